"""Leaf output and iteration ranges of the reference evaluator, against each library's
own: XGBoost and LightGBM ``pred_leaf``, scikit-learn ``apply``, ONNX node ids (through
skl2onnx, whose node ids are scikit-learn's), and the round slicing of XGBoost's
``iteration_range`` and LightGBM's ``start_iteration``/``num_iteration``."""

from __future__ import annotations

import numpy as np
import pytest

import silvanforge
from silvanforge import reference
from silvanforge.errors import InputError, UnsupportedModelError
from silvanforge.model import Tree, build_forest
from util import assert_parity, with_nans

xgb = pytest.importorskip("xgboost")
lgb = pytest.importorskip("lightgbm")
ensemble = pytest.importorskip("sklearn.ensemble")

RNG = np.random.default_rng(7)
X = RNG.normal(size=(300, 6)).astype(np.float32)
Y_BIN = (X[:, 0] + X[:, 1] > 0).astype(int)
Y_MULTI = np.digitize(X[:, 0] + 0.5 * X[:, 2], [-0.5, 0.5])
X_TEST = with_nans(RNG.normal(size=(80, 6)), 0.1, seed=1)


def _xgb(params, y, rounds=5):
    return xgb.train({"max_depth": 3, "verbosity": 0, **params},
                     xgb.DMatrix(X, label=y), rounds)


XGB_MODELS = {
    "binary": lambda: _xgb({"objective": "binary:logistic"}, Y_BIN),
    "multiclass": lambda: _xgb({"objective": "multi:softprob", "num_class": 3}, Y_MULTI),
    "parallel": lambda: _xgb({"objective": "multi:softprob", "num_class": 3,
                              "num_parallel_tree": 2, "subsample": 0.8}, Y_MULTI, 3),
    "pruned": lambda: _xgb({"objective": "reg:squarederror", "gamma": 2.0,
                            "max_depth": 5}, X[:, 0], 6),
}


@pytest.mark.parametrize("name", sorted(XGB_MODELS))
@pytest.mark.parametrize("fmt", ["json", "ubj"])
def test_xgboost_pred_leaf(name, fmt):
    booster = XGB_MODELS[name]()
    forest = silvanforge.load(bytes(booster.save_raw(fmt)))
    expected = booster.predict(xgb.DMatrix(X_TEST), pred_leaf=True)
    got = reference.leaf_output(forest, X_TEST)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("name", sorted(XGB_MODELS))
def test_xgboost_iteration_range(name):
    booster = XGB_MODELS[name]()
    forest = silvanforge.load(bytes(booster.save_raw("json")))
    rounds = forest.n_rounds
    assert rounds == booster.num_boosted_rounds()
    for begin, end in [(0, 0), (1, rounds), (0, 2), (1, 2)]:
        sliced = forest.slice(begin, end)
        dm = xgb.DMatrix(X_TEST)
        assert_parity(reference.predict(sliced, X_TEST),
                      booster.predict(dm, iteration_range=(begin, end)), f"{begin, end}")
        # pred_leaf takes iteration ranges from 0 only; XGBoost's answer is model slicing.
        np.testing.assert_array_equal(
            reference.leaf_output(sliced, X_TEST),
            booster[begin:end or rounds].predict(dm, pred_leaf=True))


@pytest.mark.parametrize("objective,y", [("binary", Y_BIN), ("multiclass", Y_MULTI)])
def test_lightgbm_pred_leaf_and_iterations(objective, y):
    params = {"objective": objective, "num_leaves": 7, "verbose": -1, "min_data_in_leaf": 5}
    if objective == "multiclass":
        params["num_class"] = 3
    booster = lgb.train(params, lgb.Dataset(X.astype(np.float64), y), 6)
    forest = silvanforge.load(booster.model_to_string().encode())
    np.testing.assert_array_equal(reference.leaf_output(forest, X_TEST),
                                  booster.predict(X_TEST, pred_leaf=True))
    for start, num in [(0, 2), (2, 3), (1, 5)]:
        sliced = forest.slice(start, start + num)
        assert_parity(reference.predict(sliced, X_TEST),
                      booster.predict(X_TEST, start_iteration=start, num_iteration=num))
        assert_parity(reference.predict(sliced, X_TEST, output="margin"),
                      booster.predict(X_TEST, start_iteration=start, num_iteration=num,
                                      raw_score=True))


