"""Parity of the scikit-learn frontend with scikit-learn 1.9's own predictions.

Every model is loaded as a live object (scikit-learn has no non-pickle file format) and
``reference.predict`` is compared with predict / predict_proba / decision_function on
float32 rows, including NaN, rows exactly on the model's thresholds and unseen categories.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
import sklearn
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn import datasets, ensemble, tree
from sklearn.dummy import DummyClassifier, DummyRegressor
from sklearn.linear_model import LinearRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import silvanforge
from silvanforge import reference
from silvanforge.errors import MissingDependencyError, ModelFormatError, UnsupportedModelError
from silvanforge.frontends.sklearn import installed_version, isolation_forest_output
from silvanforge.model.forest import OP_CAT
from util import assert_parity, with_nans

RNG = np.random.default_rng(20240601)


def _data(n=240, d=5, seed=0, nan=0.0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32)
    # a few repeated values so that thresholds fall between ties
    X[:, 0] = np.round(X[:, 0], 1)
    y_reg = (X[:, 0] * 2 + np.sin(X[:, 1]) + 0.1 * rng.normal(size=n)).astype(np.float64)
    y_bin = (X[:, 0] + X[:, 1] > 0).astype(int)
    y_multi = np.digitize(X[:, 0] - X[:, 2], [-0.8, 0.0, 0.8])
    return (with_nans(X, nan, seed) if nan else X), y_reg, y_bin, y_multi


def _threshold_rows(forest, X, limit=60):
    """Rows whose split feature sits exactly on a threshold (as float32) and one ulp off.

    The thresholds come from the loaded model; sklearn's trees cast inputs to float32,
    so the float32 rounding of each threshold and its float32 neighbours are the
    values that land on either side of the test.
    """
    internal = ~forest.is_leaf & (forest.split_op != OP_CAT)
    idx = np.flatnonzero(internal)
    idx = idx[np.isfinite(forest.threshold[idx])][:limit]
    rows = []
    for k, node in enumerate(idx):
        t32 = np.float32(forest.threshold[node])
        for v in (t32, np.nextafter(t32, np.float32(np.inf)),
                  np.nextafter(t32, np.float32(-np.inf))):
            row = np.array(X[k % len(X)], dtype=np.float32)
            row[forest.feature[node]] = v
            rows.append(row)
    return np.array(rows, dtype=np.float32).reshape(-1, X.shape[1])


def _rows(forest, X):
    return np.vstack([X, _threshold_rows(forest, X)]).astype(np.float32)


def _check(model, X, value, margin=None, what=""):
    """Load ``model`` and compare the reference's value (and margin) with sklearn's."""
    forest = silvanforge.load(model)
    X = _rows(forest, X)
    assert_parity(reference.predict(forest, X), value(X), f"{what} value")
    got_margin = reference.predict(forest, X, output="margin")
    if margin is None:
        # trees and forests have no margin of their own: margin == value
        assert_parity(got_margin, value(X), f"{what} margin")
    else:
        assert_parity(got_margin, margin(X), f"{what} margin")
    return forest


# ---- single trees and random forests -------------------------------------------------

# The suite runs at the lowest scikit-learn pyproject.toml allows (CI's floor job) too;
# these tests need what came later: NaN in ExtraTrees and IsolationForest (fit and
# predict), HistGradientBoosting's categories taken from pandas dtypes by default.
SINCE_1_6 = pytest.mark.skipif(installed_version() < (1, 6), reason=(
    f"needs scikit-learn 1.6 (NaN in ExtraTrees and IsolationForest, categories from "
    f"pandas dtypes by default); this is {sklearn.__version__}"))

TREE_CLASSIFIERS = [
    lambda: tree.DecisionTreeClassifier(max_depth=6, random_state=0),
    pytest.param(lambda: tree.ExtraTreeClassifier(max_depth=8, random_state=0),
                 marks=SINCE_1_6),
    lambda: ensemble.RandomForestClassifier(n_estimators=4, max_depth=6, random_state=0),
    pytest.param(lambda: ensemble.ExtraTreesClassifier(n_estimators=4, max_depth=6,
                                                       random_state=0), marks=SINCE_1_6),
]
TREE_REGRESSORS = [
    lambda: tree.DecisionTreeRegressor(max_depth=6, random_state=0),
    pytest.param(lambda: tree.ExtraTreeRegressor(max_depth=8, random_state=0),
                 marks=SINCE_1_6),
    lambda: ensemble.RandomForestRegressor(n_estimators=4, max_depth=6, random_state=0),
    pytest.param(lambda: ensemble.ExtraTreesRegressor(n_estimators=4, max_depth=6,
                                                      random_state=0), marks=SINCE_1_6),
]


@pytest.mark.parametrize("make", TREE_CLASSIFIERS)
@pytest.mark.parametrize("target", ["binary", "multiclass"])
@pytest.mark.parametrize("nan", [0.0, 0.1])
def test_tree_classifiers(make, target, nan):
    X, _, y_bin, y_multi = _data(nan=nan)
    y = y_bin if target == "binary" else y_multi
    model = make().fit(X, np.array(["c%d" % v for v in y]))
    # NaN at predict time also for models trained without NaN (routed the way sklearn
    # routes them: by missing_go_to_left)
    Xt = with_nans(_data(seed=1)[0], 0.15, seed=2)
    forest = _check(model, Xt, model.predict_proba, what=type(model).__name__)
    assert forest.class_labels == tuple(model.classes_)
    assert forest.input_dtype == np.float32


@pytest.mark.parametrize("make", TREE_REGRESSORS)
@pytest.mark.parametrize("n_targets", [1, 3])
@pytest.mark.parametrize("nan", [0.0, 0.1])
def test_tree_regressors(make, n_targets, nan):
    X, y, _, _ = _data(nan=nan)
    if n_targets > 1:
        y = np.column_stack([y * (k + 1) + k for k in range(n_targets)])
    model = make().fit(X, y)
    Xt = with_nans(_data(seed=3)[0], 0.15, seed=4)
    forest = _check(model, Xt, model.predict, what=type(model).__name__)
    assert forest.leaf_width == n_targets


def test_a_scikit_learn_older_than_the_floor_is_refused(monkeypatch):
    # Before 1.4 a classifier's leaves held class counts: read as fractions they would
    # be wrong answers, so the load names the version instead.
    model = tree.DecisionTreeClassifier(max_depth=2).fit(*_data()[::2])
    monkeypatch.setattr(sklearn, "__version__", "1.3.2")
    with pytest.raises(MissingDependencyError, match=r"scikit-learn 1\.3\.2 is older"):
        silvanforge.load(model)


def test_bundled_datasets_trees_and_forests():
    iris = datasets.load_iris()
    X = iris.data.astype(np.float32)
    rf = ensemble.RandomForestClassifier(n_estimators=5, random_state=0).fit(X, iris.target)
    _check(rf, X, rf.predict_proba, what="iris RF")
    diab = datasets.load_diabetes()
    X = diab.data.astype(np.float32)
    et = ensemble.ExtraTreesRegressor(n_estimators=3, max_depth=8, random_state=0)
    et.fit(X, diab.target)
    _check(et, X, et.predict, what="diabetes ET")
    dt = tree.DecisionTreeRegressor(max_depth=10, random_state=0).fit(X, diab.target)
    _check(dt, X, dt.predict, what="diabetes DT")


def test_dataframe_feature_names_and_class_weights():
    X, _, _, y = _data()
    df = pd.DataFrame(X, columns=list("abcde"))
    model = ensemble.RandomForestClassifier(n_estimators=3, class_weight="balanced",
                                            max_samples=0.7, random_state=0).fit(df, y)
    forest = silvanforge.load(model)
    assert forest.feature_names == tuple("abcde")
    assert_parity(reference.predict(forest, df), model.predict_proba(df), "dataframe")


# ---- GradientBoosting ----------------------------------------------------------------

def _gb_nan_margin(model, X):
    """sklearn's own GradientBoosting tree walk on rows with NaN (predict refuses them)."""
    from sklearn.ensemble._gradient_boosting import predict_stages

    X = np.ascontiguousarray(X, dtype=np.float32)
    raw = model._raw_predict_init(np.nan_to_num(X))
    predict_stages(model.estimators_, X, model.learning_rate, raw)
    return raw if raw.shape[1] > 1 else raw.ravel()


