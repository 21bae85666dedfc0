"""Probability-based tiling and walk peeling (seed 004).

A *profile* is how many rows of some representative input reach each node
(:func:`leaf_counts`). Trees where a few leaves take most rows are *skewed*
(:func:`skewed_trees`); they get the greedy tiling of seed 004 Algorithm 1, which pulls
the hot leaves close to the root, and every other tree the uniform tiling
(:func:`probability_tiling`). Walks are then peeled to the tile depth that covers most
rows (:func:`peel_depths`), and trees are reordered so that trees peeled alike are
contiguous (:func:`peel_groups`, :func:`permute_trees`).

>>> import numpy as np
>>> from silvanforge.model import Tree, build_forest
>>> chain = Tree(left=[1, -1, 3, -1, -1], right=[2, -1, 4, -1, -1], feature=[0] * 5,
...              threshold=[-1.0, 0, 1.0, 0, 0], leaf_value=[0.0] * 5)
>>> forest = build_forest([chain], n_features=1, n_outputs=1)
>>> counts = leaf_counts(forest, np.full((10, 1), 5.0))
>>> counts.tolist()
[10, 0, 10, 0, 10]
>>> skewed_trees(forest, counts).tolist()
[True]
>>> from silvanforge.hir import plan_tiling
>>> plan = plan_tiling(forest, probability_tiling(forest, 1, counts), 1)
>>> tile_depths(plan).tolist()
[-1, 1, -1, 2, 2]
>>> peel_depths(plan, counts).tolist()
[2]
"""

from __future__ import annotations

import heapq
from collections import deque
from math import floor
from typing import Any

import numpy as np

from ..errors import InputError, TilingError
from ..model.forest import Forest
from ..model.inputs import as_matrix
from ..reference import global_leaves
from .tiling import TilingPlan, _global_children, uniform_tiling

# alpha * n_leaves is floored; a product that should be whole (0.29 * 100) can land just
# below it in floating point, which this slack absorbs.
_FLOOR_SLACK = 1e-9


def leaf_counts(forest: Forest, X: Any) -> np.ndarray:
    """How many rows of ``X`` reach each node: (n_nodes,) int64.

    A leaf counts the rows that end there, an internal node the rows that pass through
    it (the sum over its two children), so every root counts every row.

    >>> leaf_counts(forest, X)                                      # doctest: +SKIP
    """
    rows = as_matrix(X, forest)
    if len(rows) == 0:
        raise InputError("a profile needs at least one row; X has none")
    counts = np.bincount(global_leaves(forest, rows).ravel(),
                         minlength=forest.n_nodes).astype(np.int64)
    children = _global_children(forest)
    depth = forest.node_depth
    internal = ~forest.is_leaf
    # Deepest first, so both children of a node are final before it is summed.
    for d in range(forest.max_depth - 1, -1, -1):
        nodes = np.flatnonzero(internal & (depth == d))
        counts[nodes] = counts[children[nodes, 0]] + counts[children[nodes, 1]]
    return counts


def skewed_trees(forest: Forest, counts: np.ndarray, alpha: float = 0.05,
                 beta: float = 0.9) -> np.ndarray:
    """Per tree, whether a small fraction ``alpha`` of its leaves covers at least a
    fraction ``beta`` of the rows reaching its root (seed 004): (n_trees,) bool.

    "A small fraction of leaves" is read as the ``k = max(1, floor(alpha * n_leaves))``
    most-hit leaves: flooring keeps the fraction at most ``alpha`` (with 31 leaves and
    ``alpha = 0.05``, 1.55 leaves means 1), and at least one leaf is always allowed, so
    with the seed's parameters a tree of fewer than 40 leaves is skewed when its hottest
    leaf takes 90% of the rows. A single-leaf tree is never skewed (there is nothing to
    tile), nor is a tree no row reaches (there is no evidence).

    >>> skewed_trees(forest, leaf_counts(forest, X))                # doctest: +SKIP
    """
    if not 0.0 < alpha <= 1.0 or not 0.0 <= beta <= 1.0:
        raise TilingError(f"skew test needs 0 < alpha <= 1 and 0 <= beta <= 1, "
                          f"not alpha={alpha}, beta={beta}")
    counts = _checked_counts(forest, counts)
    is_leaf = forest.is_leaf
    skewed = np.zeros(forest.n_trees, dtype=bool)
    for t in range(forest.n_trees):
        span = forest.tree(t)
        hits = np.sort(counts[span][is_leaf[span]])[::-1]
        k = max(1, floor(alpha * len(hits) + _FLOOR_SLACK))
        total = counts[span.start]
        skewed[t] = len(hits) > 1 and total > 0 and hits[:k].sum() >= beta * total
    return skewed


