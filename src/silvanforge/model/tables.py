"""Named inputs → the model's rows: columns matched to the model's features by name.

A frame whose columns are the model's features in another order is reordered; a
missing or unknown column is an :class:`~silvanforge.errors.InputError` naming it. A
model that knows only generic names (``f0``, ``f1``, ... from XGBoost, ``Column_0``, ...
from LightGBM, ``0``, ``1``, ... from an unnamed pandas frame, or none), and a frame without names (pandas' default 0, 1, ...), are read
by position. Categorical columns become the model's category codes (:mod:`.categories`).

>>> from types import SimpleNamespace as NS
>>> forest = NS(feature_names=("a", "b"), n_features=2, input_dtype=np.dtype("float32"),
...             pandas_categories=None, unseen_category="missing")
>>> table_rows({"b": [1, 2], "a": [3, 4]}, forest)
array([[3., 1.],
       [4., 2.]], dtype=float32)
"""

from __future__ import annotations

import functools
import re
from typing import Any, Mapping, Sequence

import numpy as np

from ..errors import InputError
from . import columns
from .categories import category_values, training_codes

# Names a library makes up for unnamed columns: XGBoost's f0, LightGBM's Column_0, and
# the 0, 1, ... of a pandas frame without column names.
_GENERIC = re.compile(r"(?:f|Column_|)(\d+)")
_SHOWN = 8  # names listed in an error message


def generic(names: Sequence[Any] | None) -> bool:
    """Whether ``names`` (a model's feature names) say nothing beyond position.

    >>> generic(("f0", "f1")), generic(("Column_0",)), generic(("0", "1")), generic(("f1",))
    (True, True, True, False)
    """
    return _generic(tuple(names or ()))


@functools.lru_cache(maxsize=64)
def _generic(names: tuple) -> bool:
    # Cached: a model's names are asked about at every call with a frame (~10 µs for 28).
    matches = [_GENERIC.fullmatch(str(n)) for n in names]
    return all(m is not None and int(m.group(1)) == i for i, m in enumerate(matches))


def _listed(names: Sequence[Any]) -> str:
    shown = ", ".join(repr(n) for n in names[:_SHOWN])
    return shown + (f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else "")


def column_order(names: Sequence[Any], forest: Any) -> list[int]:
    """The input's column positions in the model's feature order.

    >>> from types import SimpleNamespace as NS
    >>> column_order(["y", "x"], NS(feature_names=("x", "y"), n_features=2))
    [1, 0]
    """
    model = forest.feature_names
    unnamed = list(names) == list(range(len(names)))
    if generic(model) or unnamed:
        if len(names) != forest.n_features:
            raise InputError(f"the model expects {forest.n_features} features (columns) "
                             f"but the input has {len(names)}")
        return list(range(len(names)))
    given = [str(n) for n in names]
    position = {n: i for i, n in enumerate(given)}
    if len(position) != len(given):
        repeated = sorted({n for n in given if given.count(n) > 1})
        raise InputError(f"the input names columns more than once: {_listed(repeated)}")
    missing = [n for n in model if n not in position]
    unknown = [n for n in given if n not in set(model)]
    if missing or unknown:
        parts = [f"missing {_listed(missing)}"] if missing else []
        parts += [f"unknown {_listed(unknown)}"] if unknown else []
        raise InputError(f"the input's columns do not match the model's features: "
                         f"{'; '.join(parts)} (the model's features: {_listed(model)})")
    return [position[n] for n in model]


def _known_categories(cols: Any, order: list[int], forest: Any) -> Mapping[int, Any]:
    """Training categories by input column position; a column absent here is read by
    its values, or, when the model keeps no categories at all, by its own codes."""
    known = forest.pandas_categories
    if known is None:
        return {}
    if isinstance(known, Mapping):
        # By the model's name for the feature, else (a model without names) the input's.
        names = forest.feature_names or [str(cols.names[i]) for i in order]
        return {i: known[names[j]] for j, i in enumerate(order) if names[j] in known}
    # A sequence (LightGBM): matched in order to the categorical columns, taken in the
    # model's feature order.
    categorical = [i for i in order if cols.is_categorical(i)]
    if len(categorical) != len(known):
        raise InputError(f"the model was trained on a frame with {len(known)} pandas "
                         f"categorical columns; this frame has {len(categorical)}")
    return dict(zip(categorical, known))


def table_rows(X: Any, forest: Any) -> np.ndarray | None:
    """``X``'s rows in ``forest.input_dtype`` and feature order (a new C-contiguous
    array), or None when ``X`` is not a named input."""
    cols = columns.reader(X)
    if cols is None:
        return None
    order = column_order(cols.names, forest)
    whole = cols.block()
    if whole is not None:
        # Values beyond float32's range become infinities, as below.
        with np.errstate(over="ignore"):
            return np.array(whole[:, order], dtype=forest.input_dtype, order="C")
    known = _known_categories(cols, order, forest)
    own_codes = forest.pandas_categories is None
    out = np.empty((cols.n_rows, len(order)), dtype=forest.input_dtype)
    for j, i in enumerate(order):
        name, start = cols.names[i], 0
        for segment in cols.segments(i):
            if not isinstance(segment, columns.Categorical):
                values = segment
            elif i in known or own_codes:
                values = training_codes(segment, known.get(i), name, forest.unseen_category)
            else:
                values = category_values(segment, name)
            # Values beyond float32's range become infinities, as in the libraries that
            # round inputs to float32 (inputs.as_rows says the same of arrays).
            with np.errstate(over="ignore"):
                out[start:start + len(values), j] = values
            start += len(values)
    return out