@pytest.mark.parametrize("loss", ["log_loss", "exponential"])
def test_gradient_boosting_binary(loss):
    X, _, y, _ = _data()
    model = ensemble.GradientBoostingClassifier(n_estimators=8, max_depth=3, loss=loss,
                                                learning_rate=0.3, random_state=0)
    model.fit(X, y)
    forest = _check(model, _data(seed=5)[0], model.predict_proba, model.decision_function,
                    what=f"GB {loss}")
    assert forest.post_transform == "sigmoid_pair"
    # NaN rows: compare with sklearn's tree walk, which sends NaN right
    Xn = with_nans(_data(seed=6)[0], 0.2, seed=7)
    assert_parity(reference.predict(forest, Xn, output="margin"), _gb_nan_margin(model, Xn),
                  "GB NaN")


def test_gradient_boosting_multiclass_subsample_and_iris():
    X, _, _, y = _data()
    model = ensemble.GradientBoostingClassifier(n_estimators=6, max_depth=2, subsample=0.8,
                                                random_state=0).fit(X, y)
    _check(model, _data(seed=8)[0], model.predict_proba, model.decision_function,
           what="GB multiclass")
    Xn = with_nans(X, 0.2, seed=9)
    assert_parity(reference.predict(silvanforge.load(model), Xn, output="margin"),
                  _gb_nan_margin(model, Xn), "GB multiclass NaN")
    iris = datasets.load_iris()
    Xi = iris.data.astype(np.float32)
    gb = ensemble.GradientBoostingClassifier(n_estimators=5, random_state=0)
    gb.fit(Xi, iris.target)
    _check(gb, Xi, gb.predict_proba, gb.decision_function, what="iris GB")


