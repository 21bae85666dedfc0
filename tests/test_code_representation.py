"""The code representation (trees as branches, thresholds as immediates) and the CPU
backend's outlining of large blocks into functions.

Compiled code predictors must equal the reference exactly on random forests using every
operator, missing rule, category rule, vector and linear leaves, at both precisions, on
rows of thresholds, NaNs and odd categories; and trained LightGBM / XGBoost models
(schedules leaving tree indices unknown at compile time: test_code_dispatch.py). Big
forests are split into several functions, and outlining keeps every schedule of every
representation exact however small the pieces.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import silvanforge
from silvanforge import reference
from silvanforge.backends.cpu import outline
from silvanforge.backends.cpu.freevars import walk_stmts
from silvanforge.backends.gpu import CUDARenderer
from silvanforge.lir import ir
from silvanforge.model.builder import Tree, build_forest
from silvanforge.model.forest import OP_CAT
from silvanforge.representations import REGISTRY

from test_compile import schedules
from test_forest import random_forests
from test_representations import forests, random_rows
from test_vector_walks import complete_forest
from util import assert_parity, probe_rows, with_nans

# Schedules with constant tree indices, which the code representation runs best.
CODE_SCHEDULES = {
    "code_rows": "code_rows",
    "row by row": "unroll(tree)",
    "tree by tree": "reorder(tree, batch)\nunroll(tree)",
    "interleaved rows": "tile(batch, b0, b1, 4)\nreorder(b0, tree, b1)\nunroll(tree)\n"
                        "interleave(b1)\nparallel(b0)",
    "specialized": "tile(batch, b0, b1, 3)\nreorder(b0, tree, b1)\nspecialize(tree)\n"
                   "parallel(b0)",
}


def check(predictor, forest, X) -> None:
    for output in ("margin", "value"):
        np.testing.assert_allclose(predictor.predict(X, output=output),
                                   reference.predict(forest, X, output=output),
                                   rtol=1e-12, atol=1e-12, err_msg=output)


@settings(max_examples=30, deadline=None)
@given(forest=forests(), seed=st.integers(0, 2**32 - 1),
       which=st.sampled_from(sorted(CODE_SCHEDULES)), n_jobs=st.sampled_from([1, 2]))
def test_code_equals_reference(forest, seed, which, n_jobs):
    rows = random_rows(forest, seed, 23)
    for precision in ("float64", "float32"):
        if precision == "float32" and forest.input_dtype != np.float32:
            continue
        predictor = silvanforge.compile(forest, schedule=CODE_SCHEDULES[which],
                                        representation="code", precision=precision,
                                        n_jobs=n_jobs)
        check(predictor, forest, rows.astype(forest.input_dtype))


@settings(max_examples=15, deadline=None)
@given(forest=random_forests(), seed=st.integers(0, 2**32 - 1))
def test_default_code_schedule_equals_reference(forest, seed):
    predictor = silvanforge.compile(forest, representation="code", n_jobs=2)
    assert predictor.plan.small_schedule is None
    assert "unroll(t1)" in str(predictor.schedule)
    for n in (1, 64, 65, 150):
        check(predictor, forest, probe_rows(forest, seed, n))


@pytest.mark.parametrize("n_features, input_dtype, block", [
    (5, np.float64, None), (300, np.float32, 218), (2000, np.float32, 32),
    (40000, np.float64, 16)])
def test_wide_rows_walk_in_blocks_that_fit_the_cache(n_features, input_dtype, block):
    # A block of the default schedule is a thread's share of the call, unless fewer than
    # 256 rows fill 256 KiB: then that many (at least 16), each tile of trees walking a
    # block the cache still holds. Every batch end of such blocks stays exact.
    forest = complete_forest([4] * 40, n_features=n_features, seed=n_features,
                             input_dtype=input_dtype)
    predictor = silvanforge.compile(forest, representation="code", n_jobs=2)
    first = str(predictor.schedule).splitlines()[0]
    assert first == f"tile(batch, b0, b1, {block if block else 'share'})"
    rng = np.random.default_rng(n_features)
    rows = with_nans(rng.normal(size=(2 * (block or 20) + 5, n_features)), 0.1,
                     n_features).astype(input_dtype)
    for count in sorted({1, (block or 20) - 1, block or 20, (block or 20) + 1, len(rows)}):
        check(predictor, forest, rows[:count])


def test_a_forest_of_no_features_takes_the_default_block_as_code():
    # Leaves alone (rows of no features): no row width to size a block by.
    forest = build_forest([Tree(left=[-1], right=[-1], feature=[0], threshold=[0.0],
                                leaf_value=[1.5])], n_features=0, n_outputs=1)
    predictor = silvanforge.compile(forest, representation="code")
    np.testing.assert_array_equal(predictor.predict(np.zeros((3, 0)), output="margin"),
                                  reference.predict(forest, np.zeros((3, 0)), output="margin"))


def _big_forest(n_trees: int = 120, seed: int = 0):
    """LightGBM-like skewed trees of 15 leaves (29 nodes) on 5 features."""
    rng = np.random.default_rng(seed)
    trees = []
    for _ in range(n_trees):
        left, right = [-1], [-1]
        for _ in range(14):
            leaf = int(rng.choice([i for i in range(len(left)) if left[i] < 0]))
            left[leaf], right[leaf] = len(left), len(left) + 1
            left += [-1, -1]
            right += [-1, -1]
        n = len(left)
        trees.append(Tree(left=left, right=right, feature=rng.integers(0, 5, n),
                          threshold=rng.normal(size=n), leaf_value=rng.normal(size=n),
                          default_left=rng.random(n) < 0.5))
    return build_forest(trees, n_features=5, n_outputs=1)


def test_the_bottom_of_a_tree_is_selects():
    """A subtree of at most SELECT_NODES split nodes is one expression of selects; only
    the nodes above branch."""
    from silvanforge.representations import code
    forest = _big_forest(n_trees=8, seed=3)

    def children(t: int, n: int) -> tuple[int, int]:  # of local node n of tree t
        at = forest.tree_offsets[t] + n
        return forest.left[at], forest.right[at]

    def splits(t: int, n: int) -> int:  # split nodes of the subtree at n
        left, right = children(t, n)
        return 0 if left < 0 else 1 + splits(t, left) + splits(t, right)

    def branching(t: int, n: int) -> int:  # nodes whose subtree passes the bound
        if splits(t, n) <= code.SELECT_NODES:
            return 0
        left, right = children(t, n)
        return 1 + branching(t, left) + branching(t, right)

    lir = silvanforge.compile(forest, representation="code", schedule="unroll(tree)",
                              n_jobs=1).dump("lir")
    expected = sum(branching(t, 0) for t in range(forest.n_trees))
    assert 0 < expected < (forest.n_nodes - forest.n_trees) // 2
    assert lir.count("if (") == expected
    assert lir.count(" ? ") >= (forest.n_nodes - forest.n_trees) // 2 - expected


def test_a_big_forest_is_split_into_functions():
    forest = _big_forest()
    predictor = silvanforge.compile(forest, representation="code", n_jobs=1)
    llvm_ir = predictor.dump("llvm")
    # The kernel, the parallel loop's body and several pieces of trees.
    assert llvm_ir.count("define ") > 4
    # Thresholds are immediates: the kernel branches on them, one branch a node at most.
    branches = llvm_ir.count("br i1")
    assert forest.n_trees < branches <= forest.n_internal + 10 * forest.n_trees
    X = with_nans(np.random.default_rng(1).normal(size=(300, 5)), 0.1)
    check(predictor, forest, X)
    again = silvanforge.Predictor.from_bytes(predictor.to_bytes())
    np.testing.assert_array_equal(again.predict(X), predictor.predict(X))


def test_the_optimised_ir_is_built_again_when_asked_for():
    """A compile keeps no LLVM IR; asked for, it is built again: the same modules (one
    a object file) and the IR a build keeping it has, for two kernels of one build, in
    parallel and on one core."""
    from silvanforge.backends.cpu import Target, build, jit
    lir = silvanforge.compile(_big_forest(), representation="code", n_jobs=1)._main.lir
    kernels = [lir, ir.Kernel("again", lir.params, lir.body)]
    levels, target = [(1, True), (2, False)], Target.host()
    compiled = jit.compile_kernels(kernels, levels=levels)
    assert all(callable(k._llvm_ir) for k in compiled)  # nothing printed yet
    kept, _ = jit._parallel(kernels, levels, target, "test", None, keep_ir=True)
    assert len(kept[0]) > 1  # the kernel's main module and its pieces
    for k, objects in zip(compiled, kept):
        assert k.llvm_ir == "\n".join(text for _, text in objects)
        assert k.llvm_ir.count("; ModuleID") == len(k.object_code) == len(objects)
    alone = jit._OptimisedIR(kernels, levels, target, parallel=False)
    assert alone[1] == build.build(str(jit.render_kernel(kernels[1], target)), target.triple,
                                   target.cpu, target.features, 2)[1]


@pytest.mark.parametrize("representation", ["sparse", "code"])
def test_small_pieces_keep_every_schedule_exact(representation, monkeypatch):
    """Outlining is the backend's: with pieces of a tree or less (a tree's code is ~200
    units), every schedule of every representation still computes the reference's sums."""
    forest = _big_forest(n_trees=6, seed=2)
    X = with_nans(np.random.default_rng(3).normal(size=(70, 5)), 0.1)
    options = CODE_SCHEDULES if representation == "code" else schedules(forest)
    outlined = 0
    for budget in (100, 400):
        monkeypatch.setattr(outline, "BUDGET", budget)
        for name, text in options.items():
            predictor = silvanforge.compile(forest, schedule=text,
                                            representation=representation, n_jobs=2)
            outlined += predictor.dump("llvm").count("define internal fastcc")
            np.testing.assert_allclose(predictor.predict(X), reference.predict(forest, X),
                                       rtol=1e-12, atol=1e-12, err_msg=f"{name}, {budget}")
    assert outlined >= 4


