"""``vectorize``: rows walking as the lanes of vectors (array layout, float32) give the
reference's predictions, with NaNs, every operator and missing rule, categories, and
batches that end inside a vector."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import silvanforge
from silvanforge import reference
from silvanforge.errors import ScheduleError
from silvanforge.model.builder import Tree, build_forest
from silvanforge.model.forest import (MISSING_NAN, MISSING_NONE, MISSING_ZERO, OP_CAT,
                                      OP_EQ, OP_LE, OP_LT)
from silvanforge.backends.cpu import Target
from silvanforge.representations import REGISTRY
from silvanforge.lir import interpret, ir
from silvanforge.lir.lower import MAX_IN_PLACE_FEATURES, PREFETCH_LINES, lower as lir_lower
from silvanforge.representations.array import SPARSE_CODE_ROWS, SPARSE_CODE_SPLITS, vectorizes
from silvanforge.plan.planner import make_plan
from silvanforge.schedule import Schedule

from test_representations import random_rows, random_tree


def schedule(tile: int, cache: bool) -> str:
    return "\n".join([f"tile(batch, b0, b1, {tile})", "reorder(b0, tree, b1)",
                      *(["cache(b0)"] if cache else []), "vectorize(b1)", "parallel(b0)"])


def random_forest(rng, ops, rules, n_features: int, n_outputs: int, leaves: str = "constant"):
    """A float32 forest of 1-4 random trees of any depths (a vectorized schedule pads
    them to the deepest's); ``leaves``: "constant", "linear" or "vector" (one leaf value
    per output)."""
    width = n_outputs if leaves == "vector" else 1
    trees = [random_tree(rng, n_features, ops, rules, width, leaves == "linear",
                         0 if width > 1 else int(rng.integers(0, n_outputs)))
             for _ in range(int(rng.integers(1, 5)))]
    return build_forest(trees, n_features=n_features, n_outputs=n_outputs,
                        linear_leaves=leaves == "linear", input_dtype=np.float32)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_rows=st.integers(1, 140),
       tile=st.sampled_from([16, 32, 48, 64]), cache=st.booleans(),
       n_features=st.sampled_from([1, 2, 3, 4, 16, 21, 40]),
       n_outputs=st.integers(1, 2), leaves=st.sampled_from(["constant", "linear", "vector"]),
       ops=st.lists(st.sampled_from([OP_LT, OP_LE, OP_EQ, OP_CAT]), min_size=1,
                    max_size=4, unique=True),
       rules=st.lists(st.sampled_from([MISSING_NAN, MISSING_ZERO, MISSING_NONE]),
                      min_size=1, max_size=3, unique=True), wide=st.booleans())
def test_vector_walks_match_reference(seed, n_rows, tile, cache, n_features, n_outputs,
                                      leaves, ops, rules, wide):
    # Up to 140 rows: whole blocks, whose vector walks interleave, and a last block
    # with fewer groups of rows, whose groups walk alone. Constant leaves are permuted
    # windows, linear and vector leaves gathers. Rows of 16 features or more are copied
    # a block of 16 x 16 at a time (transposed in registers), the rest feature by feature.
    # float64 rows (``wide``) the copy rounds to float32 itself (the reference takes them
    # rounded by numpy); without the copy they are converted first.
    rng = np.random.default_rng(seed)
    forest = random_forest(rng, ops, rules, n_features, n_outputs, leaves)
    rows = random_rows(forest, seed, n_rows)
    rounded = rows.astype(np.float32)
    predictor = silvanforge.compile(forest, schedule=schedule(tile, cache),
                                    representation="array", precision="float32")
    np.testing.assert_array_equal(predictor.predict(rows if wide else rounded,
                                                    output="margin"),
                                  reference.predict(forest, rounded, output="margin"))


def test_every_end_of_a_batch_in_a_block_of_four_vector_walks():
    # Batches ending in each group of a 64-row block take each of its code paths (all
    # four groups in turn, the first two, the first alone), with and without the copy.
    rng = np.random.default_rng(11)
    forest = random_forest(rng, [OP_LT, OP_CAT], [MISSING_NAN, MISSING_ZERO], 3, 1)
    rows = random_rows(forest, 11, 200).astype(np.float32)
    expected = reference.predict(forest, rows, output="margin")
    for cache in (False, True):
        predictor = silvanforge.compile(forest, schedule=schedule(64, cache),
                                        representation="array", precision="float32")
        for n in [*range(1, 70), 100, 127, 128, 129, 200]:
            np.testing.assert_array_equal(predictor.predict(rows[:n], output="margin"),
                                          expected[:n], err_msg=f"{n} rows")


@pytest.mark.parametrize("seed", [12, 13])
def test_vector_walks_for_a_cpu_without_avx512_permute_by_8_and_stay_exact(seed):
    # Built for an AVX2 machine (this test's CPU must have AVX2 to run it): 16-lane
    # vectors are two of 8, and windows of up to 32 slots (AVX2_PERMUTE_SPAN) are one-table
    # permutes and a select tree (levels 0-5 of a depth-7 tree: 1 to 32 slots); wider
    # ones (its level of 64 nodes, its 128 leaves) and the rows' values load a lane at a
    # time, by 32-bit offsets, not by LLVM's gather.
    rng = np.random.default_rng(seed)
    forest = random_forest(rng, [OP_LT, OP_LE, OP_CAT], [MISSING_NAN, MISSING_ZERO], 4, 2)
    deep = complete_forest([7, 5], n_features=5, seed=seed)
    for forest in (forest, deep):
        rows = random_rows(forest, seed, 140).astype(np.float32)
        expected = reference.predict(forest, rows, output="margin")
        predictor = silvanforge.compile(forest, schedule=schedule(64, True),
                                        representation="array", precision="float32",
                                        cpu="x86-64-v3")
        text = predictor.dump("llvm")
        assert "avx512" not in text and "llvm.x86.avx2.permd" in text
        assert not re.search(r"call .*@llvm\.masked\.gather", text) and "zext i32" in text
        for n in (1, 20, 70, 140):
            np.testing.assert_array_equal(predictor.predict(rows[:n], output="margin"),
                                          expected[:n])


def complete_forest(depths: list[int], n_features: int = 3, seed: int = 0,
                    n_outputs: int = 1, spread: int = 0, **model):
    """A forest of complete trees of ``depths`` (random splits, NaN to the left; float32
    unless ``model`` says): tree t adds to output ``t % n_outputs``, its leaves of
    magnitudes 10**-spread .. 10**spread."""
    rng = np.random.default_rng(seed)

    def tree(t: int, depth: int) -> Tree:
        n = 2 ** (depth + 1) - 1
        feature, threshold = rng.integers(0, n_features, n), rng.normal(size=n)
        leaf = rng.normal(size=n)
        if spread:
            leaf *= 10.0 ** rng.integers(-spread, spread + 1, n)
        return Tree(left=[2 * i + 1 if 2 * i + 1 < n else -1 for i in range(n)],
                    right=[2 * i + 2 if 2 * i + 2 < n else -1 for i in range(n)],
                    feature=feature, threshold=threshold, leaf_value=leaf,
                    default_left=True, output=t % n_outputs)
    return build_forest([tree(t, d) for t, d in enumerate(depths)], n_features=n_features,
                        n_outputs=n_outputs, **{"input_dtype": np.float32, **model})


AVX512 = frozenset({"avx512f", "avx2"})


def vector_schedule(forest):
    """The array layout's default schedule for ``forest`` at float32 on AVX-512."""
    return REGISTRY["array"].default_schedule(forest, "float32", AVX512)


