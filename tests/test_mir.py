"""MIR: structure of lowered schedules, legalisation, and interpreter == reference."""

import numpy as np
import pytest
from hypothesis import given, strategies as st

from silvanforge import reference
from silvanforge.errors import ScheduleError
from silvanforge.mir import Loop, ReduceDimension, interpret, lower, print_mir
from silvanforge.model.builder import Tree, build_forest
from silvanforge.schedule import Schedule, named


def random_tree(rng, depth, n_features, output=0, width=1):
    """A random full-ish tree; leaves at depth 1..depth."""
    left, right, feature, threshold, values = [], [], [], [], []

    def node(d):
        i = len(left)
        for lst in (left, right, feature, threshold):
            lst.append(0)
        values.append(rng.normal(size=width))
        if d < depth and (d == 0 or rng.random() < 0.8):
            feature[i], threshold[i] = int(rng.integers(n_features)), float(rng.normal())
            left[i] = node(d + 1)
            right[i] = node(d + 1)
        else:
            left[i] = right[i] = -1
        return i

    node(0)
    return Tree(left, right, feature, threshold, values, output=output)


def random_forest(seed, n_trees, n_outputs=1, depth=3):
    rng = np.random.default_rng(seed)
    trees = [random_tree(rng, depth, 3, output=t % n_outputs) for t in range(n_trees)]
    return build_forest(trees, n_features=3, n_outputs=n_outputs, input_dtype=np.float64)


def sums(forest, X):
    return reference.tree_sums(forest, np.asarray(X, dtype=np.float64))


SCHEDULES = [
    "",
    "reorder(tree, batch)",
    "tile(batch, b0, b1, 4)\nreorder(b0, tree, b1)\nparallel(b0)",
    "tile(tree, t0, t1, 2)\nreorder(t0, batch, t1)",
    "tile(batch, b0, b1, 4)\ntile(tree, t0, t1, 2)\nreorder(b0, t0, b1, t1)\ncache(b0)\ncache(t0)",
    "tile(tree, t0, t1, 3)\nparallel(t0)",
    "tile(tree, t0, t1, 3)\nparallel(t0)\natomicReduce(t0)",
    "tile(tree, t0, t1, 2)\nreorder(t0, batch, t1)\nparallel(t0)\nvectorReduce(t0, 4)",
    "reorder(tree, batch)\nsplit(tree, t0, t1, 2)\nunrollWalk(batch.t0, 1)\nunrollWalk(batch.t1, 2)",
    "split(batch, f, s, 3)\nparallel(tree.f)\nparallel(s)",
    "tile(batch, b0, b1, 4)\nreorder(b0, tree, b1)\ninterleave(b1)\nunrollWalk(b1, 2)",
    "tile(tree, t0, t1, 2)\nunroll(t1)",
    "reorder(tree, batch)\nspecialize(tree)",
    "tile(tree, t0, t1, 3)\ninterleave(t1)\ngpuDimension(t0, block.x)\nsharedReduce(t0)",
    "reorder(batch, tree)\ngpuDimension(batch, grid.x)\ngpuDimension(tree, block.x)\ncache(batch)",
    # Inner loops outside their outer loops: offset loops and guards.
    "tile(tree, t0, t1, 3)\nreorder(t1, t0, batch)\nparallel(t1)",
    "tile(batch, b0, b1, 4)\nreorder(b1, tree, b0)\nparallel(tree)",
    "tile(tree, t0, t1, 2)\nreorder(t1, batch, t0)\ninterleave(t0)",
    "tile(batch, b0, b1, 4)\ntile(b1, c0, c1, 2)\nreorder(b0, tree, c1, c0)\ninterleave(c0)",
    "tile(tree, t0, t1, 4)\ntile(t1, a, b, 2)\nreorder(b, a, t0, batch)\nunroll(a)\nparallel(b)",
    "tile(tree, t0, t1, 2)\nreorder(t1, t0, batch)\nspecialize(t0)\nunroll(t1)",
    "tile(tree, t0, t1, 3)\nreorder(t1, t0, batch)\nsplit(t1, f, s, 1)\nparallel(t0.s)",
    "tile(batch, b0, b1, 4)\ntile(tree, t0, t1, 2)\nreorder(t1, b1, t0, b0)\ncache(t0)",
    # Tahoe's shared partial forest: two nested GPU-mapped tree loops (inplace reduction).
    "tile(batch, b0, b1, 4)\ntile(tree, t0, t0i, 4)\ntile(t0i, t1, t2, 2)\ncache(t1)\n"
    "reorder(b0, t0, b1, t1, t2)\ngpuDimension(b0, grid.x)\ngpuDimension(t0, grid.y)\n"
    "gpuDimension(b1, block.x)\ngpuDimension(t1, block.y)",
]


