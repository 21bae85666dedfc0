"""The strict UBJSON decoder: XGBoost's files, the spec's forms, and hostile input."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from silvanforge.errors import ModelFormatError
from silvanforge.frontends.ubjson import MAX_DEPTH, decode
from util import to_ubjson


def _plain(value):
    """Typed arrays → lists, numbers → float, so values compare with json.loads'."""
    if isinstance(value, np.ndarray):
        return [float(np.float32(v)) for v in value.tolist()]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, (bool, int, float)):
        return float(np.float32(value))
    return value


def test_xgboost_ubj_equals_its_json():
    xgb = pytest.importorskip("xgboost")
    rng = np.random.default_rng(0)
    X = rng.normal(size=(80, 3)).astype(np.float32)
    booster = xgb.train({"max_depth": 3}, xgb.DMatrix(X, X[:, 0]), 3)
    assert _plain(decode(bytes(booster.save_raw("ubj")))) == \
        _plain(json.loads(booster.save_raw("json")))


@pytest.mark.parametrize("data,expected", [
    (b"Z", None), (b"T", True), (b"F", False), (b"i\xff", -1), (b"U\xff", 255),
    (b"I\x01\x00", 256), (b"l\xff\xff\xff\xfe", -2), (b"L" + struct.pack(">q", 2**40), 2**40),
    (b"d" + struct.pack(">f", 1.5), 1.5), (b"D" + struct.pack(">d", -0.25), -0.25),
    (b"Ca", "a"), (b"SU\x03abc", "abc"), (b"HU\x041e-3", 1e-3),
    (b"[i\x01SU\x01x]", [1, "x"]), (b"[#U\x02i\x01i\x02", [1, 2]),
    (b"{U\x01ai\x01U\x01b[]}", {"a": 1, "b": []}),
    (b"{$i#U\x02U\x01a\x01U\x01b\x02", {"a": 1, "b": 2}),
    (b"[NNi\x07N]N", [7]), (b"[$S#U\x02U\x01aU\x01b", ["a", "b"]),
])
def test_values(data, expected):
    assert decode(data) == expected


def test_typed_numeric_arrays_are_numpy():
    arr = decode(b"[$l#U\x03" + struct.pack(">3i", 1, -2, 3))
    assert isinstance(arr, np.ndarray) and arr.tolist() == [1, -2, 3]
    assert not arr.flags.writeable
    arr = decode(b"[$d#i\x02" + struct.pack(">2f", 0.5, -1.0))
    assert arr.dtype == np.float32 and arr.tolist() == [0.5, -1.0]


@pytest.mark.parametrize("data,message", [
    (b"", "truncated"), (b"[", "truncated"), (b"{U\x01a", "truncated"),
    (b"l\x00\x00", "truncated"), (b"SU\x05ab", "truncated"),
    (b"[$d#U\x03\x00\x00\x00\x00", "exceeds"),
    (b"[$d#L" + struct.pack(">q", 2**62), "exceeds"),
    (b"[#L" + struct.pack(">q", 2**40), "exceeds"),
    (b"[$d#i\xff", "negative"), (b"SU\x02\xff\xfe", "UTF-8"),
    (b"X", "unknown type marker"), (b"[i\x01?]", "unknown type marker"),
    (b"[$T#U\x05", "unsupported container element type"),
    (b"[$i]", "declare its count"), (b"[#d\x00\x00\x00\x00", "must be an integer"),
    (b"HU\x03abc", "high-precision"), (b"i\x01i\x02", "unexpected bytes"),
    (b"{i\x01a}", "unknown type marker"),
])
def test_malformed(data, message):
    with pytest.raises(ModelFormatError, match=message):
        decode(data)


def test_depth_limit():
    ok = b"[" * MAX_DEPTH + b"]" * MAX_DEPTH
    assert decode(ok) is not None
    deep = b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1)
    with pytest.raises(ModelFormatError, match="nested deeper"):
        decode(deep)
    with pytest.raises(ModelFormatError, match="nested deeper"):
        decode(b"{U\x01a" * 10_000)



_json = st.recursive(
    st.booleans() | st.integers(-2**63, 2**63 - 1) | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=20)


@given(_json)
def test_roundtrip(value):
    assert decode(to_ubjson(value)) == value


@given(_json, st.data())
def test_every_truncation_is_an_error(value, data):
    encoded = to_ubjson(value)
    cut = data.draw(st.integers(0, len(encoded) - 1))
    with pytest.raises(ModelFormatError):
        decode(encoded[:cut])
