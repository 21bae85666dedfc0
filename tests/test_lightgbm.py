"""LightGBM frontend: parity with lightgbm's own predictions, and malformed model text."""

from __future__ import annotations

import inspect
import re

import numpy as np
import pytest
from hypothesis import given, strategies as st

lgb = pytest.importorskip("lightgbm", reason="lightgbm is not installed")
pd = pytest.importorskip("pandas", reason="pandas is not installed")

import silvanforge  # noqa: E402
from silvanforge import reference  # noqa: E402
from silvanforge.errors import SilvanForgeError  # noqa: E402
from silvanforge.frontends import lightgbm as lgb_frontend  # noqa: E402
from silvanforge.model.forest import MISSING_NAN, MISSING_NONE, MISSING_ZERO, OP_CAT  # noqa: E402
from util import assert_parity, with_nans  # noqa: E402

K_ZERO = float(np.float32(1e-35))
N_CATS = 100  # categories 0..99: bitsets of up to four 32-bit words
BASE = dict(verbose=-1, num_threads=1, min_data_in_leaf=5, min_data_per_group=5,
            max_cat_to_onehot=2, cat_smooth=1.0, cat_l2=1.0, seed=1, deterministic=True)


# ---- data and helpers ---------------------------------------------------------------------

def _data(n: int = 300, seed: int = 0) -> np.ndarray:
    """Float32 rows: numeric columns with NaN and many exact zeros, one categorical column."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4)).astype(np.float32)
    X[rng.random(n) < 0.3, 2] = 0.0
    X = with_nans(X, 0.08, seed)
    X[:, 1] = rng.integers(0, N_CATS, n)
    X[rng.random(n) < 0.05, 1] = np.nan
    return X


def _label(X: np.ndarray, kind: str, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x0 = np.nan_to_num(X[:, 0])
    cat_effect = np.where(np.nan_to_num(X[:, 1]) % 3 == 0, 1.5, -0.5)
    score = x0 + cat_effect + 0.5 * np.nan_to_num(X[:, 3]) + 0.3 * rng.normal(size=len(X))
    if kind == "binary":
        return (score > 0).astype(np.float64)
    if kind == "multi":
        return np.digitize(score, [-0.5, 0.7]).astype(np.float64)
    if kind == "positive":
        return np.exp(score / 2) + 0.1
    if kind == "unit":
        return 1 / (1 + np.exp(-score))
    if kind == "rank":
        return np.digitize(score, [-1, 0, 1]).astype(np.float64)
    return score


def _train(params: dict, X: np.ndarray, y: np.ndarray, rounds: int = 4, **dataset) -> "lgb.Booster":
    ds = lgb.Dataset(X, y, categorical_feature=dataset.pop("categorical_feature", [1]),
                     free_raw_data=False, **dataset)
    return lgb.train({**BASE, **params}, ds, num_boost_round=rounds)


def _splits(text: str) -> list[tuple[int, float, int]]:
    """(feature, raw threshold, decision_type) of every split in a model text."""
    out = []
    for block in text.split("\nTree=")[1:]:
        fields = dict(line.split("=", 1) for line in block.splitlines()[1:] if "=" in line)
        if int(fields["num_leaves"]) < 2:
            continue
        for f, t, d in zip(fields["split_feature"].split(), fields["threshold"].split(),
                           fields["decision_type"].split()):
            out.append((int(f), float(t), int(d)))
    return out


def _probe_rows(text: str, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Float32 and float64 rows: data rows plus every threshold fed back as an input.

    Thresholds go in exactly (float64 rows) and rounded to float32 (float32 rows), with
    their neighbours; categorical features get unseen, negative and fractional values.
    """
    base = np.nan_to_num(X[:8].astype(np.float64), nan=0.5)
    rows32, rows64 = [X.astype(np.float32)], [X.astype(np.float64)]
    splits = _splits(text)
    for f, t, d in splits:
        if d & 1:
            continue
        for v in (t, np.nextafter(t, np.inf), np.nextafter(t, -np.inf)):
            r = base.copy()
            r[:, f] = v
            rows64.append(r)
            r32 = base.copy()
            r32[:, f] = np.float32(v)
            rows32.append(r32.astype(np.float32))
    specials = [np.nan, 0.0, -0.0, 1e-40, -1e-40, 5e-36, -5e-36]
    for v in specials + [-1.0, -7.0, 2.5, 3.99, -0.5, N_CATS + 5, 1e9, 2.0**31, -2.0**31]:
        r = base.copy()
        r[:, 1] = v
        rows64.append(r)
        rows32.append(r.astype(np.float32))
    for v in specials:
        r = base.copy()
        r[:, [0, 2, 3]] = v
        rows64.append(r)
        rows32.append(r.astype(np.float32))
    return np.vstack(rows32).astype(np.float32), np.vstack(rows64)