@given(seed=st.integers(0, 2**16), n_trees=st.integers(1, 7), n_rows=st.sampled_from([0, 1, 5, 9]),
       n_outputs=st.integers(1, 2), text=st.sampled_from(SCHEDULES))
def test_interpreter_matches_reference(seed, n_trees, n_rows, n_outputs, text):
    forest = random_forest(seed, n_trees, n_outputs)
    X = np.random.default_rng(seed).normal(size=(n_rows, 3))
    try:
        fn = lower(forest, Schedule.parse(text))
    except ScheduleError as exc:  # unroll/specialize need ranges T makes compile-time
        assert "unroll" in str(exc) or "specialize" in str(exc)
        return
    np.testing.assert_allclose(interpret(fn, forest, X), sums(forest, X), rtol=1e-12)


@pytest.mark.parametrize("name", ["default", "xgboost", "one_tree_at_a_time", "tree_parallel"])
@pytest.mark.parametrize("n_rows", [0, 1, 63, 65, 130])
def test_named_schedules(name, n_rows):
    forest = random_forest(1, 5, 2)
    X = np.random.default_rng(n_rows).normal(size=(n_rows, 3))
    fn = lower(forest, named(name, forest.n_trees))
    np.testing.assert_allclose(interpret(fn, forest, X), sums(forest, X), rtol=1e-12)


@pytest.mark.parametrize("threads", [1, 2, 3, 8])
@pytest.mark.parametrize("n_rows", [0, 1, 5, 64, 130])
def test_thread_shares(threads, n_rows):
    # Blocks of ceil(rows / threads): one a thread, the last one short.
    forest = random_forest(2, 6, 2)
    X = np.random.default_rng(n_rows).normal(size=(n_rows, 3))
    fn = lower(forest, Schedule.parse("tile(batch, b0, b1, share)\ntile(tree, t0, t1, 3)\n"
                                      "reorder(b0, t0, b1, t1)\nunroll(t1)\nparallel(b0)"))
    assert "step S" in print_mir(fn) and "min(S + b0, N)" in print_mir(fn)
    np.testing.assert_allclose(interpret(fn, forest, X, threads), sums(forest, X), rtol=1e-12)


def test_a_share_has_no_compile_time_trip_count():
    forest = random_forest(2, 6, 2)
    # The inner loop of a share moved outside its outer one would run a share's trip.
    with pytest.raises(ScheduleError, match="compile-time trip count"):
        lower(forest, Schedule.parse("tile(batch, b0, b1, share)\nreorder(b1, b0)"))


def test_all_schedules_run_exhaustively():
    forest = random_forest(7, 6, 2)
    X = np.random.default_rng(0).normal(size=(11, 3))
    for text in SCHEDULES:
        fn = lower(forest, Schedule.parse(text))
        np.testing.assert_allclose(interpret(fn, forest, X), sums(forest, X), rtol=1e-12)


def test_reorder_changes_printed_mir():
    forest = random_forest(0, 4)
    default = print_mir(lower(forest, Schedule()))
    xgb = print_mir(lower(forest, Schedule.parse("reorder(tree, batch)")))
    assert default != xgb
    assert default.index("%batch =") < default.index("%tree =")
    assert xgb.index("%tree =") < xgb.index("%batch =")


