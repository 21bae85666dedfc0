"""Mutated model files: every format, random damage, never anything but our errors.

Starting from a small valid file of each format, hypothesis flips bytes, cuts, splices
and swaps numbers. ``load`` must answer with a SilvanForgeError or a valid Forest, and a
Forest it returns must predict without error: whatever a file says, nothing crashes.
"""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import silvanforge
from silvanforge import reference
from silvanforge.errors import SilvanForgeError
from silvanforge.plan import planner
from silvanforge.runtime.predictor import Predictor


def _data(n=200, d=4, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32)
    X[rng.random(X.shape) < 0.1] = np.nan
    return X, (np.nan_to_num(X[:, 0]) + np.nan_to_num(X[:, 1]) > 0).astype(int)


def _xgboost(fmt: str) -> bytes:
    xgb = pytest.importorskip("xgboost")
    X, y = _data()
    booster = xgb.train({"objective": "binary:logistic", "max_depth": 3},
                        xgb.DMatrix(X, label=y), num_boost_round=2)
    return bytes(booster.save_raw(fmt))


def _lightgbm() -> bytes:
    lgb = pytest.importorskip("lightgbm")
    X, y = _data()
    booster = lgb.train({"objective": "binary", "num_leaves": 5, "verbose": -1,
                         "min_data_in_leaf": 5}, lgb.Dataset(X, y), num_boost_round=2)
    return booster.model_to_string().encode()


def _onnx() -> bytes:
    pytest.importorskip("skl2onnx")
    from skl2onnx import to_onnx
    from sklearn.tree import DecisionTreeRegressor

    X, y = _data()
    model = DecisionTreeRegressor(max_depth=3).fit(np.nan_to_num(X), y)
    return to_onnx(model, np.nan_to_num(X[:1])).SerializeToString()


SOURCES = {"xgboost-json": lambda: _xgboost("json"), "xgboost-ubj": lambda: _xgboost("ubj"),
           "lightgbm": _lightgbm, "onnx": _onnx}
_cache: dict[str, bytes] = {}


def _valid(name: str) -> bytes:
    if name not in _cache:
        _cache[name] = SOURCES[name]()
    return _cache[name]


@st.composite
def damage(draw, data: bytes) -> bytes:
    """Apply a few random edits of the kinds real corruption and tampering make."""
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "cut", "delete", "splice", "number"]))
        at = draw(st.integers(0, max(0, len(out) - 1)))
        if kind == "flip" and out:
            out[at] = draw(st.integers(0, 255))
        elif kind == "cut":
            del out[at:]
        elif kind == "delete":
            del out[at:at + draw(st.integers(1, 16))]
        elif kind == "splice":
            out[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "number":
            # Replace one number of a text format by another: indices, counts, sizes.
            text = bytes(out)
            numbers = [m.span() for m in re.finditer(rb"-?\d+(\.\d+)?", text)]
            if numbers:
                a, b = numbers[draw(st.integers(0, len(numbers) - 1))]
                new = draw(st.sampled_from([b"-1", b"0", b"1", b"7", b"99999", b"1e308",
                                            b"-2147483649", b"2.5", b"nan"]))
                out[a:b] = new
    return bytes(out)


@pytest.mark.parametrize("name", list(SOURCES))
@settings(max_examples=60)
@given(data=st.data())
def test_damaged_files_raise_our_errors_or_load_whole(name, data):
    blob = data.draw(damage(_valid(name)))
    try:
        forest = silvanforge.load(blob)
    except SilvanForgeError:
        return
    X = np.random.default_rng(0).normal(size=(8, forest.n_features))
    X[0] = np.nan
    out = reference.predict(forest, X)
    assert len(out) == 8


@pytest.mark.parametrize("name", list(SOURCES))
def test_the_undamaged_files_load(name):
    forest = silvanforge.load(_valid(name))
    assert forest.n_trees >= 1


# ---- fuzz/: the atheris harnesses and their seeds ----------------------------------------

FUZZ = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fuzz")


@pytest.fixture(scope="module")
def harness():
    pytest.importorskip("atheris")
    spec = importlib.util.spec_from_file_location("silvanforge_fuzz_harness",
                                                  os.path.join(FUZZ, "harness.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("kind", ["xgboost_json", "xgboost_ubjson", "lightgbm_text", "onnx",
                                  "predictor", "tuning_cache"])
def test_each_harness_passes_its_seeds(harness, kind, monkeypatch, tmp_path):
    """The committed seeds are valid inputs of their kind (a corpus of rejected files
    would fuzz nothing but the first checks), and the harness passes each."""
    monkeypatch.setenv("SILVANFORGE_CACHE_DIR", str(tmp_path))  # the harness moves it
    seeds = sorted(glob.glob(os.path.join(FUZZ, "corpus", kind, "seed-*")))
    assert seeds
    for seed in seeds:
        with open(seed, "rb") as fh:
            data = fh.read()
        harness.HARNESSES[kind](data)
        if kind in ("xgboost_json", "xgboost_ubjson", "lightgbm_text", "onnx"):
            silvanforge.load(data)
        elif kind == "predictor" and data[0] == 0:
            Predictor.from_bytes(data[1:], trust_code=False)
        elif kind == "tuning_cache":  # the entry is found: the tuned options are used
            options = planner.tuned_options(harness._cache_state["forest"], "auto",
                                            {"n_jobs": 1}, "native")
            assert options["schedule"] == json.loads(data)["entries"][0]["configuration"][
                "schedule"]