def _check(forest, booster, text: str, X: np.ndarray, what: str) -> None:
    """Value and margin of the forest equal the booster's on data and probe rows."""
    for rows in _probe_rows(text, X):
        assert_parity(reference.predict(forest, rows), booster.predict(rows),
                      f"{what}: value, {rows.dtype}")
        assert_parity(reference.predict(forest, rows, output="margin"),
                      booster.predict(rows, raw_score=True),
                      f"{what}: margin, {rows.dtype}")


def _all_loads(booster, tmp_path, name: str = "model.txt") -> dict:
    """The forest from a saved file, from model_to_string bytes, and from the live Booster."""
    path = tmp_path / name
    booster.save_model(str(path))
    return {"file": silvanforge.load(str(path)),
            "string": lgb_frontend.load_bytes(booster.model_to_string().encode()),
            "booster": silvanforge.load(booster)}


# ---- objectives --------------------------------------------------------------------------

OBJECTIVES = [
    ("regression", {}, "real", "identity"),
    ("regression_l1", {}, "real", "identity"),
    ("huber", {}, "real", "identity"),
    ("fair", {}, "real", "identity"),
    ("quantile", {"alpha": 0.7}, "real", "identity"),
    ("mape", {}, "positive", "identity"),
    ("regression", {"reg_sqrt": True}, "real", "signed_square"),
    ("regression_l1", {"reg_sqrt": True}, "real", "signed_square"),
    ("binary", {}, "binary", "sigmoid"),
    ("binary", {"sigmoid": 0.7}, "binary", "sigmoid"),
    ("multiclass", {"num_class": 3}, "multi", "softmax"),
    ("multiclassova", {"num_class": 3, "sigmoid": 1.3}, "multi", "sigmoid"),
    ("cross_entropy", {}, "unit", "sigmoid"),
    ("cross_entropy_lambda", {}, "unit", "log1p_exp"),
    ("poisson", {}, "positive", "exp"),
    ("gamma", {}, "positive", "exp"),
    ("tweedie", {"tweedie_variance_power": 1.3}, "positive", "exp"),
    ("lambdarank", {}, "rank", "identity"),
    ("rank_xendcg", {}, "rank", "identity"),
]


@pytest.mark.parametrize("objective,extra,label,transform", OBJECTIVES,
                         ids=[f"{o}-{'-'.join(map(str, e.values()))}" for o, e, _, _ in OBJECTIVES])
def test_objectives(objective, extra, label, transform, tmp_path):
    X = _data()
    y = _label(X, label)
    group = [30] * 10 if label == "rank" else None
    booster = _train({"objective": objective, "num_leaves": 15, **extra}, X, y, group=group)
    text = booster.model_to_string()
    for how, forest in _all_loads(booster, tmp_path).items():
        assert forest.post_transform == transform
        assert forest.objective.split()[0] == objective
        assert forest.source == "lightgbm v4"
        assert forest.has_categorical
        _check(forest, booster, text, X, f"{objective} {extra} via {how}")
    if "sigmoid" in extra:
        assert forest.transform_params["alpha"] == extra["sigmoid"]


def test_custom_objective_is_identity(tmp_path):
    X = _data()
    y = _label(X, "real")

    def squared_error(preds, data):
        return preds - data.get_label(), np.ones_like(preds)

    booster = _train({"objective": squared_error, "num_leaves": 8}, X, y)
    text = booster.model_to_string()
    assert "\nobjective=" not in text.split("Tree=0")[0]
    for how, forest in _all_loads(booster, tmp_path).items():
        assert forest.post_transform == "identity"
        _check(forest, booster, text, X, f"custom objective via {how}")


# ---- missing values, thresholds, categoricals -------------------------------------------

MISSING_SETUPS = {
    "nan": ({"use_missing": True, "zero_as_missing": False}, True),
    "zero": ({"use_missing": True, "zero_as_missing": True}, True),
    "none-nofeatures-nan": ({"use_missing": False}, True),
    "none-no-nans": ({"use_missing": True, "zero_as_missing": False}, False),
}


def test_all_missing_types(tmp_path):
    """Models whose text holds each of LightGBM's missing types agree with LightGBM."""
    seen = set()
    for name, (params, keep_nans) in MISSING_SETUPS.items():
        X = _data(seed=3)
        y = _label(X, "real", seed=3)
        if not keep_nans:
            X = np.nan_to_num(X, nan=0.25)
        booster = _train({"objective": "regression", "num_leaves": 31, **params}, X, y,
                         rounds=3)
        text = booster.model_to_string()
        types = {(d >> 2) & 3 for _, _, d in _splits(text) if not d & 1}
        defaults = {bool(d & 2) for _, _, d in _splits(text) if not d & 1}
        seen |= types
        forest = lgb_frontend.load_bytes(text.encode())
        numeric = ~forest.is_leaf & (forest.split_op != OP_CAT)
        expect = {0: MISSING_NONE, 1: MISSING_ZERO, 2: MISSING_NAN}
        assert set(forest.missing[numeric].tolist()) == {expect[t] for t in types}
        _check(forest, booster, text, X, f"missing setup {name} (types {types}, "
                                         f"default_left {defaults})")
    # LightGBM's missing types: 0 None, 1 Zero, 2 NaN. All three must really occur.
    assert seen == {0, 1, 2}, seen


