"""The ``mask`` representation: every split of a tree tested at once as vectors, the leaf
found from the bits. Its predictions are the reference's for trees of 1-63 splits, every
operator, missing rule and category, NaN and infinite inputs, rows of up to 40 features,
any schedule, float32 and float64."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import silvanforge
from silvanforge import reference
from silvanforge.backends.cpu import Target
from silvanforge.errors import InputError, ScheduleError, UnsupportedModelError
from silvanforge.lir import ir
from silvanforge.model.builder import Tree, build_forest
from silvanforge.model.forest import (MISSING_NAN, MISSING_NONE, MISSING_ZERO, OP_CAT,
                                      OP_EQ, OP_LE, OP_LT)
from silvanforge.representations.mask import (MaskRepresentation, _ranks, one_compare,
                                               vector_ready)
from silvanforge.plan.planner import choose_representation, make_plan
from silvanforge.representations import decision, mask
from silvanforge.schedule import named

from test_representations import random_rows, tree_of_shape
from util import forbid_compiling

SCHEDULES = ["xgboost",                                   # a tree over a block of rows
             "tile(batch, b0, b1, 16)\nparallel(b0)",     # a row through every tree
             "small_batch",                               # interleaved trees
             "one_tree_at_a_time"]
AVX512 = Target("x86_64-unknown-linux-gnu", "skylake-avx512", "+avx512f,+avx2")
AVX2 = Target("x86_64-unknown-linux-gnu", "haswell", "-avx512f,+avx2")


def grown_tree(rng, splits: int, n_features: int, ops, rules, width: int = 1,
               linear: bool = False, output: int = 0, **shape) -> Tree:
    """A tree of exactly ``splits`` internal nodes, each splitting a random leaf
    (``shape``: more of tree_of_shape's keywords)."""
    left, right = [-1], [-1]
    for _ in range(splits):
        i = int(rng.choice([j for j in range(len(left)) if left[j] < 0]))
        left[i], right[i] = len(left), len(left) + 1
        left += [-1, -1]
        right += [-1, -1]
    return tree_of_shape(rng, left, right, n_features, ops, rules, width, linear, output,
                         **{"minus_inf": 0.03, **shape})


def grown_forest(rng, max_splits: int, n_features: int, ops, rules, n_outputs: int = 1,
                 leaves: str = "constant", dtype=np.float64, categories=None, **model):
    width = n_outputs if leaves == "vector" else 1
    shape = {} if categories is None else {"categories": categories}
    trees = [grown_tree(rng, int(rng.integers(0, max_splits + 1)), n_features, ops, rules,
                        width, leaves == "linear",
                        0 if width > 1 else int(rng.integers(0, n_outputs)), **shape)
             for _ in range(int(rng.integers(1, 5)))]
    return build_forest(trees, n_features=n_features, n_outputs=n_outputs,
                        linear_leaves=leaves == "linear", input_dtype=dtype, **model)


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
    # Float64 forests, float32 lanes: a copy is a whole number of 16-lane registers.
    ([OP_LE], [MISSING_NAN, MISSING_NONE], 5, 16),   # LightGBM's numeric splits
    ([OP_LT], [MISSING_NAN], 20, 32),                # XGBoost's, rows of two registers
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


# Category sets that fit coded masks (below the two reserved top bits), per precision.
CODED = {np.float64: np.array([0, 1, 2, 5, 31, 32, 40, 61]),
         np.float32: np.array([0, 1, 2, 5, 16, 29])}
# Row values around the reserved bits and the category rules' edges.
CATEGORY_INPUTS = np.array([0, 1, 5, 29, 30, 31, 32, 61, 62, 63, 64, -0.7, -1.0, -0.0,
                            1e-36, 2.5, np.nan, np.inf, -np.inf])


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_rows=st.integers(1, 150),
       # Up to three copies of 16 lanes: within MAX_COPIES whatever the rules.
       max_splits=st.integers(0, 63), n_features=st.integers(1, 16),
       schedule=st.sampled_from(SCHEDULES + ["cached"]), float32=st.booleans(),
       op=st.sampled_from([OP_LT, OP_LE]), numeric=st.booleans(),
       rules=st.lists(st.sampled_from([MISSING_NAN, MISSING_NONE]), min_size=1, max_size=2,
                      unique=True),
       apart=st.booleans(), category_rule=st.sampled_from(["truncate", "nonnegative", "exact"]),
       negative=st.sampled_from(["not_in_set", "missing"]))
