"""Python's cyclic garbage collector paused while a model compiles.

Compiling builds hundreds of thousands of small, long-lived IR objects (a 1000-tree
forest as code: ~30,000 nodes of LIR, each a dozen expression objects, then the LLVM
text of each). Every 700 allocations the collector runs, and its older generations walk
every one of those live objects again: a third of the Python time of a compile, for
garbage that reference counting frees anyway (IR trees hold no cycles; the compile times
saved are in docs/ARCHITECTURE.md, "Compiling big kernels").

While a compile runs, the collector is paused for the whole process (it has one
switch): other threads' cycles wait until the last compile in progress ends, when
collection resumes as it was.

>>> import gc
>>> before = gc.isenabled()
>>> with paused():
...     gc.isenabled()
False
>>> gc.isenabled() == before
True
"""

from __future__ import annotations

import gc
import threading
from contextlib import contextmanager
from typing import Iterator

_lock = threading.Lock()
_depth = 0  # compiles in progress, in any thread
_was_enabled = False  # the collector's state when the first of them began


@contextmanager
def paused() -> Iterator[None]:
    """Pause cyclic garbage collection for the duration of the block (nests, and
    several threads may compile at once: the collector resumes, if it was on, when the
    last block ends)."""
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()