def test_the_default_schedule_vectorizes_array_float32_forests_on_avx512_and_avx2():
    forest = complete_forest([3, 3, 2])
    assert vectorizes(forest, "float32", AVX512)
    assert vectorizes(forest, "float32", frozenset({"avx2", "avx", "fma"}))
    assert not vectorizes(forest, "float32", frozenset({"avx", "sse4.2"}))
    for cpu, vector in (("x86-64-v3", True), ("x86-64-v2", False)):
        assert silvanforge.compile(forest, cpu=cpu).schedule.vectorized == vector
    assert not vectorizes(forest, "float64", AVX512)
    assert not REGISTRY["sparse"].default_schedule(forest, "float32", AVX512).vectorized
    predictor = silvanforge.compile(forest)
    host = frozenset(Target.host().enabled())
    assert predictor.schedule.vectorized == vectorizes(forest, "float32", host)
    rows = random_rows(forest, 5, 100).astype(np.float32)
    np.testing.assert_array_equal(predictor.predict(rows, output="margin"),
                                  reference.predict(forest, rows, output="margin"))


def test_vectorized_padding_keeps_the_vector_bound():
    # Padding the stumps to the deep tree's depth: 31 x 511 slots for 1 x 511 + 30 x 3
    # nodes, more than 16 slots a node; with 9 stumps 9.5 a node, within it (past the
    # 4 of walks row by row: vector walks' time follows the padded depth, not slots).
    assert not vectorizes(complete_forest([8] + [1] * 30), "float32", AVX512)
    sparse = complete_forest([8] + [1] * 9)
    assert vectorizes(sparse, "float32", AVX512)
    assert REGISTRY["array"].suits(sparse, "float32", AVX512)
    assert vectorizes(complete_forest([8, 8, 8, 7]), "float32", AVX512)