def test_categorical_bitsets_span_several_words():
    X = _data(600, seed=5)
    y = _label(X, "real", seed=5)
    booster = _train({"objective": "regression", "num_leaves": 31, "max_cat_threshold": 64},
                     X, y, rounds=6)
    text = booster.model_to_string()
    forest = lgb_frontend.load_bytes(text.encode())
    cat_nodes = np.flatnonzero(~forest.is_leaf & (forest.split_op == OP_CAT))
    assert len(cat_nodes) > 0
    assert forest.cat_words[cat_nodes].max() >= 2, "no bitset spans several 32-bit words"
    assert max(len(forest.category_set(n)) for n in cat_nodes) > 1, "only one-hot splits"
    # Every category value, in and out of range, takes LightGBM's branch.
    rows = np.repeat(np.nan_to_num(X[:1], nan=0.3), N_CATS + 40, axis=0)
    rows[:, 1] = np.arange(-20, N_CATS + 20)
    _check(forest, booster, text, rows.astype(np.float32), "every category")


def test_categorical_nan_and_negative_go_right_for_every_missing_type():
    """A handmade categorical split with each decision_type: NaN and negatives go right."""
    for missing_type in range(3):
        for default_left in (0, 2):
            dt = 1 | default_left | (missing_type << 2)
            text = _one_split_model(threshold="0", decision_type=dt, cat_words=[0b10101, 1])
            booster = lgb.Booster(model_str=text)
            forest = lgb_frontend.load_bytes(text.encode())
            rows = np.array([[v] for v in (np.nan, 0, -0.5, -1, 2, 2.9, 1, 32, 33, 64, 1e10,
                                           -1e10, 2.0**31, 4, 5e-36)], dtype=np.float64)
            assert_parity(reference.predict(forest, rows), booster.predict(rows),
                          f"categorical decision_type {dt}")


def test_thresholds_in_lightgbms_zero_band():
    """LightGBM reads |x| <= 1e-35f as 0; thresholds in or at that band still match."""
    xs = np.array([[v] for v in (np.nan, 0.0, -0.0, 1e-35, -1e-35, K_ZERO, -K_ZERO, 5e-36,
                                 -5e-36, 2e-35, -2e-35, np.nextafter(K_ZERO, 1),
                                 np.nextafter(-K_ZERO, -1), 1.0, -1.0)])
    for thr in (-K_ZERO, -5e-36, -0.0, 0.0, 5e-36, 1e-35, K_ZERO, 2e-35, -2e-35):
        for missing_type in (0, 1, 2):
            for default_left in (0, 2):
                dt = default_left | (missing_type << 2)
                text = _one_split_model(repr(thr), dt)
                forest = lgb_frontend.load_bytes(text.encode())
                booster = lgb.Booster(model_str=text)
                for rows in (xs, xs.astype(np.float32)):
                    assert_parity(reference.predict(forest, rows), booster.predict(rows),
                                  f"threshold {thr!r}, decision_type {dt}, {rows.dtype}")


def test_zero_missing_type_at_float32_1e_minus_35():
    text = _one_split_model("5", 1 << 2)  # missing type Zero, default right
    forest = lgb_frontend.load_bytes(text.encode())
    booster = lgb.Booster(model_str=text)
    rows = np.array([[np.float32(1e-35)], [np.float32(-1e-35)]], dtype=np.float32)
    assert_parity(reference.predict(forest, rows), booster.predict(rows), "x = +-1e-35f")
    # A trained zero_as_missing model has thresholds of +-1e-35f: fed back, they differ.
    X = _data(seed=3)
    booster = _train({"objective": "regression", "num_leaves": 31, "zero_as_missing": True},
                     X, _label(X, "real", seed=3), rounds=3)
    text = booster.model_to_string()
    _check(lgb_frontend.load_bytes(text.encode()), booster, text, X,
           "zero_as_missing model with +-1e-35f inputs")


# ---- model shapes and training modes -----------------------------------------------------

def test_linear_trees(tmp_path):
    X = _data(seed=7)
    y = 2 * np.nan_to_num(X[:, 0]) - np.nan_to_num(X[:, 3]) + _label(X, "real", 7)
    booster = _train({"objective": "regression", "linear_tree": True, "num_leaves": 8}, X, y,
                     rounds=5)
    text = booster.model_to_string()
    assert "is_linear=1" in text and re.search(r"num_features=.*[1-9]", text)
    for how, forest in _all_loads(booster, tmp_path).items():
        assert forest.linear is not None and forest.linear.count.max() > 0
        _check(forest, booster, text, X, f"linear trees via {how}")


