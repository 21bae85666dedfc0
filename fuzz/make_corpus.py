"""Write the fuzz harnesses' seed corpus (fuzz/corpus/KIND/) from small models this
script trains: a few seeds per kind, a few KB each, so mutations stay fast.

    python fuzz/make_corpus.py      # needs the dev extra (xgboost, lightgbm, skl2onnx)
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import zipfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import silvanforge  # noqa: E402
from silvanforge.plan import cache  # noqa: E402
from silvanforge.plan.configuration import Configuration  # noqa: E402

from harness import MEMBER  # noqa: E402


def data(n=200, d=4, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32)
    X[rng.random(X.shape) < 0.1] = np.nan  # missing values take the default branches
    return X, (np.nan_to_num(X[:, 0]) + np.nan_to_num(X[:, 1]) > 0).astype(int)


def xgboost_models(fmt: str) -> list[bytes]:
    import xgboost as xgb
    X, y = data()
    params = [{"objective": "binary:logistic", "max_depth": 3},
              {"objective": "reg:squarederror", "max_depth": 2},
              {"objective": "multi:softprob", "num_class": 3, "max_depth": 2}]
    labels = [y, np.nan_to_num(X[:, 2]), (np.nan_to_num(X[:, 3]) > 0).astype(int) + y]
    return [bytes(xgb.train(p, xgb.DMatrix(X, label=t), num_boost_round=2).save_raw(fmt))
            for p, t in zip(params, labels)]


def lightgbm_models() -> list[bytes]:
    import lightgbm as lgb
    X, y = data()
    out = []
    for params, target in (({"objective": "binary"}, y), ({"objective": "regression"}, np.nan_to_num(X[:, 2])),
                           ({"objective": "regression", "linear_tree": True}, np.nan_to_num(X[:, 2]))):
        params = {**params, "num_leaves": 4, "verbose": -1, "min_data_in_leaf": 5}
        booster = lgb.train(params, lgb.Dataset(X, target), num_boost_round=2)
        out.append(booster.model_to_string().encode())
    X[:, 3] = np.abs(np.nan_to_num(X[:, 3]) * 3).astype(int)  # a categorical feature
    booster = lgb.train({"objective": "binary", "num_leaves": 4, "verbose": -1,
                         "min_data_in_leaf": 5},
                        lgb.Dataset(X, y, categorical_feature=[3]), num_boost_round=2)
    return out + [booster.model_to_string().encode()]


def onnx_models() -> list[bytes]:
    from skl2onnx import to_onnx
    from sklearn.ensemble import GradientBoostingClassifier, RandomForestRegressor
    from sklearn.tree import DecisionTreeRegressor
    X, y = data()
    X = np.nan_to_num(X)
    models = [DecisionTreeRegressor(max_depth=3).fit(X, y),
              RandomForestRegressor(n_estimators=2, max_depth=2, random_state=0).fit(X, y),
              GradientBoostingClassifier(n_estimators=2, max_depth=2).fit(X, y)]
    return [to_onnx(m, X[:1]).SerializeToString() for m in models]


def predictors(models: list[bytes]) -> list[bytes]:
    """Each saved predictor twice: raw (first byte 0) and as members to seal (first byte
    1; fuzz/harness.py's ``predictor``)."""
    out = []
    for model, kwargs in zip(models, ({}, {"representation": "array"},
                                      {"schedule": "tree_parallel"})):
        blob = silvanforge.compile(silvanforge.load(model), **kwargs).to_bytes()
        out.append(b"\0" + blob)
        with zipfile.ZipFile(io.BytesIO(blob)) as archive:
            members = [(i.filename, archive.read(i)) for i in archive.infolist()
                       if i.filename != "digest.npy"]  # the harness seals them anew
        out.append(b"\1" + MEMBER.join(name.encode() + b"\n" + content
                                        for name, content in members))
    return out


def tuning_caches(model: bytes) -> list[bytes]:
    # The harness puts this machine's CPU and the model's hash in place of the
    # placeholders (harness.CACHE_PLACEHOLDERS): the seeds hold on any CPU and survive
    # changes to what the model hash covers.
    key = {**cache.cache_key(silvanforge.load(model), 1024, 1), "model": "@MODEL",
           "cpu": "@CPU"}
    configs = [Configuration("reorder(tree, batch)", "sparse", 1),
               Configuration("xgboost", "array", 1, batch_size=1024, seconds=0.001,
                             search="guided"),
               Configuration("tree_parallel", "code", 1, point={"tile": 1})]
    return [json.dumps({"entries": [{"key": key, "configuration": c.to_json()}]}).encode()
            for c in configs]


def main() -> None:
    corpus = os.path.join(HERE, "corpus")
    shutil.rmtree(corpus, ignore_errors=True)
    json_models = xgboost_models("json")
    seeds = {"xgboost_json": json_models, "xgboost_ubjson": xgboost_models("ubj"),
             "lightgbm_text": lightgbm_models(), "onnx": onnx_models(),
             "predictor": predictors(json_models), "tuning_cache": tuning_caches(json_models[0])}
    for kind, blobs in seeds.items():
        os.makedirs(os.path.join(corpus, kind))
        for i, blob in enumerate(blobs):
            with open(os.path.join(corpus, kind, f"seed-{i}"), "wb") as fh:
                fh.write(blob)
    # The model tuning_cache's seeds are keyed to (the harness compiles it).
    with open(os.path.join(corpus, "cache_model.json"), "wb") as fh:
        fh.write(json_models[0])


if __name__ == "__main__":
    main()
