"""Compiled predictors whose tile inner loops run outside their outer loops (offset loops
with guards) against the reference: tree and batch tiles, parallel on the moved loop,
ragged tails and fewer trees or rows than a tile, every CPU representation.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from test_mask import grown_tree
from test_representations import forests, random_rows

import silvanforge
from silvanforge import reference
from silvanforge.backends.cpu import Target
from silvanforge.model.builder import build_forest
from silvanforge.model.forest import MISSING_NAN, MISSING_NONE, OP_LE

TREE_MOVED = "tile(tree, t0, t1, 8)\nreorder(t1, t0, batch)\nparallel(t1)"
BATCH_MOVED = "tile(batch, b0, b1, 16)\nreorder(b1, b0, tree)\nparallel(b1)"
BOTH_MOVED = ("tile(batch, b0, b1, 16)\ntile(tree, t0, t1, 8)\n"
              "reorder(t1, b1, t0, b0)\nparallel(t1)")
# The moved loop inside a parallel tree loop: a privatized reduction flushed per b1.
BATCH_UNDER_PARALLEL_TREES = "tile(batch, b0, b1, 16)\nreorder(b1, tree, b0)\nparallel(tree)"
# Nested tiles, the inner one moved: the guard's end is the outer tile's.
NESTED = "tile(tree, t0, t1, 8)\ntile(t1, a, b, 3)\nreorder(b, a, t0, batch)\nparallel(b)"
# A cached row block whose inner tile moved out of its interleaved outer loop.
CACHED_INTERLEAVED = ("tile(batch, b0, b1, 16)\ntile(b1, c0, c1, 4)\n"
                      "reorder(b0, c1, tree, c0)\ncache(b0)\ninterleave(c0)\nparallel(b0)")


def lightgbm_like(n_trees: int, seed: int = 0) -> silvanforge.Forest:
    """Small trees of ``<=`` splits with NaN or no missing rule: forests ``mask`` takes."""
    rng = np.random.default_rng(seed)
    trees = [grown_tree(rng, 7, 5, [OP_LE], [MISSING_NAN, MISSING_NONE])
             for _ in range(n_trees)]
    return build_forest(trees, n_features=5, n_outputs=1)


def _exact(predictor, forest, rows) -> None:
    np.testing.assert_allclose(predictor.predict(rows, output="margin"),
                               reference.predict(forest, rows, output="margin"),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("representation", ["array", "sparse", "mask"])
@pytest.mark.parametrize("schedule", [TREE_MOVED, BATCH_MOVED, BOTH_MOVED,
                                      BATCH_UNDER_PARALLEL_TREES, NESTED,
                                      CACHED_INTERLEAVED])
@pytest.mark.parametrize("n_trees", [3, 8, 13])  # fewer than a tile, whole tiles, ragged
def test_moved_inner_loops_equal_the_reference(representation, schedule, n_trees):
    if representation == "mask" and "avx512f" not in Target.host().enabled():
        pytest.skip("representation='mask' is checked on AVX-512 hosts; this one has no "
                    "avx512f")
    forest = lightgbm_like(n_trees)
    predictor = silvanforge.compile(forest, schedule=schedule,
                                    representation=representation, n_jobs=2)
    assert "<offset>" in predictor.dump("mir")
    rows = random_rows(forest, n_trees, 37)  # NaNs, thresholds and their neighbours
    for n in (37, 32, 16, 5, 1, 0):  # ragged row blocks, whole ones, fewer than a block
        _exact(predictor, forest, rows[:n])


@settings(max_examples=30, deadline=None)
@given(forest=forests(), seed=st.integers(0, 2**32 - 1), data=st.data(),
       tree_tile=st.integers(1, 9), batch_tile=st.integers(1, 20),
       n_rows=st.integers(0, 45), representation=st.sampled_from(["array", "sparse"]))
def test_random_tiles_in_random_orders(forest, seed, data, tree_tile, batch_tile, n_rows,
                                       representation):
    """Every order of the tiled loops (a tile of the tree tile's inner loop too) is legal;
    with parallel on any one of them the predictions are the reference's (rows with
    NaNs)."""
    lines = []
    loops = ["batch", "tree"]
    if data.draw(st.booleans(), "tile trees"):
        lines.append(f"tile(tree, t0, t1, {tree_tile})")
        loops[1:] = ["t0", "t1"]
        if data.draw(st.booleans(), "tile the tile"):
            lines.append(f"tile(t1, t2, t3, {data.draw(st.integers(1, 4), 'nested tile')})")
            loops[2:] = ["t2", "t3"]
    if data.draw(st.booleans(), "tile rows"):
        lines.append(f"tile(batch, b0, b1, {batch_tile})")
        loops[:1] = ["b0", "b1"]
    order = data.draw(st.permutations(loops), "order")
    lines.append(f"reorder({', '.join(order)})")
    parallel = data.draw(st.sampled_from([None, *order]), "parallel")
    if parallel:
        lines.append(f"parallel({parallel})")
    try:
        predictor = silvanforge.compile(forest, schedule="\n".join(lines),
                                        representation=representation,
                                        n_jobs=2 if parallel else 1)
    except silvanforge.UnsupportedModelError:
        assert representation == "array"  # a tree too deep for a padded array
        return
    _exact(predictor, forest, random_rows(forest, seed, n_rows))