def test_random_forest_averages(tmp_path):
    X = _data(seed=8)
    for objective, label in (("regression", "real"), ("binary", "binary")):
        y = _label(X, label, 8)
        rounds = 5
        booster = _train({"objective": objective, "boosting": "rf", "bagging_freq": 1,
                          "bagging_fraction": 0.6, "num_leaves": 15}, X, y, rounds=rounds)
        text = booster.model_to_string()
        assert "\naverage_output\n" in text
        for how, forest in _all_loads(booster, tmp_path).items():
            # LightGBM's raw_score for rf is the SUM of the trees while its prediction
            # transforms the MEAN.
            assert forest.average and not forest.average_in_margin
            _check(forest, booster, text, X, f"rf {objective} via {how}")


def test_multiclass_trees_cycle_through_classes():
    X = _data(seed=9)
    y = _label(X, "multi", 9)
    booster = _train({"objective": "multiclass", "num_class": 3, "num_leaves": 7}, X, y, rounds=3)
    forest = lgb_frontend.load_bytes(booster.model_to_string().encode())
    assert forest.n_outputs == 3 and forest.n_trees == 9
    assert forest.tree_output.tolist() == [0, 1, 2] * 3
    assert reference.predict(forest, X).shape == booster.predict(X).shape == (len(X), 3)


def test_early_stopping_uses_best_iteration(tmp_path):
    X = _data(400, seed=10)
    y = _label(X, "real", 10)
    Xv, yv = X[300:], _label(X, "real", 11)[300:]  # a noisy validation set stops early
    ds = lgb.Dataset(X[:300], y[:300], categorical_feature=[1], free_raw_data=False)
    booster = lgb.train({**BASE, "objective": "regression", "num_leaves": 15,
                         "learning_rate": 0.5}, ds, num_boost_round=40,
                        valid_sets=[lgb.Dataset(Xv, yv, reference=ds)],
                        callbacks=[lgb.early_stopping(3, verbose=False)],
                        keep_training_booster=True)  # else train() drops the extra trees
    assert 0 < booster.best_iteration < booster.current_iteration()
    forest = silvanforge.load(booster)
    assert forest.n_trees == booster.best_iteration
    _check(forest, booster, booster.model_to_string(), X, "early stopping, Booster")
    reg = lgb.LGBMRegressor(n_estimators=40, num_leaves=15, learning_rate=0.5, **BASE)
    # LightGBM 4.7 takes eval_X/eval_y and deprecates eval_set, which older ones take.
    validation = {"eval_X": (Xv,), "eval_y": (yv,)} \
        if "eval_X" in inspect.signature(reg.fit).parameters else {"eval_set": [(Xv, yv)]}
    reg.fit(X[:300], y[:300], **validation, callbacks=[lgb.early_stopping(3, verbose=False)])
    assert 0 < reg.best_iteration_ < 40
    forest = silvanforge.load(reg)
    assert forest.n_trees == reg.best_iteration_
    rows = _probe_rows(reg.booster_.model_to_string(), X)[0]
    assert_parity(reference.predict(forest, rows), reg.predict(rows), "early stopping, sklearn")
    assert_parity(reference.predict(forest, rows, output="margin"),
                  reg.predict(rows, raw_score=True), "early stopping, sklearn margin")


def test_large_trees_and_single_leaf_trees():
    X = _data(2000, seed=12)
    y = _label(X, "real", 12)
    booster = _train({"objective": "regression", "num_leaves": 63, "min_data_in_leaf": 2},
                     X, y, rounds=2)
    forest = lgb_frontend.load_bytes(booster.model_to_string().encode())
    assert forest.n_leaves == 2 * 63
    _check(forest, booster, booster.model_to_string(), X, "63 leaves")
    # A constant label and a huge min_data_in_leaf give trees that are a single leaf.
    for params, label in (({"min_data_in_leaf": 10_000}, y), ({}, np.full(len(y), 3.25))):
        booster = _train({"objective": "regression", **params}, X, label, rounds=3)
        text = booster.model_to_string()
        assert "num_leaves=1\n" in text
        forest = lgb_frontend.load_bytes(text.encode())
        assert forest.max_depth == 0
        _check(forest, booster, text, X, f"single-leaf trees {params}")


