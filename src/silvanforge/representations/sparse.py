"""The sparse representation (seed 003): compact nodes with a child pointer, leaves apart.

Internal nodes of all trees are stored compactly, tree after tree in breadth-first order,
with ``child[n]`` the handle of the left child; the right child is always the next
handle (siblings adjacent). Leaves live in their own tables: a handle ``h >= N`` (``N``
internal slots) is leaf ``h - N``, so the leaf test is a compare with a constant and
loads nothing. Siblings must share a table to be adjacent; where a leaf's sibling is an
internal node, the leaf becomes one more internal "hop" slot (a copy of its parent's
split) whose two children are both that leaf: one extra step on that path, as in the seed.

>>> rep = SparseRepresentation(forest)                      # doctest: +SKIP
>>> rep.n_internal_slots                                     # doctest: +SKIP
"""

from __future__ import annotations

from collections import deque

import numpy as np

from ..errors import UnsupportedModelError
from ..lir import ir
from ..model.forest import Forest
from . import decision, leaves
from .base import register
from .tables import TableRepresentation


@register
class SparseRepresentation(TableRepresentation):
    """Compact internal nodes with child pointers; leaves in their own tables."""

    name = "sparse"
    # Every forest fits: the last default.
    default_rank = 3

    def __init__(self, forest: Forest, precision: str = "float64") -> None:
        super().__init__(forest, precision)
        internal_nodes, child, leaf_nodes, roots = _layout(forest)
        # Slot → global node, internal slots then leaf slots (hops repeat a node).
        self.slot_nodes = (internal_nodes, leaf_nodes)
        self.n_internal_slots = len(internal_nodes)
        if self.n_internal_slots + len(leaf_nodes) >= 2**31:
            raise UnsupportedModelError("the sparse representation holds fewer than 2^31 "
                                        "nodes")
        trees = (_starts(forest, internal_nodes), len(internal_nodes))
        self._add(decision.node_arrays(forest, self.spec, internal_nodes, leaf_bit=False),
                  trees)
        self._add({"child": child.astype(np.int32)}, trees)
        self._add(leaves.leaf_arrays(forest, leaf_nodes, precision),
                  (_starts(forest, leaf_nodes), len(leaf_nodes)))
        self._add({"root": roots})

    def root(self, tree: ir.Expr) -> ir.Expr:
        return self._load("root", tree)

    def is_leaf(self, tree: ir.Expr, node: ir.Expr) -> ir.Expr:
        return ir.Cmp("ge", node, ir.i64(self.n_internal_slots))

    def child(self, tree: ir.Expr, node: ir.Expr, left: ir.Expr) -> ir.Expr:
        return ir.BinOp("add", ir.Cast(self._load("child", node), ir.I64),
                        ir.Select(left, ir.i64(0), ir.i64(1)))

    def _leaf_slot(self, tree: ir.Expr, node: ir.Expr) -> ir.Expr:
        return ir.BinOp("sub", node, ir.i64(self.n_internal_slots))

    def _first_slot(self, tree: ir.Expr) -> ir.Expr:
        # A tree that is a single leaf has no node slot; any in-bounds slot will do.
        return ir.BinOp("min", self.root(tree), ir.i64(self.n_internal_slots - 1))


def _starts(forest: Forest, slot_nodes: np.ndarray) -> np.ndarray:
    """Where each tree's slots start among slots holding ``slot_nodes`` (global nodes,
    trees in order; padding -1 sorts after every tree)."""
    tree = np.searchsorted(forest.tree_offsets, slot_nodes, side="right") - 1
    tree[slot_nodes < 0] = forest.n_trees
    return np.searchsorted(tree, np.arange(forest.n_trees + 1)).astype(np.int64)


def _layout(forest: Forest) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(internal slot → global node, child handles, leaf slot → global node, root handles).

    Internal slots are numbered first; a leaf handle is ``N + leaf slot``, so leaf
    references are kept as negative ``-(slot + 1)`` until ``N`` is known. There is always
    at least one internal slot (padding, -1) so that the node tables are never empty.
    """
    internal: list[int] = []
    child: list[int] = []
    leaf: list[int] = []
    roots: list[int] = []
    is_leaf = forest.is_leaf

    def add_leaf_pair(first: int, second: int) -> int:
        leaf.extend((first, second))
        return -(len(leaf) - 2) - 1

    def add_internal(node: int) -> int:
        internal.append(node)
        child.append(0)
        return len(internal) - 1

    for t in range(forest.n_trees):
        base = int(forest.tree_offsets[t])
        if is_leaf[base]:
            leaf.append(base)
            roots.append(-(len(leaf) - 1) - 1)
            continue
        roots.append(add_internal(base))
        queue = deque([len(internal) - 1])
        while queue:
            slot = queue.popleft()
            node = internal[slot]
            left = base + int(forest.left[node])
            right = base + int(forest.right[node])
            if is_leaf[left] and is_leaf[right]:
                child[slot] = add_leaf_pair(left, right)
                continue
            first = len(internal)
            for kid in (left, right):
                # A leaf next to an internal sibling becomes a hop: the parent's split,
                # both ways to that leaf.
                kid_slot = add_internal(node if is_leaf[kid] else kid)
                if is_leaf[kid]:
                    child[kid_slot] = add_leaf_pair(kid, kid)
                else:
                    queue.append(kid_slot)
            child[slot] = first
    if not internal:
        add_internal(-1)
    n = len(internal)

    def handle(ref: int) -> int:
        return ref if ref >= 0 else n + (-ref - 1)

    return (np.array(internal, dtype=np.int64), np.array([handle(c) for c in child]),
            np.array(leaf, dtype=np.int64), np.array([handle(r) for r in roots], np.int64))
