"""XGBoost frontend: parity with the installed XGBoost (3.2, and the `xgboost` extra's
floor in CI's floor job) on files, bytes and live objects."""

from __future__ import annotations

import copy
import functools
import json
import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import silvanforge
from silvanforge import reference
from silvanforge.errors import (ModelFormatError, SilvanForgeError, UnsupportedModelError,
                               version_of)
from silvanforge.frontends import xgboost as fx
from util import assert_parity, to_ubjson, with_nans

xgb = pytest.importorskip("xgboost")
warnings.filterwarnings("ignore", category=UserWarning, module="xgboost")
XGB = version_of(xgb)
# What older XGBoost releases lack, for the tests that need it.
needs_2_0 = pytest.mark.skipif(XGB < (2, 0), reason=f"needs XGBoost 2.0 (multi_strategy, "
                               f"reg:quantileerror); {xgb.__version__} is installed")
# 3.1 writes base_score as a list (one per output) and stores pandas categories.
VECTOR_BASE = STORES_CATEGORIES = XGB >= (3, 1)

RNG = np.random.default_rng(42)
N = 240
X = with_nans(RNG.normal(size=(N, 5)), 0.1, seed=1)
Z = np.nan_to_num(X)
Y_REG = 2 * Z[:, 0] + Z[:, 1] - Z[:, 2] ** 2
Y_BIN = (Z[:, 0] + 0.5 * Z[:, 3] > 0).astype(float)
Y_POS = np.exp(0.5 * Z[:, 0]) + 0.1
Y_CLS = (np.digitize(Z[:, 0] + Z[:, 1], [-0.5, 0.5])).astype(int)


# ---- helpers -------------------------------------------------------------------------

def _threshold_rows(booster, n_features: int) -> np.ndarray:
    """Rows whose features sit exactly on the model's numeric split thresholds."""
    doc = json.loads(booster.save_raw("json"))
    gb = doc["learner"]["gradient_booster"]
    rows = []
    for tree in gb.get("gbtree", gb)["model"]["trees"]:
        for node, left in enumerate(tree["left_children"]):
            if left >= 0 and tree.get("split_type", [0] * len(tree["left_children"]))[node] == 0:
                row = np.full(n_features, np.float32(0.0), dtype=np.float32)
                row[:] = np.float32(tree["split_conditions"][node])
                rows.append(row)
    return np.array(rows[:60], dtype=np.float32).reshape(-1, n_features)


def _forests(booster, tmp_path):
    """The model through every path: raw JSON/UBJ bytes, saved files, the live object."""
    out = {"json-bytes": fx.load_bytes(bytes(booster.save_raw("json"))),
           "ubj-bytes": fx.load_bytes(bytes(booster.save_raw("ubj"))),
           "object": silvanforge.load(booster)}
    for ext in ("json", "ubj"):
        path = tmp_path / f"model.{ext}"
        booster.save_model(str(path))
        out[f"{ext}-file"] = silvanforge.load(str(path))
    return out


def _check(booster, X_test, tmp_path, dmatrix_kw=None, cat_columns=()):
    """Value and margin parity on X_test plus the threshold rows, every load path."""
    rows = np.vstack([X_test, _threshold_rows(booster, X_test.shape[1])])
    value = booster.inplace_predict(rows)
    margin = booster.predict(xgb.DMatrix(rows, **(dmatrix_kw or {})), output_margin=True)
    for name, forest in _forests(booster, tmp_path).items():
        assert_parity(reference.predict(forest, rows), value, f"{name} value")
        assert_parity(reference.predict(forest, rows, output="margin"), margin,
                      f"{name} margin")
    return forest


def _train(params, y, rounds=4, X_train=X, **dm):
    return xgb.train({"max_depth": 4, "seed": 0, **params}, xgb.DMatrix(X_train, y, **dm),
                     rounds)


# ---- objectives ----------------------------------------------------------------------

OBJECTIVES = [
    ({"objective": "reg:squarederror"}, Y_REG),
    ({"objective": "reg:squaredlogerror"}, Y_POS),
    ({"objective": "reg:logistic"}, Y_BIN),
    ({"objective": "reg:pseudohubererror"}, Y_REG),
    ({"objective": "reg:absoluteerror"}, Y_REG),
    ({"objective": "reg:quantileerror", "quantile_alpha": 0.3}, Y_REG),
    ({"objective": "reg:quantileerror", "quantile_alpha": [0.1, 0.5, 0.9]}, Y_REG),
    ({"objective": "binary:logistic"}, Y_BIN),
    ({"objective": "binary:logistic", "base_score": 0.7}, Y_BIN),
    ({"objective": "binary:logitraw", "base_score": 0.7}, Y_BIN),
    ({"objective": "binary:hinge", "base_score": 0.3}, Y_BIN),
    ({"objective": "count:poisson"}, np.round(Y_POS * 3)),
    ({"objective": "survival:cox"}, Y_POS * np.where(Y_BIN > 0, 1, -1)),
    ({"objective": "reg:gamma"}, Y_POS),
    ({"objective": "reg:tweedie", "tweedie_variance_power": 1.3}, Y_POS),
    ({"objective": "multi:softmax", "num_class": 3}, Y_CLS),
    ({"objective": "multi:softprob", "num_class": 3}, Y_CLS),
    ({"objective": "reg:squarederror", "tree_method": "exact", "max_depth": 8}, Y_REG),
    ({"objective": "reg:squarederror", "tree_method": "approx", "max_depth": 8}, Y_REG),
    ({"objective": "reg:squarederror", "tree_method": "exact", "gamma": 3.0}, Y_REG),
]


