"""Tilings of a forest's trees and the tree of tiles they define (seed 000 §3.4-§3.5).

A tiling is first a plain assignment ``node_tile`` (per Forest node: a tile label for
internal nodes, -1 for leaves), as any tiling strategy produces it; :func:`plan_tiling`
checks it against seed 000 §3.4 and builds the :class:`TilingPlan` that lower stages read.
:func:`uniform_tiling` is the basic strategy; :func:`walk_plan` is the numpy reference walk
over a plan.

Padding: a tile with fewer than ``n`` nodes is filled with dummy nodes (node id -1), put
breadth-first into the first free child slots of the tile. A dummy takes the place of an
edge leaving the tile and both of its exits lead where that edge led, so its comparison
bit never changes the exit the LUT gives: a lower stage may give dummies any feature and
threshold. By maximality a smaller tile only has leaves below it, so duplicated exits only
ever repeat a leaf.

>>> import silvanforge                                            # doctest: +SKIP
>>> plan = tile_uniform(silvanforge.load("model.json"), 4)       # doctest: +SKIP
>>> print(print_plan(plan))                                      # doctest: +SKIP
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import TilingError
from ..model.forest import Forest
from ..model.inputs import as_matrix
from ..reference import _go_left
from .shapes import TileShapes, tile_shapes


@dataclass(frozen=True, eq=False)
class TilingPlan:
    """The tree of tiles of every tree of a forest, as read-only arrays.

    Tiles of tree ``t`` are ``tile_offsets[t]:tile_offsets[t+1]``, in breadth-first order
    of the tree of tiles with children left to right, so a tree's first tile holds its
    root; a tree without tiles is a single leaf (node ``forest.tree_offsets[t]``). Per
    tile: ``nodes`` its global node ids in level order (-1 for dummies), ``shape`` its
    shape id, and for each of its ``tile_size + 1`` exits, left to right, either
    ``exit_tile`` (a global tile index) or ``exit_leaf`` (a global leaf node id) is >= 0,
    the other -1. ``node_tile`` gives each internal node's tile (-1 for leaves).
    """

    tile_size: int
    tile_offsets: np.ndarray  # (n_trees + 1,) int64
    nodes: np.ndarray         # (n_tiles, tile_size) int32
    shape: np.ndarray         # (n_tiles,) int16
    exit_tile: np.ndarray     # (n_tiles, tile_size + 1) int32
    exit_leaf: np.ndarray     # (n_tiles, tile_size + 1) int32
    node_tile: np.ndarray     # (n_nodes,) int32

    @property
    def n_tiles(self) -> int:
        return len(self.shape)

    @property
    def n_trees(self) -> int:
        return len(self.tile_offsets) - 1

    @property
    def shapes(self) -> TileShapes:
        """The shape tables and LUT of this plan's tile size."""
        return tile_shapes(self.tile_size)

    def tile_depths(self) -> np.ndarray:
        """Per tile, how many tiles a walk evaluates up to and including it (a root tile
        1): (n_tiles,) int64."""
        depth = np.zeros(self.n_tiles, dtype=np.int64)
        first = self.tile_offsets[:-1]
        level = first[self.tile_offsets[1:] > first]
        d = 1
        while len(level):
            depth[level] = d
            below = self.exit_tile[level]
            # Child tiles are reached by one edge each: dummies only repeat leaf exits.
            level = below[below >= 0]
            d += 1
        return depth


def uniform_tiling(forest: Forest, tile_size: int) -> np.ndarray:
    """Greedy uniform tiling: ``node_tile`` labels (-1 for leaves), seed 000 §3.4.

    Each tile grows breadth-first from its root until it holds ``tile_size`` nodes or no
    internal node is left below it; the internal nodes just below a full tile root the
    next tiles. Tiles are therefore connected and maximal.

    >>> uniform_tiling(forest, 3)                                   # doctest: +SKIP
    array([ 0,  0, -1,  0,  1, ...], dtype=int32)
    """
    tile_shapes(tile_size)  # rejects a bad size before any work
    children = _global_children(forest)
    is_leaf = forest.is_leaf
    node_tile = np.full(forest.n_nodes, -1, dtype=np.int32)
    label = 0
    for root in forest.tree_offsets[:-1]:
        roots = deque([int(root)] if not is_leaf[root] else [])
        while roots:
            frontier = deque([roots.popleft()])
            for _ in range(tile_size):
                if not frontier:
                    break
                node = frontier.popleft()
                node_tile[node] = label
                frontier.extend(int(c) for c in children[node] if not is_leaf[c])
            roots.extend(frontier)
            label += 1
    return node_tile


