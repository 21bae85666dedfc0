"""The CPU cores this process may run on (its affinity, where the system has one)."""

from __future__ import annotations

import os


def usable() -> int:
    """How many cores this process may run on.

    >>> usable() >= 1
    True
    """
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1
