"""Tile shapes, the LUT, uniform tiling and the walk over a tree of tiles (seed 000 §3).

The library's tables are checked against things written here independently: hand-made
golden shapes, a one-outcome-at-a-time walk of each shape, a tile-by-tile validity check
and an exhaustive walk of every tile in the Forest itself.
"""

from __future__ import annotations

from math import comb

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from test_forest import random_forests
from util import probe_rows

from silvanforge import reference
from silvanforge.errors import TilingError
from silvanforge.hir import (MAX_TILE_SIZE, check_tiling, plan_tiling, print_plan,
                             print_shapes, tile_shapes, tile_uniform, uniform_tiling,
                             walk_plan)
from silvanforge.model import Tree, build_forest
from silvanforge.model.inputs import as_matrix

SIZES = range(1, MAX_TILE_SIZE + 1)

# ---- shapes and the LUT -----------------------------------------------------------------

# Written by hand from seed 000 Figure 2 and §3.6: per node (level order) its in-tile
# children, -1 for an edge leaving the tile. Order: left chain first, right chain last.
GOLDEN = {
    1: [[[-1, -1]]],
    2: [[[1, -1], [-1, -1]],                  # root with a left child
        [[-1, 1], [-1, -1]]],                 # root with a right child
    3: [[[1, -1], [2, -1], [-1, -1]],         # left chain
        [[1, -1], [-1, 2], [-1, -1]],         # left, then right
        [[1, 2], [-1, -1], [-1, -1]],         # balanced
        [[-1, 1], [2, -1], [-1, -1]],         # right, then left
        [[-1, 1], [-1, 2], [-1, -1]]],        # right chain
}


