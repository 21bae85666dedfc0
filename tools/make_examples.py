"""Regenerate the example set `silvanforge demo` ships (src/silvanforge/examples/).

    python -m venv floor && floor/bin/pip install uv
    floor/bin/uv pip install --python floor/bin/python --resolution lowest-direct \
        -e ".[xgboost,lightgbm]" && floor/bin/python tools/make_examples.py

Written by the oldest XGBoost and LightGBM pyproject.toml allows, so that every version
it allows reads them as the demo compares (XGBoost 3 writes base_score as a vector,
"[2.91E-1]", which XGBoost 1.7 misreads: its predictions were 20% off; LightGBM 4.7
writes parameters 4.0 and 4.1 cannot parse). CI's floor job runs the demo.

Two small models on synthetic data, with the rows they are demonstrated on: an XGBoost
binary classifier (JSON) and a LightGBM regressor (text), each with sample rows as a
.npy array (float32, some values missing). Fixed seeds: the files are the same on every
run with the same library versions. Together they stay under 1 MB (package data that
every install carries); this script refuses to write more.
"""

from __future__ import annotations

from pathlib import Path

import lightgbm as lgb
import numpy as np
import xgboost as xgb

OUT = Path(__file__).resolve().parent.parent / "src" / "silvanforge" / "examples"
LIMIT = 1 << 20
N_TRAIN, N_ROWS, N_FEATURES = 4000, 2048, 12


def _data(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N_TRAIN + N_ROWS, N_FEATURES)).astype(np.float32)
    X[rng.random(X.shape) < 0.05] = np.nan  # missing values take the trees' default paths
    Z = np.nan_to_num(X)
    signal = Z[:, 0] * Z[:, 1] + np.sin(2 * Z[:, 2]) + 0.5 * Z[:, 3] - np.abs(Z[:, 4])
    return X, signal + rng.normal(scale=0.3, size=len(X))


def main() -> None:
    OUT.mkdir(exist_ok=True)
    X, y = _data(0)
    booster = xgb.train({"objective": "binary:logistic", "max_depth": 5, "eta": 0.3,
                         "seed": 0, "nthread": 1},
                        xgb.DMatrix(X[:N_TRAIN], label=(y[:N_TRAIN] > 0).astype(int)),
                        num_boost_round=40)
    booster.save_model(OUT / "xgboost_classifier.json")
    np.save(OUT / "xgboost_classifier.rows.npy", X[N_TRAIN:])

    X, y = _data(1)
    model = lgb.train({"objective": "regression", "num_leaves": 15, "learning_rate": 0.1,
                       "seed": 0, "num_threads": 1, "deterministic": True, "verbose": -1},
                      lgb.Dataset(X[:N_TRAIN], y[:N_TRAIN]), num_boost_round=60)
    model.save_model(OUT / "lightgbm_regressor.txt")
    np.save(OUT / "lightgbm_regressor.rows.npy", X[N_TRAIN:])

    total = sum(p.stat().st_size for p in OUT.iterdir() if p.is_file())
    for p in sorted(OUT.iterdir()):
        print(f"{p.name}: {p.stat().st_size} bytes")
    print(f"total {total} bytes")
    if total > LIMIT:
        raise SystemExit(f"the example set is {total} bytes, over the {LIMIT} limit")


if __name__ == "__main__":
    main()
