"""The schedule language: API, text form, checks, named schedules."""

import pytest
from hypothesis import given, strategies as st

from silvanforge.errors import ScheduleError
from silvanforge.schedule import LIBRARY, Schedule, named


def test_api_and_text_agree():
    s = Schedule()
    b0, b1 = s.tile("batch", "b0", "b1", 64)
    s.reorder(b0, "tree", b1).parallel(b0)
    text = "tile(batch, b0, b1, 64)\n# comment\n\nreorder(b0, tree, b1)  # trailing\nparallel(b0)"
    assert Schedule.parse(text) == s
    assert str(s) == "tile(batch, b0, b1, 64)\nreorder(b0, tree, b1)\nparallel(b0)"
    assert s.loop_order() == [["b0", "tree", "b1"]]


def test_split_names_copies():
    s = Schedule.parse("reorder(tree, batch)\nsplit(tree, t0, t1, 2)\nunrollWalk(batch.t0, 1)")
    assert s.loop_order() == [["t0", "batch.t0"], ["t1", "batch.t1"]]
    assert s.attrs["batch.t0"] == {"unroll_walk": 1}


def _directives(draw):
    """A random valid directive sequence, built by trying directives on a live schedule."""
    s, counter = Schedule(10), [0]
    for _ in range(draw(st.integers(0, 6))):
        live = sorted(s.attrs)
        v = draw(st.sampled_from(live))
        fresh = [f"v{counter[0]}", f"v{counter[0] + 1}"]
        counter[0] += 2
        op = draw(st.sampled_from(["tile", "split", "reorder", "parallel", "unrollWalk",
                                   "peelWalk", "cache", "interleave", "gpuDimension"]))
        args = {"tile": (v, *fresh, draw(st.integers(1, 8))),
                "split": (v, *fresh, draw(st.integers(1, 8))),
                "reorder": tuple(draw(st.permutations(live))[:2]),
                "unrollWalk": (v, draw(st.integers(1, 4))),
                "peelWalk": (v, draw(st.integers(1, 4))),
                "gpuDimension": (v, draw(st.sampled_from(["grid.x", "block.x"])))
                }.get(op, (v,))
        try:
            s.apply(op, *args)
        except ScheduleError:
            pass
    return s


@given(st.composite(_directives)())
def test_text_round_trip(s):
    again = Schedule.parse(str(s), 10)
    assert again == s and str(again) == str(s)
    assert again.loop_order() == s.loop_order()


