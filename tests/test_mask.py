"""The ``mask`` representation: every split of a tree tested at once as vectors, the leaf
found from the bits. Its predictions are the reference's for trees of 1-63 splits, every
operator, missing rule and category, NaN and infinite inputs, rows of up to 40 features,
any schedule, float32 and float64."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import silvanforge
from silvanforge import reference
from silvanforge.backends.cpu import Target
from silvanforge.errors import InputError, UnsupportedModelError
from silvanforge.model.builder import Tree, build_forest
from silvanforge.model.forest import (MISSING_NAN, MISSING_NONE, MISSING_ZERO, OP_CAT,
                                      OP_EQ, OP_LE, OP_LT)
from silvanforge.representations.mask import MaskRepresentation, one_compare
from silvanforge.runtime.predictor import _representation

from test_representations import random_rows, tree_of_shape

SCHEDULES = ["xgboost",                                   # a tree over a block of rows
             "tile(batch, b0, b1, 16)\nparallel(b0)",     # a row through every tree
             "small_batch",                               # interleaved trees
             "one_tree_at_a_time"]
AVX512 = Target("x86_64-unknown-linux-gnu", "skylake-avx512", "+avx512f,+avx2")
AVX2 = Target("x86_64-unknown-linux-gnu", "haswell", "-avx512f,+avx2")


def grown_tree(rng, splits: int, n_features: int, ops, rules, width: int = 1,
               linear: bool = False, output: int = 0) -> Tree:
    """A tree of exactly ``splits`` internal nodes, each splitting a random leaf."""
    left, right = [-1], [-1]
    for _ in range(splits):
        i = int(rng.choice([j for j in range(len(left)) if left[j] < 0]))
        left[i], right[i] = len(left), len(left) + 1
        left += [-1, -1]
        right += [-1, -1]
    return tree_of_shape(rng, left, right, n_features, ops, rules, width, linear, output,
                         minus_inf=0.03)


def grown_forest(rng, max_splits: int, n_features: int, ops, rules, n_outputs: int = 1,
                 leaves: str = "constant", dtype=np.float64):
    width = n_outputs if leaves == "vector" else 1
    trees = [grown_tree(rng, int(rng.integers(0, max_splits + 1)), n_features, ops, rules,
                        width, leaves == "linear",
                        0 if width > 1 else int(rng.integers(0, n_outputs)))
             for _ in range(int(rng.integers(1, 5)))]
    return build_forest(trees, n_features=n_features, n_outputs=n_outputs,
                        linear_leaves=leaves == "linear", input_dtype=dtype)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_rows=st.integers(1, 150),
       max_splits=st.sampled_from([1, 15, 31, 63]), n_features=st.integers(1, 40),
       schedule=st.sampled_from(SCHEDULES), float32=st.booleans(),
       n_outputs=st.integers(1, 2), leaves=st.sampled_from(["constant", "linear", "vector"]),
       ops=st.lists(st.sampled_from([OP_LT, OP_LE, OP_EQ, OP_CAT]), min_size=1,
                    max_size=4, unique=True),
       rules=st.lists(st.sampled_from([MISSING_NAN, MISSING_ZERO, MISSING_NONE]),
                      min_size=1, max_size=3, unique=True))
def test_masks_match_the_reference(seed, n_rows, max_splits, n_features, schedule, float32,
                                   n_outputs, leaves, ops, rules):
    # One operator with NaN/none rules takes the one-compare path (row copies), up to 32
    # features; the rest the general lane-wise test.
    rng = np.random.default_rng(seed)
    dtype = np.float32 if float32 else np.float64
    forest = grown_forest(rng, max_splits, n_features, ops, rules, n_outputs, leaves, dtype)
    rows = random_rows(forest, seed, n_rows).astype(dtype)
    predictor = silvanforge.compile(forest, schedule=schedule, representation="mask",
                                    precision="float32" if float32 else "float64")
    np.testing.assert_array_equal(predictor.predict(rows, output="margin"),
                                  reference.predict(forest, rows, output="margin"))


@pytest.mark.parametrize("ops, rules, n_features, copies", [
    ([OP_LE], [MISSING_NAN, MISSING_NONE], 5, 8),    # LightGBM's numeric splits
    ([OP_LT], [MISSING_NAN], 20, 24),                # XGBoost's, rows of three registers
    ([OP_LT], [MISSING_NAN], 33, 0),                 # too wide for the copies
    ([OP_LT, OP_LE], [MISSING_NAN], 5, 0),           # two operators
    ([OP_LE], [MISSING_ZERO], 5, 0),                 # zero as missing
    ([OP_CAT], [MISSING_NAN], 5, 0)])                # categories
def test_which_forests_are_tested_with_one_compare(ops, rules, n_features, copies):
    rng = np.random.default_rng(1)
    forest = grown_forest(rng, 31, n_features, ops, rules)
    forest = forest.replace(threshold=np.where(np.isinf(forest.threshold), 0.5,
                                               forest.threshold))
    rep = MaskRepresentation(forest)
    assert rep.copy_width == copies
    assert one_compare(forest, "float64") == bool(copies)
    rows = random_rows(forest, 2, 200)
    for schedule in SCHEDULES[:2]:
        predictor = silvanforge.compile(forest, schedule=schedule, representation="mask")
        np.testing.assert_array_equal(predictor.predict(rows, output="margin"),
                                      reference.predict(forest, rows, output="margin"))


def test_a_nan_sent_left_past_minus_infinity_takes_the_general_test():
    # x < -inf holds for no value, yet a NaN goes left: the copy of the row with NaNs
    # read as -inf would send it right, so this forest is tested lane-wise.
    tree = Tree(left=[1, -1, -1], right=[2, -1, -1], feature=[0, 0, 0],
                threshold=[-np.inf, 0, 0], leaf_value=[[0.0], [1.0], [2.0]],
                default_left=[True, False, False], split_op=OP_LT, missing=MISSING_NAN)
    forest = build_forest([tree], n_features=1, n_outputs=1)
    assert MaskRepresentation(forest).copy_width == 0
    assert not one_compare(forest, "float64")
    rows = np.array([[np.nan], [-np.inf], [0.0], [np.inf]])
    predictor = silvanforge.compile(forest, representation="mask")
    np.testing.assert_array_equal(predictor.predict(rows, output="margin"), [1, 2, 2, 2])


@pytest.mark.parametrize("splits, lanes", [(0, 16), (15, 16), (16, 32), (31, 32),
                                           (32, 64), (63, 64)])
def test_a_tree_stride_holds_the_largest_tree(splits, lanes):
    rng = np.random.default_rng(splits)
    forest = build_forest([grown_tree(rng, splits, 3, [OP_LT], [MISSING_NAN]),
                           grown_tree(rng, 1, 3, [OP_LT], [MISSING_NAN])],
                          n_features=3, n_outputs=1)
    rep = MaskRepresentation(forest)
    assert rep.lanes == lanes
    rows = random_rows(forest, 3, 100)
    predictor = silvanforge.compile(forest, representation="mask")
    np.testing.assert_array_equal(predictor.predict(rows, output="margin"),
                                  reference.predict(forest, rows, output="margin"))


def test_a_tree_of_64_splits_is_refused_by_name():
    rng = np.random.default_rng(0)
    forest = build_forest([grown_tree(rng, 2, 3, [OP_LT], [MISSING_NAN]),
                           grown_tree(rng, 64, 3, [OP_LT], [MISSING_NAN])],
                          n_features=3, n_outputs=1)
    with pytest.raises(UnsupportedModelError, match="tree 1 has 64 internal nodes"):
        silvanforge.compile(forest, representation="mask")
    assert not one_compare(forest, "float64")


def test_masks_are_the_default_for_small_skewed_numeric_trees_on_avx512():
    rng = np.random.default_rng(4)
    # Chains of 30 splits: an array layout would pad each to 2^31 slots.
    numeric = build_forest([grown_tree(rng, 30, 5, [OP_LE], [MISSING_NAN, MISSING_NONE])
                            for _ in range(3)], n_features=5, n_outputs=1)
    categorical = build_forest([grown_tree(rng, 30, 5, [OP_LE, OP_CAT], [MISSING_NAN])
                                for _ in range(3)], n_features=5, n_outputs=1)
    if _representation(numeric, None, precision="float64", target=AVX512) != "mask":
        pytest.skip("these random trees happen to fit the array layout's padding bound")
    assert _representation(numeric, None, precision="float64", target=AVX2) == "code"
    assert _representation(categorical, None, precision="float64", target=AVX512) == "code"
    # GPU targets never get it, and refuse it when named.
    assert _representation(numeric, None, code=False, target=AVX512) == "sparse"
    with pytest.raises(InputError, match="CPU-only"):
        silvanforge.compile(numeric, target="opencl", representation="mask")


def test_the_default_compile_of_a_lightgbm_model_with_missing_values():
    lgb = pytest.importorskip("lightgbm", reason="lightgbm is not installed")
    rng = np.random.default_rng(5)
    X = rng.normal(size=(2000, 5))
    y = X[:, 0] * 2 + np.sin(X[:, 1]) + X[:, 2] * X[:, 3]
    X[rng.random(X.shape) < 0.1] = np.nan
    booster = lgb.train({"num_leaves": 31, "verbose": -1}, lgb.Dataset(X, y), 20)
    predictor = silvanforge.compile(booster, n_jobs=1)
    if "avx512f" in Target.host().enabled():
        assert predictor.options.representation == "mask"
    forest = silvanforge.load(booster)
    test = np.vstack([X[:300], np.full((1, 5), np.nan), np.zeros((1, 5))])
    np.testing.assert_array_equal(predictor.predict(test, output="margin"),
                                  reference.predict(forest, test, output="margin"))
    np.testing.assert_allclose(predictor.predict(test), booster.predict(test),
                               rtol=1e-12, atol=1e-12)


def test_masks_for_a_cpu_without_avx512_gather_and_stay_exact(monkeypatch):
    monkeypatch.setattr(Target, "host", classmethod(lambda cls: AVX2))
    rng = np.random.default_rng(6)
    forest = grown_forest(rng, 31, 12, [OP_LE], [MISSING_NAN, MISSING_NONE])
    rows = random_rows(forest, 6, 150)
    predictor = silvanforge.compile(forest, representation="mask")
    assert "avx512" not in predictor.dump("llvm")
    np.testing.assert_array_equal(predictor.predict(rows, output="margin"),
                                  reference.predict(forest, rows, output="margin"))