def test_sklearn_wrappers():
    X = _data(seed=13)
    rows = _probe_rows(lgb.LGBMRegressor(**BASE).fit(X, _label(X, "real")).booster_
                       .model_to_string(), X)[0]
    labels = np.array(["no", "yes"])[_label(X, "binary", 13).astype(int)]
    clf = lgb.LGBMClassifier(n_estimators=4, num_leaves=15, **BASE).fit(X, labels)
    forest = silvanforge.load(clf)
    assert forest.class_labels == ("no", "yes")
    assert_parity(reference.predict(forest, rows), clf.predict_proba(rows)[:, 1], "classifier")
    assert_parity(reference.predict(forest, rows, output="margin"),
                  clf.predict(rows, raw_score=True), "classifier margin")
    multi = lgb.LGBMClassifier(n_estimators=3, num_leaves=7, **BASE).fit(
        X, _label(X, "multi", 13).astype(int) * 10)
    forest = silvanforge.load(multi)
    assert forest.class_labels == (0, 10, 20)
    assert_parity(reference.predict(forest, rows), multi.predict_proba(rows), "multiclass")
    reg = lgb.LGBMRegressor(n_estimators=4, num_leaves=15, **BASE).fit(X, _label(X, "real"))
    assert_parity(reference.predict(silvanforge.load(reg), rows), reg.predict(rows),
                  "regressor")
    ranker = lgb.LGBMRanker(n_estimators=4, num_leaves=15, **BASE).fit(
        X, _label(X, "rank", 13), group=[30] * 10)
    forest = silvanforge.load(ranker)
    assert forest.objective == "lambdarank"
    assert_parity(reference.predict(forest, rows), ranker.predict(rows), "ranker")
    with pytest.raises(SilvanForgeError, match="not fitted"):
        silvanforge.load(lgb.LGBMRegressor())


# ---- pandas ------------------------------------------------------------------------------

def test_pandas_categories_follow_training_order(tmp_path):
    rng = np.random.default_rng(14)
    n = 400
    colors = np.array([f"c{i:02d}" for i in range(40)])
    train = pd.DataFrame({
        "x": rng.normal(size=n),
        "color": pd.Categorical(rng.choice(colors, n), categories=colors),
        "z": np.where(rng.random(n) < 0.3, 0.0, rng.normal(size=n)),
        "size": pd.Categorical(rng.choice(["S", "M", "L"], n), categories=["S", "M", "L"]),
    })
    code = train["color"].cat.codes.to_numpy()
    y = train["x"] + np.where(code % 4 == 0, 2.0, 0.0) + (train["size"] == "L") * 1.5
    booster = lgb.train({**BASE, "objective": "regression", "num_leaves": 15},
                        lgb.Dataset(train, y), num_boost_round=5)
    text = booster.model_to_string()
    assert "pandas_categorical:[[" in text
    # Prediction frames whose categoricals list categories in another order, lack some,
    # or hold categories never seen in training (which LightGBM treats as missing).
    shuffled = list(rng.permutation(colors[:30])) + ["unseen1", "unseen2"]
    values = rng.choice(shuffled, 60).tolist() + [None, "unseen1"]
    test = pd.DataFrame({
        "x": rng.normal(size=62),
        "color": pd.Categorical(values, categories=shuffled),
        "z": np.zeros(62),
        "size": pd.Categorical(rng.choice(["L", "M", "XL"], 62), categories=["XL", "L", "M"]),
    })
    for how, forest in _all_loads(booster, tmp_path).items():
        assert forest.pandas_categories == (tuple(colors), ("S", "M", "L"))
        assert_parity(reference.predict(forest, test), booster.predict(test),
                      f"pandas frame via {how}")
        assert_parity(reference.predict(forest, test, output="margin"),
                      booster.predict(test, raw_score=True), f"pandas margin via {how}")
    reg = lgb.LGBMRegressor(n_estimators=4, num_leaves=15, **BASE).fit(train, y)
    assert_parity(reference.predict(silvanforge.load(reg), test), reg.predict(test),
                  "pandas, LGBMRegressor")


def test_pandas_categoricals_match_by_position():
    """An ordered categorical is numeric to LightGBM, yet takes a place in the list."""
    rng = np.random.default_rng(15)
    n = 300
    train = pd.DataFrame({
        "c": pd.Categorical(rng.choice(list("abc"), n)),
        "o": pd.Categorical(rng.choice(list("lmn"), n), ordered=True),
        "x": rng.normal(size=n)})
    y = (train.c == "b") * 2.0 + train.o.cat.codes * 0.5 + train.x
    booster = lgb.train({**BASE, "objective": "regression", "num_leaves": 4},
                        lgb.Dataset(train, y), num_boost_round=3)
    forest = lgb_frontend.load_bytes(booster.model_to_string().encode())
    assert forest.pandas_categories == (("a", "b", "c"), ("l", "m", "n"))
    test = pd.DataFrame({
        "c": pd.Categorical(rng.choice(list("cbaz"), 40), categories=list("zcba")),
        "o": pd.Categorical(rng.choice(list("nml"), 40), categories=list("nml"), ordered=True),
        "x": rng.normal(size=40)})
    assert_parity(reference.predict(forest, test), booster.predict(test), "by position")
    # Columns are matched by name first (LightGBM itself would read these by position).
    assert_parity(reference.predict(forest, test[["x", "o", "c"]]), booster.predict(test),
                  "reordered")
    with pytest.raises(SilvanForgeError, match="2 pandas categorical columns; this frame has 1"):
        reference.predict(forest, test.assign(o=test.o.cat.codes))
    with pytest.raises(SilvanForgeError, match="missing 'c'; unknown 'renamed'"):
        reference.predict(forest, test.rename(columns={"c": "renamed"}))