@pytest.mark.parametrize("cpu", ["native", "x86-64-v3"])
def test_vector_walks_of_shallower_trees_skip_the_padded_levels(cpu):
    # Trees of depths 0-6 padded to 6: a walk branches on its tree's own depth at each
    # level where some tree stops (the deepest trees take every level), and a shallow
    # tree's positions go down its leaves' copies. Uniform depths take no branch.
    mixed = complete_forest([6, 0, 2, 6, 5, 1, 3], n_features=4, seed=21)
    rows = random_rows(mixed, 21, 200).astype(np.float32)
    rows[::7, 1] = np.nan
    predictor = silvanforge.compile(mixed, schedule=schedule(64, True), cpu=cpu,
                                    representation="array", precision="float32")
    branches = re.findall(r"if \(\(model_tree_levels\[tree\] > (\d+)\)\)",
                          predictor.dump("lir"))
    assert set(branches) == {"0", "1", "2", "3", "5"}  # no tree stops at level 4
    expected = reference.predict(mixed, rows, output="margin")
    for n in (1, 17, 64, 100, 200):
        np.testing.assert_array_equal(predictor.predict(rows[:n], output="margin"),
                                      expected[:n])
    uniform = silvanforge.compile(complete_forest([3, 3]), schedule=schedule(64, True),
                                  cpu=cpu, representation="array", precision="float32")
    assert "tree_levels" not in uniform.dump("lir")


@pytest.mark.parametrize("cpu", [None, "x86-64-v3"])
@pytest.mark.parametrize("n_features", [15, 16, 37])
def test_the_row_copy_transposes_square_blocks_of_features_in_registers(cpu, n_features):
    # Rows of at least a vector's lanes of features (16 on AVX-512, 8 for x86-64-v3):
    # each group's lanes x lanes blocks are loaded a row at a time, transposed by
    # log2(lanes) steps of shuffles and stored a feature at a time; the features past
    # the last whole block (and rows of fewer) are copied one by one. Rows past the
    # batch's end are the last row's copies (any count of rows). x86-64-v3 needs a CPU
    # with AVX2 to run.
    forest = complete_forest([6, 8, 3], n_features=n_features, seed=n_features)
    rows = random_rows(forest, n_features, 150).astype(np.float32)
    expected = reference.predict(forest, rows, output="margin")
    predictor = silvanforge.compile(forest, schedule=schedule(64, True), cpu=cpu,
                                    representation="array", precision="float32")
    lir = predictor.dump("lir")
    lanes = predictor.plan.vector_lanes
    assert lanes == (8 if cpu or Target.host().vector_bits() == 256 else 16)
    # lanes x lanes blocks of log2(lanes) steps of `lanes` shuffles, once for float32
    # rows, once for float64 (the copy comes before the tree loop and its cold twin).
    steps = lanes.bit_length() - 1
    assert lir.count("shuffle(") == (2 * steps * lanes if n_features >= lanes else 0)
    assert lir.count("cold {") == 1
    for n in (1, 15, 16, 64, 65, 150):
        for X in (rows[:n], rows[:n].astype(np.float64)):
            np.testing.assert_array_equal(predictor.predict(X, output="margin"),
                                          expected[:n], err_msg=f"{n} rows {X.dtype}")