def probability_tiling(forest: Forest, tile_size: int, counts: np.ndarray,
                       alpha: float = 0.05, beta: float = 0.9) -> np.ndarray:
    """``node_tile`` labels (as :func:`uniform_tiling`'s: -1 for leaves, labels unique in
    the forest and increasing tree by tree): greedy probability-based tiles for skewed
    trees (:func:`skewed_trees`), uniform tiles for the others.

    The greedy tiling is seed 004 Algorithm 1: a tile starts at the tree root and takes,
    while it has fewer than ``tile_size`` nodes, the internal node just below it that most
    rows reach (ties: lower node id); the internal nodes left just below it root the next
    tiles. Tiles are so connected and maximal by construction. A uniform tree gets the
    labels :func:`uniform_tiling` would give it alone, shifted past the previous tree's.

    >>> node_tile = probability_tiling(forest, 4, leaf_counts(forest, X))  # doctest: +SKIP
    >>> plan = plan_tiling(forest, node_tile, 4)                           # doctest: +SKIP
    """
    uniform = uniform_tiling(forest, tile_size)  # also rejects a bad tile size
    counts = _checked_counts(forest, counts)
    skewed = skewed_trees(forest, counts, alpha, beta)
    children = _global_children(forest)
    is_leaf = forest.is_leaf
    node_tile = np.full(forest.n_nodes, -1, dtype=np.int32)
    label = 0
    for t in range(forest.n_trees):
        span = forest.tree(t)
        if skewed[t]:
            label = _greedy_tiles(span.start, children, is_leaf, counts, tile_size,
                                  node_tile, label)
            continue
        own = uniform[span]
        if (own >= 0).any():  # a tree's uniform labels are consecutive
            node_tile[span] = np.where(own >= 0, own - own[own >= 0].min() + label, -1)
            label = int(node_tile[span].max()) + 1
    return node_tile


def tile_depths(plan: TilingPlan) -> np.ndarray:
    """Per node, how many tiles a walk evaluates to reach it if it is a leaf (0 for a
    tree that is a single leaf), -1 for internal nodes: (n_nodes,) int64.

    The expected number of tiles per walk of a tree is ``(counts * depth)`` summed over
    its leaves, divided by its root's count (seed 004's objective).

    >>> tile_depths(tile_uniform(forest, 2))                        # doctest: +SKIP
    """
    tile_depth = plan.tile_depths()
    depth = np.where(plan.node_tile >= 0, -1, 0).astype(np.int64)
    tile = np.repeat(np.arange(plan.n_tiles), plan.tile_size + 1)
    leaf = plan.exit_leaf.ravel()
    depth[leaf[leaf >= 0]] = tile_depth[tile[leaf >= 0]]
    return depth