@pytest.mark.parametrize("text, message", [
    ("frobnicate(batch)", "unknown directive"),
    ("tile(rows, a, b, 4)", "unknown index variable"),
    ("tile(batch, a, b, 4)\ntile(batch, c, d, 4)", "no longer names a loop"),
    ("tile(batch, tree, b, 4)", "already used"),
    ("tile(batch, a, a, 4)", "already used"),
    ("tile(batch, a, b, 0)", "must be > 0"),
    ("split(tree, a, b, -1)", "must be > 0"),
    ("tile(batch, a, b, 4)\nreorder(tree, a)", "successive"),
    ("split(batch, a, b, 4)\nreorder(tree.a, tree.b)", "successive"),
    ("interleave(tree)\nreorder(tree, batch)", "'tree' has interleave, which needs it innermost"),
    ("tile(batch, a, b, 4)\nreorder(a, tree, b)\nunrollWalk(b, 1)\nreorder(b, tree)",
     "'b' has unrollWalk"),
    ("tile(batch, a, b, 4)\nreorder(b, a)\nsplit(a, c, d, 2)", "'b', outside 'a', starts from 'a'"),
    ("tile(tree, t0, t1, 4)\ntile(batch, a, b, 4)\nreorder(t1, a, b, t0)\nsplit(a, c, d, 2)",
     "'t1', outside 'a', starts from 't0'"),
    ("reorder(batch, batch)", "distinct"),
    ("unroll(batch)", "batch loop"),
    ("specialize(batch)", "batch loop"),
    ("interleave(batch)", "not an innermost loop"),
    ("reorder(tree, batch)\ninterleave(batch)", "run-time trip count"),
    ("tile(tree, a, b, 100)\ninterleave(b)", "at most 64"),
    ("unrollWalk(batch, 2)", "not an innermost loop"),
    ("peelWalk(batch, 2)", "not an innermost loop"),
    ("parallel(batch)\nparallel(tree)", "cannot nest"),
    ("parallel(tree)\nparallel(tree)", "already has"),
    ("gpuDimension(tree, warp.x)", "unknown GPU dimension"),
    ("gpuDimension(batch, grid.x)\ngpuDimension(tree, grid.x)", "already mapped"),
    ("gpuDimension(batch, block.x)\ngpuDimension(tree, grid.x)", "grid dimension inside"),
    ("parallel(tree)\ntile(tree, a, b, 2)", "tile it before"),
    ("tile(batch, a, b, x)", "must be an integer"),
    ("tile(tree, a, b, share)", "divides 'batch' itself"),
    ("tile(batch, a, b, 4)\ntile(b, c, d, share)", "divides 'batch' itself"),
    ("split(batch, a, b, share)", "must be an integer"),
    ("tile(batch, a, b, share)\ntile(a, c, d, 2)", "cannot be tiled or split"),
    ("tile(batch, a, b, share)\nsplit(a, c, d, 2)", "cannot be tiled or split"),
    ("tile(batch, a, b, share)\nreorder(a, tree, b)\ninterleave(b)", "run-time trip count"),
    ("tile batch", r"expected name\(arguments"),
])
def test_errors_name_line_and_reason(text, message):
    with pytest.raises(ScheduleError, match=message) as info:
        Schedule.parse(text, 10)
    assert str(info.value).startswith(f"line {len(text.splitlines())}: ")


def test_inner_loops_move_outside_their_outer_loops():
    # Any order of perfectly nested loops is legal, a tile's inner loop outside its outer
    # one included (lowered with offsets and a guard, see test_mir).
    s = Schedule(5)
    t0, t1 = s.tile("tree", "t0", "t1", 8)
    s.reorder(t1, t0, "batch").parallel(t1)
    assert s.loop_order() == [["t1", "t0", "batch"]]
    assert str(Schedule.parse(str(s), 5)) == str(s)
    b = Schedule.parse("tile(batch, b0, b1, 16)\nreorder(b1, b0, tree)\nparallel(b1)")
    assert b.loop_order() == [["b1", "b0", "tree"]] and b.attrs["b1"] == {"parallel": True}
    nested = Schedule.parse("tile(tree, t0, t1, 8)\ntile(t1, a, b, 2)\nreorder(b, a, t0)")
    assert nested.loop_order() == [["batch", "b", "a", "t0"]]
    # A split part of a moved inner loop takes copies of the loops it starts from.
    part = Schedule.parse("tile(tree, t0, t1, 4)\nreorder(t1, t0, batch)\nsplit(t1, f, s, 3)")
    assert part.loop_order() == [["f", "t0.f", "batch.f"], ["s", "t0.s", "batch.s"]]
    assert part.vars["f"].rename == (("t1", "f"), ("t0", "t0.f"), ("batch", "batch.f"))


def test_api_error_names_directive():
    with pytest.raises(ScheduleError, match=r"^tile\(batch, a, b, 0\): "):
        Schedule().tile("batch", "a", "b", 0)


def test_interleave_of_tree_checked_with_t():
    s = Schedule.parse("reorder(batch, tree)\ninterleave(tree)")  # T unknown: deferred
    s.check(64)
    with pytest.raises(ScheduleError, match="at most 64"):
        s.check(65)


def test_library():
    assert set(LIBRARY) >= {"default", "xgboost", "one_tree_at_a_time", "tree_parallel"}
    assert named("xgboost", 10).loop_order() == [["b0", "tree", "b1"]]
    assert named("one_tree_at_a_time", 10).loop_order() == [["tree", "batch"]]
    tp = named("tree_parallel", 10, chunks=3)
    assert tp.attrs["t0"] == {"parallel": True} and tp.max_trip("t0") == 3
    with pytest.raises(ScheduleError, match="unknown schedule"):
        named("fastest", 10)
