"""Compiled leaf output and iteration ranges against the reference: random forests with
random source ids (up to 2^31 - 1, which a float32 would round), every representation,
schedules of every kind, threads, probability tiling's reordered trees, saving."""

from __future__ import annotations

import logging
import pickle

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import silvanforge
from silvanforge import reference
from silvanforge.errors import InputError, ModelFormatError
from silvanforge.representations import REGISTRY

from test_compile import schedules
from test_forest import random_forests, stump, forest_of
from util import probe_rows, forbid_compiling


def with_ids(forest, seed):
    """``forest`` with random distinct source ids, the largest int32 among them."""
    rng = np.random.default_rng(seed)
    ids = rng.choice(2**31 - 1, size=forest.n_nodes, replace=False)
    ids[rng.integers(forest.n_nodes)] = 2**31 - 1
    return forest.replace(source_id=ids, source="test")


@settings(max_examples=12, deadline=None)
@given(forest=random_forests(), seed=st.integers(0, 2**32 - 1),
       representation=st.sampled_from(sorted(REGISTRY)), which=st.integers(0, 100),
       n_jobs=st.sampled_from([1, 2]), precision=st.sampled_from([None, "float64"]))
def test_compiled_leaf_output_equals_reference(forest, seed, representation, which, n_jobs,
                                               precision):
    forest = with_ids(forest, seed)
    options = schedules(forest)
    name = sorted(options)[which % len(options)]
    try:
        predictor = silvanforge.compile(forest, schedule=options[name], n_jobs=n_jobs,
                                        representation=representation, precision=precision)
    except silvanforge.UnsupportedModelError:
        return  # a tree too deep for a padded array, a layout this CPU lacks
    X = probe_rows(forest, seed, 37)
    got = predictor.predict(X, output="leaf")
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, reference.leaf_output(forest, X),
                                  err_msg=f"{name}, {representation}")


@pytest.fixture(scope="module")
def forest():
    trees = [stump(feature=k % 3, threshold=0.1 * k, values=(k, -k)) for k in range(1, 12)]
    return with_ids(forest_of(*trees, n_features=3, base_score=0.5,
                              post_transform="sigmoid"), 5)


@pytest.mark.parametrize("options", [{}, {"n_jobs": 3}, {"precision": "float32"},
                                     {"tile_size": 3}, {"tiling": "probability"}])
def test_default_plans_threads_tiles_and_reordered_trees(forest, options):
    X = np.random.default_rng(1).normal(size=(300, 3))
    if options.get("tiling"):
        options = {**options, "profile": X[::-1]}
    predictor = silvanforge.compile(forest, **options)
    for n in (0, 1, 5, 300):  # the small-batch kernel and the main one
        np.testing.assert_array_equal(predictor.predict(X[:n], output="leaf"),
                                      reference.leaf_output(forest, X[:n]), err_msg=str(n))
    assert predictor.predict(X, output="leaf", n_jobs=2).shape == (300, forest.n_trees)


def test_built_once_lazily_and_saved_without_recompiling(forest, tmp_path, monkeypatch,
                                                         caplog):
    predictor = silvanforge.compile(forest, n_jobs=1)
    X = np.random.default_rng(2).normal(size=(40, 3))
    with caplog.at_level(logging.INFO, logger="silvanforge"):
        first = predictor.predict(X, output="leaf")
        np.testing.assert_array_equal(predictor.predict(X, output="leaf"), first)
    assert sum("leaf output: building" in r.getMessage() for r in caplog.records) == 1
    path = tmp_path / "model.sfp"
    predictor.save(path)
    forbid_compiling(monkeypatch)
    for loaded in (silvanforge.load_predictor(path), pickle.loads(pickle.dumps(predictor))):
        np.testing.assert_array_equal(loaded.predict(X, output="leaf"), first)
    # A damaged leaf kernel is found by the digest like any other member.
    data = bytearray(path.read_bytes())
    at = data.find(b"leaf_object_code_0_0")
    data[data.find(b"ELF", at) + 64] ^= 1
    with pytest.raises(ModelFormatError):
        silvanforge.Predictor.from_bytes(bytes(data))


def test_eager_outputs_build_the_leaf_kernel_at_compile_time(forest, monkeypatch):
    predictor = silvanforge.compile(forest, outputs=("leaf",), n_jobs=1)
    assert predictor.plan.outputs == ("leaf",) and "leaf" in predictor.dump("plan")
    from silvanforge.runtime import predictor as runtime

    monkeypatch.setattr(runtime, "compile_kernels", lambda *a, **k: 1 / 0)
    X = np.zeros((3, 3))
    np.testing.assert_array_equal(predictor.predict(X, output="leaf"),
                                  reference.leaf_output(forest, X))


def test_bad_outputs_and_ranges(forest):
    for bad in ("leaf", ["contribs"], [3]):
        with pytest.raises(InputError, match="outputs"):
            silvanforge.compile(forest, outputs=bad)
    with pytest.raises(InputError, match="outputs"):
        silvanforge.compile(forest, target="opencl", outputs=("leaf",))
    with pytest.raises(InputError, match="'value' or 'margin' or 'leaf'"):
        silvanforge.compile(forest).predict(np.zeros((1, 3)), output="leaves")
    for bad in ((0, 12), (4, 2), 3, "0 2"):
        with pytest.raises(InputError, match="iteration_range"):
            silvanforge.compile(forest, iteration_range=bad)
    # A library's forest without ids (an older save) is refused, not numbered by guess.
    old = forest.replace(source_id=None, source="lightgbm 4.7.0")
    with pytest.raises(silvanforge.UnsupportedModelError, match="no source node ids"):
        silvanforge.compile(old).predict(np.zeros((1, 3)), output="leaf")


def test_iteration_range_against_xgboost_and_lightgbm():
    xgb = pytest.importorskip("xgboost")
    lgb = pytest.importorskip("lightgbm")
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 4))
    y = np.digitize(X[:, 0], [-0.5, 0.5])
    booster = xgb.train({"objective": "multi:softprob", "num_class": 3, "max_depth": 3},
                        xgb.DMatrix(X, label=y), 6)
    predictor = silvanforge.compile(booster, iteration_range=(2, 5), n_jobs=1)
    np.testing.assert_allclose(predictor.predict(X), booster.predict(
        xgb.DMatrix(X), iteration_range=(2, 5)), rtol=1e-6)
    np.testing.assert_array_equal(predictor.predict(X, output="leaf"),
                                  booster[2:5].predict(xgb.DMatrix(X), pred_leaf=True))
    lgbm = lgb.train({"objective": "multiclass", "num_class": 3, "verbose": -1,
                      "num_leaves": 7}, lgb.Dataset(X, y), 6)
    predictor = silvanforge.compile(lgbm, iteration_range=(1, 4), n_jobs=1)
    np.testing.assert_allclose(predictor.predict(X), lgbm.predict(
        X, start_iteration=1, num_iteration=3), rtol=1e-9)
    np.testing.assert_array_equal(predictor.predict(X, output="leaf"), lgbm.predict(
        X, start_iteration=1, num_iteration=3, pred_leaf=True))