def _trained_lightgbm():
    """(booster, rows): 20 trees of 31 leaves, feature 5 categorical, 5% NaN."""
    lgb = pytest.importorskip("lightgbm")
    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, 6))
    X[:, 5] = rng.integers(0, 30, 600)
    X = with_nans(X, 0.05).astype(np.float64)
    y = X[:, 0] + np.where(np.nan_to_num(X[:, 5]) % 3 == 0, 1.0, -1.0) + rng.normal(size=600)
    booster = lgb.train({"objective": "regression", "num_leaves": 31, "verbose": -1,
                         "min_data_per_group": 5, "cat_smooth": 1.0, "num_threads": 1},
                        lgb.Dataset(X, y, categorical_feature=[5]), num_boost_round=20)
    return booster, X


def test_trained_lightgbm_with_categories_and_missing_values():
    booster, X = _trained_lightgbm()
    forest = silvanforge.load(booster)
    assert forest.has_categorical
    predictor = silvanforge.compile(forest, representation="code", n_jobs=1)
    check(predictor, forest, X)
    assert_parity(predictor.predict(X), booster.predict(X), "lightgbm")
    # A row's walks share its category operand: declared once for the row's 20 trees,
    # not once per tree (the shift and compares were ~12 instructions a tree a row).
    row_by_row = silvanforge.compile(forest, representation="code", schedule="unroll(tree)",
                                     n_jobs=1)
    lir = row_by_row.dump("lir")
    assert len(re.findall(r"^\s*i64 \w+_c5_bit = ", lir, re.MULTILINE)) == 1
    assert lir.count("_c5_bit & ") > 20  # the tests that read it
    check(row_by_row, forest, X)


