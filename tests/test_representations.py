"""Representations (array, sparse, reorg) and the LIR interpreter that checks them.

Every representation, walked by a small hand-built LIR kernel run through the
interpreter, must reach the leaves the reference reaches and add up to its sums, for
random forests using every operator, missing rule, category rule, vector and linear
leaves, at both precisions, on inputs full of NaNs, thresholds and odd categories.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import silvanforge
from silvanforge import reference
from silvanforge.errors import SilvanForgeError, UnsupportedModelError
from silvanforge.lir import ir
from silvanforge.lir.interpret import run
from silvanforge.model.builder import Tree, build_forest
from silvanforge.model.forest import (MISSING_NAN, MISSING_NONE, MISSING_ZERO, OP_CAT,
                                      OP_EQ, OP_LE, OP_LT, ZERO_THRESHOLD)
from silvanforge.model.inputs import as_matrix
from silvanforge.representations import REGISTRY
from silvanforge.representations.array import MAX_SLOTS, WINDOW_PAD
from silvanforge.representations.decision import round_down_f32, round_up_f32
from silvanforge.representations.tables import _LIR_TYPES
from silvanforge.representations.tiled import TILED
from silvanforge.hir import MAX_TILE_SIZE, tile_uniform

# Values thresholds and inputs share, so that rows hit thresholds exactly, plus values
# float32 cannot hold (1/3, 0.1, 1e300) and ones near ZERO_THRESHOLD.
VALUES = np.array([-2.5, -1.0, -0.7, -0.0, 0.0, 1e-36, ZERO_THRESHOLD, 0.1, 1 / 3, 0.5,
                   1.0, 2.0, 3.0, 7.0, 31.0, 32.0, 40.0, 1e300])
ODD_INPUTS = np.array([np.nan, np.inf, -np.inf, -1e-36, 33.0, 1e9, -3.0, 0.3])
# Small sets near word boundaries (and near 64, where sets stop fitting a float64
# threshold's bits); 0 often, so that -0.7 tells the category rules apart.
CATEGORIES = np.array([0, 1, 2, 5, 31, 32, 40, 63, 64, 100])


# ---- a walk kernel ------------------------------------------------------------------

def walk_kernel(rep) -> ir.Kernel:
    """for row, for tree: node = root; while not leaf: node = step(node);
    out[row, tree_output + k] += leaf_value; vals[row, tree, k] = leaf_value."""
    forest = rep.forest
    in_type = ir.F32 if forest.input_dtype == np.float32 else ir.F64
    x = ir.Buffer("x", in_type, readonly=True)
    tree_output = ir.Buffer("tree_output", ir.I64, readonly=True)
    out, vals = ir.Buffer("out", ir.F64), ir.Buffer("vals", ir.F64)
    n_rows = ir.Var("n_rows", ir.I64)
    row, tree, node = ir.Var("row", ir.I64), ir.Var("tree", ir.I64), ir.Var("node", ir.I64)

    def add(a: ir.Expr, b: ir.Expr) -> ir.Expr:
        return ir.BinOp("add", a, b)

    def mul(a: ir.Expr, n: int) -> ir.Expr:
        return ir.BinOp("mul", a, ir.i64(n))

    def feature_value(f: ir.Expr) -> ir.Expr:
        return ir.Load(x, add(mul(row, forest.n_features), f))

    per_tree: list[ir.Stmt] = [
        ir.Declare(node, rep.root(tree)),
        ir.While(ir.Not(rep.is_leaf(tree, node)), [
            ir.Assign(node, rep.step(tree, node, feature_value))])]
    for k in range(forest.leaf_width):
        value = rep.leaf_value(tree, node, k, feature_value)
        at = add(add(mul(row, forest.n_outputs), ir.Load(tree_output, tree)), ir.i64(k))
        per_tree += [
            ir.Store(out, at, add(ir.Load(out, at), value)),
            ir.Store(vals, add(mul(add(mul(row, forest.n_trees), tree), forest.leaf_width),
                               ir.i64(k)), value)]
    body = rep.cache_trees(ir.i64(0), ir.i64(forest.n_trees)) + [
        ir.For(row, ir.i64(0), n_rows, ir.i64(1), [
            ir.For(tree, ir.i64(0), ir.i64(forest.n_trees), ir.i64(1), per_tree)])]
    return ir.Kernel("walk", [*rep.params, x, tree_output, out, vals, n_rows], body)


def run_walk(rep, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    f = rep.forest
    out = np.zeros((len(rows), f.n_outputs))
    vals = np.zeros((len(rows), f.n_trees, f.leaf_width))
    run(walk_kernel(rep), {**rep.buffers, "x": rows.astype(f.input_dtype),
                           "tree_output": f.tree_output.astype(np.int64),
                           "out": out, "vals": vals, "n_rows": len(rows)})
    return out, vals


def check_against_reference(rep, rows: np.ndarray) -> None:
    f = rep.forest
    X = as_matrix(rows, f)
    out, vals = run_walk(rep, rows)
    expected_vals = reference.leaf_values(f, X, reference.global_leaves(f, X))
    np.testing.assert_array_equal(vals, expected_vals, err_msg=f"{rep.name} leaf values")
    np.testing.assert_allclose(out, reference.tree_sums(f, X), rtol=1e-12, atol=1e-12)


# ---- random forests -----------------------------------------------------------------

def random_tree(rng: np.random.Generator, n_features: int, ops: list[int],
                rules: list[int], width: int, linear: bool, output: int) -> Tree:
    max_depth = int(rng.integers(0, 11))
    left, right, depth = [-1], [-1], [0]
    for _ in range(int(rng.integers(0, 9)) if max_depth else 0):
        open_ = [i for i in range(len(left)) if left[i] < 0 and depth[i] < max_depth]
        if not open_:
            break
        # Half the time split the deepest leaf: deep, sparse trees.
        i = max(open_, key=lambda j: depth[j]) if rng.random() < 0.5 else rng.choice(open_)
        left[i], right[i] = len(left), len(left) + 1
        left += [-1, -1]
        right += [-1, -1]
        depth += [depth[i] + 1] * 2
    return tree_of_shape(rng, left, right, n_features, ops, rules, width, linear, output)


def tree_of_shape(rng: np.random.Generator, left: list[int], right: list[int],
                  n_features: int, ops: list[int], rules: list[int], width: int,
                  linear: bool, output: int, minus_inf: float = 0.0,
                  categories: np.ndarray = CATEGORIES) -> Tree:
    """Random splits and leaves for the tree shape ``left``/``right``; a ``minus_inf``
    fraction of the thresholds is -inf; category sets drawn from ``categories``."""
    n = len(left)
    op = rng.choice(ops, n)
    threshold = np.where(rng.random(n) < 0.7, rng.choice(VALUES, n), rng.normal(0, 3, n))
    if minus_inf:  # else the random stream stays that of the trees before it
        threshold[rng.random(n) < minus_inf] = -np.inf
    sets = {i: rng.choice(categories, int(rng.integers(0, 5)), replace=False).tolist()
            for i in range(n) if op[i] == OP_CAT and left[i] >= 0}
    lin = None
    if linear:
        lin = {i: (float(rng.normal()), rng.integers(0, n_features, k).tolist(),
                   rng.normal(size=k).tolist())
               for i in range(n) if left[i] < 0 and (k := int(rng.integers(0, 4)))}
    return Tree(left=left, right=right, feature=rng.integers(0, n_features, n),
                threshold=threshold, leaf_value=rng.normal(size=(n, width)),
                default_left=rng.random(n) < 0.5, split_op=np.where(op == OP_CAT, OP_LT, op),
                missing=rng.choice(rules, n), categories=sets, linear=lin,
                output=output)


@st.composite
def forests(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n_features = draw(st.integers(1, 4))
    n_outputs = draw(st.integers(1, 3))
    vector = n_outputs > 1 and draw(st.booleans())
    linear = not vector and draw(st.booleans())
    ops = draw(st.lists(st.sampled_from([OP_LT, OP_LE, OP_EQ, OP_CAT]), min_size=1,
                        max_size=4, unique=True))
    rules = draw(st.lists(st.sampled_from([MISSING_NAN, MISSING_ZERO, MISSING_NONE]),
                          min_size=1, max_size=3, unique=True))
    width = n_outputs if vector else 1
    trees = [random_tree(rng, n_features, ops, rules, width, linear,
                         0 if vector else int(rng.integers(0, n_outputs)))
             for _ in range(draw(st.integers(1, 4)))]
    return build_forest(
        trees, n_features=n_features, n_outputs=n_outputs, linear_leaves=linear,
        input_dtype=draw(st.sampled_from([np.float32, np.float64])),
        category_rule=draw(st.sampled_from(["truncate", "nonnegative", "exact"])),
        negative_category=draw(st.sampled_from(["not_in_set", "missing"])),
        beyond_category=draw(st.sampled_from(["not_in_set", "missing"])))


def random_rows(forest, seed: int, n: int = 10) -> np.ndarray:
    """Rows of thresholds, their float neighbours, categories and NaNs."""
    rng = np.random.default_rng(seed)
    t = forest.threshold
    t32 = t.astype(np.float32)
    pool = np.concatenate([VALUES, ODD_INPUTS, t, np.nextafter(t, np.inf),
                           np.nextafter(t, -np.inf), t32, np.nextafter(t32, np.float32(1)),
                           np.nextafter(t32, np.float32(-1)), rng.normal(0, 3, 8)])
    rows = rng.choice(pool, (n, forest.n_features))
    rows[rng.random(rows.shape) < 0.15] = np.nan
    return rows


@pytest.mark.parametrize("name", sorted(REGISTRY))
@settings(max_examples=50)
@given(forest=forests(), seed=st.integers(0, 2**32 - 1))
def test_walk_matches_reference(name, forest, seed):
    rows = random_rows(forest, seed)
    for precision in ("float64", "float32"):
        if precision == "float32" and forest.input_dtype != np.float32:
            with pytest.raises(SilvanForgeError, match="float32"):
                REGISTRY[name](forest, precision)
            continue
        check_against_reference(REGISTRY[name](forest, precision), rows)


@pytest.mark.parametrize("name", sorted(REGISTRY))
@settings(max_examples=25)
@given(forest=forests())
def test_buffer_types_are_known_before_the_tables_fill(name, forest):
    # A kernel is lowered from the types alone while a layout may fill its tables
    # later (array, reorg: while the kernels build): what it promised is what it makes.
    for precision in ("float64", "float32")[:1 + (forest.input_dtype == np.float32)]:
        rep = REGISTRY[name](forest, precision)
        promised = [(p.name, p.dtype) for p in rep.params]
        if name in ("array", "reorg"):
            assert rep._later is not None  # not filled by the constructor
        made = [(n, _LIR_TYPES[a.dtype]) for n, a in rep.buffers.items()]
        assert made == promised


def test_a_fill_that_breaks_its_promise_is_caught():
    rep = REGISTRY["array"](small_forest())
    rep._types["model_leaf_value"] = np.dtype(np.float32)  # the fill makes float64
    with pytest.raises(RuntimeError, match="promised"):
        rep.buffers


# ---- layouts ------------------------------------------------------------------------

def small_forest(**model):
    """Two trees: a chain going right (depth 3) and a balanced tree of depth 2."""
    chain = Tree(left=[1, -1, 3, -1, 5, -1, -1], right=[2, -1, 4, -1, 6, -1, -1],
                 feature=[0, 0, 1, 0, 0, 0, 0], threshold=[0.5, 0, 1.5, 0, 2.5, 0, 0],
                 leaf_value=[0, 1, 0, 2, 0, 3, 4])
    balanced = Tree(left=[1, 3, 5, -1, -1, -1, -1], right=[2, 4, 6, -1, -1, -1, -1],
                    feature=[1, 0, 0, 0, 0, 0, 0], threshold=[0.0, -1, 1, 0, 0, 0, 0],
                    leaf_value=[0, 0, 0, 10, 20, 30, 40])
    return build_forest([chain, balanced], n_features=2, n_outputs=1, **model)


def test_array_layout_is_level_order_per_tree_with_leaves_pushed_down():
    rep = REGISTRY["array"](small_forest())
    b = rep.buffers
    np.testing.assert_array_equal(b["model_tree_start"], [0, 15])  # 2^4 - 1 slots
    assert len(b["model_feature"]) == 15 + 7 + WINDOW_PAD  # a vector walk's windows
    # chain: root 0 → right child at slot 2 → its right at 6 → its right at 14
    np.testing.assert_array_equal(b["model_threshold"][[0, 2, 6]], [0.5, 1.5, 2.5])
    # The leaves of depth 1 and 2 (slots 1 and 5) fill the bottom level below them.
    np.testing.assert_array_equal(b["model_leaf_value"][7:15], [1, 1, 1, 1, 2, 2, 3, 4])
    assert not b["model_flags"][[1, 5]].any()  # dummy splits in their own slots
    np.testing.assert_array_equal(b["model_leaf_value"][15 + 3:15 + 7], [10, 20, 30, 40])
    np.testing.assert_array_equal(b["model_tree_depth"], [3, 2])


def test_reorg_stores_slot_s_of_tree_t_at_s_times_n_trees_plus_t():
    forest = small_forest()
    reorg = REGISTRY["reorg"](forest).buffers
    array = REGISTRY["array"](forest).buffers
    # Tree 0 has the forest's depth: its slots are the array layout's, interleaved.
    for s in range(15):
        for field in ("model_threshold", "model_feature", "model_flags", "model_leaf_value"):
            assert reorg[field][s * 2] == array[field][s], (field, s)
    assert len(reorg["model_feature"]) == 2 * 15  # both trees padded to depth 3
    # Tree 1 (depth 2) has its leaves pushed one level further, to level 3.
    np.testing.assert_array_equal(reorg["model_leaf_value"][7 * 2 + 1::2],
                                  [10, 10, 20, 20, 30, 30, 40, 40])


def test_sparse_siblings_are_adjacent_and_leaves_apart():
    forest = small_forest()
    rep = REGISTRY["sparse"](forest)
    b = rep.buffers
    n = rep.n_internal_slots
    # chain: 3 splits + 2 hops (a leaf beside an internal sibling), balanced: 3 splits;
    # leaves: 2 per hop, the chain's last pair, the balanced tree's 4
    assert n == 8 and len(b["model_leaf_value"]) == 10
    child = b["model_child"]
    for slot in range(n):
        left, right = child[slot], child[slot] + 1
        assert (left >= n) == (right >= n)   # siblings in the same table, adjacent
        assert left > slot                    # breadth first: children after parents
    np.testing.assert_array_equal(b["model_root"], [0, 5])
    # a hop copies its parent's split and sends both ways to one leaf
    hop = child[0]  # left child of the chain's root is the leaf 1.0
    assert b["model_threshold"][hop] == 0.5
    np.testing.assert_array_equal(b["model_leaf_value"][child[hop] - n:][:2], [1, 1])


def test_sparse_single_leaf_trees():
    leaf = Tree(left=[-1], right=[-1], feature=[0], threshold=[0], leaf_value=[2.5])
    forest = build_forest([leaf, leaf], n_features=1, n_outputs=1)
    for name in REGISTRY:
        out, _ = run_walk(REGISTRY[name](forest), np.zeros((2, 1)))
        np.testing.assert_array_equal(out, [[5.0], [5.0]])


def test_deep_trees_are_refused_by_level_order_layouts():
    depth = 30  # a chain: 61 nodes, but 2^31 - 1 padded slots
    left = [-1] * (2 * depth + 1)
    right = [-1] * (2 * depth + 1)
    for i in range(depth):
        node = 2 * i
        left[node], right[node] = node + 1, node + 2
    tree = Tree(left=left, right=right, feature=0, threshold=np.arange(2 * depth + 1.0),
                leaf_value=np.arange(2 * depth + 1.0))
    forest = build_forest([tree], n_features=1, n_outputs=1)
    assert 2 ** (depth + 1) > MAX_SLOTS
    for name in ("array", "reorg"):
        with pytest.raises(UnsupportedModelError, match="sparse"):
            REGISTRY[name](forest)
    rows = np.array([[-1.0], [5.5], [100.0], [np.nan]])
    check_against_reference(REGISTRY["sparse"](forest), rows)


# ---- the decision -------------------------------------------------------------------

def buffers_read(e: ir.Expr) -> set[str]:
    """Names of the buffers expression ``e`` loads from."""
    names = {e.buffer.name} if isinstance(e, ir.Load) else set()
    for child in vars(e).values():
        if isinstance(child, ir.Expr):
            names |= buffers_read(child)
    return names


def row_value(f: ir.Expr) -> ir.Expr:
    return ir.Load(ir.Buffer("x", ir.F32), f)


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_decision_is_specialised_to_what_the_forest_uses(name):
    rep = REGISTRY[name](small_forest())
    e = rep.go_left(ir.i64(0), ir.i64(0), row_value)
    # Every node sends NaN right: x < t, which fails for a NaN — no NaN test, no flags,
    # no categories.
    assert not small_forest().default_left.any()
    assert isinstance(e, ir.Cmp) and e.op == "lt"
    assert buffers_read(e) == {"x", "model_feature", "model_threshold"}
    assert "model_cat_bitset" not in rep.buffers


def test_mixed_forest_reads_flags():
    forest = small_forest().replace(
        missing=np.array([MISSING_ZERO] * 7 + [MISSING_NONE] * 7, np.uint8))
    rep = REGISTRY["sparse"](forest)
    e = rep.go_left(ir.i64(0), ir.i64(0), row_value)
    assert "model_flags" in buffers_read(e) and "model_flags" in rep.buffers


def category_forest(sets: list[list[int]], input_dtype=np.float32):
    """One tree per set: a categorical split on feature 0 over that set."""
    trees = [Tree(left=[1, -1, -1], right=[2, -1, -1], feature=[0, 0, 0],
                  threshold=[0.0, 0, 0], leaf_value=[0, 1, 2], split_op=[OP_CAT, 0, 0],
                  categories={0: s}) for s in sets]
    return build_forest(trees, n_features=1, n_outputs=1, input_dtype=input_dtype)


@pytest.mark.parametrize("sets, precision, masked", [
    ([[0, 31], [5]], "float32", True), ([[0, 32]], "float32", False),
    ([[0, 32, 63]], "float64", True), ([[64], [1]], "float64", False)])
def test_category_sets_live_in_the_threshold_when_they_fit(sets, precision, masked):
    forest = category_forest(sets)
    rep = REGISTRY["sparse"](forest, precision)
    assert rep.spec.category_mask is masked
    assert ("model_cat_bitset" in rep.buffers) is not masked
    e = rep.go_left(ir.i64(0), ir.i64(0), row_value)
    assert buffers_read(e) == {"x", "model_feature"} | ({"model_threshold"} if masked else
                                                        {"model_cat_offset", "model_cat_words",
                                                         "model_cat_bitset"})
    rows = np.array([[c] for c in [-1, 0, 0.5, 5, 31, 31.9, 32, 63, 64, 200, np.nan]])
    check_against_reference(rep, rows)


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_a_mask_that_reads_as_a_signalling_nan_keeps_its_bits(name):
    # Categories 23-31 set and 22 clear: the float32 exponent is all ones and the quiet
    # bit clear. A conversion through float64 anywhere would set bit 22.
    sets = [list(range(23, 32)), list(range(23, 31)) + [0]]
    forest = category_forest(sets)
    rep = REGISTRY[name](forest, "float32")
    assert rep.spec.category_mask
    rows = np.array([[c] for c in range(-1, 34)] + [[np.nan]], dtype=np.float32)
    check_against_reference(rep, rows)
    compiled = silvanforge.compile(forest, representation=name, precision="float32")
    np.testing.assert_array_equal(compiled.predict(rows, output="margin"),
                                  reference.predict(forest, rows, output="margin"))


@settings(max_examples=300)
@given(t=st.floats(allow_nan=False, width=64) | st.sampled_from(list(VALUES)),
       x=st.floats(width=32), step=st.integers(-2, 2))
def test_float32_thresholds_keep_comparisons_exact(t, x, step):
    # x near t matters most: move it a few float32 steps from t's float32 rounding
    if step and np.isfinite(np.float32(t)):
        x = np.float32(t)
        for _ in range(abs(step)):
            x = np.nextafter(x, np.float32(np.inf if step > 0 else -np.inf))
    x32 = np.float32(x)
    t_arr = np.array([t])
    down, up = round_down_f32(t_arr)[0], round_up_f32(t_arr)[0]
    assert down.dtype == up.dtype == np.float32
    assert (np.float64(x32) <= t) == (x32 <= down)
    assert (np.float64(x32) < t) == (x32 < up)


def test_float32_equality_thresholds():
    forest = build_forest([Tree(left=[1, -1, -1], right=[2, -1, -1], feature=0,
                                threshold=[1 / 3, 0, 0], leaf_value=[0, 1, 2],
                                split_op=OP_EQ)], n_features=1, n_outputs=1)
    rep = REGISTRY["array"](forest, "float32")
    assert np.isnan(rep.buffers["model_threshold"][0])  # 1/3 is no float32: never equal
    check_against_reference(rep, np.array([[np.float32(1 / 3)], [1 / 3], [0.0]]))
    exact = forest.replace(threshold=np.array([0.25, 0, 0]))
    assert REGISTRY["array"](exact, "float32").buffers["model_threshold"][0] == 0.25


def test_unknown_precision_is_refused():
    with pytest.raises(SilvanForgeError, match="precision"):
        REGISTRY["array"](small_forest(), "float16")


# ---- the interpreter ----------------------------------------------------------------

def evaluate(expr: ir.Expr):
    out = ir.Buffer("out", expr.dtype)
    result = np.zeros(1, dtype={ir.BOOL: np.bool_, ir.I8: np.int8, ir.I32: np.int32,
                                ir.I64: np.int64, ir.F32: np.float32,
                                ir.F64: np.float64}[expr.dtype])
    run(ir.Kernel("k", [out], [ir.Store(out, ir.i64(0), expr)]), {"out": result})
    return result[0]


@pytest.mark.parametrize("expr, expected", [
    (ir.BinOp("lshr", ir.Const(-8, ir.I32), ir.Const(1, ir.I32)), 0x7FFFFFFC),
    (ir.BinOp("ashr", ir.Const(-8, ir.I32), ir.Const(1, ir.I32)), -4),
    (ir.BinOp("add", ir.Const(2**31 - 1, ir.I32), ir.Const(1, ir.I32)), -2**31),
    (ir.BinOp("div", ir.Const(-7, ir.I64), ir.Const(2, ir.I64)), -3),
    (ir.BinOp("rem", ir.Const(-7, ir.I64), ir.Const(2, ir.I64)), -1),
    (ir.Cast(ir.Const(-2.7, ir.F64), ir.I64), -2),
    (ir.Cast(ir.Const(300, ir.I32), ir.I8), 44),
    (ir.Cast(ir.Const(0.1, ir.F64), ir.F32), np.float32(0.1)),
    (ir.Cmp("ne", ir.Const(float("nan"), ir.F64), ir.Const(1.0, ir.F64)), False),
    (ir.Cmp("lt", ir.Const(float("nan"), ir.F32), ir.Const(1.0, ir.F32)), False),
    (ir.BinOp("add", ir.Const(16777216.0, ir.F32), ir.Const(1.0, ir.F32)), 16777216.0),
    (ir.BinOp("min", ir.Const(float("nan"), ir.F64), ir.Const(1.0, ir.F64)), 1.0),
    (ir.Math("trunc", ir.Const(-0.7, ir.F64)), 0.0),
    (ir.Bitcast(ir.Const(-2.0, ir.F64), ir.I64), -0x4000000000000000),
    (ir.Bitcast(ir.Const(1, ir.I32), ir.F32), np.float32(1.4e-45)),
])
def test_interpreter_semantics(expr, expected):
    assert evaluate(expr) == expected


@pytest.mark.parametrize("stmt, error", [
    (ir.Store(ir.Buffer("b", ir.I64), ir.i64(3), ir.i64(0)), IndexError),
    (ir.Store(ir.Buffer("b", ir.I64), ir.i64(-1), ir.i64(0)), IndexError),
    (ir.Store(ir.Buffer("b", ir.I64, readonly=True), ir.i64(0), ir.i64(0)), PermissionError),
    (ir.Store(ir.Buffer("b", ir.I64), ir.i64(0), ir.Cast(ir.Const(float("nan"), ir.F64),
                                                         ir.I64)), ValueError),
    (ir.Store(ir.Buffer("b", ir.I64), ir.i64(0), ir.Const(1.0, ir.F64)), TypeError),
])
def test_interpreter_refuses_undefined_behaviour(stmt, error):
    buffer = stmt.buffer
    with pytest.raises(error):
        run(ir.Kernel("k", [buffer], [stmt]), {"b": np.zeros(3, np.int64)})


def test_interpreter_loops_scopes_and_atomics():
    acc = ir.Buffer("acc", ir.F64)
    i, j = ir.Var("i", ir.I64), ir.Var("j", ir.I64)
    total = ir.Var("total", ir.I64)
    local = ir.Buffer("tmp", ir.I64, size=2)
    body = [
        ir.Declare(total, ir.i64(0)),
        ir.LocalArray(local),
        ir.For(i, ir.i64(0), ir.i64(4), ir.i64(1), parallel=True, body=[
            ir.AtomicAdd(acc, ir.i64(0), ir.Cast(i, ir.F64)),
            ir.Declare(j, i),
            ir.While(ir.Cmp("gt", j, ir.i64(0)), [
                ir.Assign(total, ir.BinOp("add", total, ir.i64(1))),
                ir.Assign(j, ir.BinOp("sub", j, ir.i64(1)))])]),
        ir.Store(local, ir.i64(1), total),
        ir.If(ir.Cmp("eq", ir.Load(local, ir.i64(1)), ir.i64(6)),
              [ir.Store(acc, ir.i64(1), ir.Const(1.0, ir.F64))],
              [ir.Store(acc, ir.i64(1), ir.Const(-1.0, ir.F64))]),
        ir.Prefetch(acc, ir.i64(10**9)),
    ]
    buf = np.zeros(2)
    run(ir.Kernel("k", [acc], body), {"acc": buf})
    np.testing.assert_array_equal(buf, [6.0, 1.0])


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_leaf_tables_are_float32_only_when_lossless(name):
    def forest(leaf: float):
        tree = Tree(left=[1, -1, -1], right=[2, -1, -1], feature=[0, 0, 0],
                    threshold=[0.5, 0, 0], leaf_value=[0.0, leaf, -2.0])
        return build_forest([tree], n_features=1, n_outputs=1)

    exact, inexact = forest(0.375), forest(0.1)
    assert REGISTRY[name](exact, "float32").buffers["model_leaf_value"].dtype == np.float32
    assert REGISTRY[name](inexact, "float32").buffers["model_leaf_value"].dtype == np.float64
    assert REGISTRY[name](exact, "float64").buffers["model_leaf_value"].dtype == np.float64


# ---- tiled layouts ------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(TILED))
@pytest.mark.parametrize("tile_size", range(1, MAX_TILE_SIZE + 1))
@settings(max_examples=15)
@given(forest=forests(), seed=st.integers(0, 2**32 - 1))
def test_tiled_walk_matches_reference(name, tile_size, forest, seed):
    rows = random_rows(forest, seed)
    plan = tile_uniform(forest, tile_size)
    precision = "float32" if forest.input_dtype == np.float32 else "float64"
    check_against_reference(TILED[name](forest, precision, plan), rows)


@pytest.mark.parametrize("name", sorted(REGISTRY))
@pytest.mark.parametrize("default_left", [False, True])
def test_category_only_forests_keep_each_nodes_missing_rule(name, default_left):
    """Only categorical splits, NaN and 'none' rules mixed (one spec for both): under
    'none' a NaN is category 0, in the set here; under 'nan' it is missing and takes
    the default direction, whatever category 0 says."""
    tree = Tree(left=[1, -1, 3, -1, -1], right=[2, -1, 4, -1, -1], feature=[0, 0, 1, 0, 0],
                threshold=[0.0] * 5, leaf_value=[0.0, 1.0, 0.0, 2.0, 3.0],
                default_left=default_left, missing=[MISSING_NONE, 0, MISSING_NAN, 0, 0],
                categories={0: [0, 5], 2: [0, 7]})
    forest = build_forest([tree], n_features=2, n_outputs=1)
    rows = np.array([[np.nan, np.nan], [np.nan, 0.0], [np.nan, 7.0], [3.0, np.nan],
                     [3.0, 0.0], [3.0, 1.0], [-1.0, np.nan], [5.0, -2.0]])
    check_against_reference(REGISTRY[name](forest), rows)
    compiled = silvanforge.compile(forest, representation=name, n_jobs=1)
    np.testing.assert_array_equal(compiled.predict(rows, output="margin"),
                                  reference.predict(forest, rows, output="margin"))
