"""The Forest, its builder and the reference evaluator, independent of any library.

The reference is checked against a second evaluator written here the plain way (one row,
one node at a time, straight from the semantics in forest.py's docstring), on random
forests of every shape hypothesis can find.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import silvanforge
from silvanforge import reference
from silvanforge.errors import InputError, ModelFormatError, SilvanForgeError
from silvanforge.model import (MISSING_NAN, MISSING_NONE, MISSING_ZERO, OP_CAT, OP_EQ,
                               OP_LE, OP_LT, Tree, build_forest)
from silvanforge.model.builder import Trees
from silvanforge.model.forest import ZERO_THRESHOLD
from util import probe_rows


def stump(feature=0, threshold=0.5, values=(1.0, 2.0), **kw) -> Tree:
    return Tree(left=[1, -1, -1], right=[2, -1, -1], feature=[feature, 0, 0],
                threshold=[threshold, 0, 0], leaf_value=[0.0, *values], **kw)


def forest_of(*trees: Tree, n_features: int = 2, n_outputs: int = 1, **kw):
    return build_forest(list(trees), n_features=n_features, n_outputs=n_outputs, **kw)


# ---- validation ----------------------------------------------------------------------

BAD_TREES = {
    "one child": (dict(left=[1, -1], right=[-1, -1]), "one child"),
    "child out of range": (dict(left=[1, -1, -1], right=[7, -1, -1]), "out of range"),
    "root is a child": (dict(left=[1, 0, -1], right=[2, 2, -1]), "cycle"),
    "two parents": (dict(left=[1, 2, -1], right=[2, -1, -1]), "one child"),
    "shared children": (dict(left=[1, 3, 3, -1, -1], right=[2, 4, 4, -1, -1]),
                        "more than one parent"),
}


@pytest.mark.parametrize("name", BAD_TREES)
def test_malformed_structure_names_tree_and_node(name):
    arrays, message = BAD_TREES[name]
    n = len(arrays["left"])
    good = stump()
    bad = Tree(feature=[0] * n, threshold=[0.0] * n, leaf_value=[0.0] * n, **arrays)
    with pytest.raises(ModelFormatError, match=f"tree 1, node \\d+: .*{message}"):
        forest_of(good, bad)


def test_unreachable_cycle_is_rejected():
    # Nodes 3 and 4 point at each other: each has one parent, none reachable from 0.
    bad = Tree(left=[1, -1, -1, 4, 3], right=[2, -1, -1, 4, 3], feature=[0] * 5,
               threshold=[0.0] * 5, leaf_value=[0.0] * 5)
    with pytest.raises(ModelFormatError, match="tree 0, node 3"):
        forest_of(bad)


@pytest.mark.parametrize("change, message", [
    (dict(feature=[5, 0, 0]), "feature index out of range"),
    (dict(feature=[-1, 0, 0]), "feature index out of range"),
    (dict(threshold=[np.nan, 0, 0]), "threshold is NaN"),
    (dict(leaf_value=[0, np.inf, 1]), "leaf value is not finite"),
    (dict(left=[1.5, -1, -1]), "whole numbers"),
    (dict(left=[2**40, -1, -1]), "out of range"),
    (dict(left=["a", -1, -1]), "integers"),
    (dict(threshold=[0.5, 0]), "2 thresholds for 3 nodes"),
    (dict(categories={0: [-1]}), "out of range"),
    (dict(categories={0: [2**24]}), "out of range"),
    (dict(categories={7: [1]}), "node 7"),
    (dict(split_op=[9, 0, 0]), "unknown split operator"),
])
def test_bad_node_data(change, message):
    fields = dict(left=[1, -1, -1], right=[2, -1, -1], feature=[0, 0, 0],
                  threshold=[0.5, 0, 0], leaf_value=[0.0, 1.0, 2.0])
    fields.update(change)
    with pytest.raises(ModelFormatError, match=message):
        forest_of(Tree(**fields))


@pytest.mark.parametrize("kw, message", [
    (dict(base_score=[1.0, 2.0]), "base scores"),
    (dict(base_score=np.nan), "finite"),
    (dict(n_outputs=0), "at least one output"),
    (dict(post_transform="cube"), "post-transform"),
    (dict(input_dtype=np.int32), "float32 or float64"),
    (dict(feature_names=("a",)), "feature names"),
])
def test_bad_model_fields(kw, message):
    with pytest.raises(ModelFormatError, match=message):
        forest_of(stump(), **kw)


def test_trees_in_columns_build_the_forest_of_their_list():
    """``Trees`` (a forest's columns) and the list of its ``Tree`` give one Forest;
    columns that disagree with their sizes, or Forest-level faults, are refused."""
    a, b = stump(0, 0.5, (1.0, 2.0), default_left=[True, False, False]), \
        stump(1, -0.25, (3.0, -4.0), output=1)
    columns = Trees(sizes=[3, 3], left=[1, -1, -1] * 2, right=[2, -1, -1] * 2,
                    feature=[0, 0, 0, 1, 0, 0], threshold=[0.5, 0, 0, -0.25, 0, 0],
                    leaf_value=[0.0, 1.0, 2.0, 0.0, 3.0, -4.0],
                    default_left=[True, False, False, False, False, False], output=[0, 1])
    listed = forest_of(a, b, n_outputs=2)
    built = build_forest(columns, n_features=2, n_outputs=2)
    for field in dataclasses.fields(listed):
        x, y = getattr(listed, field.name), getattr(built, field.name)
        assert np.array_equal(x, y) if isinstance(x, np.ndarray) else x == y, field.name
    with pytest.raises(ModelFormatError, match="sizes add up to 5"):
        build_forest(dataclasses.replace(columns, sizes=[3, 2]), n_features=2, n_outputs=2)
    with pytest.raises(ModelFormatError, match="out of range"):
        build_forest(dataclasses.replace(columns, right=[2, -1, -1, 7, -1, -1]),
                     n_features=2, n_outputs=2)


def test_tree_output_out_of_range():
    with pytest.raises(ModelFormatError, match="tree 0: output index 3"):
        forest_of(dataclasses.replace(stump(), output=3), n_outputs=2)


def test_no_trees():
    with pytest.raises(ModelFormatError, match="no trees"):
        forest_of()


def test_errors_are_value_errors():
    assert issubclass(ModelFormatError, SilvanForgeError)
    assert issubclass(SilvanForgeError, ValueError)


# ---- the object ----------------------------------------------------------------------

def test_forest_is_immutable():
    f = forest_of(stump(), stump(feature=1))
    with pytest.raises(ValueError):
        f.threshold[0] = 3.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        f.n_features = 3
    with pytest.raises(TypeError):
        f.transform_params["alpha"] = 2


def test_properties_and_summary():
    deep = Tree(left=[1, 3, -1, -1, -1], right=[2, 4, -1, -1, -1], feature=[0, 1, 0, 0, 0],
                threshold=[0.5, 0.5, 0, 0, 0], leaf_value=[0, 0, 1, 2, 3])
    f = forest_of(stump(), deep, source="test", objective="reg")
    assert (f.n_trees, f.n_nodes, f.n_leaves, f.n_internal) == (2, 8, 5, 3)
    assert f.max_depth == 2 and f.tree_depths.tolist() == [1, 2]
    assert f.predicate == "<"
    assert f.tree(1) == slice(3, 8)
    text = f.summary()
    assert "trees 2" in text and "features 2" in text and "max 2" in text
    g = f.replace(base_score=3.0)
    assert g.base_score.tolist() == [3.0] and f.base_score.tolist() == [0.0]


def test_forest_pickles():
    import pickle

    f = forest_of(stump(), stump(feature=1), pandas_categories={"a": ("x", "y")},
                  post_transform="sigmoid", transform_params={"alpha": 2.0})
    g = pickle.loads(pickle.dumps(f))
    assert g.transform_params == {"alpha": 2.0} and g.pandas_categories == {"a": ("x", "y")}
    assert not g.threshold.flags.writeable
    X = np.random.default_rng(1).normal(size=(20, 2))
    np.testing.assert_array_equal(reference.predict(g, X), reference.predict(f, X))


def test_single_leaf_tree():
    f = forest_of(Tree(left=[-1], right=[-1], feature=[0], threshold=[0], leaf_value=[4.0]))
    assert f.max_depth == 0
    assert reference.predict(f, np.zeros((3, 2))).tolist() == [4.0] * 3


# ---- semantics, case by case -----------------------------------------------------------

def test_operators_at_the_threshold():
    x = np.array([[0.5], [0.4], [0.6]])
    for op, expected in [(OP_LT, [2, 1, 2]), (OP_LE, [1, 1, 2]), (OP_EQ, [1, 2, 2])]:
        f = forest_of(stump(split_op=op), n_features=1, input_dtype=np.float64)
        assert reference.predict(f, x).tolist() == expected


def test_input_dtype_rounds_before_comparing():
    t = float(np.float32(0.1))  # just above 0.1 in float64
    x = np.array([[0.1]])
    f32 = forest_of(stump(threshold=t, split_op=OP_LT), n_features=1)
    f64 = forest_of(stump(threshold=t, split_op=OP_LT), n_features=1, input_dtype=np.float64)
    assert reference.predict(f32, x).tolist() == [2.0]  # float32(0.1) == t: not less
    assert reference.predict(f64, x).tolist() == [1.0]


def test_missing_rules():
    x = np.array([[np.nan], [0.0], [1e-36], [-3.0], [3.0]])
    cases = {
        # (missing rule, default_left, threshold): expected leaves per row
        (MISSING_NAN, True, -1.0): [1, 2, 2, 1, 2],
        (MISSING_NAN, False, -1.0): [2, 2, 2, 1, 2],
        (MISSING_ZERO, True, 1.0): [1, 1, 1, 1, 2],
        (MISSING_ZERO, False, -5.0): [2, 2, 2, 2, 2],
        (MISSING_NONE, False, 0.5): [1, 1, 1, 1, 2],
        (MISSING_NONE, True, -0.5): [2, 2, 2, 1, 2],
    }
    for (rule, default_left, t), expected in cases.items():
        f = forest_of(stump(threshold=t, split_op=OP_LE, missing=rule,
                            default_left=[default_left, False, False]),
                      n_features=1, input_dtype=np.float64)
        assert reference.predict(f, x).tolist() == expected, (rule, default_left, t)
    # LightGBM's kZeroThreshold is 1e-35f: exactly float32(1e-35) is still "zero".
    assert ZERO_THRESHOLD == float(np.float32(1e-35))
    f = forest_of(stump(threshold=1.0, split_op=OP_LE, missing=MISSING_ZERO,
                        default_left=[False, False, False]), n_features=1,
                  input_dtype=np.float64)
    x = np.array([[np.float32(1e-35)], [np.nextafter(ZERO_THRESHOLD, 1)]])
    assert reference.predict(f, x).tolist() == [2.0, 1.0]


def test_categorical_rules():
    x = np.array([[3.0], [3.7], [-0.5], [-2.0], [40.0], [1e9], [np.nan], [np.inf], [2.0]])
    cats = {0: [3, 40]}
    cats = {0: [0, 3, 40]}
    truncate = forest_of(stump(categories=cats, default_left=[True, 0, 0]), n_features=1)
    assert reference.predict(truncate, x).tolist() == [1, 1, 1, 2, 1, 2, 1, 2, 2]
    nonnegative = truncate.replace(category_rule="nonnegative")
    assert reference.predict(nonnegative, x).tolist() == [1, 1, 2, 2, 1, 2, 1, 2, 2]
    exact = truncate.replace(category_rule="exact")
    assert reference.predict(exact, x).tolist() == [1, 2, 2, 2, 1, 2, 1, 2, 2]
    missing = nonnegative.replace(negative_category="missing")
    assert reference.predict(missing, x).tolist() == [1, 1, 1, 1, 1, 2, 1, 2, 2]
    missing = truncate.replace(negative_category="missing")
    assert reference.predict(missing, x).tolist() == [1, 1, 1, 1, 1, 2, 1, 2, 2]
    # XGBoost 1.x: 1e9 and inf lie beyond the set's 64 bits and go the default way too.
    beyond = nonnegative.replace(negative_category="missing", beyond_category="missing")
    assert truncate.cat_words[0] == 2
    assert reference.predict(beyond, x).tolist() == [1, 1, 1, 1, 1, 1, 1, 1, 2]
    x64 = np.array([[63.0], [63.9], [64.0]])
    assert reference.predict(beyond, x64).tolist() == [2, 2, 1]
    assert reference.predict(nonnegative, x64).tolist() == [2, 2, 2]
    assert truncate.split_op[0] == OP_CAT and truncate.has_categorical
    assert truncate.category_set(0).tolist() == [0, 3, 40]


def test_linear_leaves_fall_back_on_nan():
    tree = dataclasses.replace(stump(threshold=0.0, split_op=OP_LE),
                               linear={1: (1.0, [0, 1], [2.0, 3.0]), 2: (-1.0, [1], [0.5])})
    f = forest_of(tree, linear_leaves=True, input_dtype=np.float64)
    x = np.array([[-1.0, 2.0], [-1.0, np.nan], [1.0, 4.0], [1.0, np.nan]])
    assert reference.predict(f, x).tolist() == [1 - 2 + 6, 1.0, -1 + 2, 2.0]


def test_average_vector_leaves_and_transforms():
    t1 = Tree(left=[1, -1, -1], right=[2, -1, -1], feature=[0, 0, 0],
              threshold=[0.5, 0, 0], leaf_value=[[0, 0], [1, 3], [2, 0]])
    t2 = dataclasses.replace(t1, leaf_value=[[0, 0], [3, 1], [0, 2]])
    f = forest_of(t1, t2, n_outputs=2, average=True, base_score=[0.5, 0.0],
                  post_transform="softmax")
    margin = reference.predict(f, np.array([[0.0, 0.0], [1.0, 0.0]]), output="margin")
    assert margin.tolist() == [[2.5, 2.0], [1.5, 1.0]]
    value = reference.predict(f, np.array([[0.0, 0.0]]))
    e = np.exp([0.5, 0.0])
    np.testing.assert_allclose(value, [e / e.sum()])


def test_margin_of_an_averaging_model_can_be_the_sum():
    f = forest_of(stump(values=(1.0, 2.0)), stump(values=(3.0, 6.0)), average=True,
                  base_score=0.5, post_transform="exp")
    x = np.array([[0.0, 0.0], [1.0, 0.0]])
    assert reference.predict(f, x, output="margin").tolist() == [2.5, 4.5]
    raw_sum = f.replace(average_in_margin=False)
    assert reference.predict(raw_sum, x, output="margin").tolist() == [4.5, 8.5]
    np.testing.assert_array_equal(reference.predict(raw_sum, x), np.exp([2.5, 4.5]))


def test_scalar_trees_add_to_their_output():
    trees = [dataclasses.replace(stump(values=(1.0, 2.0 + k)), output=k % 3) for k in range(6)]
    f = forest_of(*trees, n_outputs=3, post_transform="argmax")
    x = np.array([[0.0, 0.0], [1.0, 0.0]])
    assert reference.predict(f, x, output="margin").tolist() == [[2, 2, 2], [7, 9, 11]]
    assert reference.predict(f, x).tolist() == [0.0, 2.0]


# ---- inputs ----------------------------------------------------------------------------

@pytest.fixture
def small():
    return forest_of(stump(), stump(feature=1, threshold=-1.0), base_score=0.25)


@pytest.mark.parametrize("X, message", [
    (np.zeros((2, 3)), "expects 2 features .* has 3"),
    (np.zeros((2, 2, 2)), "2-D"),
    (np.zeros(2), "reshape"),
    (np.array([["a", "b"]]), "dtype"),
    (np.zeros((1, 2), dtype=complex), "dtype"),
    ([[1.0, 2.0], [3.0]], "cannot read the input as an array"),
])
def test_bad_inputs(small, X, message):
    with pytest.raises(InputError, match=message):
        reference.predict(small, X)


def test_bad_output_kind(small):
    with pytest.raises(InputError, match="output"):
        reference.predict(small, np.zeros((1, 2)), output="proba")


def test_input_layouts_agree(small):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 2))
    expected = reference.predict(small, X)
    for variant in (X.astype(np.float32), np.asfortranarray(X), X.tolist(), X[::1, :]):
        np.testing.assert_array_equal(reference.predict(small, variant), expected)
    assert reference.predict(small, np.zeros((0, 2))).shape == (0,)
    assert reference.predict(small, np.zeros((3, 2), dtype=np.int64)).shape == (3,)


def test_dataframes():
    pd = pytest.importorskip("pandas", reason="pandas is part of the dev extra")
    f = forest_of(stump(categories={0: [1]}), stump(feature=1, threshold=0.5),
                  pandas_categories={"c": ("x", "y", "z")})
    df = pd.DataFrame({"c": pd.Categorical(["y", "x", "w", None], categories=["w", "x", "y"]),
                       "n": [0.0, 1.0, np.nan, 0.25]})
    # Training categories fix the codes: "y" is 1 (in the set), "x" 0, "w" unseen → NaN.
    rows = np.array([[1, 0.0], [0, 1.0], [np.nan, np.nan], [np.nan, 0.25]])
    np.testing.assert_array_equal(reference.predict(f, df), reference.predict(f, rows))
    own_codes = f.replace(pandas_categories=None)
    rows = np.array([[2, 0.0], [1, 1.0], [0, np.nan], [np.nan, 0.25]])
    np.testing.assert_array_equal(reference.predict(own_codes, df),
                                  reference.predict(own_codes, rows))
    # A sequence matches the frame's categorical columns in order, whatever their names.
    positional = f.replace(pandas_categories=[("x", "y", "z")])
    np.testing.assert_array_equal(reference.predict(positional, df.rename(columns={"c": "q"})),
                                  reference.predict(f, df))
    with pytest.raises(InputError, match="column 'n'"):
        reference.predict(f, df.assign(n=["a", "b", "c", "d"]))


# ---- the reference against a one-row-at-a-time evaluator ---------------------------------

def walk_one(f, x, t):
    """The leaf row ``x`` reaches in tree ``t``, following forest.py's docstring."""
    base = int(f.tree_offsets[t])
    node = base
    while f.left[node] >= 0:
        v = float(x[f.feature[node]])
        rule = f.missing[node]
        if math.isnan(v) and rule != MISSING_NAN:
            v = 0.0
        if rule == MISSING_NAN:
            missing = math.isnan(v)
        else:
            missing = rule == MISSING_ZERO and abs(v) <= ZERO_THRESHOLD
        rule = f.category_rule
        negative = (math.trunc(v) < 0 if rule == "truncate" else v < 0) \
            if math.isfinite(v) else v < 0
        if f.split_op[node] == OP_CAT and not missing:
            if f.negative_category == "missing" and negative:
                missing = True
            # trunc(v) < 32 * words as v < 32 * words: v >= 0 here and the bound whole.
            if f.beyond_category == "missing" and not negative and \
                    not v < 32 * int(f.cat_words[node]):
                missing = True
        if missing:
            left = bool(f.default_left[node])
        elif f.split_op[node] == OP_CAT:
            ok = math.isfinite(v) and not negative and (rule != "exact" or v == int(v))
            left = ok and int(v) in set(f.category_set(node).tolist())
        else:
            t_ = f.threshold[node]
            left = {OP_LT: v < t_, OP_LE: v <= t_, OP_EQ: v == t_}[int(f.split_op[node])]
        node = base + int(f.left[node] if left else f.right[node])
    return node


@st.composite
def random_trees(draw, n_features, width):
    """A random tree grown node by node, up to depth 20."""
    max_depth = draw(st.integers(0, 20))
    split_p = draw(st.floats(0.3, 0.95))
    rnd = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    left, right, feature, threshold, ops, miss, dleft, values = [], [], [], [], [], [], [], []
    cats = {}
    stack = [(0, 0)]
    left.append(-1), right.append(-1)
    sizes = 1
    while stack:
        node, depth = stack.pop()
        if depth < max_depth and sizes < 300 and rnd.random() < split_p:
            left[node], right[node] = sizes, sizes + 1
            left += [-1, -1]
            right += [-1, -1]
            sizes += 2
            stack += [(sizes - 2, depth + 1), (sizes - 1, depth + 1)]
    for node in range(sizes):
        feature.append(int(rnd.integers(n_features)))
        threshold.append(float(rnd.choice([0.0, 0.5, -1.0, rnd.normal()])))
        ops.append(int(rnd.choice([OP_LT, OP_LE, OP_EQ])))
        miss.append(int(rnd.choice([MISSING_NAN, MISSING_ZERO, MISSING_NONE])))
        dleft.append(bool(rnd.integers(2)))
        values.append(rnd.normal(size=width).round(3))
        if left[node] >= 0 and rnd.random() < 0.2:
            cats[node] = rnd.choice(70, size=int(rnd.integers(1, 5))).tolist()
    return Tree(left=left, right=right, feature=feature, threshold=threshold,
                leaf_value=values, split_op=ops, missing=miss, default_left=dleft,
                categories=cats)


@st.composite
def random_forests(draw):
    n_features = draw(st.integers(1, 5))
    n_outputs = draw(st.integers(1, 3))
    vector = draw(st.booleans())
    width = n_outputs if vector else 1
    trees = draw(st.lists(random_trees(n_features, width), min_size=1, max_size=5))
    for i, tree in enumerate(trees):
        tree.output = 0 if vector else i % n_outputs
    return build_forest(
        trees, n_features=n_features, n_outputs=n_outputs,
        base_score=draw(st.floats(-2, 2)), average=draw(st.booleans()),
        input_dtype=draw(st.sampled_from([np.float32, np.float64])),
        category_rule=draw(st.sampled_from(["truncate", "nonnegative", "exact"])),
        negative_category=draw(st.sampled_from(["not_in_set", "missing"])),
        beyond_category=draw(st.sampled_from(["not_in_set", "missing"])))


@settings(max_examples=150)
@given(random_forests(), st.integers(0, 2**32 - 1))
def test_reference_matches_a_row_by_row_walk(forest, seed):
    X = probe_rows(forest, seed, 40)
    rows = X.astype(forest.input_dtype).astype(np.float64)
    leaves = reference.leaves(forest, X)
    expected_margin = np.zeros((len(X), forest.n_outputs))
    for r, x in enumerate(rows):
        for t in range(forest.n_trees):
            leaf = walk_one(forest, x, t)
            assert leaves[r, t] == leaf - forest.tree_offsets[t]
            out = forest.tree_output[t]
            expected_margin[r, out:out + forest.leaf_width] += forest.leaf_value[leaf]
    if forest.average:
        expected_margin /= np.maximum(forest.trees_per_output(), 1)
    expected_margin += forest.base_score
    margin = reference.predict(forest, X, output="margin")
    np.testing.assert_allclose(margin.reshape(expected_margin.shape), expected_margin,
                               rtol=1e-12, atol=1e-12)


def test_load_passes_a_forest_through(small):
    assert silvanforge.load(small) is small
