"""The compile planner: one printable plan, the user's choices honoured, the rest chosen to
fit them (a valid schedule is never refused because of a default the planner picked)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import silvanforge
from silvanforge import reference
from silvanforge.backends.cpu import Target
from silvanforge.errors import BackendError, InputError, ModelFormatError
from silvanforge.model.forest import MISSING_NAN, MISSING_NONE, OP_LE
from silvanforge.model.builder import build_forest
from silvanforge.plan import Plan, cache, make_plan
from silvanforge.plan.planner import choose_representation
from silvanforge.representations import REGISTRY
from silvanforge.representations.sparse import SparseRepresentation
from silvanforge.schedule import Schedule, named

from test_compile import schedules
from test_forest import forest_of, stump
from test_mask import grown_tree
from test_vector_walks import complete_forest
from util import probe_rows

# Schedules a user writes without thinking of layouts (issue 22's examples among them).
USER_SCHEDULES = {
    "rows in blocks": "tile(batch, b0, b1, 64)\nreorder(b0, tree, b1)\nparallel(b0)",
    "tree tiles": "tile(tree, t0, t1, 4)\nreorder(t0, batch, t1)",
    "xgboost": "xgboost",
    "trees outside": "reorder(tree, batch)",
    "moved tree tile": "tile(tree, t0, t1, 4)\nreorder(t1, t0, batch)\nparallel(t1)",
    "moved row tile": "tile(batch, b0, b1, 16)\nreorder(b1, b0, tree)\nparallel(b1)",
}


@pytest.fixture(scope="module")
def skewed():
    """Chains of 30 splits: the array layout's padding bound refuses them, so the
    planner's default is mask (on AVX-512) or code."""
    rng = np.random.default_rng(4)
    return build_forest([grown_tree(rng, 30, 5, [OP_LE], [MISSING_NAN, MISSING_NONE])
                         for _ in range(7)], n_features=5, n_outputs=1)


@pytest.fixture(scope="module")
def stumps():
    trees = [stump(feature=k % 3, threshold=0.1 * k, values=(k, -k)) for k in range(1, 12)]
    return forest_of(*trees, n_features=3, base_score=0.5, post_transform="sigmoid")


