"""Shared assertions for the parity tests."""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest

RTOL = 1e-5


def unavailable(reason: str, what: str) -> None:
    """A test whose tool (``reason``) is missing: a failure in CI, which must run
    ``what``; elsewhere a skip with the reason printed."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI must run {what})")
    print(f"\nskipped: {reason}")
    pytest.skip(reason)


def assert_parity(actual, expected, what: str = "") -> None:
    """``actual`` equals the library's ``expected`` within 1e-5 relative.

    Relative to the scale of the whole result, so that outputs that are nearly zero
    (margins that cancel) are compared at the precision the library computed them in.
    """
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape, (
        f"{what}: shape {actual.shape} differs from the library's {expected.shape}")
    scale = max(1.0, float(np.nanmax(np.abs(expected)))) if expected.size else 1.0
    np.testing.assert_allclose(actual, expected, rtol=RTOL, atol=RTOL * scale * 0.1,
                               err_msg=what)


def with_nans(X: np.ndarray, rate: float, seed: int = 0) -> np.ndarray:
    """A copy of X with a fraction ``rate`` of its entries set to NaN."""
    rng = np.random.default_rng(seed)
    X = np.array(X, dtype=np.float32, copy=True)
    X[rng.random(X.shape) < rate] = np.nan
    return X


def to_ubjson(value) -> bytes:
    """A tiny UBJSON encoder for test documents: plain containers, int64, float64, str."""
    if isinstance(value, dict):
        return b"{" + b"".join(b"U" + bytes([len(k.encode())]) + k.encode() + to_ubjson(v)
                               for k, v in value.items()) + b"}"
    if isinstance(value, list):
        return b"[" + b"".join(to_ubjson(v) for v in value) + b"]"
    if isinstance(value, bool):
        return b"T" if value else b"F"
    if isinstance(value, int):
        return b"L" + struct.pack(">q", value)
    if isinstance(value, float):
        return b"D" + struct.pack(">d", value)
    raw = value.encode()
    return b"SL" + struct.pack(">q", len(raw)) + raw


def probe_rows(forest, seed: int, n: int) -> np.ndarray:
    """Rows that probe every split: values on thresholds, on and just off category
    boundaries, NaN, infinities, signed zeros, tiny and huge values, and some normals."""
    from silvanforge.model import OP_CAT

    rng = np.random.default_rng(seed)
    cats = [forest.category_set(i) for i in np.flatnonzero(forest.split_op == OP_CAT)]
    pool = np.concatenate([forest.threshold, *cats, *[c + 0.5 for c in cats],
                           [31.0, 32.0, 63.0, 64.0, 0.0, -0.0, -0.5, -1.0, 1e-36, -1e-36,
                            np.nan, np.inf, -np.inf, 1e30]])
    X = rng.choice(pool, size=(n, forest.n_features))
    return np.where(rng.random(X.shape) < 0.2, rng.normal(size=X.shape), X)


def unaligned(rows: np.ndarray) -> np.ndarray:
    """A copy of ``rows`` whose data starts one byte past an aligned address."""
    raw = np.zeros(rows.nbytes + 1, np.uint8)
    view = raw[1:].view(rows.dtype).reshape(rows.shape)
    view[...] = rows
    return view


def forbid_compiling(monkeypatch) -> None:
    """Make any kernel build fail the test (a reloaded predictor must not compile)."""
    from silvanforge.runtime import predictor as runtime

    def no_compiling(*args, **kwargs):
        raise AssertionError("recompiled")

    monkeypatch.setattr(runtime, "compile_kernels", no_compiling)