def test_shape_counts_are_catalan_numbers():
    assert [tile_shapes(n).count for n in SIZES] == [comb(2 * n, n) // (n + 1) for n in SIZES]


@pytest.mark.parametrize("n", sorted(GOLDEN))
def test_shape_ids_are_the_golden_ones(n):
    assert tile_shapes(n).children.tolist() == GOLDEN[n]


def test_lut_examples_from_the_seed():
    lut = tile_shapes(3).lut
    assert lut[0, 0b110] == 1            # §3.7: left chain, 110 → second child
    assert lut[0, 0b011] == lut[1, 0b011] == 3 and lut[2, 0b011] == 2   # §3.6
    assert tile_shapes(1).lut.tolist() == [[1, 0]]
    assert tile_shapes(2).lut.tolist() == [[2, 2, 1, 0], [2, 1, 0, 0]]


def _preorder_left_sizes(children, i=0) -> list[int]:
    if i < 0:
        return []
    left = _preorder_left_sizes(children, children[i][0])
    return [len(left)] + left + _preorder_left_sizes(children, children[i][1])


@pytest.mark.parametrize("n", SIZES)
def test_shape_order_is_documented_and_tables_are_well_formed(n):
    shapes = tile_shapes(n)
    keys = [_preorder_left_sizes(c) for c in shapes.children.tolist()]
    assert keys == sorted(keys, reverse=True) and len(set(map(tuple, keys))) == shapes.count
    for s, c in enumerate(shapes.children):
        inside = c[c >= 0]
        # level order: node k's children come after it, in increasing order, each once
        assert sorted(inside.tolist()) == list(range(1, n))
        assert all(inside[i] < inside[i + 1] for i in range(len(inside) - 1))
        assert shapes.shape_id(c) == s
        assert sorted(shapes.exits[s][c < 0].tolist()) == list(range(n + 1))
        assert (shapes.exits[s][c >= 0] == -1).all()
    assert not shapes.lut.flags.writeable and tile_shapes(n) is shapes


def _direct_lut(children: list) -> list[int]:
    """The LUT row of one shape: walk each outcome; exits rank by their path, L < R."""
    n = len(children)
    paths = {}

    def collect(i, path):
        for side, step in ((0, "L"), (1, "R")):
            c = children[i][side]
            if c >= 0:
                collect(c, path + step)
            else:
                paths[(i, side)] = path + step

    collect(0, "")
    rank = {slot: r for r, slot in enumerate(sorted(paths, key=paths.get))}
    row = []
    for bits in range(1 << n):
        i = 0
        while True:
            side = 0 if (bits >> (n - 1 - i)) & 1 else 1
            if children[i][side] < 0:
                row.append(rank[(i, side)])
                break
            i = children[i][side]
    return row


@pytest.mark.parametrize("n", SIZES)
def test_lut_agrees_with_a_direct_walk_of_every_shape(n):
    shapes = tile_shapes(n)
    expected = [_direct_lut(c) for c in shapes.children.tolist()]
    assert shapes.lut.tolist() == expected


@pytest.mark.parametrize("size", [0, 9, -1, 2.5, "3"])
def test_unsupported_tile_sizes(size):
    with pytest.raises(TilingError, match="tile size"):
        tile_shapes(size)


def test_print_shapes():
    assert print_shapes(2).splitlines()[1] == "  shape 0: 0[1 e2] 1[e0 e1]  lut 00:2 01:2 10:1 11:0"


# ---- tilings ----------------------------------------------------------------------------

def complete_tree(depth: int, **kw) -> Tree:
    """Internal nodes 0..2^depth-2 in level order, leaves after them."""
    n = (1 << (depth + 1)) - 1
    inner = (1 << depth) - 1
    left = [2 * i + 1 if i < inner else -1 for i in range(n)]
    right = [2 * i + 2 if i < inner else -1 for i in range(n)]
    return Tree(left=left, right=right, feature=[0] * n,
                threshold=np.linspace(-1, 1, n).tolist(), leaf_value=list(range(n)), **kw)


@pytest.fixture(scope="module")
def complete():
    leaf = Tree(left=[-1], right=[-1], feature=[0], threshold=[0.0], leaf_value=[5.0])
    return build_forest([complete_tree(3), leaf], n_features=1, n_outputs=1)


def test_uniform_tiling_of_a_complete_tree(complete):
    plan = tile_uniform(complete, 3)
    assert plan.tile_offsets.tolist() == [0, 5, 5]       # the second tree is one leaf
    assert plan.nodes.tolist() == [[0, 1, 2], [3, -1, -1], [4, -1, -1], [5, -1, -1],
                                   [6, -1, -1]]
    assert plan.shape.tolist() == [2] * 5                # dummies pad to the balanced shape
    assert plan.exit_tile[0].tolist() == [1, 2, 3, 4]
    assert plan.exit_leaf[1].tolist() == [7, 7, 8, 8]    # a dummy repeats the edge it cuts
    assert (plan.exit_leaf[0] == -1).all() and (plan.exit_tile[1:] == -1).all()
    assert print_plan(plan).splitlines()[:3] == [
        "tiling: tile size 3, 2 trees, 5 tiles",
        "tree 0: tiles 0..4",
        "  tile 0: nodes [0 1 2] shape 2 0[1 2] 1[e0 e1] 2[e2 e3] exits [t1 t2 t3 t4]"]
    assert print_plan(plan).splitlines()[-1] == "tree 1: a single leaf"
    assert not plan.nodes.flags.writeable


def test_tile_size_one_is_the_plain_tree(complete):
    plan = tile_uniform(complete, 1)
    assert plan.nodes[:, 0].tolist() == list(range(7))
    assert plan.node_tile.tolist() == list(range(7)) + [-1] * 9


@pytest.mark.parametrize("node_tile, message", [
    ([0, 0, 1, 2, 3, 4, 5, 0] + [-1] * 8, "leaf in a tile"),
    ([0, 0, -1, 1, 2, 3, 4] + [-1] * 9, "internal node in no tile"),
    ([0, 0, 0, 0, 1, 2, 3] + [-1] * 9, "larger than 3"),
    ([0, 1, 1, 2, 3, 4, 5] + [-1] * 9, "not connected"),
    ([0, 1, 1, 1, 2, 3, 4] + [-1] * 9, "not connected"),
    ([0, 1, 2, 3, 4, 5, 6] + [-1] * 9, "not maximal"),
    ([0, 0, 0], "one integer per node"),
])
def test_invalid_tilings_are_rejected(complete, node_tile, message):
    with pytest.raises(TilingError, match=message):
        plan_tiling(complete, np.array(node_tile), 3)


def assert_valid_tiling(forest, plan):
    """Seed 000 §3.4, checked tile by tile on the plan."""
    n = plan.tile_size
    base = np.repeat(forest.tree_offsets[:-1], forest.tree_sizes)
    kids = np.stack([forest.left + base, forest.right + base], axis=1)
    internal = ~forest.is_leaf
    assert ((plan.node_tile >= 0) == internal).all()
    seen = []
    for t in range(forest.n_trees):
        for k in range(plan.tile_offsets[t], plan.tile_offsets[t + 1]):
            members = [v for v in plan.nodes[k].tolist() if v >= 0]
            assert set(np.flatnonzero(plan.node_tile == k).tolist()) == set(members)
            assert all(forest.tree_offsets[t] <= v < forest.tree_offsets[t + 1]
                       for v in members)
            # connected: every member but the first (the tile root) has its parent inside
            inside = {int(c) for v in members for c in kids[v]} & set(members)
            assert inside == set(members[1:]) and plan.nodes[k, 0] >= 0
            below = {int(c) for v in members for c in kids[v] if internal[c]} - set(members)
            assert len(members) == n or not below       # maximal
            seen += members
    assert sorted(seen) == np.flatnonzero(internal).tolist()   # a partition


def assert_tiles_walk_like_the_tree(forest, plan):
    """For every tile and every outcome, the LUT's exit is where the Forest's own edges
    lead from the tile root, reading real nodes' bits and ignoring dummies'."""
    n = plan.tile_size
    if plan.n_tiles == 0:
        return
    base = np.repeat(forest.tree_offsets[:-1], forest.tree_sizes)
    kids = np.stack([forest.left + base, forest.right + base], axis=1)
    pos = np.zeros(forest.n_nodes, dtype=np.int64)
    real = plan.nodes >= 0
    pos[plan.nodes[real]] = np.nonzero(real)[1]
    bits = np.arange(1 << n)[None, :]
    tile = np.arange(plan.n_tiles)[:, None]
    node = np.repeat(plan.nodes[:, :1], 1 << n, axis=1).astype(np.int64)
    target = np.full(node.shape, -1)
    for _ in range(n):
        left = (bits >> (n - 1 - pos[node])) & 1
        child = np.where(left == 1, kids[node, 0], kids[node, 1])
        stays = plan.node_tile[child] == tile
        target = np.where((target < 0) & ~stays, child, target)
        node = np.where(target < 0, child, node)
    exit_ = plan.shapes.lut[plan.shape[:, None], bits]
    to_tile = plan.exit_tile[tile, exit_]
    expected = np.where(to_tile >= 0, plan.nodes[np.maximum(to_tile, 0), 0],
                        plan.exit_leaf[tile, exit_])
    np.testing.assert_array_equal(target, expected)
    # a child tile is the one its root node belongs to
    assert (plan.node_tile[expected[to_tile >= 0]] == to_tile[to_tile >= 0]).all()


@settings(max_examples=30)
@given(random_forests())
def test_uniform_tilings_are_valid(forest):
    for n in SIZES:
        plan = tile_uniform(forest, n)
        check_tiling(forest, uniform_tiling(forest, n), n)
        assert_valid_tiling(forest, plan)
        assert_tiles_walk_like_the_tree(forest, plan)


def test_the_checks_can_fail(complete):
    good = tile_uniform(complete, 3)
    with pytest.raises(AssertionError):   # tile 1 loses its only node to tile 2
        assert_valid_tiling(complete, plan_with(good, node_tile=np.where(
            good.node_tile == 1, 2, good.node_tile)))
    with pytest.raises(AssertionError):   # the root tile claims the mirrored shape
        assert_tiles_walk_like_the_tree(complete, plan_with(good, shape=np.array(
            [4, 2, 2, 2, 2], dtype=np.int16)))


def plan_with(plan, **changes):
    fields = {k: getattr(plan, k) for k in ("tile_size", "tile_offsets", "nodes", "shape",
                                            "exit_tile", "exit_leaf", "node_tile")}
    return type(plan)(**{**fields, **changes})


# ---- walking the tree of tiles ----------------------------------------------------------

@settings(max_examples=30)
@given(random_forests(), st.integers(0, 2**32 - 1))
def test_walking_tiles_reaches_the_reference_leaf(forest, seed):
    X = probe_rows(forest, seed, 30)
    expected = reference.global_leaves(forest, as_matrix(X, forest))
    for n in SIZES:
        np.testing.assert_array_equal(walk_plan(tile_uniform(forest, n), forest, X), expected)


def test_walk_of_a_complete_tree(complete):
    X = np.linspace(-1.2, 1.2, 41)[:, None]
    expected = reference.global_leaves(complete, X)
    for n in SIZES:
        np.testing.assert_array_equal(walk_plan(tile_uniform(complete, n), complete, X),
                                      expected)


def test_a_walk_that_does_not_end_is_an_error(complete):
    good = tile_uniform(complete, 3)
    cyclic = plan_with(good, exit_tile=np.where(good.exit_leaf >= 0, 0, good.exit_tile),
                       exit_leaf=np.full_like(good.exit_leaf, -1))
    with pytest.raises(TilingError, match="does not end"):
        walk_plan(cyclic, complete, np.zeros((2, 1)))