def test_categorical_lanes_test_coded_operands(seed, n_rows, max_splits, n_features,
                                               schedule, float32, op, numeric, rules, apart,
                                               category_rule, negative):
    # Categorical splits of small sets take the copy path too: a coded operand (a bit a
    # category, one for NaN, one for negative values) tested with an `and`, from the
    # first copy (features only split by category) or a copy of their own (features
    # split both ways).
    rng = np.random.default_rng(seed)
    dtype = np.float32 if float32 else np.float64
    forest = grown_forest(rng, max_splits, n_features, [op, OP_CAT] if numeric else [OP_CAT],
                          rules, dtype=dtype, categories=CODED[dtype],
                          category_rule=category_rule, negative_category=negative)
    if apart and n_features > 1:  # categorical splits on the last feature only
        cat = forest.split_op == OP_CAT
        forest = forest.replace(feature=np.where(
            cat, n_features - 1, np.minimum(forest.feature, n_features - 2)))
    # (x < -inf sending NaN left takes the general test: see the test after the next.)
    forest = forest.replace(threshold=np.where(np.isinf(forest.threshold), 0.5,
                                               forest.threshold))
    rows = random_rows(forest, seed, n_rows)
    some = np.random.default_rng(seed).random(rows.shape) < 0.4
    rows[some] = np.random.default_rng(seed + 1).choice(CATEGORY_INPUTS, some.sum())
    rows = rows.astype(dtype)
    rep = MaskRepresentation(forest, "float32" if float32 else "float64")
    assert rep.copy_width > 0
    predictor = silvanforge.compile(
        forest, representation="mask", precision="float32" if float32 else "float64",
        schedule=None if schedule == "cached" else schedule)
    np.testing.assert_array_equal(predictor.predict(rows, output="margin"),
                                  reference.predict(forest, rows, output="margin"))


def forest_of(ops, rules, default_left=None, features=None, categories=(1, 3, 5, 20),
              **model):
    """Two trees of 7 splits on 3 features, its splits' rules, directions and features
    as given (else random)."""
    rng = np.random.default_rng(7)
    forest = build_forest([grown_tree(rng, 7, 3, ops, rules,
                                      categories=np.array(categories)) for _ in range(2)],
                          n_features=3, n_outputs=1, **model)
    forest = forest.replace(threshold=np.where(np.isinf(forest.threshold), 0.5,
                                               forest.threshold))
    if default_left is not None:
        forest = forest.replace(default_left=np.full(forest.n_nodes, default_left))
    if features is not None:
        forest = forest.replace(feature=np.where(forest.split_op == OP_CAT, features[1],
                                                 features[0]))
    return forest


@pytest.mark.parametrize("forest, regions", [
    (forest_of([OP_LE], [MISSING_NONE]), ("zero",)),  # LightGBM without NaNs in training
    (forest_of([OP_LT], [MISSING_NAN], default_left=True), ("low",)),
    (forest_of([OP_LT], [MISSING_NAN], default_left=False), ("nan",)),
    (forest_of([OP_LT], [MISSING_NAN]), ("low", "nan")),  # XGBoost
    (forest_of([OP_LE, OP_CAT], [MISSING_NONE], features=(0, 2)), ("zero",)),
    (forest_of([OP_LE, OP_CAT], [MISSING_NONE], features=(1, 1)), ("zero", "coded")),
    (forest_of([OP_CAT], [MISSING_NAN, MISSING_NONE]), ("coded",)),
    (forest_of([OP_LE, OP_CAT], [MISSING_ZERO]), ()),             # zero is missing
    (forest_of([OP_CAT], [MISSING_NAN], categories=(5, 62, 63, 100)), ()),  # reserved bits
])
def test_which_copies_a_row_is_read_from(forest, regions):
    for precision in ("float64", "float32"):
        assert MaskRepresentation(forest, precision).regions == regions
        assert one_compare(forest, precision) == bool(regions)
    rep = MaskRepresentation(forest)
    # The first copy holds coded operands where some feature is split only by category.
    assert ("model_mask_categorical" in rep.buffers) == (
        OP_CAT in forest.split_op and bool(regions) and "coded" not in regions)
    rows = np.vstack([random_rows(forest, 8, 200), np.tile(CATEGORY_INPUTS[:, None], 3)])
    predictor = silvanforge.compile(forest, representation="mask")
    np.testing.assert_array_equal(predictor.predict(rows, output="margin"),
                                  reference.predict(forest, rows, output="margin"))


