"""A Forest as plain arrays and JSON, for files that must load without running code.

Compiled predictors are saved with their Forest in an ``.npz`` archive read with
``allow_pickle=False``; this module is the Forest's half of that format.
"""

from __future__ import annotations

import json
from dataclasses import fields
from typing import Any, Mapping

import numpy as np

from ..errors import ModelFormatError
from .forest import Forest, LinearLeaves

_ARRAYS = ("feature", "threshold", "left", "right", "default_left", "split_op", "missing",
           "cat_offset", "cat_words", "leaf_value", "tree_offsets", "tree_output",
           "cat_bitset", "base_score")
_LINEAR = ("offset", "count", "const", "feature", "coeff")
# Arrays a forest may lack (Forest's module docstring): saved only when present.
_OPTIONAL = ("cover", "source_id")
# The arrays no prediction kernel reads (outputs other than predictions do).
NOT_PREDICTED = frozenset(_OPTIONAL)


def _plain(value: Any) -> Any:
    """Numpy scalars and tuples → JSON values."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def to_arrays(forest: Forest) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The Forest's arrays (by name) and its other fields as a JSON-able dict."""
    arrays = {name: getattr(forest, name) for name in _ARRAYS}
    arrays.update({name: getattr(forest, name) for name in _OPTIONAL
                   if getattr(forest, name) is not None})
    if forest.linear is not None:
        arrays.update({f"linear_{n}": getattr(forest.linear, n) for n in _LINEAR})
    meta = {}
    for f in fields(forest):
        if f.name in _ARRAYS or f.name in _OPTIONAL or f.name == "linear":
            continue
        value = getattr(forest, f.name)
        meta[f.name] = value.name if f.name == "input_dtype" else _plain(value)
    cats = forest.pandas_categories
    meta["pandas_categories_by"] = (None if cats is None else
                                    "name" if isinstance(cats, Mapping) else "position")
    return arrays, meta


def from_arrays(arrays: Mapping[str, np.ndarray], meta: dict[str, Any]) -> Forest:
    """Rebuild (and so re-validate) a Forest from :func:`to_arrays`' output."""
    try:
        values = {name: arrays[name] for name in _ARRAYS}
        values.update({name: arrays[name] for name in _OPTIONAL if name in arrays})
        if "linear_offset" in arrays:
            values["linear"] = LinearLeaves(**{n: arrays[f"linear_{n}"] for n in _LINEAR})
        meta = dict(meta)
        by = meta.pop("pandas_categories_by", None)
        cats = meta.get("pandas_categories")
        if cats is not None and by == "position":
            meta["pandas_categories"] = [tuple(c) for c in cats]
        if "sparse_absent" not in meta and str(meta.get("source", "")).startswith("xgboost"):
            # Saved before the rule was a field: XGBoost's, as its frontend sets it now.
            meta.update(sparse_absent="missing", unseen_category="error")
        for key in ("feature_names", "class_labels"):
            if meta.get(key) is not None:
                meta[key] = tuple(meta[key])
        return Forest(**values, **meta)
    except (KeyError, TypeError) as exc:
        raise ModelFormatError(f"incomplete or foreign forest data ({exc})") from None


def dumps_meta(meta: dict[str, Any]) -> np.ndarray:
    return np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)


def loads_meta(data: np.ndarray) -> dict[str, Any]:
    try:
        value = json.loads(bytes(np.asarray(data, dtype=np.uint8)).decode())
    except (UnicodeDecodeError, ValueError) as exc:
        raise ModelFormatError(f"corrupt metadata ({exc})") from None
    if not isinstance(value, dict):
        raise ModelFormatError("corrupt metadata: expected an object")
    return value
