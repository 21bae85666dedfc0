"""Benchmark models with the shapes of the Treebeard and lleaves benchmarks, trained on
synthetic numpy data (no downloads), plus ../shared/models/*.json when that folder exists.

The data sets are stand-ins: the feature counts, tree counts and depths are those of the
published benchmarks, the values are random, so tree shapes (and so timings) are alike
but predictions mean nothing.
"""

from __future__ import annotations

import atexit
import glob
import os
import shutil
import tempfile
from dataclasses import dataclass

import numpy as np

import silvanforge
from silvanforge.bench import Case, case_from_file

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.join(HERE, "..", "..", "shared", "models")


@dataclass(frozen=True)
class Spec:
    """One synthetic benchmark model: its library, shape and task."""

    name: str
    library: str  # xgboost, lightgbm or sklearn
    features: int
    task: str  # reg, bin, multi or poisson
    trees: int = 100
    depth: int = 8  # XGBoost / random-forest depth; LightGBM uses leaves
    leaves: int = 31
    max_depth: int = -1  # LightGBM's limit (-1: none)
    classes: int = 4  # for task "multi"
    categorical: int = 0  # trailing integer-coded categorical columns (LightGBM)
    missing: float = 0.0  # fraction of values set to NaN
    train_rows: int = 8000
    quick: bool = False
    note: str = ""


SPECS = [
    Spec("higgs-like", "xgboost", 28, "bin", quick=True, note="Treebeard HIGGS shape"),
    Spec("airline-like", "xgboost", 13, "bin", missing=0.02, note="Treebeard airline shape"),
    Spec("year-like", "xgboost", 90, "reg", note="Treebeard YearPredictionMSD shape"),
    Spec("epsilon-like", "xgboost", 2000, "bin", train_rows=2000,
         note="Treebeard epsilon shape"),
    Spec("bosch-like", "xgboost", 968, "bin", missing=0.5, train_rows=3000,
         note="Treebeard bosch shape (mostly missing values)"),
    Spec("nyc-taxi-like", "lightgbm", 5, "reg", quick=True, note="lleaves NYC-taxi shape"),
    Spec("airline-cat-like", "lightgbm", 13, "bin", categorical=5, quick=True,
         note="lleaves airline shape, 5 categorical features"),
    Spec("mtpl2-like", "lightgbm", 12, "poisson", trees=1000, categorical=2,
         note="lleaves mtpl2 shape, 1000 trees"),
    Spec("random-forest", "sklearn", 20, "bin", quick=True,
         note="scikit-learn RandomForestClassifier"),
    Spec("multiclass", "xgboost", 20, "multi", trees=40, depth=6, quick=True,
         note="XGBoost multi:softprob, 4 classes"),
    Spec("lightgbm-multiclass", "lightgbm", 10, "multi", trees=40, leaves=32, max_depth=5,
         classes=3, note="LightGBM multiclass, 3 classes x 40 rounds, depth <= 5 "
         "(issue 27's small multiclass forest)"),
]


def _data(spec: Spec, n: int, rng: np.random.Generator) -> np.ndarray:
    X = rng.normal(size=(n, spec.features)).astype(np.float32)
    if spec.categorical:
        X[:, -spec.categorical:] = rng.integers(0, 20, size=(n, spec.categorical))
    if spec.missing:
        X[rng.random(X.shape) < spec.missing] = np.nan
    return X


