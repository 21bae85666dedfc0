"""Categorical columns → the category codes the model's trees compare.

The training library fixed each category's code (its index in the training list the
Forest keeps, ``Forest.pandas_categories``); a column's own codes mean nothing to the
model unless it kept no list. A category the training never saw is missing (LightGBM,
scikit-learn) or an error (XGBoost 3.1+), by ``Forest.unseen_category``.

>>> seg = Categorical(["b", "z", "a"], np.array([0, 1, 2, -1]))
>>> training_codes(seg, ("a", "b"), "color", "missing")
array([ 1., nan,  0., nan])
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..errors import InputError
from .columns import Categorical


def training_codes(segment: Categorical, training: Sequence[Any] | None, name: str,
                   unseen: str) -> np.ndarray:
    """The float64 codes of ``segment`` in the ``training`` categories (NaN: missing);
    with ``training`` None, the segment's own codes."""
    codes = np.asarray(segment.codes, dtype=np.int64)
    if training is not None:
        index = {value: i for i, value in enumerate(training)}
        lookup = np.array([index.get(c, -1) for c in segment.categories] + [-1], np.int64)
        # -1 (a null) reads lookup's last entry, -1: still missing.
        mapped = lookup[codes]
        if unseen == "error":
            new = (codes >= 0) & (mapped < 0)
            if new.any():
                value = segment.categories[int(codes[np.argmax(new)])]
                raise InputError(f"column {name!r}: category {value!r} was not among the "
                                 f"training categories (the model's library refuses it)")
        codes = mapped
    values = codes.astype(np.float64)
    values[codes < 0] = np.nan
    return values


def category_values(segment: Categorical, name: str) -> np.ndarray:
    """The segment's values as numbers (a categorical the model keeps no list for is
    read by its values, as numpy converts it); NaN for nulls."""
    try:
        numbers = np.asarray(list(segment.categories) + [np.nan], dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError(f"column {name!r} is a categorical of non-numbers, and the model "
                         f"keeps no categories for it") from None
    return numbers[np.asarray(segment.codes, dtype=np.int64)]