def check_tiling(forest: Forest, node_tile: np.ndarray, tile_size: int) -> None:
    """Raise :class:`TilingError` unless ``node_tile`` is a valid tiling (seed 000 §3.4):
    every internal node in exactly one tile and no leaf in any, at most ``tile_size``
    nodes per tile, tiles connected, and a tile smaller than ``tile_size`` has no
    internal child outside it.

    >>> check_tiling(forest, uniform_tiling(forest, 4), 4)          # doctest: +SKIP
    """
    tile_shapes(tile_size)
    node_tile = np.asarray(node_tile)
    if node_tile.shape != (forest.n_nodes,) or node_tile.dtype.kind not in "iu":
        raise TilingError(f"a tiling gives one integer per node ({forest.n_nodes}), "
                          f"not an array of shape {node_tile.shape} and type {node_tile.dtype}")
    internal = ~forest.is_leaf
    _fail(forest, internal & (node_tile < 0), "internal node in no tile")
    _fail(forest, ~internal & (node_tile >= 0), "leaf in a tile")
    # Leaves share the label -1; every mask below is restricted to internal nodes.
    _, label, size = np.unique(node_tile, return_inverse=True, return_counts=True)
    _fail(forest, internal & (size[label] > tile_size), f"tile larger than {tile_size} nodes")
    parent = _parents(forest)
    parent_tile = np.where(parent >= 0, node_tile[np.maximum(parent, 0)], -1)
    # A set of tree nodes is connected iff exactly one of them has its parent outside.
    is_entry = internal & (parent_tile != node_tile)
    entries = np.bincount(label, weights=is_entry)
    _fail(forest, is_entry & (entries[label] > 1), "tile is not connected")
    small = internal & (size[label] < tile_size)
    _fail(forest, is_entry & (parent >= 0) & small[np.maximum(parent, 0)],
          f"tile of fewer than {tile_size} nodes is not maximal: this node's parent "
          f"could take it in")


def plan_tiling(forest: Forest, node_tile: np.ndarray, tile_size: int) -> TilingPlan:
    """Check a tiling and build its tree of tiles, padded to ``tile_size``.

    >>> plan = plan_tiling(forest, uniform_tiling(forest, 3), 3)   # doctest: +SKIP
    >>> plan.nodes[0], plan.shape[0], plan.exit_leaf[0]            # doctest: +SKIP
    """
    check_tiling(forest, node_tile, tile_size)
    node_tile = np.asarray(node_tile)
    shapes = tile_shapes(tile_size)
    children = _global_children(forest)
    rows: list[tuple[list[int], int, list[int]]] = []  # (nodes, shape, exit targets)
    offsets = [0]
    for root in forest.tree_offsets[:-1]:
        # Breadth-first over the tree of tiles. An internal target is always a tile root
        # reached by its one parent edge: dummies only repeat leaf edges (maximality).
        queue = deque([int(root)] if node_tile[root] >= 0 else [])
        while queue:
            nodes, shape, targets = _layout(queue.popleft(), node_tile, children, shapes)
            queue.extend(t for t in targets if node_tile[t] >= 0)
            rows.append((nodes, shape, targets))
        offsets.append(len(rows))
    n_tiles = len(rows)
    nodes = np.array([r[0] for r in rows], dtype=np.int32).reshape(n_tiles, tile_size)
    targets = np.array([r[2] for r in rows], dtype=np.int64).reshape(n_tiles, tile_size + 1)
    node_to_tile = np.full(forest.n_nodes, -1, dtype=np.int32)
    real = nodes >= 0
    node_to_tile[nodes[real]] = np.nonzero(real)[0]
    to_leaf = node_to_tile[targets] < 0
    return TilingPlan(
        tile_size=tile_size,
        tile_offsets=_frozen(np.array(offsets, dtype=np.int64)),
        nodes=_frozen(nodes),
        shape=_frozen(np.array([r[1] for r in rows], dtype=np.int16)),
        exit_tile=_frozen(np.where(to_leaf, -1, node_to_tile[targets]).astype(np.int32)),
        exit_leaf=_frozen(np.where(to_leaf, targets, -1).astype(np.int32)),
        node_tile=_frozen(node_to_tile))


def tile_uniform(forest: Forest, tile_size: int) -> TilingPlan:
    """:func:`uniform_tiling` made into a plan.

    >>> tile_uniform(forest, 4).n_tiles                             # doctest: +SKIP
    """
    return plan_tiling(forest, uniform_tiling(forest, tile_size), tile_size)