def _labels(spec: Spec, X: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    # A smooth function of a few features plus an interaction: deep trees have signal to
    # split on everywhere, as on real data.
    Z = np.nan_to_num(X[:, :min(8, spec.features)].astype(np.float64))
    w = rng.normal(size=Z.shape[1])
    signal = np.sin(Z @ w) + Z[:, 0] * Z[:, -1] + rng.normal(scale=0.3, size=len(Z))
    if spec.categorical:
        signal += np.nan_to_num(X[:, -1]) % 3 - 1
    if spec.task == "bin":
        return (signal > 0).astype(np.int64)
    if spec.task == "multi":
        cuts = np.arange(1, spec.classes) / spec.classes
        return np.digitize(signal, np.quantile(signal, cuts))
    if spec.task == "poisson":
        return rng.poisson(np.exp(signal / 2)).astype(np.float64)
    return signal


def _estimator(spec: Spec):
    if spec.library == "xgboost":
        import xgboost as xgb

        kind = xgb.XGBRegressor if spec.task == "reg" else xgb.XGBClassifier
        return kind(n_estimators=spec.trees, max_depth=spec.depth, tree_method="hist",
                    n_jobs=os.cpu_count(), min_child_weight=0.1)
    if spec.library == "lightgbm":
        import lightgbm as lgb

        kind = lgb.LGBMClassifier if spec.task in ("bin", "multi") else lgb.LGBMRegressor
        objective = "poisson" if spec.task == "poisson" else None
        return kind(n_estimators=spec.trees, num_leaves=spec.leaves, objective=objective,
                    max_depth=spec.max_depth, min_child_samples=5, verbose=-1)
    from sklearn.ensemble import RandomForestClassifier

    return RandomForestClassifier(n_estimators=spec.trees, max_depth=spec.depth,
                                  n_jobs=os.cpu_count(), random_state=0)


def build(spec: Spec, n_rows: int, folder: str, seed: int = 0) -> Case:
    """Train ``spec``'s model and return its Case with ``n_rows`` benchmark rows.

    XGBoost and LightGBM models are also saved under ``folder`` (lleaves reads files).
    """
    rng = np.random.default_rng(seed)
    X = _data(spec, spec.train_rows, rng)
    y = _labels(spec, X, rng)
    est = _estimator(spec)
    if spec.categorical:
        columns = list(range(spec.features - spec.categorical, spec.features))
        est.fit(X, y, categorical_feature=columns)
    else:
        est.fit(X, y)
    rows = _data(spec, n_rows, rng)
    path = booster = None
    if spec.library == "xgboost":
        booster = est.get_booster()
        path = os.path.join(folder, spec.name + ".json")
        booster.save_model(path)
    elif spec.library == "lightgbm":
        booster = est.booster_
        path = os.path.join(folder, spec.name + ".txt")
        booster.save_model(path)
    source = booster if booster is not None else est
    return Case(spec.name, silvanforge.load(source), rows, spec.library, booster=booster,
                estimator=est, path=path, note=spec.note)


def shared_cases(n_rows: int, drawn: bool = False) -> list[Case]:
    """../shared/models/: XGBoost ``*.json`` and LightGBM ``*.lgb.txt`` models with the
    rows of their CSV files (``<stem>.*.csv``: feature columns, then a label), repeated
    up to ``n_rows``; ``drawn``: ``n_rows`` distinct rows drawn around each model's
    split points instead (``bench.random_rows``), so that no batch repeats rows."""
    cases = []
    for path in sorted(glob.glob(os.path.join(SHARED, "*.json"))
                       + glob.glob(os.path.join(SHARED, "*.lgb.txt"))):
        stem = path[:-len(".json")] if path.endswith(".json") else path[:-len(".lgb.txt")]
        csvs = sorted(glob.glob(stem + ".*.csv"))
        rows = np.loadtxt(csvs[0], delimiter=",", ndmin=2) if csvs and not drawn else None
        case = case_from_file(path, rows, n_rows)
        case.name = "shared/" + case.name
        case.note = "real model" + (f", rows of {os.path.basename(csvs[0])}" if rows is not None
                                    else f", {n_rows} rows drawn around its split points")
        cases.append(case)
    return cases


def cases(quick: bool, n_rows: int, names: list[str] | None = None,
          folder: str | None = None, log=print, drawn: bool = False) -> list[Case]:
    """Every benchmark model (``quick``: the small subset; ``names``: only those), then
    the shared ones (``drawn``: see :func:`shared_cases`). The models trained here go
    to ``folder``, else to a temporary folder removed when the process ends."""
    out = []
    for spec in SPECS:
        if (quick and not spec.quick) or (names and spec.name not in names):
            continue
        if folder is None:
            folder = tempfile.mkdtemp(prefix="sf-bench-models-")
            atexit.register(shutil.rmtree, folder, ignore_errors=True)
        log(f"training {spec.name} ({spec.library}, {spec.trees} trees)")
        out.append(build(spec, n_rows, folder))
    return out + [c for c in shared_cases(n_rows, drawn) if not names or c.name in names]
