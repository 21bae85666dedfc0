"""The code representation under schedules whose tree index is not a compile-time
constant: a walk jumps on its tree index to that tree's code (a LIR ``Switch``).

Every named schedule that runs on a CPU and the loop orders below must equal the
reference exactly on random forests (every operator, missing rule, category rule, vector
and linear leaves) with NaN inputs, and on LightGBM (categorical splits, NaNs),
XGBoost and scikit-learn models trained here, on one thread and two. The forest's code
is emitted once whatever the number of interleaved walks, and a big forest's switch
calls one function a tree.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import silvanforge
from silvanforge import reference
from silvanforge.backends.cpu import outline
from silvanforge.backends.gpu import CUDARenderer
from silvanforge.lir import interpret, ir, lower as lir_lower
from silvanforge.lir.finish import MARGIN
from silvanforge.lir.printer import print_lir
from silvanforge.mir import lower as mir_lower
from silvanforge.representations import REGISTRY
from silvanforge.schedule.library import GPU_SCHEDULES, LIBRARY, named

from test_code_representation import _big_forest, check
from test_representations import forests, random_rows
from util import with_nans

# Named schedules a CPU runs with this representation (``vector`` walks the array layout
# only; GPU schedules run their mapped loops serially).
NAMED = sorted(name for name in LIBRARY if "vectorize" not in LIBRARY[name](4))
CUSTOM = {
    "rows by tree": "reorder(tree, batch)",
    "row blocks": "tile(batch, b0, b1, 64)\nreorder(b0, tree, b1)\nparallel(b0)",
    "tree tiles": "tile(tree, t0, t1, 4)\nreorder(t0, batch, t1)",
    "interleaved trees": "tile(tree, t0, t1, 3)\ninterleave(t1)",
}
SCHEDULES = {**{name: name for name in NAMED}, **CUSTOM}


def test_named_schedules_include_those_that_failed_before():
    assert {"default", "xgboost", "one_tree_at_a_time", "tree_parallel",
            "small_batch"} <= set(NAMED)


@settings(max_examples=40, deadline=None)
@given(forest=forests(), seed=st.integers(0, 2**32 - 1),
       which=st.sampled_from(sorted(SCHEDULES)), n_jobs=st.sampled_from([1, 2]))
def test_any_schedule_equals_reference(forest, seed, which, n_jobs):
    predictor = silvanforge.compile(forest, schedule=SCHEDULES[which],
                                    representation="code", n_jobs=n_jobs)
    check(predictor, forest, random_rows(forest, seed, 29).astype(forest.input_dtype))


def _trained(library: str):
    """(forest, rows with NaNs) of a small model trained here."""
    rng = np.random.default_rng(7)
    X = rng.normal(size=(400, 6))
    if library == "lightgbm":
        lgb = pytest.importorskip("lightgbm")
        X[:, 5] = rng.integers(0, 40, len(X))
        X = with_nans(X, 0.05).astype(np.float64)
        y = X[:, 0] + np.where(np.nan_to_num(X[:, 5]) % 3 == 0, 1.0, -1.0) \
            + rng.normal(size=len(X))
        model = lgb.train({"objective": "regression", "num_leaves": 15, "verbose": -1,
                           "min_data_per_group": 5, "cat_smooth": 1.0, "num_threads": 1},
                          lgb.Dataset(X, y, categorical_feature=[5]), num_boost_round=12)
    elif library == "xgboost":
        xgb = pytest.importorskip("xgboost")
        # Three classes: trees feed outputs in turn, so a walk of the wrong tree shows.
        X = with_nans(X, 0.05)
        y = (X[:, 0] > 0).astype(int) + (np.nan_to_num(X[:, 1]) > 0.5)
        model = xgb.train({"objective": "multi:softprob", "num_class": 3, "max_depth": 5,
                           "nthread": 1}, xgb.DMatrix(X, y), num_boost_round=4)
    else:
        ensemble = pytest.importorskip("sklearn.ensemble")
        y = (X[:, 0] * X[:, 1] > 0).astype(int) + (X[:, 2] > 1)
        model = ensemble.RandomForestClassifier(n_estimators=8, max_depth=6,
                                                random_state=0).fit(X, y)
        X = with_nans(X, 0.05)
    forest = silvanforge.load(model)
    if library == "lightgbm":
        assert forest.has_categorical
    return forest, X


@pytest.mark.parametrize("library", ["lightgbm", "xgboost", "sklearn"])
def test_trained_models_under_every_schedule(library):
    forest, X = _trained(library)
    X = X.astype(forest.input_dtype)
    for name, schedule in SCHEDULES.items():
        for n_jobs in (1, 2):
            predictor = silvanforge.compile(forest, schedule=schedule,
                                            representation="code", n_jobs=n_jobs)
            try:
                check(predictor, forest, X)
            except AssertionError as exc:
                raise AssertionError(f"{library}, {name}, {n_jobs} threads") from exc


@pytest.mark.parametrize("schedule", ["default", "small_batch"])
def test_the_lir_interpreter_takes_the_same_jumps(schedule):
    forest, X = _trained("lightgbm")
    X = X[:14]
    rep = REGISTRY["code"](forest)
    fn = mir_lower(forest, named(schedule, forest.n_trees))
    kernel = lir_lower.lower(fn, forest, rep)
    assert "switch (" in print_lir(kernel)
    result = np.zeros(len(X) * forest.n_outputs)
    scratch = [np.zeros(shape).ravel()
               for shape in lir_lower.scratch_shapes(fn, len(X), forest.n_outputs)]
    data = [p.name for p in kernel.params[2:3 + len(scratch)]]
    args = {"rows": np.ascontiguousarray(X.ravel(), dtype=forest.input_dtype),
            "n_rows": len(X), **dict(zip(data, [result, *scratch])), "n_threads": 1,
            "finish": MARGIN, "tree_output": forest.tree_output.astype(np.int32),
            **rep.buffers}
    interpret.run(kernel, args)
    np.testing.assert_allclose(result, reference.predict(forest, X, output="margin").ravel(),
                               rtol=1e-12, atol=1e-12)


def test_interleaved_walks_emit_each_tree_once():
    """Twelve rows' walks through one tree jump once, to a loop over the rows: the
    forest's code is there once, not twelve times."""
    forest = _big_forest(n_trees=6)
    rows = silvanforge.compile(forest, schedule="default", representation="code",
                               n_jobs=1).dump("lir")
    trees = silvanforge.compile(forest, schedule="small_batch", representation="code",
                                n_jobs=1).dump("lir")
    unrolled = silvanforge.compile(forest, schedule="unroll(tree)", representation="code",
                                   n_jobs=1).dump("lir")
    nodes = unrolled.count("threshold[")  # each split node's test reads its threshold
    assert nodes == (forest.n_nodes - forest.n_trees) // 2
    for lir in (rows, trees):
        assert lir.count("switch (") == 1
        assert lir.count("threshold[") == nodes


