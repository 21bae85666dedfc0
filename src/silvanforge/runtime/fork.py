"""One thread a call in a process forked after multithreaded predictions.

OpenMP (libgomp) keeps a pool of threads once a parallel loop has run, and ``fork``
copies only the calling thread: the child inherits a pool whose threads do not exist,
and its first parallel loop waits for them forever (issue 26: a child forked after a
multithreaded predict hung in its own). libgomp has no way to start a fresh pool, so
such a child runs every kernel call on one thread (a team of one never touches the
pool), and says so once with a :class:`~silvanforge.errors.SilvanForgeWarning`. A child
forked before any multithreaded call, or started with the ``spawn`` or ``forkserver``
method, keeps its threads.

>>> threads(4)                                                     # doctest: +SKIP
4
"""

from __future__ import annotations

import os
import warnings

from ..errors import SilvanForgeWarning

# This process has run a kernel call on more than one thread (OpenMP's pool exists).
_threaded = False
# Forked after that: the pool did not come along.
_pool_lost = False
_warned = False


def threads(n: int) -> int:
    """The threads a kernel call of ``n`` (> 1) may use in this process."""
    global _threaded, _warned
    if not _pool_lost:
        _threaded = True
        return n
    if not _warned:
        _warned = True
        warnings.warn("this process was forked after multithreaded predictions, and "
                      "OpenMP's threads do not survive fork: predicting on one thread "
                      "(start processes with the 'spawn' or 'forkserver' method to keep "
                      "them)", SilvanForgeWarning, stacklevel=3)
    return 1


def _after_fork_in_child() -> None:
    global _pool_lost, _warned
    _pool_lost = _pool_lost or _threaded
    _warned = False  # each process says it once


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_after_fork_in_child)