# ---- random model texts (property test) --------------------------------------------------

_HEADER = """tree
version=v4
num_class={k}
num_tree_per_iteration={k}
label_index=0
max_feature_idx={mf}
objective={objective}
feature_names={names}
feature_infos={infos}

"""


def _one_split_model(threshold: str, decision_type: int, cat_words=None) -> str:
    """A one-feature model with a single split whose left leaf is 1 and right leaf 2."""
    cat = decision_type & 1
    tree = {"num_leaves": "2", "num_cat": str(int(cat)), "split_feature": "0",
            "split_gain": "1", "threshold": threshold, "decision_type": str(decision_type),
            "left_child": "-1", "right_child": "-2", "leaf_value": "1 2",
            "leaf_weight": "1 1", "leaf_count": "1 1", "internal_value": "0",
            "internal_weight": "0", "internal_count": "2", "is_linear": "0",
            "shrinkage": "1"}
    if cat:
        tree["cat_boundaries"] = f"0 {len(cat_words)}"
        tree["cat_threshold"] = " ".join(map(str, cat_words))
    return _model_text([tree], 1, 1, "regression")


def _model_text(trees: list[dict], n_features: int, k: int, objective: str) -> str:
    head = _HEADER.format(k=k, mf=n_features - 1, objective=objective,
                          names=" ".join(f"f{i}" for i in range(n_features)),
                          infos=" ".join(["none"] * n_features))
    body = "".join(f"Tree={t}\n" + "".join(f"{key}={v}\n" for key, v in tree.items()) + "\n\n"
                   for t, tree in enumerate(trees))
    return head + body + "end of trees\n"


_THRESHOLDS = [0.0, -0.0, 1.0, -1.0, 0.5, 2.5, -3.25, K_ZERO, -K_ZERO, 1e-35, 5e-36, -5e-36,
               1e300, -1e300, 0.1, float(np.float32(0.1)), 3.0]


@st.composite
def _random_tree(draw, n_features: int) -> dict:
    """A random tree in LightGBM's numbering, grown by splitting leaves as LightGBM does."""
    n_leaves = draw(st.integers(1, 64))
    depth = [0]
    parent_of_leaf = [(-1, False)]  # (internal node, is-left-child) per leaf
    left, right, feature, threshold, decision = [], [], [], [], []
    cat_words: list[list[int]] = []
    for node in range(n_leaves - 1):
        candidates = [j for j, d in enumerate(depth) if d < 20]
        j = draw(st.sampled_from(candidates))
        p, is_left = parent_of_leaf[j]
        if p >= 0:
            (left if is_left else right)[p] = node
        new = len(depth)
        left.append(~j)
        right.append(~new)
        depth[j] += 1
        depth.append(depth[j])
        parent_of_leaf[j] = (node, True)
        parent_of_leaf.append((node, False))
        feature.append(draw(st.integers(0, n_features - 1)))
        is_cat = draw(st.booleans()) and draw(st.booleans())
        dt = draw(st.integers(0, 2)) << 2 | draw(st.sampled_from([0, 2])) | int(is_cat)
        decision.append(dt)
        if is_cat:
            threshold.append(str(len(cat_words)))
            n_words = draw(st.integers(1, 4))
            cat_words.append([draw(st.integers(0, 2**32 - 1)) for _ in range(n_words)])
        else:
            threshold.append(repr(draw(st.one_of(st.sampled_from(_THRESHOLDS),
                                                 st.floats(-4, 4, allow_nan=False)))))
    values = [repr(draw(st.floats(-10, 10, allow_nan=False))) for _ in range(n_leaves)]
    tree = {"num_leaves": str(n_leaves), "num_cat": str(len(cat_words)),
            "split_feature": " ".join(map(str, feature)), "threshold": " ".join(threshold),
            "decision_type": " ".join(map(str, decision)),
            "left_child": " ".join(map(str, left)), "right_child": " ".join(map(str, right)),
            "leaf_value": " ".join(values)}
    if cat_words:
        bounds = np.concatenate([[0], np.cumsum([len(w) for w in cat_words])])
        tree["cat_boundaries"] = " ".join(map(str, bounds))
        tree["cat_threshold"] = " ".join(str(w) for ws in cat_words for w in ws)
    tree["is_linear"] = "0"
    tree["shrinkage"] = "1"
    return tree