@pytest.mark.parametrize("loss", ["squared_error", "absolute_error", "huber", "quantile"])
def test_gradient_boosting_regressor(loss):
    X, y, _, _ = _data()
    model = ensemble.GradientBoostingRegressor(n_estimators=8, max_depth=3, loss=loss,
                                               alpha=0.7, random_state=0).fit(X, y)
    _check(model, _data(seed=10)[0], model.predict, model.predict, what=f"GB {loss}")


def test_gradient_boosting_init_variants_and_breast_cancer():
    X, y, yb, _ = _data()
    zero = ensemble.GradientBoostingRegressor(n_estimators=5, init="zero").fit(X, y)
    _check(zero, X, zero.predict, zero.predict, what="GB zero init")
    dummy = ensemble.GradientBoostingClassifier(
        n_estimators=5, init=DummyClassifier(strategy="prior")).fit(X, yb)
    _check(dummy, X, dummy.predict_proba, dummy.decision_function, what="GB dummy init")
    med = ensemble.GradientBoostingRegressor(
        n_estimators=5, init=DummyRegressor(strategy="median")).fit(X, y)
    _check(med, X, med.predict, med.predict, what="GB median init")
    bc = datasets.load_breast_cancer()
    Xb = bc.data.astype(np.float32)
    gb = ensemble.GradientBoostingClassifier(n_estimators=5, random_state=0)
    gb.fit(Xb, bc.target)
    _check(gb, Xb, gb.predict_proba, gb.decision_function, what="breast cancer GB")


# ---- HistGradientBoosting ------------------------------------------------------------

def _hgb_threshold_rows64(forest, X):
    """Rows exactly on HistGB's float64 thresholds (it compares in float64)."""
    internal = ~forest.is_leaf & (forest.split_op != OP_CAT) & np.isfinite(forest.threshold)
    rows = []
    for k, node in enumerate(np.flatnonzero(internal)[:60]):
        row = np.array(X[k % len(X)], dtype=np.float64)
        row[forest.feature[node]] = forest.threshold[node]
        rows.append(row)
    return np.array(rows).reshape(-1, X.shape[1])


