"""Compiled predictors against the reference: every schedule, representation, thread count.

The forests are random (built with the model builder, so every split semantic occurs:
operators, missing rules, categories, vector leaves); the rows hold NaN, thresholds and
special categories. Exactness is the bar: the compiled sums must equal the reference's up
to float64 summation order.
"""

from __future__ import annotations

import inspect
import os
import pickle
import re
import subprocess
import sys
import threading
import tracemalloc
import types
import weakref

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import silvanforge
from silvanforge import reference
from silvanforge.backends.cpu import Target
from silvanforge.errors import InputError, ModelFormatError, ScheduleError
from silvanforge.plan.plan import MAX_JOBS
from silvanforge.runtime.predictor import Predictor
from silvanforge.schedule.schedule import MAX_SHARE

from test_forest import random_forests, stump, forest_of
from util import probe_rows, unaligned, forbid_compiling

REPRESENTATIONS = ["array", "sparse", "reorg"]
# Every host the suite supports (x86-64 with AVX2 and up) runs code built for these.
CPUS = ["native", "x86-64-v2", "x86-64-v3"]


def schedules(forest) -> dict[str, str]:
    """Schedules of every kind the language has, valid for ``forest``."""
    t = forest.n_trees
    half = max(1, t // 2)
    peel = int(forest.node_depth[forest.is_leaf].min())
    out = {
        "default": "default",
        "xgboost": "xgboost",
        "one_tree_at_a_time": "one_tree_at_a_time",
        "tree_parallel": "tree_parallel",
        "tiled trees": f"tile(tree, t0, t1, {half})\nreorder(t0, batch, t1)",
        "parallel rows": "tile(batch, b0, b1, 3)\nparallel(b0)",
        "interleaved rows": "tile(batch, b0, b1, 4)\nreorder(b0, tree, b1)\n"
                            "interleave(b1)\nparallel(b0)",
        "interleaved trees": f"tile(tree, t0, t1, {min(t, 4)})\ninterleave(t1)",
        "unrolled walk": "unrollWalk(tree, 2)",
        "split trees": f"split(tree, ta, tb, {half})\nunrollWalk(ta, 1)",
        "atomic tree parallel": f"reorder(tree, batch)\ntile(tree, t0, t1, {half})\n"
                                "parallel(t0)\natomicReduce(t0)",
        "cached": "tile(batch, b0, b1, 8)\ncache(b0)\nreorder(b0, tree, b1)\ncache(tree)",
        "vector reduce": f"tile(tree, t0, t1, {half})\nreorder(t0, batch, t1)\nparallel(t0)\n"
                         "vectorReduce(t0, 4)",
        "thread shares": f"tile(batch, b0, b1, share)\ntile(tree, t0, t1, {half})\n"
                         "reorder(b0, t0, b1, t1)\nparallel(b0)",
    }
    if peel:
        out["peeled walk"] = f"peelWalk(tree, {peel})"
    return out


@settings(max_examples=40, deadline=None)
@given(forest=random_forests(), seed=st.integers(0, 2**32 - 1),
       representation=st.sampled_from(REPRESENTATIONS), which=st.integers(0, 100),
       n_jobs=st.sampled_from([1, 2]), dtype=st.sampled_from([np.float32, np.float64]),
       cpu=st.sampled_from(CPUS))
def test_compiled_equals_reference(forest, seed, representation, which, n_jobs, dtype, cpu):
    options = schedules(forest)
    name = sorted(options)[which % len(options)]
    try:
        predictor = silvanforge.compile(forest, schedule=options[name],
                                        representation=representation, n_jobs=n_jobs,
                                        cpu=cpu)
    except silvanforge.UnsupportedModelError:
        assert representation == "array"  # a tree too deep for a padded array
        return
    X = probe_rows(forest, seed, 37).astype(dtype)
    for output in ("margin", "value"):
        expected = reference.predict(forest, X, output=output)
        got = predictor.predict(X, output=output)
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12,
                                   err_msg=f"{name}, {representation}, {output}")


