"""Probability-based tiling, walk peeling and tree reordering (seed 004).

Profiles, tile depths and peel depths are checked against walks written here node by
node; tilings against seed 000 §3.4 (check_tiling and the tile-by-tile checks of
test_tiles) and against the reference walk.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from test_forest import random_forests
from test_tiles import assert_tiles_walk_like_the_tree, assert_valid_tiling, complete_tree
from util import probe_rows

from silvanforge import reference
from silvanforge.errors import InputError, TilingError
from silvanforge.hir import (MAX_TILE_SIZE, check_tiling, leaf_counts, peel_depths,
                             peel_groups, permute_trees, plan_tiling, probability_tiling,
                             skewed_trees, tile_depths, tile_uniform, uniform_tiling,
                             walk_plan)
from silvanforge.model import Tree, build_forest
from silvanforge.model.inputs import as_matrix

SIZES = range(1, MAX_TILE_SIZE + 1)


def parents(forest) -> np.ndarray:
    parent = np.full(forest.n_nodes, -1)
    for t in range(forest.n_trees):
        base = int(forest.tree_offsets[t])
        for v in range(base, int(forest.tree_offsets[t + 1])):
            if forest.left[v] >= 0:
                parent[base + forest.left[v]] = parent[base + forest.right[v]] = v
    return parent


def counts_from_leaves(forest, leaf_hits: dict[int, int]) -> np.ndarray:
    """A profile from per-leaf hits (global ids): every ancestor adds its leaves' hits."""
    counts = np.zeros(forest.n_nodes, dtype=np.int64)
    parent = parents(forest)
    for leaf, hits in leaf_hits.items():
        v = leaf
        while v >= 0:
            counts[v] += hits
            v = parent[v]
    return counts


def walk_tiles(forest, node_tile) -> np.ndarray:
    """Per leaf, the distinct tiles on its root path (a walk evaluates each once)."""
    parent = parents(forest)
    depth = np.where(forest.is_leaf, 0, -1)
    for leaf in np.flatnonzero(forest.is_leaf):
        v, tiles = parent[leaf], set()
        while v >= 0:
            tiles.add(int(node_tile[v]))
            v = parent[v]
        depth[leaf] = len(tiles)
    return depth


def chain(n_internal: int) -> Tree:
    """Internal nodes 0, 2, 4, ... down the right; every left child is a leaf."""
    n = 2 * n_internal + 1
    left = [i + 1 if i % 2 == 0 and i < n - 1 else -1 for i in range(n)]
    right = [i + 2 if i % 2 == 0 and i < n - 1 else -1 for i in range(n)]
    return Tree(left=left, right=right, feature=[0] * n, threshold=[float(i) for i in range(n)],
                leaf_value=[float(i) for i in range(n)])


def forest_of(*trees, **kw):
    return build_forest(list(trees), n_features=2, n_outputs=1, **kw)


# ---- profiles ---------------------------------------------------------------------------

@settings(max_examples=30)
@given(random_forests(), st.integers(0, 2**32 - 1), st.integers(1, 40))
def test_leaf_counts_count_every_row_once_per_tree(forest, seed, n_rows):
    X = probe_rows(forest, seed, n_rows)
    counts = leaf_counts(forest, X)
    leaves = reference.global_leaves(forest, as_matrix(X, forest))
    assert counts.dtype == np.int64
    is_leaf = forest.is_leaf
    ends = np.bincount(leaves.ravel(), minlength=forest.n_nodes)
    np.testing.assert_array_equal(counts[is_leaf], ends[is_leaf])
    assert (counts[forest.tree_offsets[:-1]] == n_rows).all()
    per_tree = np.add.reduceat(np.where(is_leaf, counts, 0), forest.tree_offsets[:-1])
    assert (per_tree == n_rows).all()
    base = np.repeat(forest.tree_offsets[:-1], forest.tree_sizes)
    inner = np.flatnonzero(~is_leaf)
    np.testing.assert_array_equal(counts[inner], counts[forest.left[inner] + base[inner]]
                                  + counts[forest.right[inner] + base[inner]])