@pytest.mark.parametrize("target", ["binary", "multiclass"])
def test_hist_gradient_boosting_classifier(target):
    X, _, y_bin, y_multi = _data(n=300, nan=0.1)
    y = y_bin if target == "binary" else y_multi
    model = ensemble.HistGradientBoostingClassifier(max_iter=6, max_leaf_nodes=8,
                                                    random_state=0).fit(X, y)
    Xt = with_nans(_data(seed=11)[0], 0.15, seed=12)
    forest = _check(model, Xt, model.predict_proba, model.decision_function,
                    what=f"HGB {target}")
    assert forest.input_dtype == np.float64
    X64 = _hgb_threshold_rows64(forest, Xt)
    assert_parity(reference.predict(forest, X64), model.predict_proba(X64), "HGB float64")


@pytest.mark.parametrize("loss", ["squared_error", "absolute_error", "poisson", "gamma",
                                  "quantile"])
def test_hist_gradient_boosting_regressor(loss):
    X, y, _, _ = _data(n=300, nan=0.1)
    y = np.abs(y) + 0.1
    kw = {"quantile": 0.3} if loss == "quantile" else {}
    model = ensemble.HistGradientBoostingRegressor(max_iter=6, loss=loss, random_state=0,
                                                   **kw).fit(X, y)
    Xt = with_nans(_data(seed=13)[0], 0.15, seed=14)
    forest = _check(model, Xt, model.predict, lambda Z: model._raw_predict(Z).ravel(),
                    what=f"HGB {loss}")
    assert forest.post_transform == ("exp" if loss in ("poisson", "gamma") else "identity")


def _categorical_data(n=400, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4)).astype(np.float32)
    X[:, 1] = rng.choice([0, 2, 3, 5, 7, 40], n)      # sparse category values
    X[:, 3] = rng.integers(0, 4, n)
    y = (np.isin(X[:, 1], [2, 7, 40]) ^ (X[:, 0] > 0.3) ^ (X[:, 3] == 1)).astype(int)
    X = with_nans(X, 0.08, seed)
    return X, y


@pytest.mark.parametrize("spec", ["indices", "mask"])
def test_hist_gradient_boosting_categorical_numpy(spec):
    X, y = _categorical_data()
    cats = [1, 3] if spec == "indices" else [False, True, False, True]
    model = ensemble.HistGradientBoostingClassifier(max_iter=6, categorical_features=cats,
                                                    random_state=0).fit(X, y)
    forest = silvanforge.load(model)
    assert forest.has_categorical
    Xt = _categorical_data(seed=1)[0]
    # unknown, negative, fractional and huge categories: sklearn treats them
    # all as missing
    Xt[:40, 1] = np.array([-1, -5, 1, 4, 6, 8, 39, 41, 2.5, 1e7, 1e30, -1e30,
                           2, 7, 40, 0, 3, 5, np.nan, 100] * 2, dtype=np.float32)
    Xt[40:60, 3] = np.array([-1, 4, 0.5, 3, 2, 1, 0, np.nan, 9, -0.5] * 2, dtype=np.float32)
    X_all = _rows(forest, Xt)
    assert_parity(reference.predict(forest, X_all), model.predict_proba(X_all), "HGB cat")
    assert_parity(reference.predict(forest, X_all, output="margin"),
                  model.decision_function(X_all), "HGB cat margin")


def test_hist_gradient_boosting_categorical_pandas_multiclass():
    rng = np.random.default_rng(3)
    n = 400
    df = pd.DataFrame({
        "num": rng.normal(size=n).astype(np.float32),
        "color": pd.Categorical(rng.choice(["red", "green", "blue", None], n),
                                categories=["red", "green", "blue", "unused"]),
        "x2": rng.normal(size=n).astype(np.float32),
        "size": pd.Categorical(rng.choice(["S", "M", "L"], n)),
    })
    y = ((df.color == "green").astype(int) + (df["num"] > 0) + (df["size"] == "L")) % 3
    df.loc[rng.random(n) < 0.1, "x2"] = np.nan
    model = ensemble.HistGradientBoostingClassifier(
        max_iter=5, categorical_features="from_dtype", random_state=0).fit(df, y)
    forest = silvanforge.load(model)
    assert forest.feature_names == ("num", "color", "x2", "size")
    assert forest.pandas_categories["color"] == ("blue", "green", "red")
    test = df.copy()
    # categories the model never saw ("unused" is in the dtype but not in the data,
    # "purple" in neither) are missing values for sklearn
    test["color"] = pd.Categorical(rng.choice(["red", "green", "blue", "unused", "purple",
                                               None], n))
    test["size"] = pd.Categorical(rng.choice(["M", "XL", "S", "L"], n))
    assert_parity(reference.predict(forest, test), model.predict_proba(test), "pandas cat")
    assert_parity(reference.predict(forest, test, output="margin"),
                  model.decision_function(test), "pandas cat margin")