@pytest.fixture(scope="module")
def forest():
    trees = [stump(feature=k % 3, threshold=0.1 * k, values=(k, -k)) for k in range(1, 12)]
    return forest_of(*trees, n_features=3, base_score=0.5, post_transform="sigmoid")


@pytest.mark.parametrize("representation", REPRESENTATIONS)
def test_every_schedule_and_batch_size(forest, representation):
    rng = np.random.default_rng(3)
    for name, text in schedules(forest).items():
        predictor = silvanforge.compile(forest, schedule=text, representation=representation,
                                        n_jobs=2)
        for n in (0, 1, 2, 63, 64, 65, 200):
            X = rng.normal(size=(n, 3)).astype(np.float32)
            np.testing.assert_allclose(predictor.predict(X), reference.predict(forest, X),
                                       rtol=1e-12, err_msg=f"{name}, {n} rows")


@pytest.mark.parametrize("n_jobs", [1, 2, 3])
def test_thread_shares_cover_every_row(forest, n_jobs):
    # A share is ceil(rows / threads), at most MAX_SHARE: calls of a few rows, of rows
    # not divisible by the threads, and of more than MAX_SHARE rows on one thread (several
    # blocks a thread) each add every tree to every row once.
    predictor = silvanforge.compile(forest, schedule="tile(batch, b0, b1, share)\n"
                                    "reorder(b0, tree, b1)\nparallel(b0)", n_jobs=3)
    assert "step S" in predictor.dump("mir") and "share = " in predictor.dump("lir")
    rng = np.random.default_rng(5)
    for n in (0, 1, 2, 3, 10, 1001, 2 * MAX_SHARE + 5):
        X = rng.normal(size=(n, 3)).astype(np.float32)
        np.testing.assert_allclose(predictor.predict(X, n_jobs=n_jobs),
                                   reference.predict(forest, X), rtol=1e-12,
                                   err_msg=f"{n} rows")


@pytest.mark.parametrize("n_outputs", [1, 3])
@pytest.mark.parametrize("representation", [None, "code"])
def test_few_rows_take_the_short_path_with_the_same_results(n_outputs, representation,
                                                           monkeypatch):
    # predict's first lines send a few rows with the default output and a valid n_jobs
    # to the small kernel as they are (to the main one in a plan without one, as code's);
    # rows its entry refuses (big-endian, strided) and every other call take the
    # general path, with the same results or errors.
    trees = [stump(feature=k % 3, threshold=0.1 * k, values=(k, -k), output=k % n_outputs)
             for k in range(1, 12)]
    forest = forest_of(*trees, n_features=3, n_outputs=n_outputs, base_score=0.5,
                       post_transform="softmax" if n_outputs > 1 else "sigmoid")
    predictor = silvanforge.compile(forest, representation=representation)
    assert predictor._few and predictor._quick is not None
    assert (predictor._small is None) == (representation == "code")
    calls = spy_on_kernels(predictor, monkeypatch)
    rng = np.random.default_rng(4)
    for n in (1, 2, 8):
        X = rng.normal(size=(n, 3))
        want = reference.predict(forest, X)
        calls.clear()
        np.testing.assert_allclose(predictor.predict(X), want, rtol=1e-12)
        assert len(calls) == 1 and calls[0][0] is X and calls[0][1] is True
        for rows in (X.astype(np.float32), X.astype(">f8"), np.repeat(X, 2, axis=1)[:, ::2]):
            np.testing.assert_allclose(predictor.predict(rows),
                                       reference.predict(forest, rows), rtol=1e-12)
        for n_jobs in (1, 2, MAX_JOBS):  # a few rows run on one thread, whatever n_jobs
            calls.clear()
            np.testing.assert_allclose(predictor.predict(X, n_jobs=n_jobs), want, rtol=1e-12)
            assert len(calls) == 1 and calls[0][0] is X
        for bad in (0, -1, True, MAX_JOBS + 1, 1.5, "2"):  # checked all the same
            with pytest.raises(InputError, match="n_jobs"):
                predictor.predict(X, n_jobs=bad)
        np.testing.assert_allclose(predictor.predict(X, output="margin"),
                                   reference.predict(forest, X, output="margin"), rtol=1e-12)
    with pytest.raises(InputError, match="2-D"):
        predictor.predict(np.zeros(3))
    with pytest.raises(InputError, match="features"):
        predictor.predict(np.zeros((1, 4)))
    assert predictor.predict(np.zeros((0, 3))).shape[0] == 0