def walk_plan(plan: TilingPlan, forest: Forest, X: Any) -> np.ndarray:
    """The global leaf each row reaches in each tree, walking tiles: (rows, n_trees).

    Per step every node of the current tile is evaluated with the Forest's exact split
    semantics, the bits are packed (node 0 most significant) and the LUT gives the exit.
    Agrees with :func:`silvanforge.reference.global_leaves` for any valid plan.

    >>> walk_plan(tile_uniform(forest, 4), forest, X)              # doctest: +SKIP
    """
    rows = as_matrix(X, forest)
    n = plan.tile_size
    lut = plan.shapes.lut
    first = plan.tile_offsets[:-1]
    has_tiles = plan.tile_offsets[1:] > first
    tile = np.repeat(np.where(has_tiles, first, -1)[None, :], len(rows), axis=0)
    leaf = np.repeat(np.where(has_tiles, -1, forest.tree_offsets[:-1])[None, :],
                     len(rows), axis=0)
    row = np.arange(len(rows))[:, None, None]
    weight = 1 << np.arange(n - 1, -1, -1)
    # Every tile step goes down at least one level, so a valid plan is done in max_depth.
    for _ in range(forest.max_depth):
        active = tile >= 0
        if not active.any():
            break
        at = np.maximum(tile, 0)
        nodes = plan.nodes[at]                   # (rows, trees, n)
        node = np.maximum(nodes, 0)              # a dummy's bit is irrelevant; any node does
        bits = _go_left(forest, node, rows[row, forest.feature[node]]) & (nodes >= 0)
        exit_ = lut[plan.shape[at], (bits * weight).sum(axis=-1)]
        leaf = np.where(active, plan.exit_leaf[at, exit_], leaf)
        tile = np.where(active, plan.exit_tile[at, exit_], tile)
    if (tile >= 0).any():
        raise TilingError("the tiling plan does not fit this forest: a walk does not end")
    return leaf


def _layout(root: int, node_tile: np.ndarray, children: np.ndarray,
            shapes: TileShapes) -> tuple[list[int], int, list[int]]:
    """(level-order nodes with -1 dummies, shape id, exit targets left to right) of the
    tile rooted at ``root``. Targets are global node ids: a leaf or a child tile's root."""
    label = node_tile[root]
    nodes = [root]
    slots: list[list[int]] = []   # per tile node: per side, in-tile index or ~target
    for node in nodes:  # grows while iterating: breadth-first over the tile
        row = []
        for child in children[node]:
            if node_tile[child] == label:
                row.append(len(nodes))
                nodes.append(int(child))
            else:
                row.append(~int(child))
        slots.append(row)
    # Dummies fill free slots breadth-first; a dummy's two exits repeat the edge it cuts.
    free = deque((i, side) for i in range(len(nodes)) for side in (0, 1))
    while len(nodes) < shapes.size:
        i, side = free.popleft()
        if slots[i][side] >= 0:
            continue
        target = slots[i][side]
        slots[i][side] = len(nodes)
        nodes.append(-1)
        slots.append([target, target])
        free.extend(((len(nodes) - 1, 0), (len(nodes) - 1, 1)))
    # Dummies may sit above real nodes of later levels: renumber in level order.
    order = [0]
    for i in order:
        order.extend(s for s in slots[i] if s >= 0)
    new = {old: k for k, old in enumerate(order)}
    table = np.array([[new[s] if s >= 0 else -1 for s in slots[old]] for old in order],
                     dtype=np.int8)
    shape = shapes.shape_id(table)
    targets = [0] * (shapes.size + 1)
    for k, old in enumerate(order):
        for side in (0, 1):
            e = shapes.exits[shape, k, side]
            if e >= 0:
                targets[e] = ~slots[old][side]
    return [nodes[old] for old in order], shape, targets


def _global_children(forest: Forest) -> np.ndarray:
    """(n_nodes, 2) global left and right child ids (unspecified for leaves)."""
    base = np.repeat(forest.tree_offsets[:-1], forest.tree_sizes)
    return np.stack([forest.left + base, forest.right + base], axis=1)


def _parents(forest: Forest) -> np.ndarray:
    """Global parent of every node, -1 for roots."""
    parent = np.full(forest.n_nodes, -1, dtype=np.int64)
    internal = np.flatnonzero(~forest.is_leaf)
    children = _global_children(forest)[internal]
    parent[children[:, 0]] = internal
    parent[children[:, 1]] = internal
    return parent


def _fail(forest: Forest, mask: np.ndarray, problem: str) -> None:
    bad = np.flatnonzero(mask)
    if len(bad):
        node = int(bad[0])
        t = int(np.searchsorted(forest.tree_offsets, node, side="right") - 1)
        more = f" (and {len(bad) - 1} more nodes)" if len(bad) > 1 else ""
        raise TilingError(f"tree {t}, node {node - int(forest.tree_offsets[t])}: "
                          f"{problem}{more}")


def _frozen(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a
