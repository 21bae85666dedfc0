"""The reorg representation (RAPIDS FIL's): level-order trees interleaved slot by slot.

Every tree is padded to the forest's depth ``D`` (``2**(D+1) - 1`` slots each, leaves
pushed down to level ``D`` as in the array representation, so every walk takes ``D``
steps) and
level-order slot ``s`` of tree ``t`` is stored at ``s * n_trees + t``: the roots of all
trees first, then all their left children, and so on, so that threads walking different
trees at the same level read neighbouring memory. A node handle is that global index;
the child of ``g`` in tree ``t`` is ``2g - t + n_trees`` (left) or ``2g - t + 2 n_trees``.
Padding is refused beyond :data:`~silvanforge.representations.array.MAX_SLOTS` slots.

>>> rep = ReorgRepresentation(forest, precision="float32")   # doctest: +SKIP
"""

from __future__ import annotations

import numpy as np

from ..lir import ir
from ..model.forest import Forest
from .array import LevelOrderRepresentation, check_padded_size
from .base import register


@register
class ReorgRepresentation(LevelOrderRepresentation):
    """Level-order slots interleaved across trees."""

    name = "reorg"

    def __init__(self, forest: Forest, precision: str = "float64") -> None:
        super().__init__(forest, precision)
        n_trees = forest.n_trees
        per_tree = 2 ** (forest.max_depth + 1) - 1
        check_padded_size(per_tree * n_trees, self.name)
        self._depth = forest.max_depth
        self._fill_pushed_down(np.full(n_trees, self._depth),
                               lambda tree, position: position * n_trees + tree,
                               per_tree * n_trees)

    def root(self, tree: ir.Expr) -> ir.Expr:
        return tree

    def walk_depth(self, tree: ir.Expr) -> ir.Expr:
        return ir.i64(self._depth)

    def child(self, tree: ir.Expr, node: ir.Expr, left: ir.Expr) -> ir.Expr:
        n_trees = self.forest.n_trees
        base = ir.BinOp("sub", ir.BinOp("mul", node, ir.i64(2)), tree)
        return ir.BinOp("add", base, ir.Select(left, ir.i64(n_trees), ir.i64(2 * n_trees)))
