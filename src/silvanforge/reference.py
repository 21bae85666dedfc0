"""The reference evaluator: plain numpy, vectorised over rows, slow and obviously right.

It is the oracle of every test: it is tested against the training libraries, and every
compiled configuration is tested against it. It implements the semantics documented in
:mod:`silvanforge.model.forest` and nothing else.

>>> import numpy as np, silvanforge
>>> forest = silvanforge.load("model.json")                  # doctest: +SKIP
>>> silvanforge.reference.predict(forest, np.zeros((3, forest.n_features)))  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import InputError
from .model import transforms
from .model.forest import (MISSING_NAN, MISSING_ZERO, OP_CAT, OP_LE, OP_LT,
                           ZERO_THRESHOLD, Forest)
from .model.inputs import as_matrix
from .model.sparse import blockwise

# Rows × trees evaluated at once; bounds the temporary arrays to a few tens of MiB.
_CELLS_PER_CHUNK = 1 << 20


def _go_left(f: Forest, node: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Where each (row, tree) at internal ``node`` with value ``x`` goes: True = left."""
    op = f.split_op[node]
    miss = f.missing[node]
    isnan = np.isnan(x)
    x = np.where(isnan & (miss != MISSING_NAN), 0.0, x)
    is_missing = np.where(miss == MISSING_NAN, isnan,
                          (miss == MISSING_ZERO) & (np.abs(x) <= ZERO_THRESHOLD))
    t = f.threshold[node]
    with np.errstate(invalid="ignore"):
        holds = np.select([op == OP_LT, op == OP_LE], [x < t, x <= t], x == t)
    is_cat = op == OP_CAT
    if is_cat.any():
        with np.errstate(invalid="ignore"):
            c = np.trunc(x)
            negative = (c < 0) if f.category_rule == "truncate" else (x < 0)
            valid = (np.isfinite(x) & ~negative
                     & (c < f.cat_words[node].astype(np.float64) * 32))
            if f.category_rule == "exact":
                valid &= c == x
        ci = np.where(valid, c, 0).astype(np.int64)
        word_at = np.where(valid, f.cat_offset[node] + ci // 32, 0)
        words = f.cat_bitset[word_at] if len(f.cat_bitset) else np.zeros_like(ci, np.uint32)
        in_set = valid & (((words.astype(np.int64) >> (ci % 32)) & 1) == 1)
        holds = np.where(is_cat, in_set, holds)
        if f.negative_category == "missing":
            is_missing = is_missing | (is_cat & negative)
    return np.where(is_missing, f.default_left[node], holds)


def leaves(forest: Forest, X: Any) -> np.ndarray:
    """The leaf each row reaches in each tree: (rows, n_trees), tree-local node ids."""
    rows = as_matrix(X, forest)
    return global_leaves(forest, rows) - forest.tree_offsets[:-1]


def global_leaves(f: Forest, X: np.ndarray) -> np.ndarray:
    """Global leaf indices, shape (rows, n_trees), for rows checked by ``as_matrix``."""
    base = np.repeat(f.tree_offsets[:-1], f.tree_sizes)
    left = f.left + base
    right = f.right + base
    is_leaf = f.is_leaf
    node = np.repeat(f.tree_offsets[None, :-1], len(X), axis=0)
    row = np.arange(len(X))[:, None]
    for _ in range(f.max_depth):
        active = ~is_leaf[node]
        if not active.any():
            break
        go_left = _go_left(f, node, X[row, f.feature[node]])
        node = np.where(active, np.where(go_left, left[node], right[node]), node)
    return node


def leaf_values(f: Forest, X: np.ndarray, leaf: np.ndarray) -> np.ndarray:
    """(rows, trees, leaf_width) values of the reached leaves (global indices ``leaf``,
    as :func:`global_leaves` gives them), linear leaves applied."""
    values = f.leaf_value[leaf]
    lin = f.linear
    if lin is None:
        return values
    count = lin.count[leaf]
    offset = lin.offset[leaf]
    out = lin.const[leaf].copy()
    nan_found = np.zeros(leaf.shape, dtype=bool)
    row = np.arange(len(X))[:, None]
    for j in range(int(count.max(initial=0))):
        has = j < count
        k = np.where(has, offset + j, 0)
        xv = X[row, lin.feature[k]] if len(lin.feature) else np.zeros(leaf.shape)
        nan_found |= has & np.isnan(xv)
        # An infinite input gives coeff * inf, as in LightGBM; NaN never reaches the sum.
        with np.errstate(invalid="ignore"):
            out += np.where(has & ~np.isnan(xv), lin.coeff[k] * np.where(np.isnan(xv), 0.0, xv),
                            0.0)
    # LightGBM: any NaN among a leaf's features falls back to the constant leaf value.
    return np.where(nan_found, values[..., 0], out)[..., None]


def tree_sums(f: Forest, X: np.ndarray) -> np.ndarray:
    """(rows, n_outputs) per-output sums of the trees, for rows checked by ``as_matrix``."""
    margin = np.zeros((len(X), f.n_outputs))
    chunk = max(1, _CELLS_PER_CHUNK // max(1, f.n_trees))
    for start in range(0, len(X), chunk):
        rows = X[start:start + chunk]
        values = leaf_values(f, rows, global_leaves(f, rows))
        if f.leaf_width == f.n_outputs and f.leaf_width > 1:
            margin[start:start + chunk] = values.sum(axis=1)
        else:
            for k in range(f.n_outputs):
                margin[start:start + chunk, k] = values[:, f.tree_output == k, 0].sum(axis=1)
    return margin


def predict(forest: Forest, X: Any, output: str = "value") -> np.ndarray:
    """Predict like the source library.

    ``output="value"`` is what the library's default predict returns (probabilities for
    classifiers, class ids for XGBoost's multi:softmax); ``"margin"`` is the raw score
    before the post-transform. The result is 1-D where the library's is.

    >>> silvanforge.reference.predict(forest, X, output="margin")   # doctest: +SKIP
    """
    check_output(output)
    by_block = blockwise(X, forest, lambda part: predict(forest, part, output))
    if by_block is not None:  # a large sparse matrix, never densified whole
        return by_block
    return finish(forest, tree_sums(forest, as_matrix(X, forest)), output)


def check_output(output: str) -> None:
    if output not in ("value", "margin"):
        raise InputError(f"output must be 'value' or 'margin', not {output!r}")


def finish(forest: Forest, sums: np.ndarray, output: str) -> np.ndarray:
    """Per-output tree sums → the margin or the value, shaped like the library's result.

    Every evaluator (this one and the compiled predictors) ends here, so that averaging,
    base scores, transforms and shapes are defined once.
    """
    if output == "margin" and not forest.average_in_margin:
        result = sums + forest.base_score
    else:
        averaged = sums / np.maximum(forest.trees_per_output(), 1) if forest.average else sums
        result = averaged + forest.base_score
        if output == "value":
            result = transforms.apply(forest.post_transform, forest.transform_params, result)
    return shaped(forest, result)


def shaped(forest: Forest, result: np.ndarray) -> np.ndarray:
    """A finished (rows, m) result in the library's shape: one column flattened when the
    library returns a vector."""
    if forest.flat_output and result.shape[1] == 1:
        return result[:, 0]
    return result