def test_a_profile_needs_rows():
    forest = forest_of(chain(2))
    with pytest.raises(InputError, match="at least one row"):
        leaf_counts(forest, np.zeros((0, 2)))
    with pytest.raises(InputError):
        leaf_counts(forest, np.zeros((3, 5)))


# ---- the skew test ----------------------------------------------------------------------

@pytest.mark.parametrize("n_leaves, alpha, top, skewed", [
    (39, 0.05, [90], True),          # floor(0.05 * 39) = 1 leaf may cover 90%
    (39, 0.05, [89, 1], False),      # ... and one leaf short of it is not enough
    (40, 0.05, [45, 45], True),      # floor(0.05 * 40) = 2 leaves
    (40, 0.05, [45, 44, 1], False),
    (100, 0.29, [6] + [3] * 28, True),   # 0.29 * 100 is 28.999... in floats, yet 29
])
def test_skew_at_the_boundary(n_leaves, alpha, top, skewed):
    forest = forest_of(chain(n_leaves - 1))
    leaves = np.flatnonzero(forest.is_leaf)
    rest = [1] * (100 - sum(top))               # one row on each of some other leaves
    hits = {int(leaf): h for leaf, h in zip(leaves, top + rest)}
    counts = counts_from_leaves(forest, hits)
    assert counts[0] == 100
    assert skewed_trees(forest, counts, alpha).tolist() == [skewed]


def test_skew_parameters_and_degenerate_trees():
    leaf = Tree(left=[-1], right=[-1], feature=[0], threshold=[0.0], leaf_value=[1.0])
    forest = forest_of(leaf, chain(1), chain(1))
    counts = np.array([7, 7, 7, 0, 0, 0, 0])     # tree 2: no row reaches it
    assert skewed_trees(forest, counts).tolist() == [False, True, False]
    assert skewed_trees(forest, counts, alpha=1.0, beta=0.0).tolist() == [False, True, False]
    for alpha, beta in [(0.0, 0.9), (1.5, 0.9), (0.05, -0.1), (0.05, 1.1)]:
        with pytest.raises(TilingError, match="alpha"):
            skewed_trees(forest, counts, alpha, beta)
    for bad in [counts[:-1], counts - 1, counts.astype(str), np.where(counts, np.nan, 0)]:
        with pytest.raises(TilingError, match="one count"):
            skewed_trees(forest, bad)


# ---- tilings ----------------------------------------------------------------------------

@settings(max_examples=30)
@given(random_forests(), st.integers(0, 2**32 - 1))
def test_probability_tilings_are_valid_and_walk_like_the_reference(forest, seed):
    X = probe_rows(forest, seed, 30)
    expected = reference.global_leaves(forest, as_matrix(X, forest))
    rng = np.random.default_rng(seed)
    profiles = [leaf_counts(forest, X), rng.integers(0, 4, forest.n_nodes)]  # ties too
    for counts in profiles:
        for alpha, beta in [(0.05, 0.9), (1.0, 0.0)]:   # the second makes all greedy
            for n in SIZES:
                node_tile = probability_tiling(forest, n, counts, alpha, beta)
                check_tiling(forest, node_tile, n)
                labels = node_tile[node_tile >= 0]
                assert labels.dtype == np.int32
                assert np.array_equal(np.unique(labels), np.arange(len(np.unique(labels))))
                plan = plan_tiling(forest, node_tile, n)
                assert_valid_tiling(forest, plan)
                assert_tiles_walk_like_the_tree(forest, plan)
                np.testing.assert_array_equal(walk_plan(plan, forest, X), expected)
                np.testing.assert_array_equal(tile_depths(plan),
                                              walk_tiles(forest, plan.node_tile))


@settings(max_examples=15)
@given(random_forests())
def test_trees_that_are_not_skewed_get_the_uniform_tiling(forest):
    zeros = np.zeros(forest.n_nodes, dtype=np.int64)   # no rows: nothing is skewed
    for n in SIZES:
        np.testing.assert_array_equal(probability_tiling(forest, n, zeros),
                                      uniform_tiling(forest, n))