@pytest.mark.parametrize("cpu", [None, "x86-64-v3"])
def test_the_row_copy_fills_only_the_groups_a_last_block_walks(cpu):
    # The default block (128 rows, eight walks of 16, on AVX-512; 64 rows, eight walks
    # of 8, for x86-64-v3, whose CPU this test's must run): the copy's group loop stops
    # at the groups that walk (all when more than half have rows, else the first half,
    # ...), and every call size around the halves is exact, float32 and float64 rows.
    if cpu and not Target.named(cpu).runs_on(Target.host()):
        pytest.skip("needs a CPU that runs x86-64-v3 code (AVX2)")
    forest = complete_forest([8, 8, 5], n_features=20, seed=4)
    predictor = silvanforge.compile(forest, cpu=cpu, representation="array",
                                    precision="float32")
    lanes = predictor.plan.vector_lanes
    block = int(str(predictor.plan.schedule).split(",")[3].split(")")[0])
    groups = block // lanes
    bound = f"((n_rows - b0) > {groups // 2 * lanes}) ? {groups} :"
    assert bound in predictor.dump("lir")
    rows = random_rows(forest, 20, 3 * block).astype(np.float32)
    expected = reference.predict(forest, rows, output="margin")
    sizes = {1, lanes - 1, lanes, lanes + 1, 2 * lanes + 1, block // 2, block // 2 + 1,
             block - 1, block, block + 1, block + lanes + 1, 3 * block}
    for n in sorted(sizes):
        for X in (rows[:n], rows[:n].astype(np.float64)):
            np.testing.assert_array_equal(predictor.predict(X, output="margin"),
                                          expected[:n], err_msg=f"{n} rows {X.dtype}")


def test_float64_rows_round_in_the_row_copy_as_numpy_rounds_them(monkeypatch):
    # Values at the float32 thresholds and half a float32 step either side (ties, which
    # round to even), a hair either side, and values numpy's astype makes infinities,
    # zeros, subnormals or NaN: the kernel's copy rounds float64 rows to the same
    # float32 values (no conversion of the call's rows first: it is not called).
    forest = complete_forest([6] * 8, n_features=21, seed=9)
    thresholds = forest.threshold[forest.feature >= 0].astype(np.float32)
    rng = np.random.default_rng(9)
    picked = rng.choice(thresholds, (400, 21)).astype(np.float64)
    step = np.spacing(np.abs(picked).astype(np.float32)).astype(np.float64)
    offsets = np.array([0.0, 0.5, -0.5, 1e-12, -1e-12])[rng.integers(0, 5, picked.shape)]
    rows = picked + offsets * step
    specials = [np.nan, np.inf, -np.inf, 1e300, -1e300, 1e-300, -0.0, 0.0, 1e-45, 7e-46,
                3.4028235e38 * (1 + 2 ** -25), 3.4028235e38 * (1 + 2 ** -23)]
    rows[rng.random(rows.shape) < 0.1] = rng.choice(specials)
    with np.errstate(over="ignore"):
        rounded = rows.astype(np.float32)
    predictor = silvanforge.compile(forest, schedule=schedule(64, True),
                                    representation="array", precision="float32")

    def refused(*args, **kwargs):
        raise AssertionError("float64 rows converted before the kernel")
    with monkeypatch.context() as patch:
        patch.setattr("silvanforge.runtime.predictor.as_rows", refused)
        got = [predictor.predict(rows[:n], output="margin", n_jobs=jobs)
               for n in (64, 100, 400) for jobs in (1, 2)]
    expected = reference.predict(forest, rounded, output="margin")
    for g in got:
        np.testing.assert_array_equal(g, expected[:len(g)])
    np.testing.assert_array_equal(predictor.predict(rounded, output="margin"), expected)


def _loops(stmts: list) -> list:
    """Every ``For`` in ``stmts``, nested ones included."""
    out = []
    for s in stmts:
        if isinstance(s, ir.For):
            out += [s, *_loops(s.body)]
        elif isinstance(s, ir.If):
            out += _loops(s.then) + _loops(s.orelse)
    return out