@pytest.mark.parametrize("op", [OP_LT, OP_LE])
def test_float64_forests_compare_in_float32_lanes_and_settle_ties_in_float64(op):
    # Values within half a float32 step of a threshold round alike: the float32 lanes
    # leave them undecided and the float64 compare settles them.
    thresholds = [0.1, 1 / 3, 1e-40, 3.5e38, -2.0 ** -130, 7.0]
    trees = [Tree(left=[1, -1, -1], right=[2, -1, -1], feature=[i % 2, 0, 0],
                  threshold=[t, 0, 0], leaf_value=[[0.0], [1.0 * 10 ** i], [0.0]],
                  split_op=op, missing=MISSING_NONE) for i, t in enumerate(thresholds)]
    forest = build_forest(trees, n_features=2, n_outputs=1, input_dtype=np.float64)
    rep = MaskRepresentation(forest)
    assert rep.narrow and rep.lane_type == ir.F32
    values = np.array([v for t in thresholds for v in (
        t, np.nextafter(t, np.inf), np.nextafter(t, -np.inf), np.float32(t),
        np.nextafter(np.float32(t), np.float32(np.inf)))] + [np.nan, np.inf, -np.inf, 0.0])
    rows = np.stack([values, values[::-1]], axis=1)
    predictor = silvanforge.compile(forest, representation="mask")
    np.testing.assert_array_equal(predictor.predict(rows, output="margin"),
                                  reference.predict(forest, rows, output="margin"))


def test_float32_lanes_need_category_sets_below_30():
    rng = np.random.default_rng(11)
    small = forest_of([OP_LE, OP_CAT], [MISSING_NAN], categories=(1, 3, 5, 20),
                      input_dtype=np.float64)
    large = forest_of([OP_LE, OP_CAT], [MISSING_NAN], categories=(1, 30, 40, 61),
                      input_dtype=np.float64)
    assert MaskRepresentation(small).narrow and not MaskRepresentation(large).narrow
    assert MaskRepresentation(large).copy_width  # float64 lanes then
    # A float32 forest's lanes are float32 already.
    assert not MaskRepresentation(forest_of([OP_LE], [MISSING_NAN]), "float32").narrow
    for forest in (small, large):
        rows = np.vstack([random_rows(forest, 12, 200), np.tile(CATEGORY_INPUTS[:, None], 3)])
        rows[rng.random(len(rows)) < 0.5, 2] = 30
        predictor = silvanforge.compile(forest, representation="mask")
        np.testing.assert_array_equal(predictor.predict(rows, output="margin"),
                                      reference.predict(forest, rows, output="margin"))


def test_a_cached_block_prepares_each_row_once():
    forest = forest_of([OP_LE, OP_CAT], [MISSING_NAN, MISSING_NONE])
    rows = random_rows(forest, 9, 300)
    cached = silvanforge.compile(forest, representation="mask",
                                 schedule=named("xgboost", forest.n_trees, cache=True))
    plain = silvanforge.compile(forest, representation="mask", schedule="xgboost")
    lir = cached.dump("lir")
    # One loop over the block's rows fills the local array the walks read.
    assert "prepared" in lir and "prepared" not in plain.dump("lir")
    expected = reference.predict(forest, rows, output="margin")
    for predictor in (cached, plain):
        for n in (1, 63, 64, 65, 300):
            np.testing.assert_array_equal(predictor.predict(rows[:n], output="margin"),
                                          expected[:n])


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