def hot_chain_forest():
    """A right chain c0..c5 (nodes split on x0 >= i) whose left children are complete
    subtrees of depth 2 on x1; almost every row runs down the chain."""
    left, right, feature, threshold = [], [], [], []

    def add(f, t):
        left.append(-1), right.append(-1), feature.append(f), threshold.append(t)
        return len(left) - 1

    def subtree(depth):
        v = add(1, 0.0)
        if depth:
            left[v] = subtree(depth - 1)
            right[v] = subtree(depth - 1)
        return v

    chain_nodes = []
    v = add(0, 0.0)
    for i in range(6):
        chain_nodes.append(v)
        threshold[v] = float(i)
        left[v] = subtree(2)
        right[v] = v = add(0, 0.0)
    tree = Tree(left=left, right=right, feature=feature, threshold=threshold,
                leaf_value=[0.0] * len(left))
    return forest_of(tree), chain_nodes


def expected_tiles_per_walk(forest, node_tile, n, counts):
    depth = tile_depths(plan_tiling(forest, node_tile, n))
    return (counts * np.maximum(depth, 0)).sum() / counts[0]


def test_greedy_tiling_puts_the_hot_path_first():
    forest, hot = hot_chain_forest()
    rng = np.random.default_rng(0)
    X = np.column_stack([np.r_[np.full(95, 100.0), rng.uniform(0, 6, 5)],
                         rng.normal(size=100)])
    counts = leaf_counts(forest, X)
    assert skewed_trees(forest, counts).tolist() == [True]
    for n in SIZES:
        greedy = probability_tiling(forest, n, counts)
        uniform = uniform_tiling(forest, n)
        on_path = min(n, len(hot))
        assert (greedy[hot[:on_path]] == greedy[hot[0]]).all()
        assert (greedy == greedy[hot[0]]).sum() == n       # the tile is full
        ours = expected_tiles_per_walk(forest, greedy, n, counts)
        theirs = expected_tiles_per_walk(forest, uniform, n, counts)
        assert ours <= theirs and (n < 2 or ours < theirs)


def test_greedy_ties_go_to_the_lower_node_id():
    forest = build_forest([complete_tree(3)], n_features=1, n_outputs=1)
    counts = np.zeros(forest.n_nodes, dtype=np.int64)
    counts[[0, 1, 2, 5, 6]] = [8, 4, 4, 4, 4]   # 1 and 2 tie, then 5 and 6 tie
    node_tile = probability_tiling(forest, 2, counts, alpha=1.0, beta=0.0)
    assert node_tile[:7].tolist() == [0, 0, 1, 2, 3, 1, 4]
    node_tile = probability_tiling(forest, 4, counts, alpha=1.0, beta=0.0)
    assert node_tile[:7].tolist() == [0, 0, 0, 1, 2, 0, 3]


def test_bad_tile_size():
    forest = forest_of(chain(2))
    with pytest.raises(TilingError, match="tile size"):
        probability_tiling(forest, 9, np.ones(forest.n_nodes, dtype=np.int64))


# ---- peeling ----------------------------------------------------------------------------

def test_tile_and_peel_depths_of_chains():
    leaf = Tree(left=[-1], right=[-1], feature=[0], threshold=[0.0], leaf_value=[1.0])
    forest = forest_of(chain(6), leaf, chain(6))
    plan = tile_uniform(forest, 2)   # tiles {c0 c1} {c2 c3} {c4 c5} in each chain
    depth = tile_depths(plan)
    assert depth[:13].tolist() == [-1, 1, -1, 1, -1, 2, -1, 2, -1, 3, -1, 3, 3]
    assert depth[13] == 0
    a = {1: 30, 3: 20, 5: 20, 7: 15, 9: 5, 11: 5, 12: 5}      # 50, 85, 100 by depth
    b = {14 + k: h for k, h in a.items()}
    b.update({14 + 1: 35, 14 + 9: 0, 14 + 11: 0, 14 + 12: 0})  # 55, 90, 90
    counts = counts_from_leaves(forest, {**a, **b, 13: 100})
    assert peel_depths(plan, counts).tolist() == [3, 0, 2]
    assert peel_depths(plan, counts, coverage=0.85).tolist() == [2, 0, 2]
    assert peel_depths(plan, counts, coverage=0.5).tolist() == [1, 0, 1]
    assert peel_depths(plan, counts, coverage=1.0).tolist() == [3, 0, 2]
    assert peel_depths(plan, np.zeros_like(counts)).tolist() == [0, 0, 0]
    with pytest.raises(TilingError, match="coverage"):
        peel_depths(plan, counts, coverage=0.0)
    with pytest.raises(TilingError, match="one count per node"):
        peel_depths(plan, counts[:-1])