def peel_depths(plan: TilingPlan, counts: np.ndarray, coverage: float = 0.9) -> np.ndarray:
    """Per tree, the smallest tile depth ``d`` such that leaves at tile depth ``<= d``
    receive at least ``coverage`` of the rows reaching the tree: (n_trees,) int64.

    Seed 004 peels each walk by that many tile steps ("the maximum depth of leaves needed
    to cover 90 percent of the inputs"). A single-leaf tree, and a tree no row reaches,
    gives 0.

    >>> peel_depths(plan, leaf_counts(forest, X))                   # doctest: +SKIP
    """
    if not 0.0 < coverage <= 1.0:
        raise TilingError(f"peel coverage must be in (0, 1], not {coverage}")
    counts = np.asarray(counts)
    if counts.shape != plan.node_tile.shape:
        raise TilingError(f"a profile gives one count per node ({len(plan.node_tile)}), "
                          f"not an array of shape {counts.shape}")
    depth = tile_depths(plan)
    # Each leaf's tree, through the tile it is an exit of (dummy exits repeat leaves).
    exit_tree = np.repeat(np.searchsorted(plan.tile_offsets, np.arange(plan.n_tiles),
                                          side="right") - 1, plan.tile_size + 1)
    leaf_ids = plan.exit_leaf.ravel()
    leaf, at = np.unique(leaf_ids, return_index=True)
    leaf, tree = leaf[leaf >= 0], exit_tree[at[leaf >= 0]]
    hits = counts[leaf].astype(np.float64)
    total = np.bincount(tree, weights=hits, minlength=plan.n_trees)
    at_depth = depth[leaf]
    # The peel depth is the number of depths d >= 0 whose leaves at tile depth <= d
    # still miss the target: coverage is monotone in d, and a tree no row reaches
    # never misses it.
    target = coverage * total
    covered = np.zeros(plan.n_trees)
    peel = np.zeros(plan.n_trees, dtype=np.int64)
    for d in range(int(at_depth.max(initial=0)) + 1):
        covered += np.bincount(tree[at_depth == d], weights=hits[at_depth == d],
                               minlength=plan.n_trees)
        peel += covered < target
    return peel


def peel_groups(depths: np.ndarray) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """A stable order of trees by ascending peel depth, and the groups it makes as
    (peel depth, number of trees).

    >>> order, groups = peel_groups(np.array([2, 1, 2, 1]))
    >>> order.tolist(), groups
    ([1, 3, 0, 2], [(1, 2), (2, 2)])
    """
    depths = np.asarray(depths)
    order = np.argsort(depths, kind="stable")
    values, sizes = np.unique(depths[order], return_counts=True)
    return order, [(int(v), int(n)) for v, n in zip(values, sizes)]


def permute_trees(forest: Forest, order: Any) -> Forest:
    """The same forest with its trees in ``order`` (a permutation of the tree indices):
    tree ``i`` of the result is tree ``order[i]`` of ``forest``.

    Node arrays move with their trees (:meth:`Forest.take_trees`). Predictions are
    unchanged up to the order of the floating-point sums.

    >>> permute_trees(forest, [1, 0]).tree_output                   # doctest: +SKIP
    """
    order = np.asarray(order)
    if (order.shape != (forest.n_trees,) or order.dtype.kind not in "iu"
            or not np.array_equal(np.sort(order), np.arange(forest.n_trees))):
        raise TilingError(f"a tree order must be a permutation of the {forest.n_trees} "
                          f"tree indices, not {order.tolist()!r}")
    return forest.take_trees(order)


def _greedy_tiles(root: int, children: np.ndarray, is_leaf: np.ndarray,
                  counts: np.ndarray, tile_size: int, node_tile: np.ndarray,
                  label: int) -> int:
    """Label one tree's internal nodes with greedy tiles from ``label`` on (seed 004
    Algorithm 1); return the next free label."""
    roots = deque([root] if not is_leaf[root] else [])
    while roots:
        start = roots.popleft()
        below = [(-counts[start].item(), start)]  # a max-heap on counts, then min on ids
        for _ in range(tile_size):
            if not below:
                break
            _, node = heapq.heappop(below)
            node_tile[node] = label
            for child in children[node]:
                if not is_leaf[child]:
                    heapq.heappush(below, (-counts[child].item(), int(child)))
        roots.extend(sorted(node for _, node in below))
        label += 1
    return label


def _checked_counts(forest: Forest, counts: np.ndarray) -> np.ndarray:
    counts = np.asarray(counts)
    if counts.shape != (forest.n_nodes,) or counts.dtype.kind not in "iuf" \
            or not np.all(np.isfinite(counts) & (counts >= 0)):
        raise TilingError(f"a profile gives one count >= 0 per node ({forest.n_nodes}), "
                          f"not an array of shape {counts.shape} and type {counts.dtype}")
    return counts