def test_a_big_forest_calls_a_function_a_tree():
    forest = _big_forest(n_trees=120)
    predictor = silvanforge.compile(forest, schedule="xgboost", representation="code",
                                    n_jobs=1)
    llvm_ir = predictor.dump("llvm")
    assert "switch i64" in llvm_ir
    assert llvm_ir.count("define ") > forest.n_trees  # the kernel, its loop, the trees
    X = with_nans(np.random.default_rng(1).normal(size=(200, 5)), 0.1)
    check(predictor, forest, X)


def test_a_tree_loop_over_rows_jumps_once_a_tree():
    """Where a tree loop holds a loop over rows (``xgboost``: a block's rows through one
    tree), the jump is on the tree loop's index, to a copy of the row loop per tree."""
    forest = _big_forest(n_trees=5)
    for schedule in ("xgboost", "one_tree_at_a_time"):
        lir = silvanforge.compile(forest, schedule=schedule, representation="code",
                                  n_jobs=1).dump("lir")
        assert lir.count("switch (tree) {") == 1
        assert lir.count("case ") == forest.n_trees
        assert lir.count("for (") >= 1 + forest.n_trees  # a row loop in every case


def test_small_pieces_keep_every_schedule_exact(monkeypatch):
    """Switch cases outlined as functions, and those cut again, at budgets below a
    tree's size."""
    forest = _big_forest(n_trees=6, seed=2)
    X = with_nans(np.random.default_rng(3).normal(size=(70, 5)), 0.1)
    for budget in (60, 400):
        monkeypatch.setattr(outline, "BUDGET", budget)
        for name, text in SCHEDULES.items():
            predictor = silvanforge.compile(forest, schedule=text, representation="code",
                                            n_jobs=2)
            if "switch (" in predictor.dump("lir"):
                assert predictor.dump("llvm").count("define ") > forest.n_trees, name
            check(predictor, forest, X)


def test_gpu_schedules_jump_alike(opencl, nvrtc):  # noqa: F811
    """Every GPU schedule, and a mapped row block over a plain tree loop (the tree
    loop's jump, each case a scope of its own), exact on PoCL; the CUDA source of each
    compiles to PTX."""
    forest = _big_forest(n_trees=7)
    X = with_nans(np.random.default_rng(4).normal(size=(150, 5)), 0.1)
    block = "tile(batch, b0, b1, 64)\nreorder(b0, tree, b1)\ngpuDimension(b0, grid.x)"
    for schedule in (*GPU_SCHEDULES, block):
        predictor = silvanforge.compile(forest, target="opencl", schedule=schedule,
                                        representation="code")
        np.testing.assert_allclose(predictor.predict(X), reference.predict(forest, X),
                                   rtol=1e-12, atol=1e-12, err_msg=schedule)
        source = CUDARenderer().render(predictor.program)
        assert "switch (" in source and ".entry" in nvrtc(source), schedule


def test_a_switch_runs_its_case_or_nothing():
    out = ir.Buffer("out", ir.I64)
    x = ir.Var("x", ir.I64)
    cases = [[ir.Store(out, ir.i64(0), ir.i64(10 + i))] for i in range(3)]
    for value, expected in ((0, 10), (2, 12), (3, -1), (-1, -1)):
        kernel = ir.Kernel("k", [out, x], [ir.Switch(x, cases)])
        result = np.full(1, -1, dtype=np.int64)
        interpret.run(kernel, {"out": result, "x": value})
        assert result[0] == expected


def test_a_cold_block_runs_in_place_where_no_function_is_made():
    # ir.Cold runs its body (a scope of its own) in the LIR interpreter and the GPU
    # renderers; the printer shows it.
    out = ir.Buffer("out", ir.I64)
    x = ir.Var("x", ir.I64)
    kernel = ir.Kernel("k", [out], [ir.Cold([ir.Declare(x, ir.i64(7)),
                                             ir.Store(out, ir.i64(0), x)])])
    result = np.zeros(1, dtype=np.int64)
    interpret.run(kernel, {"out": result})
    assert result[0] == 7
    assert "cold {" in print_lir(kernel)
    assert "  {\n    long long x = 7LL;\n    out[0LL] = x;\n  }" in CUDARenderer().kernel(kernel)
