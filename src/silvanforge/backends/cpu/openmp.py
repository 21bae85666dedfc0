"""Finding the OpenMP runtime that parallel loops call.

Generated code calls the runtime through its C ABI (``GOMP_parallel``,
``omp_get_num_threads``), which GNU libgomp provides and LLVM's
libomp and Intel's libiomp5 implement for compatibility. Loading the library with
``load_library_permanently`` makes those symbols visible to the JIT's linker.

"Permanently" ends at exit: LLVM's static destructors ``dlclose`` what it loaded, while
the runtime's worker threads still run its code (libgomp's spin on after a parallel
call). A process that calls C's ``exit()`` right after a parallel predict (libFuzzer,
a C host) then died of SIGSEGV in the unmapped library, every time. So the runtime is
first opened ``RTLD_NODELETE``: no ``dlclose`` unmaps it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import warnings

import llvmlite.binding as llvm

from ...errors import SilvanForgeWarning

# Environment variable naming a runtime to try first (a path or a library name).
ENV_VAR = "SILVANFORGE_OPENMP"
# How the runtime is opened first (the module's docstring): its symbols global, never
# unmapped.
_NEVER_UNLOADED = os.RTLD_NOW | os.RTLD_GLOBAL | getattr(os, "RTLD_NODELETE", 0)
# Tried in order after the environment variable and ctypes' search.
_KNOWN_NAMES = ("libgomp.so.1", "libomp.so", "libomp.so.5", "libiomp5.so",
                "libgomp.1.dylib", "libomp.dylib")


def candidates() -> list[str]:
    """Library names or paths to try, best first.

    >>> "libgomp.so.1" in candidates()
    True
    """
    found = [os.environ.get(ENV_VAR)]
    found += [ctypes.util.find_library(name) for name in ("gomp", "omp", "iomp5")]
    found += list(_KNOWN_NAMES)
    return list(dict.fromkeys(c for c in found if c))


@functools.cache
def runtime() -> str | None:
    """Load the first OpenMP runtime that loads and return its name; None if none does.

    The result is cached for the process. When no runtime is found this warns once
    (:class:`SilvanForgeWarning`) and parallel loops are compiled as serial loops.

    >>> runtime()  # doctest: +SKIP
    'libgomp.so.1'
    """
    for name in candidates():
        try:
            ctypes.CDLL(name, mode=_NEVER_UNLOADED)
            llvm.load_library_permanently(name)
        except (OSError, RuntimeError):
            continue
        return name
    warnings.warn("no OpenMP runtime found (tried " + ", ".join(candidates()) +
                  f"; set {ENV_VAR} to a library path): parallel loops run serially",
                  SilvanForgeWarning, stacklevel=2)
    return None