_INPUTS = [np.nan, 0.0, -0.0, 1.0, -1.0, 0.5, 2.5, 3.0, 5e-36, -5e-36, 1e-36, 0.1, 31.0,
           K_ZERO, -K_ZERO, 1e-35, 2e-35,
           32.0, 33.0, 64.0, 100.0, 127.0, -2.0, 1e300, 4.7]


@given(data=st.data())
def test_random_model_texts_match_lightgbm(data):
    n_features = data.draw(st.integers(1, 4))
    k = data.draw(st.sampled_from([1, 1, 3]))
    objective = data.draw(st.sampled_from(
        ["regression", "binary sigmoid:1", "regression sqrt", "poisson"]
        if k == 1 else ["multiclass num_class:3", "multiclassova num_class:3 sigmoid:0.5"]))
    n_trees = k * data.draw(st.integers(1, 3))
    trees = [data.draw(_random_tree(n_features)) for _ in range(n_trees)]
    text = _model_text(trees, n_features, k, objective)
    n_rows = 40
    value = st.one_of(st.sampled_from(_INPUTS), st.floats(-5, 5))
    rows = np.array([[data.draw(value) for _ in range(n_features)] for _ in range(n_rows)])
    forest = lgb_frontend.load_bytes(text.encode())
    booster = lgb.Booster(model_str=text)
    with np.errstate(over="ignore"):  # 1e300 becomes inf in float32, as intended
        rows32 = rows.astype(np.float32)
    for X in (rows, rows32):
        with np.errstate(over="ignore"):
            expected = booster.predict(X)
            expected_margin = booster.predict(X, raw_score=True)
        assert_parity(reference.predict(forest, X, output="margin"), expected_margin,
                      f"random model margin ({X.dtype})")
        assert_parity(reference.predict(forest, X), expected, f"random model ({X.dtype})")


# ---- malformed model text ----------------------------------------------------------------

def _good_text() -> str:
    trees = [{"num_leaves": "3", "num_cat": "1", "split_feature": "0 1", "threshold": "0.5 0",
              "decision_type": "2 1", "left_child": "-1 -2", "right_child": "1 -3",
              "leaf_value": "1 2 3", "cat_boundaries": "0 2", "cat_threshold": "5 1",
              "is_linear": "0", "shrinkage": "1"},
             {"num_leaves": "1", "num_cat": "0", "split_feature": "", "threshold": "",
              "decision_type": "", "left_child": "", "right_child": "", "leaf_value": "0.5",
              "is_linear": "0", "shrinkage": "1"}]
    return _model_text(trees, 2, 1, "regression") + "\npandas_categorical:null\n"


def test_good_text_loads_and_matches():
    text = _good_text()
    forest = lgb_frontend.load_bytes(text.encode())
    rows = np.array([[0.2, 0], [0.7, 0], [0.7, 2], [0.7, 32], [0.7, np.nan], [np.nan, 1]])
    assert_parity(reference.predict(forest, rows), lgb.Booster(model_str=text).predict(rows))


def _tree1(text: str, old: str, new: str) -> str:
    head, sep, rest = text.partition("Tree=1")
    assert old in head, old
    return head.replace(old, new, 1) + sep + rest


