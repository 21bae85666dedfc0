"""Tiled layouts (seed 000 §3.8, seed 003): a walk step evaluates a whole tile of nodes.

A tiling (:class:`~silvanforge.hir.tiling.TilingPlan`) groups each tree's internal nodes
into tiles of ``n`` nodes (padded with dummies). One step of a walk loads the tile's ``n``
feature indices and thresholds, gathers the row's ``n`` values, evaluates every node's
split with its own exact semantics (its operator, missing rule and default direction:
a NaN follows its own node's direction, as in the scalar layouts), packs the ``n``
outcomes into bits (1 = left; node ``j`` in bit ``j``, the order of a vector compare's
mask, so the stored LUT's columns are the bit-reversed ones of seed 000's, node 0 most
significant) and reads the exit from the lookup table ``lut[shape, bits]``. The node fields of a tile are ``n`` consecutive slots,
the ``n`` loads and compares are independent, and they stay scalar: on this project's
machine (Xeon, AVX-512) the vector form measured slower, an ``<n x i1>`` mask bitcast to
the LUT index as much as LLVM's SLP vectoriser turning untiled walks into gathers
(docs/ARCHITECTURE.md "Tiling").

The LUT holds only the shapes this forest uses (remapped to rows ``0..k-1``), so a tile
size of 8 (1430 shapes, 366 KB of table) costs a few KB for a typical model.

- ``sparse`` tiled (:class:`TiledSparseRepresentation`): tiles stored compactly in the
  plan's breadth-first order, each with an exit table of ``n + 1`` handles; a handle at
  or above the tile count is a leaf in the separate leaf tables (seed 003: leaves apart,
  no padding and no extra hop).
- ``array`` tiled (:class:`TiledArrayRepresentation`): each tree's tiles in a complete
  ``(n+1)``-ary tree in level order (children of tile slot ``i`` at
  ``(n+1) i + 1 + k``), leaves pushed down to the tree's deepest tile level as in the
  scalar array layout (dummy tiles above the copies), so a walk takes exactly the tree's
  tile depth in steps with no leaf test. Padding grows as ``(n+1)**depth``; beyond
  :data:`~silvanforge.representations.array.MAX_SLOTS` node slots it is refused.

>>> from silvanforge.hir import tile_uniform                          # doctest: +SKIP
>>> rep = TiledSparseRepresentation(forest, "float64", tile_uniform(forest, 4))  # doctest: +SKIP
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

import numpy as np

from ..errors import UnsupportedModelError
from ..lir import ir
from ..model.forest import Forest
from . import decision, leaves
from .array import MAX_SLOTS
from .base import FeatureLoader
from .tables import ConsecutiveTrees, TableRepresentation

if TYPE_CHECKING:  # a plan is HIR's product, handed down; this level never imports HIR
    from ..hir.tiling import TilingPlan


class TiledRepresentation(TableRepresentation):
    """Tile node fields, the compacted LUT and the tile step shared by tiled layouts."""

    def __init__(self, forest: Forest, precision: str, plan: TilingPlan) -> None:
        super().__init__(forest, precision)
        self.plan = plan
        self.tile_size = plan.tile_size

    def shortest_walks(self) -> np.ndarray:
        # A walk takes one step a tile: to its nearest tile with a leaf exit.
        plan = self.plan
        depth = np.where((plan.exit_leaf >= 0).any(axis=1), plan.tile_depths(),
                         np.iinfo(np.int64).max)
        out = np.zeros(plan.n_trees, dtype=np.int64)  # a tree without tiles: a leaf
        has = plan.tile_offsets[1:] > plan.tile_offsets[:-1]
        out[has] = np.minimum.reduceat(depth, plan.tile_offsets[:-1][has])
        return out

    def _add_tiles(self, tile_nodes: np.ndarray, tile_shape: np.ndarray) -> None:
        """Node fields of tile slots (``tile_nodes``: (slots, n) global nodes, -1 for
        dummies) and their LUT rows (``tile_shape``: shape ids, -1 for dummy tiles)."""
        n = self.tile_size
        self._add(decision.node_arrays(self.forest, self.spec, tile_nodes.reshape(-1),
                                       leaf_bit=False))
        used, row = np.unique(np.concatenate([[0], tile_shape[tile_shape >= 0]]),
                              return_inverse=True)
        compact = np.zeros(len(tile_shape), dtype=np.int64)
        compact[tile_shape >= 0] = row[1:]
        # The kernel packs node j's outcome into bit j (a vector mask's order), the
        # reverse of the LUT's convention (node 0 most significant): permute its columns.
        values = np.arange(1 << n)
        reverse = sum(((values >> j) & 1) << (n - 1 - j) for j in range(n))
        self._add({"lut_row": (compact << n).astype(np.int32),
                   "lut": self.plan.shapes.lut[used][:, reverse].reshape(-1).astype(np.int8)})
        self.n_shapes = len(used)

    def _exit(self, tile: ir.Expr, feature_value: FeatureLoader) -> ir.Expr:
        """i64: the exit (0..n) a row takes from tile slot ``tile``."""
        n = self.tile_size
        first = ir.BinOp("mul", tile, ir.i64(n)) if n > 1 else tile
        bits: ir.Expr | None = None
        for j in range(n):
            slot = first if j == 0 else ir.BinOp("add", first, ir.i64(j))
            bit = ir.Select(self.go_left(ir.i64(0), slot, feature_value),
                            ir.Const(1 << j, ir.I32), ir.Const(0, ir.I32))
            bits = bit if bits is None else ir.BinOp("or", bits, bit)
        assert bits is not None
        row = ir.BinOp("add", self._load("lut_row", tile), bits)
        return ir.Cast(self._load("lut", ir.Cast(row, ir.I64)), ir.I64)


class TiledSparseRepresentation(TiledRepresentation):
    """Tiles in breadth-first order with an exit table; leaves in their own tables."""

    name = "sparse"

    def __init__(self, forest: Forest, precision: str, plan: TilingPlan) -> None:
        super().__init__(forest, precision, plan)
        n = plan.tile_size
        # At least one tile slot, so that no table is empty (a forest of single leaves).
        self.n_tiles = max(1, plan.n_tiles)
        if self.n_tiles * (n + 1) + forest.n_leaves >= 2**31:
            raise UnsupportedModelError("the tiled sparse representation holds fewer than "
                                        "2^31 handles")
        tile_nodes = np.full((self.n_tiles, n), -1, dtype=np.int64)
        tile_nodes[:plan.n_tiles] = plan.nodes
        shape = np.full(self.n_tiles, -1, dtype=np.int64)
        shape[:plan.n_tiles] = plan.shape
        self._add_tiles(tile_nodes, shape)
        leaf_nodes = np.flatnonzero(forest.is_leaf)
        leaf_handle = np.zeros(forest.n_nodes, dtype=np.int64)
        leaf_handle[leaf_nodes] = self.n_tiles + np.arange(len(leaf_nodes))
        exits = np.full((self.n_tiles, n + 1), self.n_tiles, dtype=np.int64)
        exits[:plan.n_tiles] = np.where(plan.exit_tile >= 0, plan.exit_tile,
                                        leaf_handle[np.maximum(plan.exit_leaf, 0)])
        self._add({"exit": exits.reshape(-1).astype(np.int32)})
        self._add(leaves.leaf_arrays(forest, leaf_nodes, precision))
        first = plan.tile_offsets[:-1]
        self._add({"root": np.where(plan.tile_offsets[1:] > first, first,
                                    leaf_handle[forest.tree_offsets[:-1]])})

    def root(self, tree: ir.Expr) -> ir.Expr:
        return self._load("root", tree)

    def is_leaf(self, tree: ir.Expr, node: ir.Expr) -> ir.Expr:
        return ir.Cmp("ge", node, ir.i64(self.n_tiles))

    def step(self, tree: ir.Expr, node: ir.Expr, feature_value: FeatureLoader) -> ir.Expr:
        at = ir.BinOp("add", ir.BinOp("mul", node, ir.i64(self.tile_size + 1)),
                      self._exit(node, feature_value))
        return ir.Cast(self._load("exit", at), ir.I64)

    def _leaf_slot(self, tree: ir.Expr, node: ir.Expr) -> ir.Expr:
        return ir.BinOp("sub", node, ir.i64(self.n_tiles))

    def _first_slot(self, tree: ir.Expr) -> ir.Expr:
        tile = ir.BinOp("min", self.root(tree), ir.i64(self.n_tiles - 1))
        return ir.BinOp("mul", tile, ir.i64(self.tile_size))


class TiledArrayRepresentation(TiledRepresentation, ConsecutiveTrees):
    """Each tree's tiles as a complete (n+1)-ary tree, leaves pushed to the bottom."""

    name = "array"

    def __init__(self, forest: Forest, precision: str, plan: TilingPlan) -> None:
        super().__init__(forest, precision, plan)
        n = plan.tile_size
        arity = n + 1
        placed = [_tile_positions(plan, t, int(forest.tree_offsets[t]))
                  for t in range(forest.n_trees)]
        depths = np.array([d for _, _, d in placed], dtype=np.int64)
        # Python ints: (n+1)**depth must be checked before numpy could overflow.
        sizes = [(arity ** (int(d) + 1) - 1) // n for d in depths]
        if sum(sizes) * n > MAX_SLOTS:
            raise UnsupportedModelError(
                f"the tiled array representation would pad this forest to "
                f"{sum(sizes) * n} node slots (more than {MAX_SLOTS}); use "
                f"representation='sparse' or a smaller tile size")
        start = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        n_slots = int(start[-1])
        tile_nodes = np.full((n_slots, n), -1, dtype=np.int64)
        shape = np.full(n_slots, -1, dtype=np.int64)
        leaf = np.full(n_slots, -1, dtype=np.int64)
        for t, (tiles, leaf_at, depth) in enumerate(placed):
            for tile, position in tiles:
                tile_nodes[start[t] + position] = plan.nodes[tile]
                shape[start[t] + position] = plan.shape[tile]
            for node, position, level in leaf_at:
                # The bottom-level descendants of `position`, `down` levels below.
                down = arity ** (depth - level)
                first = position * down + (down - 1) // n
                leaf[start[t] + first:start[t] + first + down] = node
        self._add_tiles(tile_nodes, shape)
        self._add(leaves.leaf_arrays(forest, leaf, precision))
        self._add({"leaf_flag": (leaf >= 0).astype(np.int8)})
        self._add_trees(start[:-1], depths)

    def is_leaf(self, tree: ir.Expr, node: ir.Expr) -> ir.Expr:
        return ir.Cmp("ne", self._load("leaf_flag", node), ir.Const(0, ir.I8))

    def step(self, tree: ir.Expr, node: ir.Expr, feature_value: FeatureLoader) -> ir.Expr:
        # start + (n+1) (node - start) + 1 + exit
        n = self.tile_size
        local = ir.BinOp("sub", ir.BinOp("mul", node, ir.i64(n + 1)),
                         ir.BinOp("mul", self.root(tree), ir.i64(n)))
        return ir.BinOp("add", local, ir.BinOp("add", self._exit(node, feature_value),
                                               ir.i64(1)))

    def _leaf_slot(self, tree: ir.Expr, node: ir.Expr) -> ir.Expr:
        return node

    def _first_slot(self, tree: ir.Expr) -> ir.Expr:
        return ir.BinOp("mul", self.root(tree), ir.i64(self.tile_size))


def _tile_positions(plan: TilingPlan, tree: int, root: int
                    ) -> tuple[list[tuple[int, int]], list[tuple[int, int, int]], int]:
    """Tree ``tree``'s (root node ``root``) tiles as (tile, level-order position) in the complete (n+1)-ary
    tree of tiles, its leaves as (global node, position, level) and the deepest leaf
    level (the number of steps of a walk; 0 for a single-leaf tree)."""
    arity = plan.tile_size + 1
    first, stop = int(plan.tile_offsets[tree]), int(plan.tile_offsets[tree + 1])
    if first == stop:
        return [], [(root, 0, 0)], 0
    tiles: list[tuple[int, int]] = []
    leaf_at: list[tuple[int, int, int]] = []
    queue = deque([(first, 0, 0)])  # (tile, position, level)
    while queue:
        tile, position, level = queue.popleft()
        tiles.append((tile, position))
        for k in range(arity):
            child = arity * position + 1 + k
            if plan.exit_tile[tile, k] >= 0:
                queue.append((int(plan.exit_tile[tile, k]), child, level + 1))
            else:
                leaf_at.append((int(plan.exit_leaf[tile, k]), child, level + 1))
    return tiles, leaf_at, max(level for _, _, level in leaf_at)


# Layout name → its tiled form, for tile sizes above 1.
TILED: dict[str, type[TiledRepresentation]] = {
    "sparse": TiledSparseRepresentation, "array": TiledArrayRepresentation}