def test_hist_gradient_boosting_breast_cancer_and_diabetes():
    bc = datasets.load_breast_cancer()
    X = with_nans(bc.data.astype(np.float32), 0.05, 1)
    model = ensemble.HistGradientBoostingClassifier(max_iter=5, random_state=0)
    model.fit(X, bc.target)
    _check(model, X, model.predict_proba, model.decision_function, what="bc HGB")
    diab = datasets.load_diabetes()
    X = diab.data.astype(np.float32)
    reg = ensemble.HistGradientBoostingRegressor(max_iter=5, loss="poisson")
    reg.fit(X, diab.target)
    _check(reg, X, reg.predict, lambda Z: reg._raw_predict(Z).ravel(), what="diab HGB")


# ---- IsolationForest -----------------------------------------------------------------

@SINCE_1_6
@pytest.mark.parametrize("max_features", [1.0, 0.6])
def test_isolation_forest(max_features):
    X = with_nans(_data(n=200)[0], 0.05, 3)
    model = ensemble.IsolationForest(n_estimators=6, max_features=max_features,
                                     random_state=0).fit(X)
    Xt = np.vstack([with_nans(_data(seed=15)[0], 0.1, 16), 4 * _data(n=40, seed=17)[0]])
    forest = silvanforge.load(model)
    Xt = _rows(forest, Xt)
    assert_parity(reference.predict(forest, Xt), model.predict(Xt), "iforest predict")
    assert set(np.unique(model.predict(Xt))) == {-1, 1}
    assert_parity(reference.predict(isolation_forest_output(forest, "decision_function"),
                                    Xt), model.decision_function(Xt), "decision_function")
    scores = isolation_forest_output(forest, "score_samples")
    assert_parity(reference.predict(scores, Xt), model.score_samples(Xt), "score_samples")
    # the margin is the mean path length: score_samples = -2 ** (-margin / c)
    c = forest.transform_params["c"]
    assert_parity(reference.predict(forest, Xt, output="margin"),
                  -np.log2(-model.score_samples(Xt)) * c, "path length")
    back = isolation_forest_output(scores, "predict")
    assert_parity(reference.predict(back, Xt), model.predict(Xt), "predict again")


def test_isolation_forest_contamination():
    X = _data(n=200)[0]
    model = ensemble.IsolationForest(n_estimators=5, contamination=0.1,
                                     random_state=1).fit(X)
    forest = isolation_forest_output(silvanforge.load(model), "decision_function")
    Xt = _data(seed=18)[0]
    assert_parity(reference.predict(forest, Xt), model.decision_function(Xt), "contam")


# ---- property tests --------------------------------------------------------------------

def _random_problem(data, allow_nan=True):
    n = data.draw(st.integers(20, 150), label="rows")
    d = data.draw(st.integers(1, 6), label="features")
    nan = data.draw(st.sampled_from([0.0, 0.05, 0.3]) if allow_nan else st.just(0.0),
                    label="nan fraction")
    seed = data.draw(st.integers(0, 2**16), label="seed")
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32)
    if data.draw(st.booleans(), label="coarse values"):
        X = np.round(X, 1)
    y = X[:, 0] + rng.normal(size=n) * 0.5
    if nan:
        X = with_nans(X, nan, seed)
    Xt = with_nans(rng.normal(size=(60, d)).astype(np.float32), nan or 0.1, seed + 1)
    return X, y, Xt