def check(predictor, forest, seed=0):
    X = probe_rows(forest, seed, 70)
    np.testing.assert_allclose(predictor.predict(X), reference.predict(forest, X),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("cpu", ["x86-64-v2", "x86-64-v3", "native"])
def test_a_valid_schedule_runs_whatever_layout_the_planner_picks(skewed, cpu):
    every = {**schedules(skewed), **USER_SCHEDULES}
    for name, text in every.items():
        predictor = silvanforge.compile(skewed, schedule=text, cpu=cpu, n_jobs=2)
        assert str(predictor.plan.schedule) == str(silvanforge.compile(
            skewed, schedule=text, representation=predictor.plan.representation,
            cpu=cpu).plan.schedule), name
        check(predictor, skewed)


def test_the_user_s_choices_are_honoured(stumps):
    plan = make_plan(stumps, schedule="xgboost", representation="sparse",
                     precision="float64", n_jobs=3, cpu="x86-64-v2")
    assert (str(plan.schedule), plan.representation, plan.precision, plan.n_jobs,
            plan.cpu) == (str(named("xgboost", 11)), "sparse", "float64", 3, "x86-64-v2")
    # A schedule of the user's: exactly n_jobs threads, no second kernel.
    assert not plan.sized_threads and plan.small_schedule is None


def test_what_is_left_open_is_chosen_to_fit(stumps):
    plan = make_plan(stumps, n_jobs=2, cpu="x86-64-v2")
    assert plan.representation == "array" and np.dtype(plan.precision) == stumps.input_dtype
    assert plan.sized_threads and plan.small_schedule is not None
    assert not plan.schedule.vectorized  # no AVX2 or AVX-512 on x86-64-v2
    assert make_plan(stumps, n_jobs=2, cpu="x86-64-v3").schedule.vectorized
    # A vectorized schedule takes the layout whose walks are vectors, whatever the shape.
    forest = forest_of(*[stump(feature=0, threshold=0.5, values=(1, 2))] * 2,
                       n_features=1, input_dtype=np.float32)
    text = "tile(batch, b0, b1, 16)\nreorder(b0, tree, b1)\nvectorize(b1)"
    assert choose_representation(forest, None, "float32", "cpu", frozenset(),
                                 Schedule.parse(text)) == "array"


def test_the_plan_prints_every_choice_and_survives_saving(stumps, tmp_path):
    predictor = silvanforge.compile(stumps, schedule="xgboost", n_jobs=2, cpu="x86-64-v2")
    text = predictor.dump("plan")
    for part in ("target: cpu, built for CPU x86-64-v2", "representation: array",
                 "threads: 2 (as the schedule says)", "  reorder(b0, tree, b1)",
                 "11 trees, 3 features"):
        assert part in text
    path = tmp_path / "p.sfp"
    predictor.save(path)
    loaded = silvanforge.load_predictor(path)
    assert loaded.plan == predictor.plan and loaded.dump("plan") == text
    assert Plan.from_json(stumps, predictor.plan.to_json()) == predictor.plan


def test_avx2_walks_deep_array_trees_eight_rows_a_vector_and_the_plan_says_so(stumps):
    # 16 lanes (an AVX-512 register of float32), but 8 (one AVX2 register) for the array
    # layout of trees of depth 8 or more on AVX2; printed, saved, checked when read back.
    deep = complete_forest([8, 5, 8], n_features=6, seed=3)
    lanes = {(cpu, rep): make_plan(deep, n_jobs=2, cpu=cpu, representation=rep)
             for cpu in ("x86-64-v3", "x86-64-v4") for rep in ("array", "mask")}
    assert {key: p.vector_lanes for key, p in lanes.items()} == {
        ("x86-64-v3", "array"): 8, ("x86-64-v4", "array"): 16,
        ("x86-64-v3", "mask"): 16, ("x86-64-v4", "mask"): 16}
    assert make_plan(stumps, n_jobs=2, cpu="x86-64-v3").vector_lanes == 16  # shallow
    plan = lanes[("x86-64-v3", "array")]
    assert "vector walks: 8 rows a vector" in str(plan)
    assert "vector walks" not in str(make_plan(deep, cpu="x86-64-v2"))  # not vectorized
    saved = plan.to_json()
    assert Plan.from_json(deep, saved).vector_lanes == 8
    assert Plan.from_json(deep, {k: v for k, v in saved.items()
                                 if k != "vector_lanes"}).vector_lanes == 16  # older files
    with pytest.raises(ModelFormatError, match="vector_lanes 5 is not one of 8, 16"):
        Plan.from_json(deep, {**saved, "vector_lanes": 5})
    # The MIR's walks take the plan's lanes (their results: tests/test_vector_walks.py).
    if Target.named("x86-64-v3").runs_on(Target.host()):
        predictor = silvanforge.compile(deep, n_jobs=2, cpu="x86-64-v3")
        assert "interleaved_walk <lanes = 8>" in predictor.dump("mir")
        check(predictor, deep)


def test_a_new_representation_is_a_class_and_nothing_else(stumps, monkeypatch):
    class Everything(SparseRepresentation):
        name = "everything"
        default_rank = -1  # before every other default

    monkeypatch.setitem(REGISTRY, "everything", Everything)
    predictor = silvanforge.compile(stumps, n_jobs=1)
    assert predictor.plan.representation == "everything"
    check(predictor, stumps)


def test_layouts_are_refused_only_where_they_cannot_run(stumps):
    with pytest.raises(InputError, match="runs on cpu targets only; on a gpu use 'array'"):
        make_plan(stumps, target="opencl", representation="mask")
    with pytest.raises(InputError, match="unknown target 'tpu'"):
        make_plan(stumps, target="tpu")
    with pytest.raises(InputError, match="cpu= names the CPU of target 'cpu'"):
        make_plan(stumps, target="opencl", cpu="x86-64-v3")
    # GPUs take tables by default, never the CPU's branches or masks.
    assert make_plan(stumps, target="cuda").representation == "array"


def test_the_tuning_cache_keys_on_the_cpu(stumps):
    keys = {cache.cache_key(stumps, 16, 1, cpu)["cpu"]
            for cpu in ("native", "x86-64-v2", "x86-64-v3")}
    assert len(keys) == 3


def test_a_predictor_built_for_a_cpu_runs_only_where_it_can(stumps, monkeypatch, tmp_path):
    X = probe_rows(stumps, 1, 40)
    portable = silvanforge.compile(stumps, cpu="x86-64-v2", n_jobs=1)
    assert portable.kernel.target.cpu == "x86-64-v2"
    check(portable, stumps)
    # Code for a CPU with AVX-512, built on a machine without it: it saves, but refuses
    # to run here (an illegal instruction otherwise), and a machine with those features
    # loads it without recompiling.
    host = Target.host()
    avx2 = Target(host.triple, "haswell", "+avx,+avx2,+fma,-avx512f")
    monkeypatch.setattr(Target, "host", classmethod(lambda cls: avx2))
    future = silvanforge.compile(stumps, cpu="x86-64-v4", n_jobs=1)
    with pytest.raises(BackendError, match="avx512"):
        future.predict(X)
    future.save(tmp_path / "v4.sfp")
    with pytest.warns(UserWarning, match="recompiling for this CPU.*avx512"):
        here = silvanforge.load_predictor(tmp_path / "v4.sfp")
    assert here.plan.cpu == "native"
    check(here, stumps)
    monkeypatch.undo()
    if Target.named("x86-64-v4").runs_on(Target.host()):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            loaded = silvanforge.load_predictor(tmp_path / "v4.sfp")
        assert loaded.plan.cpu == "x86-64-v4"
        check(loaded, stumps)


def test_an_unknown_cpu_is_named(stumps):
    with pytest.raises(BackendError, match="unknown CPU 'pentium-9'"):
        make_plan(stumps, cpu="pentium-9")