@pytest.mark.parametrize("n_trees", [12, 4])
def test_the_tree_loop_after_a_row_copy_prefetches_the_next_block_within_the_rows(n_trees):
    # 64 rows of 21 features are 84 lines of 16 float32 (168 of 8 float64): 12 trees
    # prefetch 7 lines an iteration of float32 rows, the whole next block (and the first
    # lines of the one after), 8 (PREFETCH_LINES) of float64 rows, the next block's
    # first; 4 trees 8 of either. Every address lies within the rows: an iteration
    # whose lines would pass their end prefetches none, and the last block nothing.
    # The predictions stay exact.
    forest = complete_forest([4] * n_trees, n_features=21, seed=n_trees)
    predictor = silvanforge.compile(forest, schedule=schedule(64, True),
                                    representation="array", precision="float32")
    kernel = lir_lower(predictor.mir, forest, predictor.representation)
    loops = [loop for loop in _loops(kernel.body) if loop.var.name == "tree"]
    assert len(loops) == 1
    by_kind = loops[0].body[0]  # float64 rows, else float32 rows
    assert isinstance(by_kind, ir.If) and by_kind.cond.a.name == "rows_are_f64"
    for guard, per_line in ((by_kind.then[0], 8), (by_kind.orelse[0], 16)):
        assert all(isinstance(p, ir.Prefetch) for p in guard.then)
        block = -(-64 * 21 // per_line)
        each = min(PREFETCH_LINES, -(-block // n_trees))
        assert len(guard.then) == each
        env = interpret._Env()
        for n in (1, 64, 100, 128, 150, 200, 256):
            env.vars["n_rows"] = n
            for b0 in range(0, n, 64):
                env.vars["b0"] = b0
                lines = set()
                for tree in range(n_trees):
                    env.vars["tree"] = tree
                    if interpret._eval(guard.cond, env):
                        at = [int(interpret._eval(p.index, env)) for p in guard.then]
                        assert all(0 <= i < n * 21 for i in at), (n, b0, tree, at)
                        lines |= {i // per_line for i in at}
                first = (b0 + 64) * 21 // per_line
                if b0 + 64 >= n:  # the last block: nothing after it
                    assert not lines
                elif b0 + 128 <= n:  # the next block's lines, all or the first of them
                    wanted = set(range(first, ((b0 + 128) * 21 - 1) // per_line + 1))
                    assert wanted <= lines if each * n_trees >= block else \
                        lines == set(range(first, first + each * n_trees))
    rows = random_rows(forest, 3, 200)
    for X in (rows.astype(np.float32), rows):
        np.testing.assert_array_equal(predictor.predict(X, output="margin"),
                                      reference.predict(forest, X.astype(np.float32),
                                                        output="margin"))


@pytest.mark.parametrize("schedule_text", [
    schedule(64, True), schedule(32, False),
    "tile(batch, b0, b1, 64)\ntile(tree, t0, t1, 3)\nreorder(b0, t0, t1, b1)\ncache(b0)\n"
    "vectorize(b1)\nparallel(b0)"])
def test_a_block_of_several_outputs_sums_its_rows_by_output_and_stays_exact(schedule_text):
    # Three outputs, each tree adding to one (XGBoost's multiclass) with leaf values of
    # every magnitude: the block's sums by output (a local array, one vector add a
    # group) start from the target's values and go back to it, so each row's sum takes
    # its trees in the reference's order, tiles of trees included. Batches ending in
    # each group of a block.
    forest = complete_forest([5] * 14, n_features=4, seed=5, n_outputs=3, spread=6,
                             base_score=[0.1, 0.2, 0.3])
    rows = random_rows(forest, 5, 150).astype(np.float32)
    expected = reference.predict(forest, rows, output="margin")
    predictor = silvanforge.compile(forest, schedule=schedule_text, representation="array",
                                    precision="float32")
    assert "f64 sums" in predictor.dump("lir")
    for n in (1, 7, 16, 17, 40, 63, 64, 65, 150):
        np.testing.assert_array_equal(predictor.predict(rows[:n], output="margin"),
                                      expected[:n], err_msg=f"{n} rows")


def test_one_output_sums_a_full_blocks_rows_and_adds_the_last_blocks_in_place():
    # One output: the tree loop of a block whose groups walk in full adds each group's
    # leaves to the block's sums (a local array, one vector add and no test a group),
    # read from the result before it and written back after it; the cold copy that
    # walks a batch's last block of fewer groups adds to the result in place (the sums'
    # zeroing and copies cost calls of a few rows). Exact to the bit either way, with
    # leaves of every magnitude and batches ending in each group of a block.
    forest = complete_forest([5] * 14, n_features=4, seed=6, spread=6, base_score=0.25)
    rows = random_rows(forest, 6, 150).astype(np.float32)
    expected = reference.predict(forest, rows, output="margin")
    predictor = silvanforge.compile(forest, schedule=schedule(64, True),
                                    representation="array", precision="float32")
    text = predictor.dump("lir")
    hot, cold = text.split("cold {", 1)
    assert "f64 sums" in hot and re.search(r"\bsums\d+\[.*\] = \(sums", hot)
    assert "sums" not in cold.split("finish_row")[0] and "result[" in cold
    for n in (1, 7, 16, 17, 40, 63, 64, 65, 100, 150):
        np.testing.assert_array_equal(predictor.predict(rows[:n], output="margin"),
                                      expected[:n], err_msg=f"{n} rows")


def test_a_vectorized_forest_of_wide_rows_walks_them_in_place():
    # More features than levels walked: copying rows transposed costs more than it saves.
    wide, narrow = complete_forest([4, 4], n_features=100), complete_forest([4, 4])
    assert "cache(b0)" not in str(vector_schedule(wide))
    assert "cache(b0)" in str(vector_schedule(narrow))
    assert vector_schedule(wide).vectorized


def sparse_forest(seed: int, n_trees: int, splits: int, depth: int, n_features: int = 4):
    """Trees of ``splits`` splits reaching ``depth``: a chain down to it, then random
    leaves above it split (float32, NaN to the left)."""
    rng = np.random.default_rng(seed)

    def tree() -> Tree:
        left, right, level = [-1], [-1], [0]
        for k in range(splits):
            open_ = [j for j in range(len(left)) if left[j] < 0 and level[j] < depth]
            i = open_[-1] if k < depth else int(rng.choice(open_))
            left[i], right[i] = len(left), len(left) + 1
            left, right, level = left + [-1, -1], right + [-1, -1], level + [level[i] + 1] * 2
        n = len(left)
        return Tree(left=left, right=right, feature=rng.integers(0, n_features, n),
                    threshold=rng.normal(size=n), leaf_value=rng.normal(size=n),
                    default_left=True)
    return build_forest([tree() for _ in range(n_trees)], n_features=n_features,
                        n_outputs=1, input_dtype=np.float32)


def test_sparse_trees_walk_as_vectors_and_a_row_alone_as_code():
    # Trees of 70 splits in depth 9 pad to 7.3 slots a node: past the 4 of walks row by
    # row, within the 16 of vector walks (whose time follows the depth), and masks take
    # at most 63 splits. A few rows walk only their own paths, as code. Built for
    # x86-64-v3 (this test's CPU must run AVX2 code).
    if not Target.named("x86-64-v3").runs_on(Target.host()):
        pytest.skip("needs a CPU that runs x86-64-v3 code (AVX2)")
    forest = sparse_forest(5, 6, 70, 9)
    assert 4 < 6 * 1023 / forest.n_nodes < 16
    predictor = silvanforge.compile(forest, cpu="x86-64-v3")
    plan = predictor.plan
    assert (plan.representation, plan.small_representation, plan.small_batch) == \
        ("array", "code", SPARSE_CODE_ROWS)
    assert plan.schedule.vectorized and not plan.small_schedule.vectorized
    rows = random_rows(forest, 3, 40)
    for n in (1, SPARSE_CODE_ROWS, SPARSE_CODE_ROWS + 1, 17, 40):
        np.testing.assert_array_equal(predictor.predict(rows[:n], output="margin"),
                                      reference.predict(forest, rows[:n], output="margin"))


def test_sparse_forests_of_many_splits_take_sparse_tables_for_a_few_rows():
    # Code for a few rows would add seconds of compile past SPARSE_CODE_SPLITS.
    small, big = sparse_forest(6, 2, 70, 9), sparse_forest(6, SPARSE_CODE_SPLITS // 70 + 1,
                                                             70, 9)
    assert make_plan(small, cpu="x86-64-v3").small_representation == "code"
    plan = make_plan(big, cpu="x86-64-v3")
    assert plan.representation == "array" and plan.schedule.vectorized
    assert (plan.small_representation, plan.small_batch) == ("sparse", SPARSE_CODE_ROWS)
    if not Target.named("x86-64-v3").runs_on(Target.host()):
        pytest.skip("needs a CPU that runs x86-64-v3 code (AVX2) for the predictions")
    predictor = silvanforge.compile(big, cpu="x86-64-v3")
    rows = random_rows(big, 4, 40)
    for n in (1, SPARSE_CODE_ROWS, SPARSE_CODE_ROWS + 1, 40):
        np.testing.assert_array_equal(predictor.predict(rows[:n], output="margin"),
                                      reference.predict(big, rows[:n], output="margin"))


def test_the_reference_adds_a_row_alone_in_tree_order_as_in_a_batch():
    # numpy's sum pairs the terms of one contiguous row: 143 trees' leaves then summed
    # to 3.6e-15 from the same row's sum in a batch (and from every compiled kernel).
    forest = sparse_forest(6, 143, 70, 9)
    rows = random_rows(forest, 4, 40)
    batch = reference.predict(forest, rows, output="margin")
    alone = [reference.predict(forest, rows[i:i + 1], output="margin")[0] for i in range(40)]
    np.testing.assert_array_equal(alone, batch)


def test_rows_of_a_page_or_more_are_copied_whatever_their_levels():
    # 1024 float32 features (4 KiB) for 8 levels walked: copied (in place, each lane's
    # values come from lines of rows pages apart); 1023 are read in place; float64 rows
    # reach a page at 512 features.
    assert "cache(b0)" in str(vector_schedule(complete_forest([4, 4], n_features=1024)))
    assert "cache(b0)" not in str(vector_schedule(complete_forest([4, 4], n_features=1023)))
    wide64 = complete_forest([4, 4], n_features=512, input_dtype=np.float64)
    assert "cache(b0)" in str(vector_schedule(wide64))
    # Blocks of 128 rows on AVX-512, 64 on AVX2 (eight walks in turn either way).
    narrow = complete_forest([4] * 10, n_features=28)  # its rows copied
    assert "tile(batch, b0, b1, 128)" in str(vector_schedule(narrow))
    assert "tile(batch, b0, b1, 64)" in str(REGISTRY["array"].default_schedule(
        narrow, "float32", frozenset({"avx2", "avx", "fma"})))
    # A default copy keeps half the stack bound (the calling thread walks a block too):
    # 64 rows of 2048 float32 features, 512 KiB; wider rows in blocks of fewer rows
    # (whole vectors of 16), past 8192 features read in place, 64 rows a block.
    for features, rows in [(2048, 64), (2049, 48), (4096, 32), (4097, 16), (8192, 16)]:
        text = str(vector_schedule(complete_forest([4, 4], n_features=features)))
        assert "cache(b0)" in text and f"tile(batch, b0, b1, {rows})" in text
    text = str(vector_schedule(complete_forest([4, 4], n_features=8193)))
    assert "cache(b0)" not in text and "tile(batch, b0, b1, 64)" in text


def test_a_row_copy_past_the_stack_bound_is_refused_and_never_a_default():
    # 64 rows of 5000 float32 features: 1.28 MB on each thread's stack (the default
    # copies 16 of them).
    forest = complete_forest([8] * 30, n_features=5000)
    assert "tile(batch, b0, b1, 16)" in str(vector_schedule(forest))
    with pytest.raises(ScheduleError, match="stack"):
        silvanforge.compile(forest, schedule=schedule(64, True), representation="array",
                            precision="float32")


def test_rows_read_in_place_take_32_bit_offsets_and_wider_ones_are_refused():
    # Without the copy a group's lanes read their rows by 32-bit offsets from its first
    # row: 16 rows of fewer than 2**27 features. The planner never picks vector walks
    # past that, and a schedule asking for them is refused (the forest's tables are
    # small; no row that wide is ever made).
    forest = complete_forest([4, 4], n_features=MAX_IN_PLACE_FEATURES + 1)
    assert vectorizes(complete_forest([4, 4], n_features=MAX_IN_PLACE_FEATURES), "float32",
                      frozenset({"avx2"}))
    assert not vectorizes(forest, "float32", frozenset({"avx2"}))
    with pytest.raises(ScheduleError, match="32-bit offsets"):
        silvanforge.compile(forest, schedule=schedule(64, False), representation="array",
                            precision="float32")
    narrow = silvanforge.compile(complete_forest([4, 4], n_features=30),
                                 schedule=schedule(64, False), representation="array",
                                 precision="float32")
    assert "masked.gather" not in narrow.dump("llvm")  # loads a lane at a time


def test_a_vectorized_schedule_for_a_forest_no_lane_layout_suits_names_the_layouts():
    # A chain of 70 splits: padded to a complete tree it passes the array layout's
    # bound, and masks take at most 63 splits. Was a StopIteration from the planner.
    n = 70
    chain = Tree(left=[n + i if i < n else -1 for i in range(2 * n + 1)],
                 right=[(i + 1 if i < n - 1 else 2 * n) if i < n else -1
                        for i in range(2 * n + 1)],
                 feature=[0] * (2 * n + 1), threshold=np.arange(2.0 * n + 1),
                 leaf_value=np.arange(2.0 * n + 1), default_left=True)
    forest = build_forest([chain], n_features=2, n_outputs=1, input_dtype=np.float32)
    with pytest.raises(ScheduleError, match="none suits this forest.*representation="):
        silvanforge.compile(forest, schedule=schedule(64, True))


def test_vectorize_needs_a_tile_of_whole_vectors():
    with pytest.raises(ScheduleError, match="multiple of 16"):
        Schedule.parse("tile(batch, b0, b1, 12)\nreorder(b0, tree, b1)\nvectorize(b1)")
    with pytest.raises(ScheduleError, match="multiple of 16"):
        Schedule.parse("tile(tree, t0, t1, 16)\nvectorize(t1)")


def test_vectorize_needs_the_array_layout_at_float32():
    rng = np.random.default_rng(3)
    forest = random_forest(rng, [OP_LT], [MISSING_NAN], 2, 1)
    with pytest.raises(ScheduleError, match="array"):
        silvanforge.compile(forest, schedule=schedule(16, True), representation="sparse",
                            precision="float32")


def test_vector_walk_tables_put_each_levels_window_on_a_cache_line():
    # Trees of one size, each from slot 1 modulo 16, in tables that start on 64 bytes:
    # every level's window from level 4 on starts a cache line. Scalar layouts keep
    # their trees back to back; the kernels' buffers (pickled predictors too) start on
    # a line.
    import pickle

    from silvanforge.runtime.base import build_representation

    forest = complete_forest([8, 5, 8], n_features=12, seed=9)
    rows = random_rows(forest, 12, 90).astype(np.float32)
    predictor = silvanforge.compile(forest, representation="array", precision="float32",
                                    schedule=schedule(64, True))
    tables = build_representation(predictor.plan).buffers
    starts = tables["model_tree_start"]
    assert list(starts % 16) == [1, 1, 1] and list(np.diff(starts)) == [512, 512]
    assert all(a.ctypes.data % 64 == 0 for a in tables.values())
    scalar = silvanforge.compile(forest, representation="array", precision="float32",
                                 schedule="default")
    assert list(build_representation(scalar.plan).buffers["model_tree_start"]) == \
        [0, 511, 574]
    expected = reference.predict(forest, rows, output="margin")
    for p in (predictor, pickle.loads(pickle.dumps(predictor)), scalar):
        np.testing.assert_array_equal(p.predict(rows, output="margin"), expected)
        assert all(address % 64 == 0 for address in p._bound_arrays()[1:])