@given(st.data())
def test_property_decision_tree_and_random_forest(data):
    X, y, Xt = _random_problem(data)
    depth = data.draw(st.one_of(st.none(), st.integers(1, 20)), label="max_depth")
    kind = data.draw(st.sampled_from(["dtc", "dtr", "rfc", "rfr"]), label="model")
    if kind in ("dtc", "rfc"):
        k = data.draw(st.integers(2, 4), label="classes")
        y = np.digitize(y, np.quantile(y, np.linspace(0, 1, k + 1)[1:-1]))
    if kind == "dtc":
        model = tree.DecisionTreeClassifier(max_depth=depth, random_state=0)
    elif kind == "dtr":
        model = tree.DecisionTreeRegressor(max_depth=depth, random_state=0)
    else:
        n_est = data.draw(st.integers(1, 4), label="n_estimators")
        cls = ensemble.RandomForestClassifier if kind == "rfc" else \
            ensemble.RandomForestRegressor
        model = cls(n_estimators=n_est, max_depth=depth, random_state=0)
    model.fit(X, y)
    predict = model.predict_proba if kind in ("dtc", "rfc") else model.predict
    _check(model, Xt, predict, what=kind)


@given(st.data())
def test_property_hist_gradient_boosting(data):
    X, y, Xt = _random_problem(data)
    classify = data.draw(st.sampled_from([0, 2, 3]), label="classes")
    kw = dict(max_iter=data.draw(st.integers(1, 5), label="max_iter"),
              max_depth=data.draw(st.one_of(st.none(), st.integers(1, 20)), label="depth"),
              max_leaf_nodes=data.draw(st.integers(2, 31), label="leaves"),
              max_bins=data.draw(st.sampled_from([4, 32, 255]), label="bins"),
              min_samples_leaf=data.draw(st.integers(1, 20), label="min leaf"),
              early_stopping=False, random_state=0)
    if data.draw(st.booleans(), label="categorical"):
        X = X.copy()
        Xt = Xt.copy()
        # at most max_bins categories (sklearn's limit); the test rows add unseen and
        # negative ones
        codes = np.minimum(np.abs(np.round(X[:, 0] * 3)), kw["max_bins"] - 1)
        X[:, 0] = np.where(np.isnan(X[:, 0]), np.nan, codes)
        Xt[:, 0] = np.where(np.isnan(Xt[:, 0]), np.nan, np.round(Xt[:, 0] * 3))
        kw["categorical_features"] = [0]
    if classify:
        y = np.digitize(y, np.quantile(y, np.linspace(0, 1, classify + 1)[1:-1]))
        if len(np.unique(y)) < 2:
            y[0] = 1 - y[0]
        model = ensemble.HistGradientBoostingClassifier(**kw).fit(X, y)
        _check(model, Xt, model.predict_proba, model.decision_function, what="hgb clf")
    else:
        model = ensemble.HistGradientBoostingRegressor(**kw).fit(X, y)
        _check(model, Xt, model.predict, lambda Z: model._raw_predict(Z).ravel(),
               what="hgb reg")


@settings(max_examples=10)
@given(st.data())
def test_property_gradient_boosting(data):
    X, y, Xt = _random_problem(data, allow_nan=False)
    Xt = np.nan_to_num(Xt)
    model = ensemble.GradientBoostingRegressor(
        n_estimators=data.draw(st.integers(1, 6), label="n_estimators"),
        max_depth=data.draw(st.integers(1, 8), label="depth"),
        learning_rate=data.draw(st.floats(0.01, 1.0), label="learning rate"),
        random_state=0).fit(X, y)
    _check(model, Xt, model.predict, model.predict, what="gbr")


# ---- bad input -----------------------------------------------------------------------

def test_unfitted_estimators_are_refused():
    for model in (tree.DecisionTreeClassifier(), ensemble.RandomForestRegressor(),
                  ensemble.GradientBoostingClassifier(),
                  ensemble.HistGradientBoostingRegressor(), ensemble.IsolationForest()):
        with pytest.raises(UnsupportedModelError, match=f"{type(model).__name__}.*not fitted"):
            silvanforge.load(model)