@settings(max_examples=20)
@given(random_forests(), st.integers(0, 2**32 - 1), st.sampled_from([0.5, 0.9, 1.0]))
def test_peel_depths_are_the_smallest_that_cover(forest, seed, coverage):
    X = probe_rows(forest, seed, 30)
    counts = leaf_counts(forest, X)
    plan = plan_tiling(forest, probability_tiling(forest, 3, counts), 3)
    depth = tile_depths(plan)
    peel = peel_depths(plan, counts, coverage)
    for t in range(forest.n_trees):
        span = forest.tree(t)
        d, c = depth[span], counts[span]
        leaf = d >= 0
        covers = [c[leaf & (d <= p)].sum() >= coverage * len(X) for p in range(d.max() + 1)]
        assert peel[t] == covers.index(True)


def test_peel_groups():
    order, groups = peel_groups(np.array([2, 1, 2, 1]))
    assert order.tolist() == [1, 3, 0, 2] and groups == [(1, 2), (2, 2)]
    order, groups = peel_groups(np.array([3, 0, 3, 3, 1]))
    assert order.tolist() == [1, 4, 0, 2, 3] and groups == [(0, 1), (1, 1), (3, 3)]
    order, groups = peel_groups(np.array([], dtype=np.int64))
    assert order.tolist() == [] and groups == []


# ---- reordering trees -------------------------------------------------------------------

def assert_permutation_keeps_predictions(forest, order, X):
    permuted = permute_trees(forest, order)
    assert permuted.n_trees == forest.n_trees and permuted.n_nodes == forest.n_nodes
    np.testing.assert_array_equal(permuted.tree_output, forest.tree_output[order])
    np.testing.assert_array_equal(reference.leaves(permuted, X),
                                  reference.leaves(forest, X)[:, order])
    for output in ("margin", "value"):
        np.testing.assert_allclose(reference.predict(permuted, X, output),
                                   reference.predict(forest, X, output), rtol=1e-12, atol=1e-12)


@settings(max_examples=30)
@given(random_forests(), st.integers(0, 2**32 - 1))
def test_permuting_trees_keeps_predictions(forest, seed):
    order = np.random.default_rng(seed).permutation(forest.n_trees)
    assert_permutation_keeps_predictions(forest, order, probe_rows(forest, seed, 30))


def test_permuting_trees_with_linear_leaves_and_categories():
    cat = Tree(left=[1, -1, -1], right=[2, -1, -1], feature=[1] * 3, threshold=[0.0] * 3,
               leaf_value=[0.0, 1.0, 2.0], categories={0: [1, 3, 40]},
               linear={1: (1.0, [0, 1], [2.0, 3.0])})
    plain = Tree(left=[1, -1, -1], right=[2, -1, -1], feature=[0] * 3, threshold=[0.5] * 3,
                 leaf_value=[0.0, -1.0, 4.0], linear={2: (-1.0, [1], [0.5])}, output=1)
    forest = build_forest([cat, plain, chain(3)], n_features=2, n_outputs=2,
                          linear_leaves=True, input_dtype=np.float64)
    X = np.array([[0.2, 1.0], [0.7, 3.0], [np.nan, 40.0], [2.5, 2.0], [0.6, np.nan]])
    for order in ([2, 0, 1], [1, 2, 0], [0, 1, 2]):
        assert_permutation_keeps_predictions(forest, np.array(order), X)
    permuted = permute_trees(forest, [1, 2, 0])
    node = int(permuted.tree_offsets[2])       # the categorical root, now last
    assert permuted.category_set(node).tolist() == [1, 3, 40]


@pytest.mark.parametrize("order", [[0, 1], [0, 1, 1], [0, 1, 3], [0.0, 1.0, 2.0],
                                   [[0, 1, 2]], "abc"])
def test_a_tree_order_must_be_a_permutation(order):
    forest = forest_of(chain(1), chain(2), chain(3))
    with pytest.raises(TilingError, match="permutation"):
        permute_trees(forest, order)
