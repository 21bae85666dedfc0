"""compile_estimator: every inference method of the compiled stand-in equals the
estimator's own, for binary, multiclass and string-labelled classifiers, regressors and
rankers of XGBoost, LightGBM and scikit-learn; methods the estimator lacks are absent;
pickling carries the machine code (nothing compiles on unpickling)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import silvanforge
from util import assert_parity, forbid_compiling

xgb = pytest.importorskip("xgboost")
lgb = pytest.importorskip("lightgbm")
ensemble = pytest.importorskip("sklearn.ensemble")

RNG = np.random.default_rng(11)
X = RNG.normal(size=(240, 5)).astype(np.float32)
X_TEST = RNG.normal(size=(70, 5)).astype(np.float32)
Y_BIN = (X[:, 0] + X[:, 1] > 0).astype(int)
Y_MULTI = np.digitize(X[:, 0] - X[:, 2], [-0.6, 0.6])
Y_STR = np.array(["cat", "dog", "emu"])[Y_MULTI]
Y_REG = X[:, 0] * 2 + X[:, 3]

SMALL = {"n_estimators": 4, "max_depth": 3}
ESTIMATORS = {
    "xgb binary": lambda: xgb.XGBClassifier(**SMALL).fit(X, Y_BIN),
    "xgb multi": lambda: xgb.XGBClassifier(**SMALL).fit(X, Y_MULTI),
    "xgb ranker": lambda: xgb.XGBRanker(**SMALL).fit(X, Y_MULTI, qid=np.repeat(
        np.arange(12), 20)),
    "lgbm binary": lambda: lgb.LGBMClassifier(verbose=-1, **SMALL).fit(X, Y_BIN),
    "lgbm strings": lambda: lgb.LGBMClassifier(verbose=-1, **SMALL).fit(X, Y_STR),
    "lgbm ranker": lambda: lgb.LGBMRanker(verbose=-1, min_child_samples=5, **SMALL).fit(
        X, Y_MULTI, group=[20] * 12),
    "rf strings": lambda: ensemble.RandomForestClassifier(random_state=0, **SMALL).fit(
        X, Y_STR),
    "extra trees regressor": lambda: ensemble.ExtraTreesRegressor(
        random_state=0, **SMALL).fit(X, Y_REG),
    "gb binary": lambda: ensemble.GradientBoostingClassifier(**SMALL).fit(X, Y_BIN),
    "gb strings": lambda: ensemble.GradientBoostingClassifier(**SMALL).fit(X, Y_STR),
    "hgb binary": lambda: ensemble.HistGradientBoostingClassifier(
        max_iter=4, max_depth=3).fit(X, Y_BIN),
    "hgb strings": lambda: ensemble.HistGradientBoostingClassifier(
        max_iter=4, max_depth=3).fit(X, Y_STR),
}
METHODS = ("predict", "predict_proba", "decision_function", "apply")
# One kernel (no small-batch one): the fastest build, as the tests compile many.
FAST = {"n_jobs": 1, "schedule": "default"}


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_every_method_equals_the_estimators(name):
    est = ESTIMATORS[name]()
    fast = silvanforge.compile_estimator(est, **FAST)
    assert fast.n_features_in_ == est.n_features_in_
    assert not hasattr(fast, "feature_names_in_")
    if hasattr(est, "classes_") and hasattr(est, "predict_proba"):
        np.testing.assert_array_equal(fast.classes_, est.classes_)
    for method in METHODS:
        assert hasattr(fast, method) == hasattr(est, method), method
        if not hasattr(est, method):
            continue
        expected, got = getattr(est, method)(X_TEST), getattr(fast, method)(X_TEST)
        if method == "predict" and hasattr(est, "classes_"):
            np.testing.assert_array_equal(got, expected)  # labels, strings included
        elif method == "apply":
            assert got.dtype == np.int32
            np.testing.assert_array_equal(got, expected)
        else:
            assert_parity(got, expected, f"{name}: {method}")


def test_feature_names_and_iteration_range():
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame(X, columns=list("abcde"))
    est = xgb.XGBClassifier(n_estimators=6, max_depth=3).fit(frame, Y_MULTI)
    fast = silvanforge.compile_estimator(est, iteration_range=(0, 3), **FAST)
    np.testing.assert_array_equal(fast.feature_names_in_, est.feature_names_in_)
    assert_parity(fast.predict_proba(frame),
                  est.predict_proba(frame, iteration_range=(0, 3)))


def test_pickles_without_compiling(monkeypatch):
    est = ESTIMATORS["rf strings"]()
    fast = silvanforge.compile_estimator(est, **FAST)
    fast.apply(X_TEST[:2])  # the leaf kernel, built now, travels with the pickle
    data = pickle.dumps(fast)
    forbid_compiling(monkeypatch)
    loaded = pickle.loads(data)
    for method in ("predict", "predict_proba", "apply"):
        np.testing.assert_array_equal(getattr(loaded, method)(X_TEST),
                                      getattr(est, method)(X_TEST))


def test_not_an_estimator():
    with pytest.raises(silvanforge.UnsupportedModelError, match="compile_estimator"):
        silvanforge.compile_estimator(xgb.train({}, xgb.DMatrix(X, label=Y_REG), 2))