def test_tiling_makes_min_remainders():
    fn = lower(random_forest(0, 5), Schedule.parse("tile(batch, b0, b1, 4)\ntile(tree, t0, t1, 2)\n"
                                                   "reorder(b0, t0, b1, t1)"))
    text = print_mir(fn)
    assert "for %b1 = b0 to min(b0 + 4, N) step 1" in text
    assert "for %t1 = t0 to min(t0 + 2, 5) step 1" in text
    # T divisible by the tile: no remainder.
    assert "for %t1 = t0 to t0 + 2 step 1" in print_mir(
        lower(random_forest(0, 4), Schedule.parse("tile(tree, t0, t1, 2)")))


def test_usual_orders_keep_absolute_inner_loops():
    text = print_mir(lower(random_forest(0, 5), Schedule.parse("tile(tree, t0, t1, 8)")))
    assert "for %t1 = t0 to min(t0 + 8, 5) step 1 : tree {" in text
    assert "<offset>" not in text and "if " not in text


# The tree tile of docs/SCHEDULES.md, its inner loop outermost and parallel.
MOVED = "tile(tree, t0, t1, 8)\nreorder(t1, t0, batch)\nparallel(t1)"


def test_moved_inner_loop_runs_offsets_under_a_guard():
    assert print_mir(lower(random_forest(0, 5), Schedule.parse(MOVED))) == """\
func @predict(T = 5, n_outputs = 1) {
  %result = alloc memref<N x n_outputs x f64>
  %result_p0 = alloc memref<8 x N x n_outputs x f64>
  parallel for %t1 = 0 to 8 step 1 : tree <offset> {
    for %t0 = 0 to 5 step 8 : tree {
      if t0 + t1 < 5 {
        for %batch = 0 to N step 1 : batch {
          %leaf = walk tree(t0 + t1) row(batch)
          reduce %result_p0[t1, batch, output(t0 + t1)] += %leaf <"+", 0.0>
        }
      }
    }
  }
  %result += reduce_dimension(%result_p0, 0, [], rows [0, N))
}"""
    # Whole tiles need no guard.
    whole = print_mir(lower(random_forest(0, 16), Schedule.parse(MOVED)))
    assert "for %t0 = 0 to 16 step 8 : tree {" in whole and "if " not in whole
    # Rows: the guard compares with the batch size at run time.
    rows = print_mir(lower(random_forest(0, 3), Schedule.parse(
        "tile(batch, b0, b1, 16)\nreorder(b1, b0, tree)")))
    assert "for %b1 = 0 to 16 step 1 : batch <offset> {" in rows
    assert "for %b0 = 0 to N step 16 : batch {" in rows and "if b0 + b1 < N {" in rows


def test_moved_tile_of_a_tile_steps_by_the_outer_tile():
    fn = lower(random_forest(0, 13), Schedule.parse(
        "tile(tree, t0, t1, 8)\ntile(t0, a, b, 2)\nreorder(t1, b, a, batch)"))
    text = print_mir(fn)
    # b's index is a + 8*b; t1 starts from it: a + 8*b + t1.
    assert "for %b = 0 to 2 step 1 : tree <offset> {" in text
    assert "if a + 8*b + t1 < 13 {" in text and "walk tree(a + 8*b + t1)" in text
    X = np.random.default_rng(0).normal(size=(4, 3))
    np.testing.assert_allclose(interpret(fn, random_forest(0, 13), X),
                               sums(random_forest(0, 13), X), rtol=1e-12)


