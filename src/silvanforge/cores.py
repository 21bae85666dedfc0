"""The CPU cores this process may run on (its affinity, where the system has one).

``backends/cpu/build.py`` keeps its own ``cores()``, the same rule: that file also runs
alone as the build workers' script, importing nothing of SilvanForge's.
"""

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
