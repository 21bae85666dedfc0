"""The schedule language (seed 002 §4): loop trees over ``batch`` and ``tree``.

>>> from silvanforge.schedule import Schedule
>>> Schedule.parse("tile(batch, b0, b1, 64)\\nreorder(b0, tree, b1)").loop_order()
[['b0', 'tree', 'b1']]
"""

from .library import LIBRARY, named
from .schedule import (BATCH, GPU_DIMENSIONS, MAX_INTERLEAVE, TREE, Directive, IndexVar,
                       LoopNode, Schedule, VarInfo)

__all__ = ["Schedule", "IndexVar", "Directive", "LoopNode", "VarInfo", "named", "LIBRARY",
           "BATCH", "TREE", "GPU_DIMENSIONS", "MAX_INTERLEAVE"]