def default_of(forest, cpu, device="cpu"):
    """The planner's representation for ``forest`` at float64 on ``cpu`` (a Target)."""
    return choose_representation(forest, None, "float64", device, frozenset(cpu.enabled()))


def test_masks_are_the_default_for_small_skewed_trees_on_avx512():
    rng = np.random.default_rng(4)
    # Chains of 30 splits: an array layout would pad each to 2^31 slots.
    numeric = build_forest([grown_tree(rng, 30, 5, [OP_LE], [MISSING_NAN, MISSING_NONE])
                            for _ in range(3)], n_features=5, n_outputs=1)
    categorical = build_forest([grown_tree(rng, 30, 5, [OP_LE, OP_CAT], [MISSING_NAN],
                                           categories=CODED[np.float64]) for _ in range(3)],
                               n_features=5, n_outputs=1)
    # Categories past the coded masks' bits: a set test lane by lane, slower than code.
    large_sets = build_forest([grown_tree(rng, 30, 5, [OP_LE, OP_CAT], [MISSING_NAN],
                                          categories=np.array([3, 62, 70, 100]))
                               for _ in range(3)], n_features=5, n_outputs=1)
    if default_of(numeric, AVX512) != "mask":
        pytest.skip("these random trees happen to fit the array layout's padding bound")
    # With AVX2 only, blocks of rows as lanes (two layouts in one plan: below).
    assert vector_ready(numeric, "float64") and default_of(numeric, AVX2) == "mask"
    assert default_of(categorical, AVX512) == "mask"
    assert default_of(large_sets, AVX512) == "code"
    # Trees of 32-63 splits take strides of 64 lanes: blocks of rows as masks on
    # AVX-512 (with code for a few rows: test_trees_of_up_to_63_splits_...), code on
    # AVX2 and where rows do not walk as lanes (a row's splits as lanes: slower).
    wide = build_forest([grown_tree(rng, 40, 5, [OP_LE], [MISSING_NONE]) for _ in range(3)],
                        n_features=5, n_outputs=1)
    assert MaskRepresentation(wide).lanes == 64 and one_compare(wide, "float64")
    assert vector_ready(wide, "float64") and default_of(wide, AVX512) == "mask"
    assert default_of(wide, AVX2) == "code"
    wide_sets = build_forest([grown_tree(rng, 40, 5, [OP_LE, OP_CAT], [MISSING_NAN],
                                         categories=np.array([3, 62, 70, 100]))
                              for _ in range(3)], n_features=5, n_outputs=1)
    assert not vector_ready(wide_sets, "float64")
    assert default_of(wide_sets, AVX512) == "code"
    # GPU targets never get it, and refuse it when named.
    assert default_of(numeric, AVX512, device="gpu") == "sparse"
    with pytest.raises(InputError, match="runs on cpu targets only"):
        silvanforge.compile(numeric, target="opencl", representation="mask")


