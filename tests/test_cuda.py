"""CUDA kernels on an NVIDIA GPU against the reference: every GPU schedule, layout, tile
size and precision, random forests with NaN inputs, trained models, device arrays in and
out. Marked ``cuda``: without a GPU and CuPy every test here is skipped, the reason
printed (CI has no GPU; tests/test_gpu.py compiles the same kernels to PTX there)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import silvanforge
from silvanforge import reference
from silvanforge.schedule.library import GPU_SCHEDULES

from test_forest import random_forests
from test_tiled_compile import skewed_forest
from util import probe_rows, with_nans

pytestmark = pytest.mark.cuda
LAYOUTS = ["array", "sparse", "reorg"]


@pytest.fixture(scope="module")
def cp():
    try:
        import cupy

        cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # noqa: BLE001 (any failure means: no usable GPU here)
        print(f"\nskipped: no CUDA device or CuPy: {exc}")
        pytest.skip(f"no CUDA device or CuPy: {exc}")
    return cupy


def check(predictor, forest, X, output="margin"):
    np.testing.assert_allclose(predictor.predict(X, output=output),
                               reference.predict(forest, X, output=output),
                               rtol=1e-12, atol=1e-12)


@settings(max_examples=60, deadline=None)
@given(forest=random_forests(), seed=st.integers(0, 2**32 - 1),
       schedule=st.sampled_from(GPU_SCHEDULES), layout=st.sampled_from(LAYOUTS),
       tile_size=st.sampled_from([1, 1, 2, 4]))
def test_random_forests_on_the_gpu(cp, forest, seed, schedule, layout, tile_size):
    if tile_size > 1 and layout == "reorg":
        layout = "sparse"  # reorg has no tiled form
    try:
        p = silvanforge.compile(forest, target="cuda", schedule=schedule,
                                representation=layout, tile_size=tile_size)
    except silvanforge.UnsupportedModelError:
        assert layout != "sparse"  # a tree too deep for a padded layout
        return
    X = probe_rows(forest, seed, 97)
    check(p, forest, X)
    check(p, forest, X, output="value")


@pytest.mark.parametrize("schedule", GPU_SCHEDULES)
def test_skewed_trees_and_device_arrays(cp, schedule):
    forest = skewed_forest(40)
    X = with_nans(np.random.default_rng(3).normal(0, 3, size=(5000, forest.n_features)),
                  0.1)
    expected = reference.predict(forest, X)
    for layout in ("sparse", "code"):
        p = silvanforge.compile(forest, target="cuda", schedule=schedule,
                                representation=layout)
        on_device = p.predict(cp.asarray(X))
        assert isinstance(on_device, cp.ndarray)
        np.testing.assert_allclose(on_device.get(), expected, rtol=1e-12, atol=1e-12,
                                   err_msg=f"{schedule} {layout}")


def test_the_gpu_default_plan_on_trained_models(cp):
    sklearn = pytest.importorskip("sklearn.ensemble", reason="scikit-learn is not installed")
    rng = np.random.default_rng(0)
    X = rng.normal(size=(3000, 12))
    y = (X[:, 0] + np.sin(3 * X[:, 1]) > 0).astype(int)
    models = [sklearn.RandomForestClassifier(n_estimators=30, max_depth=10,
                                             random_state=0).fit(X, y),
              sklearn.GradientBoostingClassifier(n_estimators=40, max_depth=4,
                                                 random_state=0).fit(X, y)]
    rows = with_nans(rng.normal(size=(20000, 12)), 0.05)
    for model in models:
        forest = silvanforge.load(model)
        for precision in ("float32", "float64"):
            p = silvanforge.compile(model, target="cuda", precision=precision)
            assert "target: cuda" in p.dump("plan")
            # scikit-learn compares float32 rows with float32 thresholds: either
            # precision is exact.
            np.testing.assert_allclose(p.predict(rows), reference.predict(forest, rows),
                                       rtol=1e-12, atol=1e-12, err_msg=precision)
