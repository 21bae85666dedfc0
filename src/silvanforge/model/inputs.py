"""Prediction inputs → one matrix holding exactly the values the library compares.

Every evaluator (the reference, the CPU and GPU predictors) takes its rows through
:func:`as_rows`, so that all of them agree on what a frame, a categorical column, a
sparse matrix or a float64 value means for a given model:

* numpy arrays (and anything ``np.asarray`` reads) are positional;
* named inputs (pandas, polars, pyarrow Table/RecordBatch, dict of arrays) are matched
  to the model's feature names (:mod:`.tables`), their categoricals mapped to the
  model's category codes (:mod:`.categories`);
* scipy.sparse matrices are read by the library's rule for absent entries
  (:mod:`.sparse`).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from ..errors import InputError
from .sparse import is_sparse, sparse_rows
from .tables import table_rows

_RAGGED = getattr(np, "exceptions", np).VisibleDeprecationWarning


def as_matrix(X: Any, forest: Any) -> np.ndarray:
    """Check ``X`` against ``forest`` and return float64 rows rounded through its input dtype.

    >>> as_matrix([[1.0, 2.0]], forest).shape                  # doctest: +SKIP
    (1, 2)
    """
    return as_rows(X, forest).astype(np.float64)


def as_rows(X: Any, forest: Any) -> np.ndarray:
    """Check ``X`` against ``forest``; return C-contiguous, aligned rows of
    ``forest.input_dtype`` in this machine's byte order.

    An array that already has that dtype and layout is returned as it is, not copied.
    """
    if type(X) is np.ndarray:
        arr = X  # skips the checks for frames and sparse matrices (a row's call counts)
    elif is_sparse(X):
        arr = sparse_rows(X, forest)
    else:
        arr = table_rows(X, forest)
        if arr is None:
            try:
                with warnings.catch_warnings():
                    # numpy before 1.24 makes ragged rows an object array, warning so.
                    warnings.simplefilter("error", _RAGGED)
                    arr = np.asarray(X)
            except (TypeError, ValueError, _RAGGED) as exc:
                raise InputError(f"cannot read the input as an array: {exc}") from None
    if arr.dtype.kind not in "fiub":
        raise InputError(f"input has dtype {arr.dtype}; expected numbers "
                         f"(float32 or float64)")
    if arr.ndim != 2:
        hint = " (for one row use X.reshape(1, -1))" if arr.ndim == 1 else ""
        raise InputError(f"input must be 2-D (rows, features); got {arr.ndim}-D "
                         f"shape {arr.shape}{hint}")
    if arr.shape[1] != forest.n_features:
        raise InputError(f"the model expects {forest.n_features} features (columns) but "
                         f"the input has {arr.shape[1]}")
    dtype = forest.input_dtype
    if arr.dtype == dtype and arr.flags.c_contiguous and arr.flags.aligned:
        return arr
    # A copy, aligned and in this machine's byte order (astype: the fastest way,
    # docs/ARCHITECTURE.md "Measurements behind smaller rules"). Values beyond float32's range become
    # infinities, as in the libraries that round inputs to float32: that is the
    # semantics, not an accident worth a warning.
    if arr.dtype.kind == "f" and arr.dtype.itemsize > dtype.itemsize:
        with np.errstate(over="ignore"):
            return arr.astype(dtype, order="C")
    return arr.astype(dtype, order="C")