BAD_TEXTS = {
    "child out of range": (lambda t: _tree1(t, "right_child=1 -3", "right_child=2 -3"),
                           "tree 0.*right_child"),
    "leaf out of range": (lambda t: _tree1(t, "right_child=1 -3", "right_child=1 -4"),
                          "tree 0.*right_child"),
    "cycle": (lambda t: _tree1(t, "right_child=1 -3", "right_child=1 0"), "tree 0.*cycle"),
    "two parents": (lambda t: _tree1(t, "left_child=-1 -2", "left_child=-1 -1"), "tree 0"),
    "feature out of range": (lambda t: _tree1(t, "split_feature=0 1", "split_feature=0 2"),
                             "tree 0.*split_feature"),
    "negative feature": (lambda t: _tree1(t, "split_feature=0 1", "split_feature=-1 1"),
                         "tree 0.*split_feature"),
    "short threshold": (lambda t: _tree1(t, "threshold=0.5 0", "threshold=0.5"),
                        "tree 0.*threshold.*1 entries, expected 2"),
    "long leaf_value": (lambda t: _tree1(t, "leaf_value=1 2 3", "leaf_value=1 2 3 4"),
                        "tree 0.*leaf_value"),
    "non-numeric": (lambda t: _tree1(t, "leaf_value=1 2 3", "leaf_value=1 x 3"),
                    "tree 0.*leaf_value.*non-numeric"),
    "underscore number": (lambda t: _tree1(t, "threshold=0.5 0", "threshold=0_5 0"),
                          "tree 0.*threshold"),
    "fractional child": (lambda t: _tree1(t, "left_child=-1 -2", "left_child=-1.5 -2"),
                         "tree 0.*left_child"),
    # Numbers the fast reader reads, yet not integers as LightGBM writes them.
    "integral decimal child": (lambda t: _tree1(t, "left_child=-1 -2",
                                                "left_child=-1.0 -2"), "tree 0.*left_child"),
    "exponent feature": (lambda t: _tree1(t, "split_feature=0 1", "split_feature=0 1e0"),
                         "tree 0.*split_feature"),
    "non-finite leaf": (lambda t: _tree1(t, "leaf_value=1 2 3", "leaf_value=1 inf 3"),
                        "tree 0.*leaf value"),
    "missing type 3": (lambda t: _tree1(t, "decision_type=2 1", "decision_type=14 1"),
                       "tree 0, node 0.*missing type"),
    "cat index out of range": (lambda t: _tree1(t, "threshold=0.5 0", "threshold=0.5 1"),
                               "tree 0, node 1.*num_cat"),
    "cat boundaries": (lambda t: _tree1(t, "cat_boundaries=0 2", "cat_boundaries=0 3"),
                       "tree 0.*cat_boundaries"),
    "bitset word too big": (lambda t: _tree1(t, "cat_threshold=5 1", "cat_threshold=5 "
                                             "4294967296"), "tree 0.*cat_threshold"),
    "missing field": (lambda t: _tree1(t, "decision_type=2 1\n", ""),
                      "tree 0.*decision_type.*missing"),
    "num_leaves zero": (lambda t: _tree1(t, "num_leaves=3", "num_leaves=0"),
                        "tree 0.*num_leaves"),
    "unknown tree field": (lambda t: _tree1(t, "shrinkage=1", "shrinkage=1\nfancy=1"),
                           "tree 0.*fancy"),
    "duplicate field": (lambda t: _tree1(t, "shrinkage=1", "shrinkage=1\nshrinkage=1"),
                        "tree 0.*shrinkage.*twice"),
    "wrong tree number": (lambda t: t.replace("Tree=1", "Tree=5"), "Tree=5"),
    "no end of trees": (lambda t: t.replace("end of trees\n", ""), "end of trees"),
    "truncated": (lambda t: t[:t.index("Tree=1") + 30], "end of trees"),
    "truncated in header": (lambda t: t[:40], "header"),
    "not a model": (lambda t: "tree\nhello\n", "header"),
    "bad num_class": (lambda t: t.replace("num_class=1", "num_class=x"), "num_class"),
    "feature names count": (lambda t: t.replace("feature_names=f0 f1", "feature_names=f0"),
                            "feature_names"),
    "unknown objective": (lambda t: t.replace("objective=regression", "objective=magic"),
                          "objective"),
    "bad sigmoid": (lambda t: t.replace("objective=regression", "objective=binary sigmoid:x"),
                    "sigmoid"),
    "iterations": (lambda t: t.replace("num_class=1", "num_class=2").replace(
        "num_tree_per_iteration=1", "num_tree_per_iteration=2").replace(
        "objective=regression", "objective=multiclass num_class:2").replace(
        "\nend of trees", "\nTree=2\nnum_leaves=1\nnum_cat=0\n"
                                    "leaf_value=1\n\nend of trees"), "iterations"),
    "bad pandas json": (lambda t: t.replace("pandas_categorical:null",
                                            "pandas_categorical:[[1,"), "pandas_categorical"),
    "pandas not lists": (lambda t: t.replace("pandas_categorical:null",
                                             "pandas_categorical:{\"a\": 1}"),
                         "pandas_categorical"),
    "version": (lambda t: t.replace("version=v4", "version=v9"), "version"),
}


@pytest.mark.parametrize("name", list(BAD_TEXTS))
def test_malformed_text_is_rejected(name):
    mutate, message = BAD_TEXTS[name]
    text = mutate(_good_text())
    assert text != _good_text()
    with pytest.raises(SilvanForgeError, match=message):
        silvanforge.load(text.encode())


def test_not_utf8_and_linear_fields():
    with pytest.raises(SilvanForgeError, match="UTF-8"):
        lgb_frontend.load_bytes(b"tree\n\xff\xfe")
    linear = _tree1(_good_text(), "is_linear=0", "is_linear=1\nleaf_const=1 2 3\n"
                    "num_features=1 0 2\nleaf_features=0  1 5\nleaf_coeff=0.5  1 2")
    with pytest.raises(SilvanForgeError, match="tree 0.*leaf_features"):
        lgb_frontend.load_bytes(linear.encode())
    short = _tree1(_good_text(), "is_linear=0", "is_linear=1\nleaf_const=1 2 3\n"
                   "num_features=1 0 2\nleaf_features=0  1 1\nleaf_coeff=0.5  1")
    with pytest.raises(SilvanForgeError, match="tree 0.*leaf_coeff"):
        lgb_frontend.load_bytes(short.encode())
