"""Prediction inputs → one float64 matrix holding exactly the values the library compares.

Every evaluator (the reference now, compiled predictors later) takes its rows through
:func:`as_matrix`, so that all of them agree on what a DataFrame, a categorical column or
a float64 value means for a given model.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ..errors import InputError


def _is_dataframe(X: Any) -> bool:
    return type(X).__module__.split(".")[0] == "pandas" and hasattr(X, "columns")


def _frame_to_array(X: Any, forest: Any) -> np.ndarray:
    import pandas as pd

    known = forest.pandas_categories
    if known is not None and not isinstance(known, Mapping):
        # Matched by position among the frame's categorical columns (LightGBM).
        cat_columns = [name for name in X.columns
                       if isinstance(X[name].dtype, pd.CategoricalDtype)]
        if len(cat_columns) != len(known):
            raise InputError(f"the model was trained on a frame with {len(known)} pandas "
                             f"categorical columns; this frame has {len(cat_columns)}")
        known = {str(name): cats for name, cats in zip(cat_columns, known)}
    columns = []
    for name in X.columns:
        col = X[name]
        categorical = isinstance(col.dtype, pd.CategoricalDtype)
        if categorical and known is not None and str(name) in known:
            # The training library's categories fix the codes; a category it never saw
            # is missing, as it is for the library.
            training = pd.Index(known[str(name)])
            codes = training.get_indexer(col.astype(object).where(col.notna(), None))
        elif categorical and known is None:
            codes = col.cat.codes.to_numpy()
        else:
            # Numbers, and categoricals the model keeps no categories for, which the
            # library reads by their values (as numpy would).
            try:
                columns.append(col.to_numpy(dtype=np.float64, na_value=np.nan))
            except (TypeError, ValueError):
                raise InputError(
                    f"column {name!r} has non-numeric dtype {col.dtype}; expected numbers "
                    f"or a pandas categorical the model knows") from None
            continue
        values = codes.astype(np.float64)
        values[codes < 0] = np.nan
        columns.append(values)
    if not columns:
        return np.zeros((len(X), 0))
    return np.column_stack(columns)


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
    elif _is_dataframe(X):
        arr = _frame_to_array(X, forest)
    else:
        if hasattr(X, "tocsr") or type(X).__module__.startswith("scipy.sparse"):
            raise InputError("sparse matrices are not supported yet; pass a dense array")
        try:
            arr = np.asarray(X)
        except (TypeError, ValueError) as exc:
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