def test_unsupported_estimators_are_refused():
    X, y, yb, _ = _data()
    with pytest.raises(UnsupportedModelError, match="LinearRegression is not a supported"):
        silvanforge.load(LinearRegression().fit(X, y))
    pipe = make_pipeline(StandardScaler(), tree.DecisionTreeRegressor()).fit(X, y)
    with pytest.raises(UnsupportedModelError, match=r"final estimator \(pipeline\[-1\]\)"):
        silvanforge.load(pipe)
    with pytest.raises(UnsupportedModelError, match="AdaBoostRegressor"):
        silvanforge.load(ensemble.AdaBoostRegressor(n_estimators=2).fit(X, y))
    multi = ensemble.RandomForestClassifier(n_estimators=2).fit(X, np.c_[yb, 1 - yb])
    with pytest.raises(UnsupportedModelError, match="multi-output classification"):
        silvanforge.load(multi)
    lin_init = ensemble.GradientBoostingRegressor(n_estimators=2, init=LinearRegression())
    with pytest.raises(UnsupportedModelError, match="init=LinearRegression"):
        silvanforge.load(lin_init.fit(X, y))
    strat = ensemble.GradientBoostingClassifier(
        n_estimators=2, init=DummyClassifier(strategy="stratified")).fit(X, yb)
    with pytest.raises(UnsupportedModelError, match="init=DummyClassifier"):
        silvanforge.load(strat)


def test_negative_training_categories_are_refused():
    X, y = _categorical_data()
    X[:, 1] -= 1  # categories now include -1
    model = ensemble.HistGradientBoostingClassifier(max_iter=2, categorical_features=[1])
    with pytest.raises(UnsupportedModelError, match="training category -1"):
        silvanforge.load(model.fit(X, y))


def _fitted_tree():
    X, y, _, _ = _data()
    return tree.DecisionTreeRegressor(max_depth=4, random_state=0).fit(X, y)


def _internal_node(t, k=0):
    return int(np.flatnonzero(t.tree_.children_left >= 0)[k])


def test_tampered_child_index():
    model = _fitted_tree()
    node = _internal_node(model, 1)
    model.tree_.children_left[node] = 10_000
    with pytest.raises(ModelFormatError, match=f"tree 0, node {node}: child index"):
        silvanforge.load(model)


def test_tampered_feature_index():
    model = ensemble.RandomForestRegressor(n_estimators=2, max_depth=3, random_state=0)
    X, y, _, _ = _data()
    model.fit(X, y)
    node = _internal_node(model.estimators_[1], 2)
    model.estimators_[1].tree_.feature[node] = 99
    with pytest.raises(ModelFormatError, match=f"tree 1, node {node}: feature index"):
        silvanforge.load(model)


def test_tampered_cycle():
    model = _fitted_tree()
    node = _internal_node(model, 2)
    model.tree_.children_right[node] = 0  # back to the root
    with pytest.raises(ModelFormatError, match="tree 0, node 0: the root is the child"):
        silvanforge.load(model)


def test_tampered_self_loop_and_half_leaf():
    model = _fitted_tree()
    node = _internal_node(model, 1)
    model.tree_.children_left[node] = node
    with pytest.raises(ModelFormatError, match="tree 0, node"):
        silvanforge.load(model)
    model = _fitted_tree()
    model.tree_.children_left[_internal_node(model, 1)] = -1
    with pytest.raises(ModelFormatError, match="has one child"):
        silvanforge.load(model)


def test_tampered_hist_gradient_boosting():
    X, y = _categorical_data()
    model = ensemble.HistGradientBoostingClassifier(max_iter=2, categorical_features=[1],
                                                    random_state=0).fit(X, y)
    nodes = model._predictors[1][0].nodes
    internal = np.flatnonzero(nodes["is_leaf"] == 0)
    nodes["feature_idx"][internal[0]] = 12
    with pytest.raises(ModelFormatError, match=f"tree 1, node {internal[0]}: feature"):
        silvanforge.load(model)
    model = ensemble.HistGradientBoostingClassifier(max_iter=2, categorical_features=[1],
                                                    random_state=0).fit(X, y)
    nodes = model._predictors[0][0].nodes
    cat = np.flatnonzero((nodes["is_categorical"] == 1) & (nodes["is_leaf"] == 0))
    assert len(cat), "the model should split on the categorical feature"
    nodes["bitset_idx"][cat[0]] = 50
    with pytest.raises(ModelFormatError, match=f"tree 0, node {cat[0]}: category bitset"):
        silvanforge.load(model)
    model = ensemble.HistGradientBoostingClassifier(max_iter=2, random_state=0).fit(X, y)
    nodes = model._predictors[0][0].nodes
    nodes["right"][np.flatnonzero(nodes["is_leaf"] == 0)[1]] = 0
    with pytest.raises(ModelFormatError, match="tree 0, node"):
        silvanforge.load(model)


