"""Issue 26: whatever the caller, the file or the cache gives, SilvanForge raises its own
errors (never crashes, hangs or runs code it was not told to trust)."""

from __future__ import annotations

import numpy as np
import pytest

import silvanforge
from silvanforge.errors import InputError, ModelFormatError
from silvanforge.plan.plan import MAX_JOBS

from test_forest import forest_of, stump


@pytest.fixture(scope="module")
def forest():
    trees = [stump(feature=k % 3, threshold=0.1 * k, values=(k, -k)) for k in range(1, 6)]
    return forest_of(*trees, n_features=3, base_score=0.5, post_transform="sigmoid")


@pytest.fixture(scope="module")
def rows():
    return np.random.default_rng(0).normal(size=(300, 3)).astype(np.float32)


# ---- n_jobs ------------------------------------------------------------------------------

# 100,000 threads crashed the process (explicit schedule), 2**31 aborted it in libgomp;
# the rest were taken silently.
BAD_JOBS = [0, -1, MAX_JOBS + 1, 100_000, 2**31, "2", 1.5, 2.0, True, np.bool_(True), None]


@pytest.mark.parametrize("n_jobs", BAD_JOBS[:-1], ids=repr)
def test_predict_refuses_bad_n_jobs(forest, rows, n_jobs):
    predictor = silvanforge.compile(forest, schedule="xgboost", n_jobs=1)
    with pytest.raises(InputError, match=f"n_jobs must be an int from 1 to {MAX_JOBS}, "
                                         f"not {repr(n_jobs)[:8]}"):
        predictor.predict(rows, n_jobs=n_jobs)


@pytest.mark.parametrize("n_jobs", [n for n in BAD_JOBS if n is not None], ids=repr)
def test_compile_refuses_bad_n_jobs(forest, n_jobs):
    with pytest.raises(InputError, match="n_jobs must be an int"):
        silvanforge.compile(forest, schedule="xgboost", n_jobs=n_jobs)


def test_good_n_jobs(forest, rows):
    """numpy's ints are ints; the bound itself runs (threads an explicit schedule asks
    for are all started)."""
    predictor = silvanforge.compile(forest, schedule="xgboost", n_jobs=np.int64(2))
    assert predictor.plan.n_jobs == 2 and type(predictor.plan.n_jobs) is int
    expected = silvanforge.reference.predict(forest, rows)
    np.testing.assert_allclose(predictor.predict(rows, n_jobs=np.int32(MAX_JOBS)), expected,
                               rtol=1e-12)


def test_saved_plan_n_jobs_is_checked(forest):
    """A file's thread count is the file's error (ModelFormatError), not the caller's."""
    from silvanforge.plan.plan import Plan

    plan = silvanforge.compile(forest, schedule="xgboost", n_jobs=1).plan.to_json()
    for bad in (2**31, "2", True, 0):
        with pytest.raises(ModelFormatError, match=f"plan's n_jobs .* not {bad!r}"):
            Plan.from_json(forest, {**plan, "n_jobs": bad})