@pytest.mark.parametrize("representation", REPRESENTATIONS)
def test_small_batches_take_their_own_kernel(forest, representation):
    predictor = silvanforge.compile(forest, representation=representation, n_jobs=2)
    assert "interleave(t1)" in str(predictor.plan.small_schedule)
    rng = np.random.default_rng(6)
    for n in range(0, 20):
        X = rng.normal(size=(n, 3))
        np.testing.assert_allclose(predictor.predict(X), reference.predict(forest, X),
                                   rtol=1e-12, err_msg=f"{n} rows")
    assert silvanforge.compile(forest, schedule="default").plan.small_schedule is None


@settings(max_examples=6, deadline=None)
@given(forest=random_forests(), seed=st.integers(0, 2**32 - 1))
def test_ctypes_entry_predicts_as_the_builtin_entry(forest, seed):
    # Pythons whose object layout the builtin entry cannot read call through ctypes.
    from silvanforge.backends.cpu import entry

    X = probe_rows(forest, seed, 40)
    builtin = silvanforge.compile(forest, n_jobs=2)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(entry, "_layout", lambda: None)
        fallback = silvanforge.compile(forest, n_jobs=2)
    assert type(fallback._main.call) is not type(builtin._main.call)
    for rows in (X[:1], X[:7], X):
        for output in ("value", "margin"):
            expected = builtin.predict(rows, output=output)
            assert expected.shape == reference.predict(forest, rows, output=output).shape
            np.testing.assert_array_equal(fallback.predict(rows, output=output), expected)


@pytest.mark.parametrize("policy", [None, "PASSIVE"])
@pytest.mark.parametrize("representation", [None, "code", "mask"])
def test_default_schedule_sizes_threads_to_the_batch(forest, monkeypatch, representation,
                                                      policy):
    # Also for representations without a small-batch kernel: a thread with no rows of
    # its own only costs its wake-up, and sleeping threads cost more (OMP_WAIT_POLICY).
    from silvanforge.plan import planner as runtime

    if policy is None:
        monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
        rows = runtime.MIN_ROWS_PER_THREAD
    else:
        monkeypatch.setenv("OMP_WAIT_POLICY", policy)
        rows = -(-runtime.MIN_WALKS_PER_SLEEPING_THREAD // forest.n_trees)
        assert rows > runtime.MIN_ROWS_PER_THREAD
    predictor = silvanforge.compile(forest, n_jobs=2, representation=representation)
    assert runtime.rows_per_thread(forest) == rows
    # The default schedule has no scratch buffers: the thread count is argument 3. (The
    # quick builtin, which the spy does not see, runs calls of one thread's rows:
    # test_quick_predict.)
    monkeypatch.setattr(predictor, "_quick", None)
    calls = []
    real = predictor._main.call
    monkeypatch.setattr(predictor._main, "call",
                        lambda *a: (calls.append(a[3]), real(*a))[1])
    X = np.zeros((rows * 2, 3), np.float32)
    predictor.predict(X[:rows * 2 - 1])
    predictor.predict(X)
    assert calls == [1, 2]
    explicit = silvanforge.compile(forest, schedule="default", n_jobs=2)
    real_explicit = explicit._main.call
    monkeypatch.setattr(explicit._main, "call",
                        lambda *a: (calls.append(a[3]), real_explicit(*a))[1])
    explicit.predict(X[:10])
    assert calls[-1] == 2


def test_the_schedule_drives_the_loop_nest(forest):
    predictors = {name: silvanforge.compile(forest, schedule=s, n_jobs=1)
                  for name, s in schedules(forest).items()}
    # Distinct schedules ("default" is XGBoost's) give distinct loop nests.
    mir = {str(p.plan.schedule): p.dump("mir") for p in predictors.values()}
    assert len(set(mir.values())) == len(mir) >= 12
    assert "parallel for" in predictors["xgboost"].dump("mir")
    assert "reduce_dimension" in predictors["tree_parallel"].dump("mir")


def test_real_model_shapes_from_the_libraries():
    xgb = pytest.importorskip("xgboost")
    lgb = pytest.importorskip("lightgbm")
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 6)).astype(np.float32)
    X[rng.random(X.shape) < 0.1] = np.nan
    y = (np.nan_to_num(X[:, 0]) + np.nan_to_num(X[:, 1]) > 0).astype(int)
    models = [
        xgb.train({"objective": "multi:softprob", "num_class": 3, "max_depth": 5},
                  xgb.DMatrix(X, label=np.arange(400) % 3), 4),
        lgb.train({"objective": "binary", "num_leaves": 15, "verbose": -1,
                   "linear_tree": True}, lgb.Dataset(X, y), 4),
    ]
    for model in models:
        forest = silvanforge.load(model)
        for representation in REPRESENTATIONS:
            p = silvanforge.compile(forest, representation=representation, n_jobs=2)
            np.testing.assert_allclose(p.predict(X), reference.predict(forest, X), rtol=1e-12)