def test_trained_xgboost_at_float32():
    xgb = pytest.importorskip("xgboost")
    rng = np.random.default_rng(1)
    X = with_nans(rng.normal(size=(500, 8)), 0.05)
    y = (X[:, 0] + np.nan_to_num(X[:, 1]) > 0).astype(float)
    booster = xgb.train({"objective": "binary:logistic", "max_depth": 6, "nthread": 1},
                        xgb.DMatrix(X, y), num_boost_round=15)
    forest = silvanforge.load(booster)
    predictor = silvanforge.compile(forest, representation="code", precision="float32",
                                    n_jobs=1)
    check(predictor, forest, X)
    assert_parity(predictor.predict(X), booster.predict(xgb.DMatrix(X)), "xgboost")


def _expanded(stmts: list) -> list:
    """``stmts`` with every BranchTree replaced by its expansion, at any depth."""
    out: list = []
    for s in stmts:
        if isinstance(s, ir.BranchTree):
            out += s.expand()
            continue
        if isinstance(s, (ir.For, ir.While)):
            s = dataclasses.replace(s, body=_expanded(s.body))
        elif isinstance(s, ir.If):
            s = dataclasses.replace(s, then=_expanded(s.then), orelse=_expanded(s.orelse))
        elif isinstance(s, ir.Switch):
            s = dataclasses.replace(s, cases=[_expanded(c) for c in s.cases])
        out.append(s)
    return out