def test_tampered_leaf_value():
    model = _fitted_tree()
    leaf = int(np.flatnonzero(model.tree_.children_left < 0)[0])
    model.tree_.value[leaf, 0, 0] = np.inf
    with pytest.raises(ModelFormatError, match=f"tree 0, node {leaf}: leaf value"):
        silvanforge.load(model)


def test_warning_free_load_of_dataframe_gradient_boosting():
    X, _, yb, _ = _data()
    df = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])])
    model = ensemble.GradientBoostingClassifier(n_estimators=3).fit(df, yb)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        forest = silvanforge.load(model)
    assert forest.feature_names == tuple(df.columns)
    assert_parity(reference.predict(forest, df), model.predict_proba(df), "GB dataframe")


@SINCE_1_6
def test_hist_gradient_boosting_numeric_pandas_categories_and_names():
    rng = np.random.default_rng(5)
    n = 300
    df = pd.DataFrame({
        "level": pd.Categorical(rng.choice([10, 20, 35], n)),   # numeric categories
        "code": rng.choice([1.0, 4.0, 6.0], n).astype(np.float32),  # numeric column
        "x": rng.normal(size=n).astype(np.float32),
    })
    y = ((df.level == 20) ^ (df.code == 4.0) ^ (df.x > 0)).to_numpy(dtype=float) + df.x
    test = df.copy()
    test["level"] = pd.Categorical(rng.choice([10, 20, 35, 50], n))
    test["code"] = rng.choice([1.0, 4.0, 6.0, 5.0, -1.0, np.nan], n).astype(np.float32)
    # "from_dtype": the pandas column is matched through its categories, never through
    # the dtype's own codes (which differ from sklearn's once 50 is added)
    by_dtype = ensemble.HistGradientBoostingRegressor(max_iter=5, random_state=0)
    forest = silvanforge.load(by_dtype.fit(df, y))
    assert forest.pandas_categories == {"level": (10, 20, 35)}
    assert_parity(reference.predict(forest, test), by_dtype.predict(test), "from_dtype")
    # by name, a numeric column: matched on its raw values
    by_name = ensemble.HistGradientBoostingRegressor(
        max_iter=5, categorical_features=["code"], random_state=0).fit(df[["code", "x"]], y)
    forest = silvanforge.load(by_name)
    assert forest.has_categorical and forest.pandas_categories == {}
    assert_parity(reference.predict(forest, test[["code", "x"]]),
                  by_name.predict(test[["code", "x"]]), "by name")
    # A pandas categorical column of numbers that scikit-learn has no encoder for is read
    # by its values, not by the dtype's codes, by HistGB (declared by mask) and by trees.
    shuffled = test.assign(level=pd.Categorical(test.level.astype(float),
                                                categories=[50.0, 35.0, 20.0, 10.0]))
    for est in (ensemble.HistGradientBoostingRegressor(max_iter=5, random_state=0,
                                                       categorical_features=[0]),
                ensemble.RandomForestRegressor(n_estimators=3, random_state=0)):
        est.fit(df, y)
        assert_parity(reference.predict(silvanforge.load(est), shuffled),
                      est.predict(shuffled), f"{type(est).__name__}, categorical by value")


def test_early_stopped_boosting():
    X, y, yb, _ = _data(n=300)
    gb = ensemble.GradientBoostingClassifier(n_estimators=200, n_iter_no_change=2,
                                             validation_fraction=0.3, random_state=0)
    gb.fit(X, yb)
    assert gb.n_estimators_ < 200
    _check(gb, X, gb.predict_proba, gb.decision_function, what="GB early stop")
    hgb = ensemble.HistGradientBoostingRegressor(max_iter=100, early_stopping=True,
                                                 n_iter_no_change=2, random_state=0)
    hgb.fit(X, y)
    assert hgb.n_iter_ < 100
    _check(hgb, X, hgb.predict, lambda Z: hgb._raw_predict(Z).ravel(), what="HGB stop")