def test_vector_reduce_uses_vectors_of_its_width(forest):
    # Built for x86-64-v3, whose vectors hold four doubles: for a CPU with 512-bit ones
    # (Zen 4 and 5 use them) LLVM merges two 4-lane sums into one of 8 lanes.
    if not Target.named("x86-64-v3").runs_on(Target.host()):
        pytest.skip("needs a CPU that runs x86-64-v3 code (AVX2)")
    text = "tile(tree, t0, t1, 4)\nreorder(t0, batch, t1)\nparallel(t0)\nvectorReduce(t0, 4)"
    predictor = silvanforge.compile(forest, schedule=text, n_jobs=2, cpu="x86-64-v3")
    assert "<4 x double>" in predictor.dump("llvm")
    X = np.random.default_rng(4).normal(size=(103, 3))
    np.testing.assert_allclose(predictor.predict(X), reference.predict(forest, X), rtol=1e-12)


def test_concurrent_calls_match_serial(forest):
    predictor = silvanforge.compile(forest, n_jobs=2)
    rng = np.random.default_rng(1)
    inputs = [rng.normal(size=(300 + i, 3)) for i in range(8)]
    expected = [predictor.predict(X) for X in inputs]
    results: list = [None] * len(inputs)

    def run(i):
        for _ in range(5):
            results[i] = predictor.predict(inputs[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for got, want in zip(results, expected):
        np.testing.assert_array_equal(got, want)


def test_save_load_and_pickle_reuse_the_machine_code(forest, tmp_path, monkeypatch):
    predictor = silvanforge.compile(forest, schedule="xgboost", representation="reorg")
    X = np.random.default_rng(2).normal(size=(50, 3))
    path = tmp_path / "model.sfp"
    predictor.save(path)
    forbid_compiling(monkeypatch)
    for loaded in (silvanforge.load_predictor(path), pickle.loads(pickle.dumps(predictor))):
        assert loaded.plan == predictor.plan
        np.testing.assert_array_equal(loaded.predict(X), predictor.predict(X))
        assert loaded.dump("mir") == predictor.dump("mir")


def test_a_foreign_cpu_recompiles(forest, tmp_path):
    from silvanforge.backends.cpu import Target
    from silvanforge.runtime.predictor import Predictor

    predictor = silvanforge.compile(forest)
    fake = Target(predictor.kernel.target.triple, "future-cpu",
                  predictor.kernel.target.features + ",+imaginary-feature")
    with pytest.warns(UserWarning, match="recompiling"):
        again = Predictor(predictor.plan, (predictor.kernel.object_code,), fake)
    X = np.zeros((4, 3))
    np.testing.assert_array_equal(again.predict(X), predictor.predict(X))


def test_corrupt_predictor_files(tmp_path):
    path = tmp_path / "bad.sfp"
    path.write_bytes(b"not a predictor")
    with pytest.raises(ModelFormatError, match="bad.sfp"):
        silvanforge.load_predictor(path)
    with pytest.raises(ModelFormatError, match="cannot read"):
        silvanforge.load_predictor(tmp_path / "missing.sfp")


def test_bad_arguments(forest):
    predictor = silvanforge.compile(forest, n_jobs=1)
    with pytest.raises(InputError, match="expects 3 features"):
        predictor.predict(np.zeros((2, 4)))
    with pytest.raises(InputError, match="2-D"):
        predictor.predict(np.zeros(3))
    with pytest.raises(InputError, match="output"):
        predictor.predict(np.zeros((2, 3)), output="proba")
    with pytest.raises(InputError, match="n_jobs"):
        predictor.predict(np.zeros((2, 3)), n_jobs=0)
    with pytest.raises(InputError, match="representation"):
        silvanforge.compile(forest, representation="dense")
    with pytest.raises(InputError, match="precision"):
        silvanforge.compile(forest, precision="float16")
    with pytest.raises(InputError, match="target"):
        silvanforge.compile(forest, target="tpu")
    with pytest.raises(ScheduleError, match="line 1"):
        silvanforge.compile(forest, schedule="tile(batch, b0, b1, 0)")
    with pytest.raises(InputError, match="dump level"):
        predictor.dump("asm")


def spy_on_kernels(predictor, monkeypatch) -> list:
    """(rows argument, what the entry returned) for each kernel call of ``predictor``.
    The calls the quick builtin makes from machine code no spy sees: spied calls take
    the Python method (test_quick_predict tests the builtin)."""
    monkeypatch.setattr(predictor, "_quick", None)
    calls = []
    for kernel in (k for k in (predictor._main, predictor._small) if k is not None):
        def spy(rows, *args, call=kernel.call):
            calls.append((rows, call(rows, *args)))
            return calls[-1][1]
        monkeypatch.setattr(kernel, "call", spy)
    return calls


@pytest.mark.parametrize("n", [1, 10])
def test_inputs_are_not_copied_when_they_fit(forest, monkeypatch, n):
    predictor = silvanforge.compile(forest, n_jobs=1)
    calls = spy_on_kernels(predictor, monkeypatch)
    X = np.ascontiguousarray(np.random.default_rng(0).normal(size=(n, 3)), dtype=np.float32)
    predictor.predict(X)
    assert len(calls) == 1 and calls[0][0] is X and calls[0][1] is True


@pytest.mark.parametrize("entry_kind", ["builtin", "ctypes"])
@pytest.mark.parametrize("n", [1, 5, 40])
def test_every_input_layout_predicts_the_same(forest, monkeypatch, entry_kind, n):
    # The kernel's entry refuses rows whose layout it cannot read; those are converted.
    from silvanforge.backends.cpu import entry

    if entry_kind == "ctypes":
        monkeypatch.setattr(entry, "_layout", lambda: None)
    predictor = silvanforge.compile(forest, n_jobs=2)
    calls = spy_on_kernels(predictor, monkeypatch)
    X = np.random.default_rng(n).normal(size=(n, 3)).astype(np.float32)
    X[0, 1] = np.nan
    expected = reference.predict(forest, X)
    inputs = {"float64": X.astype(np.float64), "big-endian": X.astype(">f4"),
              "Fortran order": np.asfortranarray(X), "strided": np.repeat(X, 2, axis=1)[:, ::2],
              "unaligned": unaligned(X), "list": X.tolist(), "int": np.nan_to_num(X).astype(np.int64)}
    assert not inputs["unaligned"].flags.aligned
    for name, rows in inputs.items():
        calls.clear()
        want = reference.predict(forest, rows)
        np.testing.assert_array_equal(predictor.predict(rows), want, err_msg=name)
        assert calls[-1][1] is True and calls[-1][0].flags.aligned, name
        if name == "float64" and n > predictor._small_batch:
            # The main kernel copies its rows: it rounds float64 rows itself.
            assert len(calls) == 1 and calls[0][0] is rows
        if name != "int":
            np.testing.assert_array_equal(want, expected, err_msg=name)
    with pytest.raises(InputError, match="expects 3 features"):
        predictor.predict(np.zeros((n, 4), np.float32))
    with pytest.raises(InputError, match="expects 3 features"):
        predictor.predict(np.zeros((0, 4), np.float32))
    with pytest.raises(InputError, match="2-D"):
        predictor.predict(np.zeros(3, np.float32))


def test_quick_predict(forest):
    """predict is machine code (backends/cpu/entry.py): predict(X) of a few rows runs the
    predictor's quick builtin, which returns what the Python method returns; every other
    call goes to the method."""
    predictor = silvanforge.compile(forest, n_jobs=2)
    quick, method = predictor.predict, Predictor._predict.__get__(predictor)
    assert isinstance(quick, types.BuiltinMethodType) and quick.__self__ is predictor
    assert predictor._quick is not None
    assert str(inspect.signature(quick)) == "(X, output='value', n_jobs=None)"
    assert inspect.getdoc(Predictor._predict) in quick.__doc__
    rng = np.random.default_rng(11)
    small, solo = predictor.plan.small_batch, 2 * predictor.plan.rows_per_thread - 1
    for n in (1, 2, small, small + 1, solo, solo + 1):
        X = rng.normal(size=(n, 3)).astype(np.float32)
        X[0, 0] = np.nan
        for rows in (X, X.astype(np.float64), X.astype(">f4"), np.asfortranarray(X),
                     X.tolist(), X[None], X[:, :2]):
            for args, kwargs in (((rows,), {}), ((rows, "margin"), {}),
                                 ((rows,), {"n_jobs": 1}), ((rows,), {"output": "leaf"}),
                                 ((rows, "value", 1), {})):
                try:
                    want = method(*args, **kwargs)
                except InputError as exc:
                    with pytest.raises(InputError, match=re.escape(str(exc))):
                        quick(*args, **kwargs)
                    continue
                np.testing.assert_array_equal(quick(*args, **kwargs), want)
    for args, kwargs in (((), {}), ((X, "value", 1, 2), {}), ((X,), {"bad": 1}),
                         ((X, "value"), {"output": "value"}), ((X, "value", 1), {"n_jobs": 1})):
        with pytest.raises(TypeError):
            quick(*args, **kwargs)
    # The calls predict's first lines take, and those of a few blocks of rows, run the
    # quick builtin alone; the others, the Python method.
    X = rng.normal(size=(3, 3)).astype(np.float32)
    taken = []

    def spy(self, *args, **kwargs):
        taken.append(args)
        return method(*args, **kwargs)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Predictor, "_predict", spy)
        for args, kwargs, general in (
                ((X,), {}, False), ((X, "value"), {}, False), ((X, "value", 2), {}, False),
                ((X,), {"n_jobs": 1}, False), ((X,), {"output": "value", "n_jobs": 2}, False),
                ((X, "value"), {"n_jobs": None}, False), ((X,), {"n_jobs": MAX_JOBS}, False),
                ((X, "margin"), {}, True), ((X,), {"n_jobs": True}, True),
                ((X,), {"n_jobs": 0}, True), ((X,), {"n_jobs": MAX_JOBS + 1}, True),
                ((X,), {"n_jobs": 2**70}, True), ((X,), {"n_jobs": 1.0}, True),
                ((X.tolist(),), {}, True), ((X, "".join(["val", "ue"])), {}, True),
                # Rows the main kernel runs on one thread, then on two.
                ((np.resize(X, (solo, 3)),), {}, False),
                ((np.resize(X, (solo + 1, 3)),), {}, True)):
            taken.clear()
            try:
                got = quick(*args, **kwargs)
            except InputError:
                got = None
            assert bool(taken) == general, (args, kwargs)
            if got is not None and not general:
                np.testing.assert_array_equal(got, method(*args, **kwargs))
    with pytest.raises(TypeError, match="Predictor"):
        Predictor.predict(3, X)
    X = rng.normal(size=(5, 3)).astype(np.float32)
    assert_no_leaks(predictor, X)
    # The builtin holds no predictor: one is freed when its last reference goes.
    kept = weakref.ref(predictor)
    del predictor, method, quick
    assert kept() is None
    # Forests of several outputs: results of (rows, outputs).
    several = silvanforge.compile(forest.replace(
        n_outputs=2, tree_output=forest.tree_output % 2, base_score=np.zeros(2),
        flat_output=False))
    assert several._quick is not None
    for rows in (X[:1], X, X.astype(np.float64)):
        got = several.predict(rows)
        assert got.shape == (len(rows), 2)
        np.testing.assert_array_equal(got, Predictor._predict(several, rows))
    assert_no_leaks(several, X)


def assert_no_leaks(predictor, X):
    """No reference leaks in predict(X) (the rows, the row count, the quick builtin, the
    result), and no memory kept by calls whose rows the entry refuses (~150 bytes a
    call: the result allocated for them)."""
    before = sys.getrefcount(X), sys.getrefcount(len(X)), sys.getrefcount(predictor._quick)
    results = [predictor.predict(X) for _ in range(500)]
    after = (sys.getrefcount(X), sys.getrefcount(len(X)), sys.getrefcount(predictor._quick),
             sys.getrefcount(results[0]))
    assert after == (*before, 2)  # counted outside the assert, which holds its operands
    odd = X.astype(">f4")
    predictor.predict(odd)
    tracemalloc.start()
    try:
        for _ in range(2000):
            predictor.predict(odd)
        grown = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert grown < 100_000


LATE_CALL = """
import sys
sys.path.insert(0, sys.argv[1])
import numpy as np, silvanforge
from test_forest import forest_of, stump

class Late:
    def __del__(self):  # at exit, while modules are cleared
        print("late", float(self.f(np.zeros((1, 3), np.float32))[0]))

late = Late()
late.f = silvanforge.compile(forest_of(stump(), n_features=3)).predict
print("now", float(late.f(np.zeros((1, 3), np.float32))[0]))
"""


def test_a_bound_predict_works_while_the_interpreter_exits():
    """A bound predict points at the machine-code method's table, which lives as long
    as the process (not as long as the module that made it)."""
    tests = os.path.dirname(os.path.abspath(__file__))
    done = subprocess.run([sys.executable, "-c", LATE_CALL, tests], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    now, late = done.stdout.split()[1::2]
    assert now == late


def test_quick_predict_without_the_builtin_entry(forest, monkeypatch):
    from silvanforge.backends.cpu import entry

    monkeypatch.setattr(entry, "_layout", lambda: None)
    predictor = silvanforge.compile(forest)
    assert predictor._quick is None
    X = np.random.default_rng(3).normal(size=(4, 3)).astype(np.float32)
    np.testing.assert_allclose(predictor.predict(X), reference.predict(forest, X), rtol=1e-6)


def test_dumps(forest):
    predictor = silvanforge.compile(forest, n_jobs=1)
    assert "trees 11" in predictor.dump("hir")
    assert "walk" in predictor.dump("mir")
    assert "kernel predict(" in predictor.dump("lir")
    assert "define" in predictor.dump("llvm")


def seed_schedules(n_trees: int) -> dict[str, str]:
    """The schedules printed in seed 002, with their placeholders filled in."""
    half = max(1, n_trees // 2)
    return {
        # The seed writes unrollWalk(t0, 1): walk directives name the innermost loop here,
        # which after the split is the copy of the batch loop inside t0.
        "§3 one tree at a time, unrolled": "reorder(tree, batch)\nsplit(tree, t0, t1, 2)\n"
                                          "unrollWalk(batch.t0, 1)\nunrollWalk(batch.t1, 2)",
        "§4.1 two trees at a time": "tile(tree, t0, t1, 2)\nreorder(t0, batch, t1)",
        "§4.1 4 rows x 2 trees": "tile(batch, b0, b1, 4)\ntile(tree, t0, t1, 2)\n"
                                 "reorder(b0, t0, b1, t1)",
        "§4.2 XGBoost": "tile(batch, b0, b1, 64)\nreorder(b0, tree, b1)\nparallel(b0)",
        "§4.3 Tahoe direct": "tile(batch, b0, b1, 8)\nreorder(b0, b1, tree)\n"
                             "gpuDimension(b0, grid.x)\ngpuDimension(b1, block.x)",
        "§4.3 Tahoe shared data": "reorder(batch, tree)\ngpuDimension(batch, grid.x)\n"
                                  "gpuDimension(tree, block.x)\ncache(batch)",
        "§4.3 Tahoe shared forest": f"tile(batch, b0, b1, 8)\ntile(tree, t0, t1, {n_trees})\n"
                                    "reorder(b0, b1, t0, t1)\ncache(t0)\n"
                                    "gpuDimension(b0, grid.x)\ngpuDimension(b1, block.x)",
        "§4.3 Tahoe shared partial forest":
            f"tile(batch, b0, b1, 8)\ntile(tree, t0, t0Inner, {half})\n"
            f"tile(t0Inner, t1, t2, {half})\ncache(t1)\nreorder(b0, t0, b1, t1, t2)\n"
            "gpuDimension(b0, grid.x)\ngpuDimension(t0, grid.y)\ngpuDimension(b1, block.x)",
        "§6.2 rows and trees in parallel": f"tile(batch, i0, i1, 16)\n"
                                           f"tile(tree, t0, t1, {half})\n"
                                           "reorder(i0, t0, t1, i1)\nparallel(t0)",
    }


@pytest.mark.parametrize("name", list(seed_schedules(11)))
def test_the_seed_schedules_compile_exactly(forest, name):
    """GPU dimensions run serially on the CPU; the loop nests are the seed's."""
    text = seed_schedules(forest.n_trees)[name]
    predictor = silvanforge.compile(forest, schedule=text, n_jobs=2)
    X = np.random.default_rng(5).normal(size=(70, 3))
    np.testing.assert_allclose(predictor.predict(X), reference.predict(forest, X), rtol=1e-12)


def chain(depth: int) -> "Tree":
    """A tree that is one path: node j (even) splits to leaf j+1 and on to node j+2."""
    from silvanforge.model.builder import Tree
    n = 2 * depth + 1
    internal = [j % 2 == 0 and j < n - 1 for j in range(n)]
    left = [j + 1 if internal[j] else -1 for j in range(n)]
    right = [j + 2 if internal[j] else -1 for j in range(n)]
    return Tree(left=left, right=right, feature=[0] * n, threshold=[0.1 * i for i in range(n)],
                leaf_value=[float(i) for i in range(n)])


def test_default_representation_follows_the_tree_shapes():
    complete = forest_of(*[stump(threshold=0.1 * k) for k in range(5)])
    assert silvanforge.compile(complete, n_jobs=1).plan.representation == "array"
    # A chain of depth 12 pads to 8191 slots for 25 nodes: the array layout is not chosen.
    skewed = forest_of(chain(12), stump())
    predictor = silvanforge.compile(skewed, n_jobs=1)
    # A small skewed forest becomes masks (splits tested as vectors) on AVX-512 CPUs,
    # else code (branches with immediate thresholds).
    avx512 = "avx512f" in Target.host().enabled()
    assert predictor.plan.representation == ("mask" if avx512 else "code")
    X = probe_rows(skewed, 0, 40)
    np.testing.assert_allclose(predictor.predict(X), reference.predict(skewed, X),
                               rtol=1e-12, atol=1e-12)
    reloaded = pickle.loads(pickle.dumps(predictor))  # its object code, not recompiled
    np.testing.assert_array_equal(reloaded.predict(X), predictor.predict(X))
    # Whatever is chosen by default, an explicit choice wins.
    assert silvanforge.compile(skewed, representation="array", n_jobs=1) \
        .plan.representation == "array"
