"""Ahead-of-time export: a compiled forest as a shared library with a C header
(:mod:`.library`), and its Python loader (:mod:`.loader`). docs/DEPLOY.md has the
header, linking, threads and CPU targets.

>>> silvanforge.compile("model.json").export("out", name="model")   # doctest: +SKIP
>>> silvanforge.load_library("out/libmodel.so").predict(X)         # doctest: +SKIP
"""

from .library import (ENTRIES, Entry, Exported, Kernels, check_name, contribution_kernels,
                      write_library)
from .loader import Library, load_library

__all__ = ["ENTRIES", "Entry", "Exported", "Kernels", "Library", "check_name",
           "contribution_kernels", "load_library", "write_library"]
