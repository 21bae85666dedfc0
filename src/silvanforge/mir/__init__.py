"""MIR: loops, tree walks and reductions (seed 002 §3, §6). See ``ir`` for op semantics.

>>> from silvanforge.mir import lower, print_mir, interpret     # doctest: +SKIP
>>> print(print_mir(lower(forest, schedule)))                    # doctest: +SKIP
"""

from .interpret import interpret
from .ir import (Affine, Bound, BufferDecl, CacheRows, CacheTrees, Cond, Function,
                 Guard, InterleavedWalk, Loop, Reduce, ReduceDimension, ReduceDimensionInplace,
                 Walk, WalkMember)
from .lower import lower
from .printer import print_mir

__all__ = ["lower", "print_mir", "interpret", "Affine", "Bound", "Cond", "Guard", "Loop", "Walk",
           "WalkMember", "InterleavedWalk", "Reduce", "ReduceDimension",
           "ReduceDimensionInplace", "CacheRows", "CacheTrees", "BufferDecl", "Function"]