def test_a_guard_another_implies_is_left_out():
    # b's guard (2*a + b + t0 < min(t0 + 4, 5)) implies a's (2*a + t0 < 5).
    forest = random_forest(0, 5)
    fn = lower(forest, Schedule.parse("tile(tree, t0, t1, 4)\ntile(t1, a, b, 2)\n"
                                      "reorder(b, a, t0)"))
    text = print_mir(fn)
    assert text.count("if ") == 1 and "if 2*a + b + t0 < min(t0 + 4, 5) {" in text
    X = np.random.default_rng(0).normal(size=(3, 3))
    np.testing.assert_allclose(interpret(fn, forest, X), sums(forest, X), rtol=1e-12)


def test_a_split_part_past_a_moved_tile_is_empty():
    forest = random_forest(0, 5)
    fn = lower(forest, Schedule.parse("tile(tree, t0, t1, 4)\nreorder(t1, t0, batch)\n"
                                      "split(t1, f, s, 5)"))
    assert [op.var for op in fn.body] == ["f"]
    X = np.random.default_rng(0).normal(size=(3, 3))
    np.testing.assert_allclose(interpret(fn, forest, X), sums(forest, X), rtol=1e-12)


def test_interleaved_member_takes_one_condition():
    from silvanforge.mir import Affine, Bound, Cond
    from silvanforge.mir.lower import _strongest
    t0, t1 = Affine.var("t0"), Affine.var("t1")
    loop = Cond(t0 + 2, Bound.of(t0 + 8, 13))
    guard = Cond(t0 + t1 + 2, Bound.of(13))  # t0 + 8 is past t0 + 2: the guard implies both
    assert _strongest("t0", [loop, guard]) == guard
    with pytest.raises(ScheduleError, match=r"interleave\(t0\): its walks would need 2 guards"):
        _strongest("t0", [guard, Cond(t0 + 2, Bound.of(Affine.var("N")))])


def test_vectorize_refuses_rows_a_stride_apart():
    # b1 moved out of the tile of b0 leaves c1 innermost, stepping 2 rows.
    with pytest.raises(ScheduleError, match=r"vectorize\(c1\): its rows are 2 apart"):
        lower(random_forest(0, 3), Schedule.parse(
            "tile(batch, b0, b1, 2)\ntile(b0, c0, c1, 16)\nreorder(c0, tree, b1, c1)\n"
            "vectorize(c1)"))


def test_gpu_lowering_refuses_offset_loops():
    from silvanforge.lir.gpu import lower as gpu_lower
    from silvanforge.representations import REGISTRY
    forest = random_forest(0, 5)
    fn = lower(forest, Schedule.parse("tile(tree, t0, t1, 2)\nreorder(batch, t1, t0)\n"
                                      "gpuDimension(batch, grid.x)"))
    with pytest.raises(ScheduleError, match="t1 runs outside a loop its range starts from"):
        gpu_lower(fn, forest, REGISTRY["sparse"](forest))


def test_split_ranges():
    fn = lower(random_forest(0, 5), Schedule.parse("reorder(tree, batch)\nsplit(tree, t0, t1, 2)"))
    loops = [op for op in fn.body if isinstance(op, Loop)]
    assert [(lp.var, str(lp.lower), str(lp.upper)) for lp in loops] == [
        ("t0", "0", "2"), ("t1", "2", "5")]
    assert [lp.body[0].var for lp in loops] == ["batch.t0", "batch.t1"]
    batch_split = print_mir(lower(random_forest(0, 5), Schedule.parse("split(batch, f, s, 3)")))
    assert "%f = 0 to min(3, N)" in batch_split and "%s = min(3, N) to N" in batch_split


def test_parallel_tree_loop_is_privatized():
    forest = random_forest(0, 6)
    fn = lower(forest, Schedule.parse("tile(tree, t0, t1, 2)\nparallel(t0)"))
    assert [b.dims for b in fn.buffers] == [("N", "n_outputs"), (3, "N", "n_outputs")]
    batch = fn.body[0]
    assert isinstance(batch.body[1], ReduceDimension) and batch.body[1].source == "result_p0"
    assert "reduce %result_p0[(t0) floordiv 2, batch, output(t1)]" in print_mir(fn)


