"""Backends turn a LIR kernel into something callable; each is a package registered here.

A backend module provides ``compile_kernel(kernel, **options)``. Backends load lazily, so
importing SilvanForge never pulls in a toolchain it does not use.

>>> get_backend("cpu").compile_kernel  # doctest: +ELLIPSIS
<function compile_kernel at ...>
"""

from __future__ import annotations

import importlib
from types import ModuleType

from ..errors import BackendError

BACKENDS = {"cpu": "silvanforge.backends.cpu"}


def get_backend(name: str) -> ModuleType:
    """The backend module registered as ``name``."""
    if name not in BACKENDS:
        raise BackendError(f"unknown backend {name!r}; known: {', '.join(sorted(BACKENDS))}")
    return importlib.import_module(BACKENDS[name])
