"""SHAP contributions (``output="contribs"``): the reference TreeSHAP against XGBoost's
``pred_contribs``, LightGBM's ``pred_contrib`` and ``shap.TreeExplainer``; the compiled
kernel against the reference on random forests (every split semantic, NaN, zero covers);
the predictor's surface (shapes, threads, saving, errors).
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import silvanforge
from silvanforge import reference
from silvanforge.backends.cpu import Target, openmp
from silvanforge.errors import ContributionsError, InputError
from silvanforge.representations.contribs_tables import build_tables
from silvanforge.runtime import contribs as runtime_contribs

from test_forest import random_forests
from util import assert_parity, probe_rows

xgb = pytest.importorskip("xgboost")
lgb = pytest.importorskip("lightgbm")


def data(n: int = 300, features: int = 5, nan: float = 0.1, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, features))
    y = X[:, 0] + 2 * np.sin(X[:, 1]) + (X[:, 2] > 0) + 0.1 * rng.normal(size=n)
    X[rng.random(X.shape) < nan] = np.nan
    return X, y


def classes(y: np.ndarray) -> np.ndarray:
    return (y > 0.5).astype(int) + (y > 2)


# ---- the reference against the libraries -----------------------------------------------

@pytest.mark.parametrize("kind", ["regression", "binary", "multiclass", "categorical"])
def test_reference_equals_xgboost_pred_contribs(kind, tmp_path):
    X, y = data()
    params = {"n_estimators": 8, "max_depth": 4, "base_score": 0.3 if kind == "binary" else None}
    if kind == "regression":
        model = xgb.XGBRegressor(**params).fit(X, y)
    elif kind == "binary":
        model = xgb.XGBClassifier(**params).fit(X, y > 1)
    elif kind == "multiclass":
        model = xgb.XGBClassifier(**params).fit(X, classes(y))
    else:
        X[:, 3] = np.where(np.isnan(X[:, 3]), np.nan, np.floor(np.abs(X[:, 3]) * 4))
        model = xgb.XGBRegressor(**params, tree_method="hist", enable_categorical=True,
                                 feature_types=["q", "q", "q", "c", "q"]).fit(X, y)
    booster = model.get_booster()
    dm = xgb.DMatrix(X[:60], enable_categorical=True,
                     feature_types=booster.feature_types)
    expected = booster.predict(dm, pred_contribs=True)
    forest = silvanforge.load(model)
    assert_parity(reference.contributions(forest, X[:60]), expected, f"xgboost {kind}")
    # The UBJSON file carries the same covers as the JSON one.
    booster.save_model(tmp_path / "m.ubj")
    ubj = silvanforge.load(tmp_path / "m.ubj")
    np.testing.assert_array_equal(ubj.cover, forest.cover)


@pytest.mark.parametrize("kind", ["regression", "multiclass", "categorical", "rf"])
def test_reference_equals_lightgbm_pred_contrib(kind):
    X, y = data()
    params = {"n_estimators": 8, "num_leaves": 12, "verbose": -1}
    if kind == "multiclass":
        model = lgb.LGBMClassifier(**params).fit(X, classes(y))
    elif kind == "rf":
        model = lgb.LGBMRegressor(**params, boosting_type="rf", bagging_freq=1,
                                  bagging_fraction=0.6).fit(X, y)
    else:
        if kind == "categorical":
            X[:, 3] = np.where(np.isnan(X[:, 3]), np.nan, np.floor(np.abs(X[:, 3]) * 4))
        model = lgb.LGBMRegressor(**params, min_data_per_group=5, cat_smooth=1).fit(
            X, y, categorical_feature=[3] if kind == "categorical" else "auto")
    forest = silvanforge.load(model)
    expected = model.predict(X[:60], pred_contrib=True)
    phi = reference.contributions(forest, X[:60])
    # LightGBM's multiclass layout is flat: outputs one after another.
    assert_parity(phi.reshape(len(phi), -1), expected, f"lightgbm {kind}")


def test_lightgbm_linear_trees_are_refused():
    X, y = data(nan=0.0)
    booster = lgb.train({"objective": "regression", "linear_tree": True, "num_leaves": 4,
                         "verbose": -1}, lgb.Dataset(X, y), 3)
    forest = silvanforge.load(booster)
    with pytest.raises(ContributionsError, match="linear"):
        reference.contributions(forest, X[:3])
    with pytest.raises(ContributionsError, match="linear"):
        silvanforge.compile(forest).predict(X[:3], output="contribs")


def sklearn_models():
    from sklearn import ensemble
    return [
        ensemble.RandomForestRegressor(n_estimators=6, max_depth=6, random_state=0),
        ensemble.ExtraTreesRegressor(n_estimators=6, max_depth=6, random_state=0),
        ensemble.RandomForestClassifier(n_estimators=6, max_depth=5, random_state=0),
        ensemble.GradientBoostingRegressor(n_estimators=6, random_state=0),
        ensemble.GradientBoostingClassifier(n_estimators=6, random_state=0),
        ensemble.HistGradientBoostingRegressor(max_iter=6),
    ]


@pytest.mark.parametrize("index", range(6))
def test_reference_equals_shap_tree_explainer(index):
    shap = pytest.importorskip("shap")
    model = sklearn_models()[index]
    hist = "Hist" in type(model).__name__
    X, y = data(nan=0.1 if hist else 0.0)
    target = y > 1 if "GradientBoostingClassifier" in type(model).__name__ else \
        classes(y) if "Classifier" in type(model).__name__ else y
    model.fit(X, target)
    explainer = shap.TreeExplainer(model)
    expected = np.asarray(explainer.shap_values(X[:40], check_additivity=False))
    phi = reference.contributions(silvanforge.load(model), X[:40])
    if phi.ndim == 3:  # shap: (rows, features, classes)
        phi = np.moveaxis(phi, 1, 2)
        assert_parity(phi[:, -1, :], np.broadcast_to(explainer.expected_value,
                                                     phi[:, -1, :].shape), "expected value")
        assert_parity(phi[:, :-1, :], expected, type(model).__name__)
    else:
        assert_parity(phi[:, -1], np.full(len(phi), float(np.ravel(explainer.expected_value)[0])),
                      "expected value")
        assert_parity(phi[:, :-1], expected, type(model).__name__)


def test_a_model_without_covers_is_refused():
    X, y = data()
    forest = silvanforge.load(xgb.XGBRegressor(n_estimators=2).fit(X, y))
    bare = forest.replace(cover=None, source="onnx")  # what the ONNX frontend gives
    with pytest.raises(ContributionsError, match="covers"):
        reference.contributions(bare, X[:2])
    predictor = silvanforge.compile(bare)
    with pytest.raises(ContributionsError, match="covers"):
        predictor.predict(X[:2], output="contribs")
    with pytest.raises(InputError, match="contribs"):
        predictor.predict(X[:2], output="shap")


# ---- the compiled kernel against the reference ---------------------------------------

@st.composite
def forests_with_covers(draw):
    """Random forests (every operator, missing rule, category rule, vector leaves) with
    random covers, zeros among them."""
    forest = draw(random_forests())
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    cover = rng.choice([0.0, 1.0, 2.5, 7.0, 40.0], size=forest.n_nodes,
                       p=[0.05, 0.2, 0.25, 0.25, 0.25])
    return forest.replace(cover=cover)


@settings(max_examples=15, deadline=None)
@given(forest=forests_with_covers(), seed=st.integers(0, 2**32 - 1),
       n_jobs=st.sampled_from([1, 2]), dtype=st.sampled_from([np.float32, np.float64]))
def test_compiled_equals_reference(forest, seed, n_jobs, dtype):
    X = probe_rows(forest, seed, 37).astype(dtype)
    expected = reference.contributions(forest, X)
    # The kernel alone (Predictor.predict's contributions, without a prediction kernel).
    phi = runtime_contribs.Contributions(forest, Target.host())(X, n_jobs)
    np.testing.assert_allclose(phi, expected, rtol=1e-9, atol=1e-9)
    if forest.cover.min() > 0:
        margin = reference.predict(forest, X, output="margin")
        np.testing.assert_allclose(phi.sum(axis=-1), np.reshape(margin, phi.shape[:-1]),
                                   rtol=1e-9, atol=1e-9)


def test_tables_number_children_breadth_first():
    X, y = data()
    forest = silvanforge.load(xgb.XGBRegressor(n_estimators=3, max_depth=5).fit(X, y))
    t = build_tables(forest)
    # The kernel finds the i-th step's children at 2i + 1 and 2i + 2.
    for u in range(len(t.unit_steps) - 1):
        steps = t.step_global[t.unit_steps[u]:t.unit_steps[u + 1]]
        nodes = t.step_node[t.unit_steps[u]:t.unit_steps[u + 1]]
        base = forest.tree_offsets[u]
        position = {int(g): int(b) for g, b in zip(steps, nodes)}
        for i, g in enumerate(steps):
            for side, child in ((1, forest.left[g]), (2, forest.right[g])):
                if not forest.is_leaf[base + child]:
                    assert position[int(base + child)] == 2 * i + side


def test_threads_scratch_shares_lie_a_page_apart():
    """Each thread's share of the scratch buffers is whole pages with a free page after
    what it uses: a prefetcher, which stays within a page, never fetches lines another
    thread writes (packed shares ran 2 threads at 1.2x one on higgs)."""
    X, y = data()
    for depth in (2, 5, 9):
        forest = silvanforge.load(xgb.XGBRegressor(n_estimators=2, max_depth=depth).fit(X, y))
        t = build_tables(forest)
        for stride, used, size in ((t.scratch_stride, t.max_nodes * t.lanes, 8),
                                   (t.ones_stride, t.max_nodes, 4)):
            assert stride * size % 4096 == 0
            assert (stride - used) * size >= 4096


# ---- the predictor ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def multiclass():
    X, y = data(nan=0.15)
    model = xgb.XGBClassifier(n_estimators=6, max_depth=5).fit(X, classes(y))
    return model, X


def test_predictor_contribs_equal_xgboost_and_sum_to_the_margin(multiclass, caplog):
    model, X = multiclass
    predictor = silvanforge.compile(model, n_jobs=2)
    with caplog.at_level(logging.INFO, logger="silvanforge"):
        phi = predictor.predict(X, output="contribs")
        again = predictor.predict(X, output="contribs", n_jobs=1)
    assert sum("contributions" in r.message and "compiling" in r.message
               for r in caplog.records) == 1
    assert phi.shape == (len(X), 3, X.shape[1] + 1)
    expected = model.get_booster().predict(xgb.DMatrix(X), pred_contribs=True)
    assert_parity(phi, expected, "compiled multiclass")
    np.testing.assert_array_equal(phi, again)
    if openmp.runtime() is not None:  # rows run on threads, not serially
        assert any(b"GOMP_parallel" in obj for obj in predictor._contribs.code.object_code)
    np.testing.assert_allclose(phi.sum(axis=-1), predictor.predict(X, output="margin"),
                               rtol=1e-9, atol=1e-9)
    # Every input the predictor takes: lists, float32, non-contiguous, no rows.
    np.testing.assert_allclose(predictor.predict(X[:3].tolist(), output="contribs"), phi[:3])
    np.testing.assert_allclose(predictor.predict(np.asfortranarray(X[:9]), output="contribs"),
                               phi[:9])
    assert predictor.predict(X[:0], output="contribs").shape == (0, 3, X.shape[1] + 1)
    with pytest.raises(InputError, match="features"):
        predictor.predict(X[:, :2], output="contribs")


def test_saved_predictors_keep_the_contributions_code(multiclass, tmp_path, monkeypatch):
    model, X = multiclass
    predictor = silvanforge.compile(model)
    phi = predictor.predict(X[:20], output="contribs")
    predictor.save(tmp_path / "m.sfp")

    def no_compiling(*args, **kwargs):
        raise AssertionError("the saved contributions kernel was compiled again")

    with monkeypatch.context() as patch:
        patch.setattr(runtime_contribs, "compile_kernel", no_compiling)
        loaded = silvanforge.load_predictor(tmp_path / "m.sfp")
        np.testing.assert_array_equal(loaded.predict(X[:20], output="contribs"), phi)
    untrusted = silvanforge.load_predictor(tmp_path / "m.sfp", trust_code=False)
    np.testing.assert_array_equal(untrusted.predict(X[:20], output="contribs"), phi)
    # Asked for in the plan's outputs, the kernel is built at once, and reloaded so.
    eager = silvanforge.compile(model, outputs=("contribs",))
    assert eager._contribs is not None and "contribs" in eager.dump("plan")
    eager.save(tmp_path / "e.sfp")
    with monkeypatch.context() as patch:
        patch.setattr(runtime_contribs, "compile_kernel", no_compiling)
        loaded = silvanforge.load_predictor(tmp_path / "e.sfp")
        assert loaded._contribs is not None
        np.testing.assert_array_equal(loaded.predict(X[:20], output="contribs"), phi)


def test_reference_predict_gives_contributions(multiclass):
    model, X = multiclass
    forest = silvanforge.load(model)
    np.testing.assert_array_equal(reference.predict(forest, X[:5], output="contribs"),
                                  reference.contributions(forest, X[:5]))
