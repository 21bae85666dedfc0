"""scipy.sparse matrices → the model's rows, a block of rows at a time.

What an entry the matrix does not store means is the training library's rule
(``Forest.sparse_absent``): 0.0 for LightGBM and scikit-learn (scipy's own meaning),
missing (NaN) for XGBoost, whose DMatrix reads absent entries so. Stored entries keep
their values, explicit zeros and NaNs included. The matrix is never densified whole:
:func:`sparse_rows` fills its result block by block, and the predictors call
:func:`blocks` first, so that a large matrix is predicted a block at a time.

>>> import scipy.sparse as sp
>>> from types import SimpleNamespace as NS
>>> forest = NS(n_features=3, input_dtype=np.dtype("float64"), sparse_absent="missing")
>>> sparse_rows(sp.csr_matrix([[0, 2.0, 0]]), forest)
array([[nan,  2., nan]])
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import numpy as np

from ..errors import InputError

# Dense cells (rows x features) converted at once: 8 MiB of float64.
BLOCK_CELLS = 1 << 20


def is_sparse(X: Any) -> bool:
    """Whether ``X`` is a scipy.sparse matrix or array."""
    return type(X).__module__.startswith("scipy.sparse")


def _block_rows(n_features: int) -> int:
    return max(1, BLOCK_CELLS // max(1, n_features))


def _csr(X: Any) -> Any:
    """``X`` in CSR form with each entry stored once (duplicates summed, as scipy's
    ``toarray`` and the libraries sum them), never changing the caller's matrix."""
    if X.ndim != 2:
        raise InputError(f"input must be 2-D (rows, features); got shape {X.shape}")
    X = X.tocsr()
    if not X.has_canonical_format:
        X = X.copy()
        X.sum_duplicates()
    return X


def sparse_rows(X: Any, forest: Any) -> np.ndarray:
    """The rows of sparse ``X`` as a C-contiguous array of ``forest.input_dtype``."""
    X = _csr(X)
    n, width = X.shape
    if width != forest.n_features:
        raise InputError(f"the model expects {forest.n_features} features (columns) but "
                         f"the input has {width}")
    if X.dtype.kind not in "fiub":
        raise InputError(f"input has dtype {X.dtype}; expected numbers")
    out = np.empty((n, width), dtype=forest.input_dtype)
    absent = np.nan if forest.sparse_absent == "missing" else 0.0
    step = _block_rows(width)
    for a in range(0, n, step):
        b = min(n, a + step)
        block = out[a:b]
        block.fill(absent)
        lo, hi = X.indptr[a], X.indptr[b]
        row = np.repeat(np.arange(b - a), np.diff(X.indptr[a:b + 1]))
        with np.errstate(over="ignore"):  # float32 infinities, as for arrays
            block[row, X.indices[lo:hi]] = X.data[lo:hi]
    return out


def blocks(X: Any, forest: Any) -> Iterator[Any] | None:
    """Row blocks of a sparse ``X`` too large to convert at once, else None.

    >>> import scipy.sparse as sp
    >>> from types import SimpleNamespace as NS
    >>> blocks(sp.csr_matrix((3, 2)), NS(n_features=2)) is None
    True
    """
    if not is_sparse(X) or X.ndim != 2:
        return None
    step = _block_rows(forest.n_features)
    if X.shape[0] <= step:
        return None
    X = X.tocsr()
    return (X[a:a + step] for a in range(0, X.shape[0], step))


def blockwise(X: Any, forest: Any, predict: Callable[[Any], Any]) -> Any:
    """``predict`` over the blocks of a large sparse ``X``, concatenated (None when
    ``X`` is not one): what every evaluator does with such a matrix."""
    parts = blocks(X, forest)
    if parts is None:
        return None
    return np.concatenate([predict(part) for part in parts])
