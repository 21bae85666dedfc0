"""Compiled tiled walks (``compile(tile_size=, tiling=, profile=)``) against the reference.

Every tile size 1-8, both tiled layouts and both tilings, on random forests using every
operator, missing rule and category rule, with rows full of NaNs, thresholds and odd
categories; the probability layout's tree groups and schedule; persistence; bad options.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import event, given, settings, strategies as st
from test_representations import forests, random_rows

import silvanforge
from silvanforge import reference
from silvanforge.errors import InputError, ModelFormatError, ScheduleError, SilvanForgeError
from silvanforge.hir import MAX_TILE_SIZE, leaf_counts, peel_depths, plan_tiling
from silvanforge.model import Tree, build_forest
from silvanforge.plan.layout import PEEL_COVERAGE, grouped_schedule


def _exact(predictor, forest, rows) -> None:
    np.testing.assert_allclose(predictor.predict(rows, output="margin"),
                               reference.predict(forest, rows, output="margin"),
                               rtol=1e-12, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(forest=forests(), seed=st.integers(0, 2**32 - 1),
       tile_size=st.integers(1, MAX_TILE_SIZE), layout=st.sampled_from(["sparse", "array"]),
       tiling=st.sampled_from(["uniform", "probability"]))
def test_tiled_predictions_equal_the_reference(forest, seed, tile_size, layout, tiling):
    rows = random_rows(forest, seed, n=30)
    profile = random_rows(forest, seed + 1, n=50) if tiling == "probability" else None
    predictor = silvanforge.compile(forest, representation=layout, tile_size=tile_size,
                                    tiling=tiling, profile=profile, n_jobs=1)
    # The probability layout may reorder trees: compare with the reference of the
    # predictor's own forest and of the original (sums in another order: 1e-12).
    _exact(predictor, forest, rows)
    # Batches that take the small-batch kernel and partial row blocks, too.
    _exact(predictor, forest, rows[:3])
    _exact(predictor, forest, rows[:13])


def skewed_forest(n_trees: int = 6) -> silvanforge.Forest:
    """Right chains of varying length: rows with x0 > 0 (most of them) fall off the
    chain at depths that differ per tree; a left subtree below each chain node."""
    trees = []
    for t in range(n_trees):
        length = 2 + t % 3
        left, right, feature, threshold = [], [], [], []

        def node(l, r, f, th):
            left.append(l), right.append(r), feature.append(f), threshold.append(th)

        for k in range(length):
            base = len(left)
            node(base + 1, base + 4, 0, -1.0 + k * 0.1 - t * 0.01)  # chain node
            node(base + 2, base + 3, 1, 0.0)                          # cold subtree
            node(-1, -1, 0, 0.0)
            node(-1, -1, 0, 0.0)
        node(-1, -1, 0, 0.0)
        n = len(left)
        trees.append(Tree(left=left, right=right, feature=feature, threshold=threshold,
                          leaf_value=np.arange(n, dtype=float) + t))
    return build_forest(trees, n_features=2, n_outputs=1)


def test_probability_layout_groups_trees_by_peel_depth():
    forest = skewed_forest()
    rng = np.random.default_rng(0)
    sample = np.column_stack([rng.normal(3, 1, 500), rng.normal(size=500)])
    predictor = silvanforge.compile(forest, profile=sample, tile_size=2, n_jobs=1)
    assert predictor.plan.tiling == "probability" and predictor.plan.tile_size == 2
    assert predictor.plan.representation == "sparse"
    # The compiled forest's trees are in ascending peel depth, and the schedule unrolls
    # each group's walks to that depth.
    compiled = predictor.forest
    plan = plan_tiling(compiled, predictor.plan.node_tile, 2)
    depths = peel_depths(plan, leaf_counts(compiled, sample), PEEL_COVERAGE)
    assert list(depths) == sorted(depths) and len(set(depths)) > 1
    groups = [(int(d), int((depths == d).sum())) for d in np.unique(depths)]
    assert str(predictor.schedule) == grouped_schedule(groups)
    rows = np.column_stack([rng.normal(0, 3, 200), rng.normal(size=200)])
    rows[::7, 0] = np.nan
    _exact(predictor, forest, rows)
    assert "tiling (probability)" in predictor.dump("hir")


def test_profile_objects_and_saved_predictors_keep_the_tiling(tmp_path):
    forest = skewed_forest()
    rng = np.random.default_rng(1)
    sample = np.column_stack([rng.normal(3, 1, 300), rng.normal(size=300)])
    profile = silvanforge.profile(forest, sample)
    profile.save(tmp_path / "p.npz")
    loaded = silvanforge.Profile.load(tmp_path / "p.npz")
    np.testing.assert_array_equal(loaded.counts, profile.counts)
    from_rows = silvanforge.compile(forest, profile=sample, n_jobs=1)
    from_profile = silvanforge.compile(forest, profile=loaded, n_jobs=1)
    assert str(from_rows.schedule) == str(from_profile.schedule)
    np.testing.assert_array_equal(from_rows.plan.node_tile, from_profile.plan.node_tile)
    from_rows.save(tmp_path / "m.sfp")
    again = silvanforge.load_predictor(tmp_path / "m.sfp")
    np.testing.assert_array_equal(again.plan.node_tile, from_rows.plan.node_tile)
    assert again.plan == from_rows.plan
    np.testing.assert_array_equal(again.predict(sample), from_rows.predict(sample))
    with pytest.raises(ModelFormatError, match="profile"):
        silvanforge.Profile.load(tmp_path / "m.sfp")


def test_bad_tiling_options_are_refused():
    forest = skewed_forest()
    rows = np.zeros((4, 2))
    for bad in (0, 9, "4", True, 2.0):
        with pytest.raises(InputError, match="tile_size"):
            silvanforge.compile(forest, tile_size=bad)
    with pytest.raises(InputError, match="tiling must be"):
        silvanforge.compile(forest, tiling="greedy")
    with pytest.raises(InputError, match="needs profile"):
        silvanforge.compile(forest, tiling="probability")
    with pytest.raises(InputError, match="not 'uniform'"):
        silvanforge.compile(forest, tiling="uniform", profile=rows)
    for rep in ("reorg", "code"):
        with pytest.raises(InputError, match="walks one node at a time"):
            silvanforge.compile(forest, representation=rep, tile_size=4)
    with pytest.raises(InputError, match="at least one row"):
        silvanforge.compile(forest, profile=np.zeros((0, 2)))
    other = silvanforge.profile(skewed_forest(3), rows)
    with pytest.raises(SilvanForgeError, match="one count >= 0 per node"):
        silvanforge.compile(forest, profile=other)
    with pytest.raises(InputError, match="CPU option"):
        silvanforge.compile(forest, target="opencl", profile=rows)


def test_tiled_layouts_report_their_size():
    forest = skewed_forest()
    predictor = silvanforge.compile(forest, tile_size=3, n_jobs=1)
    assert "uniform tiles of 3" in repr(predictor)
    assert predictor.representation.tile_size == 3
    # Only the shapes this forest uses are in the LUT.
    lut = predictor.representation.buffers["model_lut"]
    assert len(lut) == predictor.representation.n_shapes * 2 ** 3
    assert predictor.representation.n_shapes < 5


@pytest.mark.parametrize("target", ["cpu", "opencl"])
def test_peeling_counts_tile_steps_not_node_depth(target, request):
    """Complete trees of depth 3: peeling 2 steps is safe node by node, but a tile of 3
    nodes reaches a leaf exit in 2 steps and one of 7 in 1: the compiler must refuse the
    schedule rather than step past a leaf."""
    if target == "opencl":
        request.getfixturevalue("opencl")  # a device, or a skip (a failure in CI)
    full = Tree(left=[1, 3, 5, 7, 9, 11, 13] + [-1] * 8,
                right=[2, 4, 6, 8, 10, 12, 14] + [-1] * 8,
                feature=[0] * 15, threshold=[0.0, -1, 1, -2, -0.5, 0.5, 2] + [0] * 8,
                leaf_value=np.arange(15.0))
    forest = build_forest([full, full], n_features=1, n_outputs=1)
    schedule = "tile(batch, b0, b1, 4)\nreorder(b0, tree, b1)\npeelWalk(b1, 3)"
    X = np.linspace(-3, 3, 13)[:, None]
    ok = silvanforge.compile(forest, schedule=schedule, target=target,
                             representation="sparse")
    np.testing.assert_allclose(ok.predict(X), reference.predict(forest, X), rtol=1e-12)
    for tile_size, steps in ((3, 2), (7, 1)):
        with pytest.raises(ScheduleError, match=f"{steps} step.*tiles of {tile_size}"):
            silvanforge.compile(forest, schedule=schedule, target=target,
                                representation="sparse", tile_size=tile_size)


@settings(max_examples=30, deadline=None)
@given(forest=forests(), seed=st.integers(0, 2**32 - 1),
       tile_size=st.integers(1, MAX_TILE_SIZE), layout=st.sampled_from(["sparse", "array"]),
       peel=st.integers(1, 4), unroll=st.integers(0, 2))
def test_peeled_tiled_walks_are_exact_or_refused(forest, seed, tile_size, layout, peel,
                                                 unroll):
    """A peel the layout's shortest walk allows compiles and is exact; a deeper one is a
    ScheduleError, never a walk past a leaf."""
    schedule = (f"tile(batch, b0, b1, 4)\nreorder(b0, tree, b1)\ninterleave(b1)\n"
                f"peelWalk(b1, {peel})" + (f"\nunrollWalk(b1, {unroll})" if unroll else ""))
    try:
        predictor = silvanforge.compile(forest, schedule=schedule, representation=layout,
                                        tile_size=tile_size, n_jobs=1)
    except ScheduleError as exc:
        assert "peelWalk" in str(exc)
        event("refused")
        return
    except SilvanForgeError:  # a layout too large for this forest
        return
    event("compiled")
    _exact(predictor, forest, random_rows(forest, seed, n=21))