@pytest.mark.parametrize("params,y", [
    pytest.param(p, y, id=str(sorted(p.items())),
                 marks=needs_2_0 if p["objective"] == "reg:quantileerror" else ())
    for p, y in OBJECTIVES])
def test_objectives(params, y, tmp_path):
    forest = _check(_train(params, y), X, tmp_path)
    assert forest.objective == params["objective"]
    assert forest.source == f"xgboost {xgb.__version__}"


def test_survival_aft(tmp_path):
    dm = xgb.DMatrix(X)
    dm.set_float_info("label_lower_bound", Y_POS)
    dm.set_float_info("label_upper_bound", np.where(Y_BIN > 0, 2 * Y_POS, np.inf))
    booster = xgb.train({"objective": "survival:aft", "max_depth": 3}, dm, 4)
    _check(booster, X, tmp_path)


@pytest.mark.parametrize("objective", ["rank:pairwise", "rank:ndcg", "rank:map"])
def test_ranking(objective, tmp_path):
    qid = np.repeat(np.arange(N // 10), 10)
    _check(_train({"objective": objective}, Y_BIN.astype(int), qid=qid), X, tmp_path)


# ---- boosting variants ---------------------------------------------------------------

def test_dart_folds_weight_drop(tmp_path):
    booster = _train({"booster": "dart", "rate_drop": 0.5, "skip_drop": 0.0}, Y_REG, 6)
    weights = json.loads(booster.save_raw("json"))["learner"]["gradient_booster"]["weight_drop"]
    assert any(w != 1.0 for w in weights), "the test needs dropped trees"
    _check(booster, X, tmp_path)


@pytest.mark.parametrize("params,y", [
    ({"num_parallel_tree": 3, "subsample": 0.7, "colsample_bynode": 0.7}, Y_REG),
    ({"num_parallel_tree": 2, "objective": "multi:softprob", "num_class": 3}, Y_CLS),
])
def test_random_forest_style(params, y, tmp_path):
    _check(_train(params, y, 3), X, tmp_path)


@pytest.mark.parametrize("strategy", ["one_output_per_tree",
                                      pytest.param("multi_output_tree", marks=needs_2_0)])
def test_multi_target(strategy, tmp_path):
    Y = np.column_stack([Y_REG, Y_BIN, Y_POS])
    booster = _train({"tree_method": "hist", "multi_strategy": strategy}, Y)
    forest = _check(booster, X, tmp_path)
    assert forest.n_outputs == 3
    assert forest.leaf_width == (3 if strategy == "multi_output_tree" else 1)


@needs_2_0
def test_multiclass_multi_output_tree(tmp_path):
    booster = _train({"objective": "multi:softprob", "num_class": 3, "tree_method": "hist",
                      "multi_strategy": "multi_output_tree"}, Y_CLS)
    assert _check(booster, X, tmp_path).leaf_width == 3


@needs_2_0
def test_multi_output_tree_2x_layout():
    """XGBoost 2.x wrote vector leaves into base_weights (no leaf_weights array)."""
    Y = np.column_stack([Y_REG, Y_BIN])
    booster = _train({"tree_method": "hist", "multi_strategy": "multi_output_tree"}, Y)
    doc = json.loads(booster.save_raw("json"))
    for tree in doc["learner"]["gradient_booster"]["model"]["trees"]:
        if "leaf_weights" not in tree:  # written by 2.x-3.0: the layout already
            continue
        leaf_weights = tree.pop("leaf_weights")
        for node, left in enumerate(tree["left_children"]):
            if left < 0:
                k = tree["right_children"][node]
                tree["base_weights"][2 * node:2 * node + 2] = leaf_weights[2 * k:2 * k + 2]
                tree["right_children"][node] = -1
    forest = fx.load_bytes(json.dumps(doc).encode())
    assert_parity(reference.predict(forest, X), booster.inplace_predict(X))
    # base_weights is read only where it is wanted (fx.UNUSED_LISTS), and then as
    # strictly as any list.
    tree = doc["learner"]["gradient_booster"]["model"]["trees"][0]
    text = json.dumps(doc).encode().replace(
        b'"base_weights": [' + json.dumps(tree["base_weights"][0]).encode(),
        b'"base_weights": [1-2', 1)
    with pytest.raises(ModelFormatError, match=r"tree 0.base_weights: expected numbers"):
        fx.load_bytes(text)


def test_lists_no_prediction_reads_are_not_parsed():
    """loss_changes and parents are never read: number characters that are no numbers
    there do not stop a load (XGBoost's own parser would refuse them), and the model
    predicts as before."""
    booster = _train({"max_depth": 3}, Y_REG, rounds=3)
    text = bytes(booster.save_raw("json"))
    broken = text.replace(b'"loss_changes":[', b'"loss_changes":[1-2,', 1).replace(
        b'"parents":[', b'"parents":[1e,', 1)
    assert broken.count(b"1-2,") == 1 and broken.count(b"1e,") == 1
    assert_parity(reference.predict(fx.load_bytes(broken), X), booster.inplace_predict(X))


def test_early_stopping_booster_uses_all_trees_wrapper_best_iteration():
    Xt, yt = X[:120], Y_REG[:120]
    model = xgb.XGBRegressor(max_depth=2, learning_rate=1.0, n_estimators=40,
                             early_stopping_rounds=2)
    model.fit(Xt, yt, eval_set=[(X[120:], Y_REG[120:])], verbose=False)
    booster = model.get_booster()
    assert model.best_iteration + 1 < booster.num_boosted_rounds()
    # Booster.predict and files: every tree.
    for forest in (silvanforge.load(booster), fx.load_bytes(bytes(booster.save_raw("ubj")))):
        assert forest.n_trees == booster.num_boosted_rounds()
        assert_parity(reference.predict(forest, X), booster.predict(xgb.DMatrix(X)))
    # The sklearn wrapper predicts with best_iteration.
    forest = silvanforge.load(model)
    assert forest.n_trees == model.best_iteration + 1
    assert_parity(reference.predict(forest, X), model.predict(X))


# ---- sklearn wrappers ----------------------------------------------------------------

def test_sklearn_wrappers():
    reg = xgb.XGBRegressor(n_estimators=4, max_depth=3).fit(X, Y_REG)
    assert_parity(reference.predict(silvanforge.load(reg), X), reg.predict(X))
    clf = xgb.XGBClassifier(n_estimators=4, max_depth=3).fit(X, Y_BIN)
    forest = silvanforge.load(clf)
    assert_parity(reference.predict(forest, X), clf.predict_proba(X)[:, 1])
    assert_parity(reference.predict(forest, X, output="margin"),
                  clf.predict(X, output_margin=True))
    multi = xgb.XGBClassifier(n_estimators=3, max_depth=3).fit(X, Y_CLS)
    assert_parity(reference.predict(silvanforge.load(multi), X), multi.predict_proba(X))
    rank = xgb.XGBRanker(n_estimators=3, max_depth=3).fit(
        X, Y_BIN.astype(int), qid=np.repeat(np.arange(N // 10), 10))
    assert_parity(reference.predict(silvanforge.load(rank), X), rank.predict(X))


def test_load_object_rejects_other_types():
    with pytest.raises(UnsupportedModelError):
        fx.load_object(object())


# ---- categorical features ------------------------------------------------------------

def _categorical_frame(n=N, seed=3):
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({
        "a": rng.normal(size=n).astype(np.float32),
        "s": pd.Categorical(rng.choice(list("pqrstuvwxyz"), n)),
        "k": pd.Categorical(rng.choice([3, 7, 11, 13, 17], n)),
    })
    df.loc[rng.random(n) < 0.1, "s"] = None
    y = (df.s.isin(["p", "r", "x"]).astype(float) + (df.k == 7) + df.a
         + rng.normal(size=n) * 0.1)
    return df, y.to_numpy()


def _codes(df):
    s = df.s.cat.codes.to_numpy().astype(np.float32)
    s[s < 0] = np.nan
    return np.column_stack([df.a.to_numpy(np.float32), s,
                            df.k.cat.codes.to_numpy().astype(np.float32)])


def _odd_categories(Xc):
    """Unseen, negative, fractional and huge category values (XGBoost refuses inf)."""
    Xc = Xc.copy()
    Xc[:12, 1] = np.arange(12) - 4 + 11  # codes beyond the trained ones
    Xc[12:22, 1] = [-1, -3, 1e7, 2**24, 2**25, 3e38, -3e38, 0.5, 2.99, -0.5]
    Xc[22:30, 2] = [-2, 5, 6, 100, 0.7, np.nan, 4.5, 1e9]
    return Xc


@pytest.mark.parametrize("onehot", [1, 16])
@pytest.mark.parametrize("method", ["hist", "approx"])
def test_categorical_pandas(onehot, method, tmp_path):
    df, y = _categorical_frame()
    booster = xgb.train({"max_depth": 5, "max_cat_to_onehot": onehot, "tree_method": method},
                        xgb.DMatrix(df, y, enable_categorical=True), 4)
    forests = _forests(booster, tmp_path)
    Xc = _odd_categories(_codes(df))
    for name, forest in forests.items():
        assert forest.has_categorical
        if STORES_CATEGORIES:
            assert forest.pandas_categories["s"] == tuple("pqrstuvwxyz")
        else:
            assert forest.pandas_categories is None
        assert forest.feature_names == ("a", "s", "k")
        assert_parity(reference.predict(forest, df), booster.inplace_predict(df), name)
        assert_parity(reference.predict(forest, Xc),
                      booster.inplace_predict(Xc, validate_features=False), name)
        assert_parity(reference.predict(forest, Xc, output="margin"),
                      booster.predict(xgb.DMatrix(Xc, feature_names=["a", "s", "k"],
                                                  feature_types=["q", "c", "c"],
                                                  enable_categorical=True),
                                      output_margin=True), name)
    # XGBoost re-codes a frame with the same categories in another order.
    shuffled = df.copy()
    shuffled["s"] = shuffled["s"].cat.reorder_categories(list("zyxwvutsrqp"))
    assert_parity(reference.predict(forests["ubj-file"], shuffled),
                  booster.inplace_predict(shuffled))


def test_categorical_feature_types_numpy(tmp_path):
    df, y = _categorical_frame(seed=5)
    Xc = _codes(df)
    # XGBoost 1.x's default tree method (exact) learns no categorical splits.
    booster = xgb.train({"max_depth": 6, "tree_method": "hist"},
                        xgb.DMatrix(Xc, y, feature_types=["q", "c", "c"],
                                    enable_categorical=True), 4)
    forest = _check(booster, _odd_categories(Xc), tmp_path,
                    {"feature_types": ["q", "c", "c"], "enable_categorical": True},
                    cat_columns=(1, 2))
    assert forest.has_categorical and forest.pandas_categories is None


def test_negative_fraction_category():
    """XGBoost tests x < 0 before truncating: -0.5 is no category, not category 0."""
    rng = np.random.default_rng(0)
    X = np.zeros((2000, 2), np.float32)
    X[:, 0] = rng.integers(0, 5, len(X))
    X[:, 1] = rng.normal(size=len(X))
    y = (X[:, 0] != 0) * 3.0 + X[:, 1] * 0.1
    booster = xgb.train({"max_depth": 2, "max_cat_to_onehot": 1, "tree_method": "hist"},
                        xgb.DMatrix(X, y, feature_types=["c", "q"], enable_categorical=True), 3)
    forest = fx.load_bytes(bytes(booster.save_raw("json")))
    rows = np.array([[v, 0.0] for v in (0.0, -0.0, -0.5, -0.99, -1.0, 0.5, 4.9, 5.0, 1e30)],
                    dtype=np.float32)
    expected = booster.inplace_predict(rows)
    # Meaningful only where category 0 and "no category" go different ways.
    assert expected[0] != expected[2]
    assert_parity(reference.predict(forest, rows), expected)


def test_categorical_children_are_swapped():
    df, y = _categorical_frame()
    booster = xgb.train({"max_depth": 1, "max_cat_to_onehot": 1, "tree_method": "hist"},
                        xgb.DMatrix(df[["s"]], y, enable_categorical=True), 1)
    tree = json.loads(booster.save_raw("json"))["learner"]["gradient_booster"]["model"][
        "trees"][0]
    assert tree["split_type"][0] == 1
    forest = fx.load_bytes(bytes(booster.save_raw("json")))
    # XGBoost's right child (the category set) is the Forest's left child.
    assert forest.left[0] == tree["right_children"][0]
    assert bool(forest.default_left[0]) != bool(tree["default_left"][0])
    assert list(forest.category_set(0)) == tree["categories"]


def test_categories_before_2_0_go_the_default_way_when_invalid():
    """XGBoost 1.5-1.7 sent a negative category, and one at or beyond the node's bitset,
    the default way (CI's floor job checks it against XGBoost 1.7 itself): a file's
    version picks the rule."""
    df, y = _categorical_frame()
    booster = xgb.train({"max_depth": 3, "max_cat_to_onehot": 1, "tree_method": "hist"},
                        xgb.DMatrix(df[["s"]], y, enable_categorical=True), 2)
    doc = json.loads(booster.save_raw("json"))
    rules = {}
    for major in (1, 2, 3):
        doc["version"] = [major, 7, 0]
        forest = fx.load_bytes(json.dumps(doc).encode())
        rules[major] = (forest.negative_category, forest.beyond_category)
    assert rules == {1: ("missing", "missing"), 2: ("not_in_set", "not_in_set"),
                     3: ("not_in_set", "not_in_set")}


def test_best_iteration_before_2_0():
    """Files before 2.0 hold no iteration_indptr: a round is num_parallel_tree trees per
    class."""
    booster = _train({"objective": "multi:softprob", "num_class": 3,
                      "num_parallel_tree": 2, "max_depth": 2}, Y_CLS, rounds=4)
    doc = json.loads(booster.save_raw("json"))
    model = doc["learner"]["gradient_booster"]["model"]
    assert len(model["trees"]) == 24
    model.pop("iteration_indptr", None)  # 2.0+ writes it
    for rounds, trees in ((1, 6), (3, 18), (4, 24), (9, 24)):
        assert fx.forest_from_document(doc, n_iterations=rounds).n_trees == trees
    assert_parity(reference.predict(fx.forest_from_document(doc, n_iterations=3), X),
                  booster.predict(xgb.DMatrix(X), iteration_range=(0, 3)))


# ---- older formats -------------------------------------------------------------------

def _as_1x(doc: dict) -> dict:
    """Rewrite a document of the installed XGBoost the way XGBoost 1.0-1.3 wrote it."""
    doc = copy.deepcopy(doc)
    doc["version"] = [1, 2, 0]
    learner = doc["learner"]
    param = learner["learner_model_param"]
    score = np.ravel(json.loads(param["base_score"].replace("E", "e")))
    assert len(score) == 1
    param["base_score"] = f"{np.float32(score[0]):E}"
    param.pop("num_target", None)
    param.pop("boost_from_average", None)
    model = learner["gradient_booster"]["model"]
    for key in ("cats", "iteration_indptr"):
        model.pop(key, None)
    model["gbtree_model_param"] = {"num_trees": str(len(model["trees"])),
                                   "size_leaf_vector": "0"}
    for tree in model["trees"]:
        for key in ("categories", "categories_nodes", "categories_segments",
                    "categories_sizes", "split_type"):
            tree.pop(key)
        tree["default_left"] = [bool(v) for v in tree["default_left"]]
        tree["tree_param"]["size_leaf_vector"] = "0"
    return doc


@pytest.mark.parametrize("objective", ["binary:logistic", "reg:squarederror"])
def test_handwritten_1x_document(objective):
    booster = _train({"objective": objective, "base_score": 0.5}, Y_BIN, 3)
    doc = _as_1x(json.loads(booster.save_raw("json")))
    assert doc["learner"]["learner_model_param"]["base_score"] == "5.000000E-01"
    data = json.dumps(doc).encode()
    forest = fx.load_bytes(data)
    assert forest.source == "xgboost 1.2.0"
    reloaded = xgb.Booster(model_file=bytearray(data))
    assert_parity(reference.predict(forest, X), reloaded.inplace_predict(X))
    assert_parity(reference.predict(forest, X), booster.inplace_predict(X))
    assert_parity(reference.predict(forest, X, output="margin"),
                  reloaded.predict(xgb.DMatrix(X), output_margin=True))


def test_plain_number_strings_and_names():
    booster = _train({"objective": "binary:logistic"}, Y_BIN, 2,
                     feature_names=["f0", "f1", "f2", "f3", "f4"])
    doc = json.loads(booster.save_raw("json"))
    doc["learner"]["learner_model_param"]["base_score"] = "6.25E-1"
    forest = fx.load_bytes(json.dumps(doc).encode())
    assert forest.feature_names == ("f0", "f1", "f2", "f3", "f4")
    assert np.isclose(forest.base_score[0], np.log(0.625 / 0.375))


# ---- property test: random models ----------------------------------------------------

@st.composite
def random_models(draw):
    n_features = draw(st.integers(1, 6))
    cat_features = [f for f in range(n_features) if draw(st.booleans())]
    n_outputs = draw(st.integers(1, 3))
    objective = "binary:logistic" if n_outputs == 1 and draw(st.booleans()) \
        else "reg:squarederror"
    n_trees = draw(st.integers(1, 4)) * n_outputs
    trees = []
    for t in range(n_trees):
        trees.append(_random_tree(draw, t, n_features, cat_features))
    # Before 3.1, one base_score served every output.
    scores = [draw(st.floats(0.05, 0.95)) for _ in range(n_outputs if VECTOR_BASE else 1)]
    base_score = ("[" + ",".join(f"{np.float32(s):E}" for s in scores) + "]"
                  if VECTOR_BASE else f"{np.float32(scores[0]):E}")
    doc = {
        "learner": {
            "attributes": {}, "feature_names": [],
            "feature_types": ["c" if f in cat_features else "float"
                              for f in range(n_features)],
            "gradient_booster": {"model": {
                "gbtree_model_param": {"num_parallel_tree": "1", "num_trees": str(n_trees)},
                "iteration_indptr": list(range(0, n_trees + 1, n_outputs)),
                "tree_info": [t % n_outputs for t in range(n_trees)],
                "trees": trees}, "name": "gbtree"},
            "learner_model_param": {
                "base_score": base_score,
                "boost_from_average": "1", "num_class": "0",
                "num_feature": str(n_features), "num_target": str(n_outputs)},
            "objective": {"name": objective, "reg_loss_param": {"scale_pos_weight": "1"}}},
        "version": [*XGB, 0]}
    return doc, n_features, cat_features


def _random_tree(draw, tid, n_features, cat_features):
    left, right, feat, cond, dleft, stype = [], [], [], [], [], []
    node_cats = {}
    f32 = st.floats(-3, 3, width=32)

    def new_node():
        for arr, v in ((left, -1), (right, -1), (feat, 0), (cond, 0.0), (dleft, 0),
                       (stype, 0)):
            arr.append(v)
        return len(left) - 1

    stack = [(new_node(), 0)]
    while stack:
        node, depth = stack.pop()
        if depth >= 20 or len(left) > 120 or not draw(st.booleans()) and depth > 0:
            cond[node] = draw(f32)
            continue
        f = draw(st.integers(0, n_features - 1))
        feat[node] = f
        dleft[node] = int(draw(st.booleans()))
        if f in cat_features and draw(st.booleans()):
            stype[node] = 1
            cond[node] = float("nan")
            chosen = sorted(draw(st.sets(st.integers(0, 40), min_size=1, max_size=8)))
            node_cats[node] = chosen
        else:
            cond[node] = draw(f32)
        a, b = new_node(), new_node()
        left[node], right[node] = a, b
        stack += [(b, depth + 1), (a, depth + 1)]
    n = len(left)
    # XGBoost expects the categorical nodes in ascending order (it aborts otherwise).
    cats, cat_nodes, cat_segs, cat_sizes = [], [], [], []
    for node in sorted(node_cats):
        cat_nodes.append(node)
        cat_segs.append(len(cats))
        cat_sizes.append(len(node_cats[node]))
        cats.extend(node_cats[node])
    parents = [2147483647] * n
    for i in range(n):
        if left[i] >= 0:
            parents[left[i]] = parents[right[i]] = i
    # XGBoost's JSON writer prints NaN split conditions of categorical nodes as NaN.
    return {"base_weights": [0.0] * n, "categories": cats, "categories_nodes": cat_nodes,
            "categories_segments": cat_segs, "categories_sizes": cat_sizes,
            "default_left": dleft, "id": tid, "left_children": left,
            "loss_changes": [0.0] * n, "parents": parents, "right_children": right,
            "split_conditions": [0.0 if c != c else c for c in cond],
            "split_indices": feat, "split_type": stype, "sum_hessian": [1.0] * n,
            "tree_param": {"num_deleted": "0", "num_feature": str(n_features),
                           "num_nodes": str(n), "size_leaf_vector": "1"}}


@settings(max_examples=25, deadline=None)
@given(model=random_models(), seed=st.integers(0, 2**31 - 1))
def test_random_models_match_xgboost(model, seed):
    doc, n_features, cat_features = model
    data = json.dumps(doc).encode()
    forest = fx.load_bytes(data)
    booster = xgb.Booster(model_file=bytearray(data))
    rng = np.random.default_rng(seed)
    rows = rng.normal(scale=2, size=(64, n_features)).astype(np.float32)
    for f in cat_features:
        rows[:, f] = rng.integers(-3, 45, size=64)
    # Numeric thresholds as inputs, and NaNs.
    thresholds = [c for t in doc["learner"]["gradient_booster"]["model"]["trees"]
                  for c, l, s in zip(t["split_conditions"], t["left_children"],
                                     t["split_type"]) if l >= 0 and s == 0]
    if thresholds:
        mask = rng.random(rows.shape) < 0.3
        rows[mask] = rng.choice(np.float32(thresholds), size=int(mask.sum()))
    rows[rng.random(rows.shape) < 0.15] = np.nan
    assert_parity(reference.predict(forest, rows), booster.inplace_predict(rows), "value")
    assert_parity(reference.predict(forest, rows, output="margin"),
                  booster.predict(xgb.DMatrix(rows), output_margin=True), "margin")


# ---- unsupported and malformed models ------------------------------------------------

@pytest.fixture(scope="module")
def good_doc():
    booster = _train({"objective": "reg:squarederror", "max_depth": 3}, Y_REG, 2)
    return json.loads(booster.save_raw("json"))


def _tree0(doc):
    return doc["learner"]["gradient_booster"]["model"]["trees"][0]


def test_gblinear_is_unsupported():
    booster = xgb.train({"booster": "gblinear"}, xgb.DMatrix(X, Y_REG), 2)
    with pytest.raises(UnsupportedModelError, match="gblinear"):
        fx.load_bytes(bytes(booster.save_raw("json")))
    with pytest.raises(UnsupportedModelError, match="gblinear"):
        silvanforge.load(booster)


def test_unknown_objective_is_unsupported(good_doc):
    doc = copy.deepcopy(good_doc)
    doc["learner"]["objective"]["name"] = "reg:wishful"
    with pytest.raises(UnsupportedModelError, match="reg:wishful"):
        fx.load_bytes(json.dumps(doc).encode())


def _internal(tree):
    return [i for i, l in enumerate(tree["left_children"]) if l >= 0]


def _break_cycle(doc):
    tree = _tree0(doc)
    node = _internal(tree)[-1]
    tree["left_children"][node] = 0


def _break_self_loop(doc):
    tree = _tree0(doc)
    node = _internal(tree)[-1]
    tree["right_children"][node] = node


def _break_child_range(doc):
    _tree0(doc)["left_children"][0] = 10_000


def _break_feature(doc):
    _tree0(doc)["split_indices"][0] = 5


def _break_length(doc):
    _tree0(doc)["split_conditions"].pop()


def _break_string(doc):
    _tree0(doc)["split_conditions"][0] = "0.5"


def _break_string_param(doc):
    doc["learner"]["learner_model_param"]["num_feature"] = "five"


def _break_tree_info(doc):
    doc["learner"]["gradient_booster"]["model"]["tree_info"][0] = 3


def _break_categories(doc):
    tree = _tree0(doc)
    tree["split_type"][0] = 1
    tree["categories_nodes"], tree["categories_segments"] = [0], [0]
    tree["categories_sizes"], tree["categories"] = [5], [1, 2]


def _break_num_nodes(doc):
    _tree0(doc)["tree_param"]["num_nodes"] = "100000000"


def _break_dangling(doc):
    tree = _tree0(doc)
    tree["left_children"][0] = tree["left_children"][tree["left_children"][0]]


BREAKS = {
    "cycle": (_break_cycle, "tree 0, node"), "self-loop": (_break_self_loop, "tree 0, node"),
    "child-range": (_break_child_range, "tree 0, node 0"),
    "feature": (_break_feature, "tree 0, node 0: feature"),
    "length": (_break_length, "tree 0: split_conditions"),
    "string": (_break_string, "split_conditions"),
    "param": (_break_string_param, "num_feature"),
    "tree-info": (_break_tree_info, "tree_info"),
    "categories": (_break_categories, "tree 0, node 0"),
    "num-nodes": (_break_num_nodes, "tree 0"),
    "dangling": (_break_dangling, "tree 0, node"),
}


@pytest.mark.parametrize("name", sorted(BREAKS))
@pytest.mark.parametrize("fmt", ["json", "ubj"])
def test_malformed_models(name, fmt, good_doc):
    doc = copy.deepcopy(good_doc)
    breaker, message = BREAKS[name]
    breaker(doc)
    data = json.dumps(doc).encode() if fmt == "json" else to_ubjson(doc)
    with pytest.raises(ModelFormatError, match=message):
        fx.load_bytes(data)
    with pytest.raises(SilvanForgeError):
        silvanforge.load(data)


def test_own_ubjson_encoding_matches_json(good_doc):
    forest = fx.load_bytes(to_ubjson(good_doc))
    assert_parity(reference.predict(forest, X),
                  reference.predict(fx.load_bytes(json.dumps(good_doc).encode()), X))


@pytest.mark.parametrize("fmt", ["json", "ubj"])
def test_truncated_files(fmt):
    booster = _train({}, Y_REG, 2)
    data = bytes(booster.save_raw(fmt))
    for cut in (len(data) - 1, len(data) // 2, 7, 2):
        with pytest.raises(ModelFormatError):
            silvanforge.load(data[:cut])


def test_huge_declared_length_and_deep_nesting():
    huge = b'{L\x00\x00\x00\x00\x00\x00\x00\x01a[$d#L\x7f\xff\xff\xff\xff\xff\xff\xff}'
    with pytest.raises(ModelFormatError, match="exceeds"):
        fx.load_bytes(huge)
    deep = b"{i\x01a" + b"[" * 5000 + b"]" * 5000 + b"}"
    with pytest.raises(ModelFormatError, match="nested"):
        fx.load_bytes(deep)
    with pytest.raises(ModelFormatError, match="nested too deeply"):
        fx.load_bytes(b'{"a":' + b"[" * 100000 + b"]" * 100000 + b"}")


def test_not_an_object_and_missing_fields():
    with pytest.raises(ModelFormatError, match="learner"):
        fx.load_bytes(b'{"version": [3, 2, 0]}')
    with pytest.raises(ModelFormatError):
        fx.load_bytes(b"[1, 2]")
    with pytest.raises(ModelFormatError, match="invalid JSON"):
        fx.load_bytes(b'{"learner": ')


# ---- trees read at once (columns) against one by one ---------------------------------

def _one_by_one(data: bytes):
    """``load_bytes`` with every tree read by ``_read_tree``: the Forest, or the error."""
    at_once = fx._plain_trees
    fx._plain_trees = lambda *args: None
    try:
        return _outcome(data)
    finally:
        fx._plain_trees = at_once


def _outcome(data: bytes):
    try:
        return fx.load_bytes(data)
    except SilvanForgeError as exc:
        return type(exc), str(exc)


def _assert_same(a, b) -> None:
    """Two outcomes of _outcome: the same error, or Forests equal field by field (the
    arrays' values and dtypes)."""
    if isinstance(a, tuple) or isinstance(b, tuple):
        assert a == b
        return
    from silvanforge.model.serialize import to_arrays

    (arrays_a, meta_a), (arrays_b, meta_b) = to_arrays(a), to_arrays(b)
    assert meta_a == meta_b
    assert arrays_a.keys() == arrays_b.keys()
    for key in arrays_a:
        assert arrays_a[key].dtype == arrays_b[key].dtype, key
        assert np.array_equal(arrays_a[key], arrays_b[key], equal_nan=True), key


@pytest.mark.parametrize("params,y,plain", [
    ({"objective": "binary:logistic", "max_depth": 6}, Y_BIN, True),
    ({"objective": "multi:softprob", "num_class": 3}, Y_CLS, True),
    ({"booster": "dart", "rate_drop": 0.5, "objective": "reg:squarederror"}, Y_REG, True),
    # Pruned trees keep deleted nodes: read one by one.
    ({"objective": "reg:squarederror", "tree_method": "exact", "gamma": 3.0}, Y_REG, False),
])
def test_trees_at_once_equal_one_by_one(params, y, plain):
    """Trained plain models take the reader in columns, and it gives the same Forest as
    reading the trees one by one, from JSON, UBJSON and XGBoost 1.x's JSON (default_left
    as true and false)."""
    booster = _train(params, y, rounds=6)
    doc = json.loads(booster.save_raw("json"))
    taken = []
    at_once = fx._plain_trees

    def spy(*args):
        taken.append(at_once(*args) is not None)
        return at_once(*args)

    files = [bytes(booster.save_raw("json")), bytes(booster.save_raw("ubj"))]
    if "gbtree" in doc["learner"]["gradient_booster"]["name"] and \
            "," not in doc["learner"]["learner_model_param"]["base_score"]:
        files.append(json.dumps(_as_1x(doc)).encode())
    for data in files:
        fx._plain_trees = spy
        try:
            fast = _outcome(data)
        finally:
            fx._plain_trees = at_once
        assert not isinstance(fast, tuple), fast
        _assert_same(fast, _one_by_one(data))
    assert taken[0] == plain and taken[2:] == [plain] * len(taken[2:]), taken


_HOSTILE = [-2, -1, 0, 1, 2, 3, 4, 9, 10_000, 2**31, -2**31 - 1, 0.5, float("nan"),
            1e300, True, "1", None, [1]]


@st.composite
def _mutated(draw):
    """A small plain model with one field of one tree set to a hostile value, removed,
    or its tree_param changed."""
    doc = copy.deepcopy(_plain_doc())
    trees = doc["learner"]["gradient_booster"]["model"]["trees"]
    tree = trees[draw(st.integers(0, len(trees) - 1))]
    what = draw(st.sampled_from(["node", "node", "node", "drop", "param", "categories",
                                 "shorten"]))
    if what == "node":
        key = draw(st.sampled_from(sorted(k for k, v in tree.items() if isinstance(v, list)
                                          and v)))
        tree[key][draw(st.integers(0, len(tree[key]) - 1))] = draw(st.sampled_from(_HOSTILE))
    elif what == "drop":
        del tree[draw(st.sampled_from(sorted(tree)))]
    elif what == "shorten":
        key = draw(st.sampled_from(["left_children", "split_type", "sum_hessian",
                                    "default_left", "split_conditions"]))
        tree[key] = tree[key][:-1]
    elif what == "param":
        key = draw(st.sampled_from(["num_nodes", "num_deleted", "size_leaf_vector"]))
        tree["tree_param"][key] = draw(st.sampled_from(
            ["0", "1", "2", "7", "-1", "1.5", "1e1", 0, 1, None, "٣"]))
    else:
        tree["categories_nodes"] = draw(st.sampled_from([[], [0], "x"]))
        if draw(st.booleans()):
            del tree["categories_sizes"]
    return json.dumps(doc).encode()


@functools.cache
def _plain_doc() -> dict:
    booster = _train({"objective": "binary:logistic", "max_depth": 2}, Y_BIN, rounds=3)
    return json.loads(booster.save_raw("json"))


@settings(max_examples=150, deadline=None)
@given(data=_mutated())
def test_trees_at_once_refuse_what_one_by_one_refuses(data):
    """Whatever a damaged file holds, reading its trees at once ends as reading them
    one by one does: the same Forest or the same error."""
    _assert_same(_outcome(data), _one_by_one(data))


def test_blanks_before_and_inside_the_first_brace_are_json():
    # JSON or UBJSON is told by the first bytes that are not blanks, however many
    # blanks come first (found without copying the text).
    booster = _train({"max_depth": 2}, Y_REG, rounds=2)
    text = bytes(booster.save_raw("json"))
    for blanked in (b" \n\t\r" * 100 + text, text.replace(b"{", b"{" + b" " * 300, 1)):
        assert_parity(reference.predict(fx.load_bytes(blanked), X),
                      booster.inplace_predict(X))
