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


def _layout(forest: Forest
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(internal slot → global node, child handles, leaf slot → global node, root handles).

    A tree's slots come before the next tree's, breadth first: its root, then the two
    children of each slot walked, in the order they are walked. A leaf beside a split
    sibling becomes a hop: a slot of its parent's split, both ways to that leaf. A slot
    whose children are both leaves, and a hop, point at a pair of leaf slots, laid out
    in the order the walk makes them; a tree that is one leaf has one leaf slot. A
    handle is a slot, or ``N + leaf slot`` past the ``N`` internal slots. There is
    always an internal slot (padding, -1) so that the node tables are never empty.
    Built a level at a time over all trees (a Python step a node took 0.09 s for
    25,000 nodes).
    """
    offsets = forest.tree_offsets[:-1].astype(np.int64)
    n_trees, is_leaf = len(offsets), forest.is_leaf
    base = np.repeat(offsets, np.diff(forest.tree_offsets))
    left, right = base + forest.left, base + forest.right
    single = np.flatnonzero(is_leaf[offsets])  # trees that are one leaf
    # Per level: each slot's node (a hop's: its parent), tree and leaf (a hop's; else
    # -1); which slots have children (split, not both leaves) and which a leaf pair.
    node = np.delete(offsets, single)
    tree = np.delete(np.arange(n_trees), single)
    hop = np.full(len(node), -1)
    levels = []
    while len(node):
        both = is_leaf[left[node]] & is_leaf[right[node]]
        parents, pairs = (hop < 0) & ~both, (hop < 0) & both
        levels.append((node, tree, hop, parents, pairs))
        kid = np.stack([left[node[parents]], right[node[parents]]], axis=1).ravel()
        hop = np.where(is_leaf[kid], kid, -1)
        node = np.where(hop >= 0, np.repeat(node[parents], 2), kid)
        tree = np.repeat(tree[parents], 2)
    if not levels:
        return (np.array([-1]), np.zeros(1, np.int64), offsets,
                1 + np.arange(n_trees, dtype=np.int64))
    # Slots: level order, made tree-major by a stable sort.
    trees = np.concatenate([level[1] for level in levels])
    order = np.argsort(trees, kind="stable")
    slot = np.empty(len(order), dtype=np.int64)
    slot[order] = np.arange(len(order))
    starts = np.cumsum([0] + [len(level[0]) for level in levels])
    child = np.zeros(len(order), dtype=np.int64)
    # Leaf pairs: (tree, the walked slot that makes them, left or right hop), first
    # leaf, second leaf, the slot pointing at them.
    made: list[tuple] = []
    above = np.zeros(0, dtype=np.int64)  # the slots of the level above with children
    for k, (node, tree, hop, parents, pairs) in enumerate(levels):
        here = slot[starts[k]:starts[k + 1]]
        hops = hop >= 0
        if hops.any():  # (not at the roots) made when their parent was walked
            side = np.arange(len(node)) % 2
            made.append((tree[hops], np.repeat(above, 2)[hops], side[hops], hop[hops],
                         hop[hops], here[hops]))
        made.append((tree[pairs], here[pairs], np.zeros(int(pairs.sum()), np.int64),
                     left[node[pairs]], right[node[pairs]], here[pairs]))
        above = here[parents]
        if len(above):  # their children: the next level's pairs of slots, in order
            child[above] = slot[starts[k + 1]:starts[k + 2]:2]
    pair_tree, by, side, first, second, owner = (np.concatenate(x) for x in zip(*made))
    # Leaf slots: the pairs and the one-leaf trees, by tree, then walk order.
    rank = np.lexsort((np.concatenate([side, np.zeros(len(single), np.int64)]),
                       np.concatenate([by, np.full(len(single), -1)]),
                       np.concatenate([pair_tree, single])))
    width = np.concatenate([np.full(len(first), 2), np.ones(len(single), np.int64)])
    start = np.empty(len(rank), dtype=np.int64)
    start[rank] = np.cumsum(width[rank]) - width[rank]
    leaf = np.empty(int(width.sum()), dtype=np.int64)
    leaf[start] = np.concatenate([first, offsets[single]])
    leaf[start[:len(first)] + 1] = second
    n = len(order)
    child[owner] = n + start[:len(first)]
    roots = np.empty(n_trees, dtype=np.int64)
    roots[levels[0][1]] = slot[:len(levels[0][0])]
    roots[single] = n + start[len(first):]
    return np.concatenate([level[0] for level in levels])[order], child, leaf, roots