def test_on_avx2_masks_walk_blocks_of_rows_and_code_a_few_rows():
    # Built for x86-64-v3 (this test's CPU must run AVX2 code): the default plan of a
    # forest whose rows walk masks as lanes has two layouts, code for up to a group of
    # 16 rows (a small forest's; 8 in a big one's). Every batch size on both sides of
    # that bound matches the reference, reloaded and pickled predictors reuse both
    # kernels, and a named layout is one layout.
    if not Target.named("x86-64-v3").runs_on(Target.host()):
        pytest.skip("needs a CPU that runs x86-64-v3 code (AVX2)")
    rng = np.random.default_rng(8)
    forest = build_forest([grown_tree(rng, 25, 6, [OP_LE], [MISSING_NAN, MISSING_NONE])
                           for _ in range(12)], n_features=6, n_outputs=1)
    rows = random_rows(forest, 9, 120)
    predictor = silvanforge.compile(forest, cpu="x86-64-v3")
    plan = predictor.plan
    assert (plan.representation, plan.small_representation, plan.small_batch) == \
        ("mask", "code", 16)
    assert plan.schedule.vectorized and not plan.small_schedule.vectorized
    assert "batches of up to 16 rows, as code:" in str(plan)
    (most, _), _ = mask.CODE_ROWS["avx2", 32]
    big = build_forest([grown_tree(rng, 25, 6, [OP_LE], [MISSING_NAN]) for _ in range(
        most // 20)], n_features=6, n_outputs=1)
    assert int((~big.is_leaf).sum()) > most
    assert make_plan(big, cpu="x86-64-v3").small_batch == 8
    buffers = [p.name for p in predictor.kernel.params]
    assert any(b.startswith("model_mask_") for b in buffers)
    assert any(b.startswith("model_small_") for b in buffers)
    expected = reference.predict(forest, rows, output="margin")
    for n in [*range(1, 12), 15, 16, 17, 70, 120]:
        np.testing.assert_array_equal(predictor.predict(rows[:n], output="margin"),
                                      expected[:n], err_msg=f"{n} rows")
    data = predictor.to_bytes()
    with pytest.MonkeyPatch.context() as patch:
        forbid_compiling(patch)
        for again in (silvanforge.Predictor.from_bytes(data),
                      pickle.loads(pickle.dumps(predictor))):
            assert again.plan == plan
            for n in (3, 9, 17, 120):
                np.testing.assert_array_equal(again.predict(rows[:n], output="margin"),
                                              expected[:n])
    for name in ("mask", "code"):
        assert silvanforge.compile(forest, representation=name, cpu="x86-64-v3",
                                   n_jobs=1).plan.small_representation is None
    # On AVX-512 code takes up to 8 rows of forests of at most 10,000 split nodes; the
    # bigger ones keep masks' own small-batch kernel (a row's splits as lanes).
    v4 = make_plan(forest, cpu="x86-64-v4")
    assert (v4.small_representation, v4.small_batch) == ("code", 8)
    (most, _), = mask.CODE_ROWS["avx512", 32]
    huge = build_forest([grown_tree(rng, 25, 6, [OP_LE], [MISSING_NAN]) for _ in range(
        most // 20)], n_features=6, n_outputs=1)
    assert int((~huge.is_leaf).sum()) > most
    v4 = make_plan(huge, cpu="x86-64-v4")
    assert (v4.representation, v4.small_representation, v4.small_batch) == ("mask", None, 8)


def test_trees_of_up_to_63_splits_walk_blocks_of_rows_as_masks_on_avx512():
    # Where rows walk 64-lane masks as lanes, the default plan on AVX-512 is masks for
    # blocks and code for up to CODE_ROWS[64]'s rows; on AVX2 such forests stay code.
    rng = np.random.default_rng(12)
    forest = build_forest([grown_tree(rng, 50, 6, [OP_LE], [MISSING_NAN, MISSING_NONE])
                           for _ in range(10)], n_features=6, n_outputs=1)
    assert mask.stride(forest) == 64 and vector_ready(forest, "float32")
    assert make_plan(forest, cpu="x86-64-v3").representation == "code"
    if "avx512f" not in Target.host().enabled():
        pytest.skip("needs a CPU with AVX-512 (this one builds the code plan above only)")
    predictor = silvanforge.compile(forest)
    plan = predictor.plan
    assert (plan.representation, plan.small_representation, plan.small_batch) == \
        ("mask", "code", 48)
    assert plan.schedule.vectorized
    rows = random_rows(forest, 13, 200)
    expected = reference.predict(forest, rows, output="margin")
    for n in (1, 7, 8, 9, 31, 32, 33, 48, 49, 64, 65, 200):
        np.testing.assert_array_equal(predictor.predict(rows[:n], output="margin"),
                                      expected[:n], err_msg=f"{n} rows")
        np.testing.assert_array_equal(predictor.predict(rows[:n]), expected[:n])
    big = build_forest([grown_tree(rng, 50, 6, [OP_LE], [MISSING_NAN])
                        for _ in range(200)], n_features=6, n_outputs=1)
    assert make_plan(big).small_batch == 16


def test_the_default_compile_of_a_lightgbm_model_with_missing_values():
    lgb = pytest.importorskip("lightgbm", reason="lightgbm is not installed")
    rng = np.random.default_rng(5)
    X = rng.normal(size=(2000, 5))
    y = X[:, 0] * 2 + np.sin(X[:, 1]) + X[:, 2] * X[:, 3]
    X[rng.random(X.shape) < 0.1] = np.nan
    booster = lgb.train({"num_leaves": 31, "verbose": -1}, lgb.Dataset(X, y), 20)
    predictor = silvanforge.compile(booster, n_jobs=1)
    if "avx512f" in Target.host().enabled():
        assert predictor.plan.representation == "mask"
    forest = silvanforge.load(booster)
    test = np.vstack([X[:300], np.full((1, 5), np.nan), np.zeros((1, 5))])
    np.testing.assert_array_equal(predictor.predict(test, output="margin"),
                                  reference.predict(forest, test, output="margin"))
    np.testing.assert_allclose(predictor.predict(test), booster.predict(test),
                               rtol=1e-12, atol=1e-12)


def test_the_default_compile_of_a_lightgbm_model_with_categorical_features():
    lgb = pytest.importorskip("lightgbm", reason="lightgbm is not installed")
    rng = np.random.default_rng(6)
    X = rng.normal(size=(3000, 6))
    X[:, 4:] = rng.integers(0, 25, size=(3000, 2))
    y = X[:, 0] + (X[:, 4] % 3) - (X[:, 5] % 4 == 1) + np.sin(X[:, 1])
    X[rng.random(X.shape) < 0.05] = np.nan
    booster = lgb.train({"num_leaves": 31, "verbose": -1, "min_data_per_group": 5,
                         "cat_smooth": 1}, lgb.Dataset(X, y, categorical_feature=[4, 5]), 20)
    forest = silvanforge.load(booster)
    assert OP_CAT in forest.split_op
    predictor = silvanforge.compile(booster, n_jobs=1)
    if "avx512f" in Target.host().enabled():
        assert predictor.plan.representation == "mask"
    # Unseen, negative, fractional, huge and missing categories.
    odd = np.tile(X[:1], (6, 1))
    odd[:, 4] = [30, -1, 2.5, 1e9, np.nan, 61]
    test = np.vstack([X[:300], odd])
    np.testing.assert_array_equal(predictor.predict(test, output="margin"),
                                  reference.predict(forest, test, output="margin"))
    np.testing.assert_allclose(predictor.predict(test), booster.predict(test),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("splits", [31, 63])
def test_masks_for_a_cpu_without_avx512_gather_and_stay_exact(splits):
    # Strides of 32 and 64 lanes (the latter's windows have 64-bit offsets, loaded a
    # lane at a time like 32-bit ones).
    rng = np.random.default_rng(6)
    forest = grown_forest(rng, splits, 12, [OP_LE], [MISSING_NAN, MISSING_NONE])
    rows = random_rows(forest, 6, 150)
    predictor = silvanforge.compile(forest, representation="mask", cpu="x86-64-v3")
    assert "avx512" not in predictor.dump("llvm")
    # Rows as lanes from 9 rows, the splits as lanes below.
    assert predictor.plan.schedule.vectorized and predictor.plan.small_batch == 8
    for n in (5, len(rows)):
        np.testing.assert_array_equal(predictor.predict(rows[:n], output="margin"),
                                      reference.predict(forest, rows[:n], output="margin"))


def vector_schedule(block: int = 64, cache: bool = True) -> str:
    return (f"tile(batch, b0, b1, {block})\nreorder(b0, tree, b1)\n"
            + ("cache(b0)\n" if cache else "") + "vectorize(b1)\nparallel(b0)")


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_rows=st.integers(1, 300),
       max_splits=st.sampled_from([1, 15, 31, 63]), n_features=st.integers(1, 40),
       float32=st.booleans(), op=st.sampled_from([OP_LT, OP_LE]), categorical=st.booleans(),
       rules=st.lists(st.sampled_from([MISSING_NAN, MISSING_NONE]), min_size=1, max_size=2,
                      unique=True),
       n_outputs=st.integers(1, 3), block=st.sampled_from([16, 32, 64]))
def test_vector_walks_of_masks_match_the_reference(seed, n_rows, max_splits, n_features,
                                                   float32, op, categorical, rules,
                                                   n_outputs, block):
    # Rows as the lanes: every split clears its left subtree's leaves where rows go
    # right, on ranks of the rows' values among the thresholds. Rows hold thresholds,
    # their neighbours, NaN, infinities and category edges; batches end anywhere in a
    # block.
    rng = np.random.default_rng(seed)
    dtype = np.float32 if float32 else np.float64
    precision = "float32" if float32 else "float64"
    forest = grown_forest(rng, max_splits, n_features, [op, OP_CAT] if categorical else [op],
                          rules, n_outputs, dtype=dtype,
                          categories=CODED[dtype] if categorical else None)
    forest = forest.replace(threshold=np.where(np.isinf(forest.threshold), 0.5,
                                               forest.threshold))
    rows = random_rows(forest, seed, n_rows).astype(np.float64)
    internal = np.flatnonzero(~forest.is_leaf)
    at = rng.integers(0, len(internal), size=rows.shape) if len(internal) else None
    if at is not None:
        t = forest.threshold[internal[at]]
        edges = np.select([rng.random(rows.shape) < p for p in (0.2, 0.3, 0.4)],
                          [t, np.nextafter(t, np.inf), np.nextafter(t, -np.inf)], rows)
        rows = np.where(forest.feature[internal[at]] == np.arange(n_features), edges, rows)
    some = rng.random(rows.shape) < 0.1
    rows[some] = rng.choice(CATEGORY_INPUTS, some.sum())
    rows = rows.astype(dtype)
    schedule = vector_schedule(block)
    if not vector_ready(forest, precision):  # too many copies of the row for the lanes
        with pytest.raises(ScheduleError, match="vectorize with the 'mask'"):
            silvanforge.compile(forest, representation="mask", schedule=schedule,
                                precision=precision)
        return
    predictor = silvanforge.compile(forest, representation="mask", schedule=schedule,
                                    precision=precision)
    np.testing.assert_array_equal(predictor.predict(rows, output="margin"),
                                  reference.predict(forest, rows, output="margin"))


@pytest.mark.parametrize("count", [1, 7, 8, 9, 63, 64, 65, 600])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_ranks_order_values_as_the_thresholds_do(count, dtype):
    # The search tables' levels count the thresholds below a value (as the kernel
    # walks them: each level one register of splitters); rank(x) <= 2i + 1 exactly
    # when x <= t_i, and rank(x) <= 2i exactly when x < t_i.
    rng = np.random.default_rng(count)
    t = np.unique(rng.normal(size=count).astype(dtype))
    while len(t) < count:
        t = np.unique(np.append(t, rng.normal(size=1).astype(dtype)))
    for op in (OP_LT, OP_LE):
        trees = [Tree(left=[1, -1, -1], right=[2, -1, -1], feature=[0, 0, 0],
                      threshold=[x, 0, 0], leaf_value=[[0.0], [1.0], [2.0]], split_op=op,
                      missing=MISSING_NONE) for x in t]
        forest = build_forest(trees, n_features=1, n_outputs=1, input_dtype=dtype)
        spec = MaskRepresentation(forest).spec
        nodes = np.flatnonzero(~forest.is_leaf)
        table, low, [(levels, n)] = _ranks(forest, spec, nodes)
        u = decision.thresholds(forest, spec, nodes).astype(np.float64)
        assert n == count and np.array_equal(np.sort(u), table[levels[-1]:levels[-1] + n])
        per = 512 // spec.compare.bits
        x = np.concatenate([u, np.nextafter(u, np.inf), np.nextafter(u, -np.inf),
                            rng.normal(size=50), [np.inf, -np.inf]]).astype(table.dtype)
        for value in x:
            below = 0
            for depth, start in enumerate(levels):
                node = below * (per if depth else 1)
                below = node + int(np.sum(table[start + node:start + node + per] < value))
            assert below == np.sum(u < value)
            rank = 2 * below + (table[levels[-1] + below] == value)
            # Each node's least rank going right (low) against the compare itself.
            assert np.array_equal(rank >= low, ~((value <= u) if op == OP_LE else (value < u)))


def test_masks_walk_blocks_of_rows_as_lanes_by_default():
    # A forest of one-compare splits and constant leaves: blocks of 64 rows as vector
    # lanes, the splits-as-lanes kernel for batches of up to 8 rows.
    forest = forest_of([OP_LE, OP_CAT], [MISSING_NONE], features=(0, 2))
    predictor = silvanforge.compile(forest, representation="mask")
    assert predictor.plan.schedule.vectorized
    assert not predictor.plan.small_schedule.vectorized and predictor.plan.small_batch == 8
    rows = np.vstack([random_rows(forest, 8, 300), np.tile(CATEGORY_INPUTS[:, None], 3)])
    for n in (1, 8, 9, 64, 65, len(rows)):
        np.testing.assert_array_equal(predictor.predict(rows[:n], output="margin"),
                                      reference.predict(forest, rows[:n], output="margin"))
    # Linear leaves (and vector leaves) keep the splits as lanes for every batch.
    rng = np.random.default_rng(2)
    linear = grown_forest(rng, 15, 3, [OP_LE], [MISSING_NONE], leaves="linear")
    assert not vector_ready(linear, "float64")
    plan = silvanforge.compile(linear, representation="mask").plan
    assert not plan.schedule.vectorized and plan.small_schedule is None
    with pytest.raises(ScheduleError, match="leaves of one constant value"):
        silvanforge.compile(linear, representation="mask", schedule=vector_schedule())


def test_vector_walks_of_masks_need_the_block_cached():
    forest = forest_of([OP_LE], [MISSING_NONE])
    with pytest.raises(ScheduleError, match=r"cache\(b0\)"):
        silvanforge.compile(forest, representation="mask",
                            schedule=vector_schedule(cache=False))


def test_float64_forests_of_small_complete_trees_take_masks_with_rows_as_lanes():
    # The array layout walks float64 forests row by row; masks with rows as lanes take
    # the forests whose splits they test in one compare (LightGBM's depth-limited
    # multiclass models: 1.7-1.9x faster from 64 rows on AVX-512; on AVX2 with code for
    # a few rows, 1.4-1.9x from 8 rows).
    rng = np.random.default_rng(9)
    left = [2 * i + 1 if i < 7 else -1 for i in range(15)]
    right = [2 * i + 2 if i < 7 else -1 for i in range(15)]
    trees = [tree_of_shape(rng, left, right, 4, [OP_LE], [MISSING_NONE], 1, False, t % 3)
             for t in range(6)]
    forest = build_forest(trees, n_features=4, n_outputs=3, input_dtype=np.float64)
    assert default_of(forest, AVX512) == "mask" and default_of(forest, AVX2) == "mask"
    # At float32 the array layout's own vector walks stay the default.
    assert choose_representation(forest, None, "float32", "cpu",
                                 frozenset(AVX512.enabled())) == "array"
    # Linear leaves: no rows as lanes, so the array layout.
    linear = build_forest([tree_of_shape(rng, left, right, 4, [OP_LE], [MISSING_NONE], 1,
                                         True, 0) for _ in range(3)],
                          n_features=4, n_outputs=1, linear_leaves=True)
    assert default_of(linear, AVX512) == "array"
    rows = random_rows(forest, 4, 200)
    predictor = silvanforge.compile(forest, representation="mask")
    np.testing.assert_array_equal(predictor.predict(rows, output="margin"),
                                  reference.predict(forest, rows, output="margin"))