def test_atomic_reduce_instead_of_privatizing():
    fn = lower(random_forest(0, 6), Schedule.parse("tile(tree, t0, t1, 2)\nparallel(t0)\n"
                                                   "atomicReduce(t0)"))
    assert len(fn.buffers) == 1 and "<atomic>" in print_mir(fn)


def test_nested_conflicts_use_inplace_reduction():
    fn = lower(random_forest(0, 8), Schedule.parse(SCHEDULES[-1]))
    text = print_mir(fn)
    assert "memref<2 x 2 x N x n_outputs x f64>" in text
    assert "reduce_dimension_inplace(%result_p0, 1, [(t0) floordiv 4]" in text
    assert "%result += reduce_dimension(%result_p0, 0" in text


def test_interpreter_catches_unlegalized_race():
    from dataclasses import replace
    from silvanforge.mir.legalize import legalize_reductions
    forest = random_forest(0, 4)
    fn = lower(forest, Schedule.parse("tile(tree, t0, t1, 2)\nparallel(t0)"))
    raw = replace(fn, buffers=fn.buffers[:1], body=(replace(fn.body[0], body=fn.body[0].body[:1]),))
    assert legalize_reductions(raw) != raw
    with pytest.raises(AssertionError, match="race"):
        interpret(replace(raw, body=_unprivatize(raw.body)), forest, np.zeros((2, 3)))


def _unprivatize(ops):
    from dataclasses import replace
    from silvanforge.mir import Reduce
    out = []
    for op in ops:
        if isinstance(op, Loop):
            op = replace(op, body=_unprivatize(op.body))
        elif isinstance(op, Reduce):
            op = replace(op, target="result", privatized=())
        out.append(op)
    return tuple(out)


def test_peel_walk_checked_against_forest():
    stump = Tree([-1], [-1], [0], [0.0], [1.0])
    shallow = Tree([1, -1, -1], [2, -1, -1], [0, 0, 0], [0.0, 0, 0], [0, 1.0, 2.0])
    forest = build_forest([stump, shallow, shallow], n_features=3, n_outputs=1)
    with pytest.raises(ScheduleError, match="tree 0 has a leaf 0 step"):
        lower(forest, Schedule.parse("peelWalk(tree, 1)"))
    # Split: only the trees in the part's range are checked.
    split = "reorder(tree, batch)\nsplit(tree, a, b, 1)\n"
    fn = lower(forest, Schedule.parse(split + "peelWalk(batch.b, 1)"))
    X = np.zeros((3, 3))
    np.testing.assert_allclose(interpret(fn, forest, X), sums(forest, X))
    with pytest.raises(ScheduleError, match="tree 1 has a leaf 1 step"):
        lower(forest, Schedule.parse(split + "peelWalk(batch.b, 2)"))
    # A moved tile of the first part: its guard keeps the stump out.
    shallow_first = build_forest([shallow, shallow, stump], n_features=3, n_outputs=1)
    fn = lower(shallow_first, Schedule.parse("split(tree, a, b, 2)\ntile(a, a0, a1, 3)\n"
                                             "reorder(a1, a0)\npeelWalk(a0, 1)"))
    np.testing.assert_allclose(interpret(fn, shallow_first, X), sums(shallow_first, X))


def test_interleave_members_and_validity():
    fn = lower(random_forest(0, 3), Schedule.parse(SCHEDULES[10]))
    text = print_mir(fn)
    assert text.count("= walk tree(tree) row(b0 + ") == 3 and "if b0 + 3 < min(b0 + 4, N)" in text


def test_reduce_directive_on_non_conflicting_loop():
    with pytest.raises(ScheduleError, match="not a parallel or GPU-mapped tree loop"):
        lower(random_forest(0, 3), Schedule.parse("atomicReduce(tree)"))


def test_unroll_needs_compile_time_trip():
    with pytest.raises(ScheduleError, match="compile-time trip count"):
        lower(random_forest(0, 5), Schedule.parse("tile(tree, t0, t1, 2)\nunroll(t1)"))