@settings(max_examples=25, deadline=None)
@given(forest=forests(), which=st.sampled_from(sorted(CODE_SCHEDULES)),
       vector_bits=st.sampled_from([0, 256, 512]))
def test_branch_trees_render_as_their_expansion(forest, which, vector_bits):
    """The CPU renderer's own rendering of a tree as code (from its numbers) is, to the
    character, the rendering of the If/Select statements it stands for, outlining
    included: every operator, missing rule, category rule and leaf kind, both
    precisions."""
    from silvanforge.backends.cpu.llvm import render_module
    from silvanforge.plan import make_plan
    from silvanforge.representations.pair import lower_schedules
    from silvanforge.runtime.base import build_representation

    precision = "float32" if forest.input_dtype == np.float32 else "float64"
    plan = make_plan(forest, representation="code", schedule=CODE_SCHEDULES[which],
                     precision=precision, n_jobs=1)
    _, kernel = lower_schedules(forest, plan.schedules, build_representation(plan),
                                plan.vector_lanes)[0]
    trees = [s for s in walk_stmts(kernel.body) if isinstance(s, ir.BranchTree)]
    assert trees and not any(isinstance(s, ir.If) and isinstance(s.cond, ir.Cmp)
                             and isinstance(s.cond.b, ir.Load)
                             and s.cond.b.buffer.name.endswith("threshold")
                             for s in walk_stmts(kernel.body))  # no tree left expanded
    expanded = ir.Kernel(kernel.name, kernel.params, _expanded(kernel.body))
    assert str(render_module(kernel, vector_bits=vector_bits)) == \
        str(render_module(expanded, vector_bits=vector_bits))


def test_most_nodes_render_from_numbers():
    """On a trained LightGBM model with categories and missing values, numeric nodes are
    compares kept as numbers; only categorical ones are expressions."""
    forest = silvanforge.load(_trained_lightgbm()[0])
    node = ir.Var("node", ir.I64)
    code = REGISTRY["code"](forest)
    trees = [code.walk_code(ir.i64(t), node, lambda f: ir.Load(
        ir.Buffer("x", ir.F64), f))[-1] for t in range(forest.n_trees)]
    compares = sum(op != "" for t in trees for op in t.op)
    categorical = int(np.sum((forest.split_op == OP_CAT) & (forest.left >= 0)))
    assert categorical > 0
    assert compares == forest.n_internal - categorical
    assert sum(len(t.tests) for t in trees) == categorical


def test_code_is_registered_and_keeps_the_sparse_tables():
    forest = _big_forest(n_trees=2)
    code, sparse = REGISTRY["code"](forest), REGISTRY["sparse"](forest)
    node = ir.Var("node", ir.I64)
    assert sparse.walk_code(ir.i64(0), node, lambda f: f) is None  # a table layout
    assert code.buffers.keys() == sparse.buffers.keys()
    tree = code.walk_code(ir.i64(1), node, lambda f: ir.Const(0.0, ir.F64))[-1]
    assert isinstance(tree, ir.BranchTree) and isinstance(tree.expand()[0], ir.If)


def test_gpu_renderers_render_code_walks_as_branches(opencl, nvrtc):  # noqa: F811
    """Exact on PoCL; the CUDA source of the same program compiles to PTX."""
    forest = _big_forest(n_trees=5)
    X = with_nans(np.random.default_rng(4).normal(size=(100, 5)), 0.1)
    schedule = ("tile(batch, b0, b1, 64)\nreorder(b0, b1, tree)\nunroll(tree)\n"
                "gpuDimension(b0, grid.x)\ngpuDimension(b1, block.x)")
    predictor = silvanforge.compile(forest, target="opencl", schedule=schedule,
                                    representation="code")
    np.testing.assert_allclose(predictor.predict(X), reference.predict(forest, X),
                               rtol=1e-12, atol=1e-12)
    assert ".entry" in nvrtc(CUDARenderer().render(predictor.program))
    # The GPU default leaves tree indices variable: each walk jumps to its tree's code.
    dispatched = silvanforge.compile(forest, target="opencl", representation="code")
    np.testing.assert_allclose(dispatched.predict(X), reference.predict(forest, X),
                               rtol=1e-12, atol=1e-12)
    source = CUDARenderer().render(dispatched.program)
    assert "switch (" in source and ".entry" in nvrtc(source)