@pytest.mark.parametrize("cls,y", [(ensemble.RandomForestClassifier, Y_MULTI),
                                   (ensemble.ExtraTreesRegressor, X[:, 0]),
                                   (ensemble.GradientBoostingClassifier, Y_MULTI),
                                   (ensemble.GradientBoostingClassifier, Y_BIN),
                                   (ensemble.GradientBoostingRegressor, X[:, 1])])
def test_sklearn_apply(cls, y):
    est = cls(n_estimators=4, max_depth=3, random_state=0).fit(X, y)
    rows = np.nan_to_num(X_TEST)  # GradientBoosting refuses NaN
    forest = silvanforge.load(est)
    got = reference.leaf_output(forest, rows)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, est.apply(rows))


def test_hist_gradient_boosting_leaf_ids_index_its_predictor_nodes():
    """HistGradientBoosting has no ``apply``: its leaf output is the index into each
    tree's ``_predictors[round][k].nodes``, shaped (rows, rounds, k) like
    GradientBoosting's ``apply``; the values there sum to ``decision_function``."""
    est = ensemble.HistGradientBoostingClassifier(max_iter=4, max_depth=3).fit(X, Y_MULTI)
    ids = reference.leaf_output(silvanforge.load(est), X_TEST)
    assert ids.shape == (len(X_TEST), 4, 3)
    total = sum(est._predictors[i][k].nodes["value"][ids[:, i, k]][:, None] * np.eye(3)[k]
                for i in range(4) for k in range(3))
    assert_parity(total + est._baseline_prediction, est.decision_function(X_TEST))
    assert np.all(np.take_along_axis(  # every id is a leaf's
        np.stack([[est._predictors[i][k].nodes["is_leaf"][ids[:, i, k]]
                   for k in range(3)] for i in range(4)]), np.zeros((1, 1, 1), int), 0))


def test_onnx_node_ids_are_sklearns():
    skl2onnx = pytest.importorskip("skl2onnx")
    from skl2onnx.common.data_types import FloatTensorType

    est = ensemble.RandomForestRegressor(n_estimators=3, max_depth=4,
                                         random_state=0).fit(X, X[:, 0])
    model = skl2onnx.convert_sklearn(est, initial_types=[("X", FloatTensorType([None, 6]))])
    forest = silvanforge.load(model.SerializeToString())
    rows = np.nan_to_num(X_TEST)
    np.testing.assert_array_equal(reference.leaf_output(forest, rows), est.apply(rows))


def test_hand_built_forest_numbers_leaves_by_node_index():
    tree = Tree(left=[1, -1, -1], right=[2, -1, -1], feature=[0, 0, 0],
                threshold=[0.0, 0, 0], leaf_value=[0.0, 1.0, 2.0])
    forest = build_forest([tree, tree], n_features=1, n_outputs=1)
    np.testing.assert_array_equal(reference.leaf_output(forest, [[-1.0], [1.0]]),
                                  [[1, 1], [2, 2]])
    # A library's forest without ids (an older SilvanForge's save) is refused, not guessed.
    with pytest.raises(UnsupportedModelError, match="no source node ids"):
        reference.leaf_output(forest.replace(source="lightgbm 4.7.0"), [[0.0]])


@pytest.mark.parametrize("bad", [(0, 6), (3, 2), (-1, 2), (5, 0), (0.5, 2), (True, 2)])
def test_iteration_range_out_of_range(bad):
    forest = silvanforge.load(bytes(XGB_MODELS["binary"]().save_raw("json")))
    with pytest.raises(InputError, match="iteration_range"):
        forest.slice(*bad)
