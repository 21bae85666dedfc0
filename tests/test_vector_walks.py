"""``vectorize``: rows walking as the lanes of vectors (array layout, float32) give the
reference's predictions, with NaNs, every operator and missing rule, categories, and
batches that end inside a vector."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import silvanforge
from silvanforge import reference
from silvanforge.errors import ScheduleError
from silvanforge.model.builder import build_forest
from silvanforge.model.forest import (MISSING_NAN, MISSING_NONE, MISSING_ZERO, OP_CAT,
                                      OP_EQ, OP_LE, OP_LT)
from silvanforge.schedule import Schedule

from test_representations import random_rows, random_tree


def schedule(tile: int, cache: bool) -> str:
    return "\n".join([f"tile(batch, b0, b1, {tile})", "reorder(b0, tree, b1)",
                      *(["cache(b0)"] if cache else []), "vectorize(b1)", "parallel(b0)"])


def same_depth_forest(rng, ops, rules, n_features: int, n_outputs: int):
    """A float32 forest of up to 4 random trees, all of the first one's depth."""
    def depth(tree):
        return int(build_forest([tree], n_features=n_features, n_outputs=n_outputs,
                                input_dtype=np.float32).tree_depths[0])
    trees = [random_tree(rng, n_features, ops, rules, 1, False, 0)]
    for _ in range(40):
        tree = random_tree(rng, n_features, ops, rules, 1, False,
                           int(rng.integers(0, n_outputs)))
        if depth(tree) == depth(trees[0]) and len(trees) < 4:
            trees.append(tree)
    return build_forest(trees, n_features=n_features, n_outputs=n_outputs,
                        input_dtype=np.float32)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_rows=st.integers(1, 70),
       tile=st.sampled_from([16, 32]), cache=st.booleans(), n_outputs=st.integers(1, 2),
       ops=st.lists(st.sampled_from([OP_LT, OP_LE, OP_EQ, OP_CAT]), min_size=1,
                    max_size=4, unique=True),
       rules=st.lists(st.sampled_from([MISSING_NAN, MISSING_ZERO, MISSING_NONE]),
                      min_size=1, max_size=3, unique=True))
def test_vector_walks_match_reference(seed, n_rows, tile, cache, n_outputs, ops, rules):
    rng = np.random.default_rng(seed)
    forest = same_depth_forest(rng, ops, rules, int(rng.integers(1, 5)), n_outputs)
    rows = random_rows(forest, seed, n_rows).astype(np.float32)
    predictor = silvanforge.compile(forest, schedule=schedule(tile, cache),
                                    representation="array", precision="float32")
    np.testing.assert_array_equal(predictor.predict(rows, output="margin"),
                                  reference.predict(forest, rows, output="margin"))


def test_vectorize_needs_a_tile_of_whole_vectors():
    with pytest.raises(ScheduleError, match="multiple of 16"):
        Schedule.parse("tile(batch, b0, b1, 12)\nreorder(b0, tree, b1)\nvectorize(b1)")
    with pytest.raises(ScheduleError, match="multiple of 16"):
        Schedule.parse("tile(tree, t0, t1, 16)\nvectorize(t1)")


def test_vectorize_needs_the_array_layout_at_float32():
    rng = np.random.default_rng(3)
    forest = same_depth_forest(rng, [OP_LT], [MISSING_NAN], 2, 1)
    with pytest.raises(ScheduleError, match="array"):
        silvanforge.compile(forest, schedule=schedule(16, True), representation="sparse",
                            precision="float32")
