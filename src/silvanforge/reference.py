"""The reference evaluator: plain numpy, vectorised over rows, slow and obviously right.

It is the oracle of every test: it is tested against the training libraries, and every
compiled configuration is tested against it. It implements the semantics documented in
:mod:`silvanforge.model.forest` and nothing else.

>>> import numpy as np, silvanforge
>>> forest = silvanforge.load("model.json")                  # doctest: +SKIP
>>> silvanforge.reference.predict(forest, np.zeros((3, forest.n_features)))  # doctest: +SKIP
"""

from __future__ import annotations

from math import factorial
from typing import Any, Iterator

import numpy as np

from .errors import InputError
from .model import cover, leaf_ids, transforms
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
            below = c < f.cat_words[node].astype(np.float64) * 32
            valid = np.isfinite(x) & ~negative & below
            if f.category_rule == "exact":
                valid &= c == x
        ci = np.where(valid, c, 0).astype(np.int64)
        word_at = np.where(valid, f.cat_offset[node] + ci // 32, 0)
        words = f.cat_bitset[word_at] if len(f.cat_bitset) else np.zeros_like(ci, np.uint32)
        in_set = valid & (((words.astype(np.int64) >> (ci % 32)) & 1) == 1)
        holds = np.where(is_cat, in_set, holds)
        if f.negative_category == "missing":
            is_missing = is_missing | (is_cat & negative)
        if f.beyond_category == "missing":
            is_missing = is_missing | (is_cat & ~negative & ~below)
    return np.where(is_missing, f.default_left[node], holds)


def leaves(forest: Forest, X: Any) -> np.ndarray:
    """The leaf each row reaches in each tree: (rows, n_trees), tree-local node ids."""
    rows = as_matrix(X, forest)
    return global_leaves(forest, rows) - forest.tree_offsets[:-1]


def leaf_output(forest: Forest, X: Any) -> np.ndarray:
    """The leaf each row reaches in each tree as the source library reports it: its node
    numbering (XGBoost node ids, LightGBM leaf indices, scikit-learn and ONNX node ids)
    and shape, int32 (:mod:`silvanforge.model.leaf_ids`).

    >>> silvanforge.reference.leaf_output(forest, X)             # doctest: +SKIP
    """
    rows = as_matrix(X, forest)
    return leaf_ids.shaped(forest, leaf_ids.source_ids(forest)[global_leaves(forest, rows)])


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
            margin[start:start + chunk] = _in_tree_order(values)
        else:
            for k in range(f.n_outputs):
                margin[start:start + chunk, k] = _in_tree_order(
                    values[:, f.tree_output == k, 0])
    return margin


def _in_tree_order(values: np.ndarray) -> np.ndarray:
    """The sums over axis 1, added in tree order: ``sum`` pairs the terms where it
    reduces a contiguous axis (one row's values), so one row's sum could differ in its
    last bits from the same row's in a batch."""
    if values.shape[1] == 0:
        return np.zeros(values.shape[:1] + values.shape[2:])
    return values.cumsum(axis=1)[:, -1]


def predict(forest: Forest, X: Any, output: str = "value") -> np.ndarray:
    """Predict like the source library.

    ``output="value"`` is what the library's default predict returns (probabilities for
    classifiers, class ids for XGBoost's multi:softmax); ``"margin"`` is the raw score
    before the post-transform. The result is 1-D where the library's is. ``"leaf"`` is
    :func:`leaf_output`, ``"contribs"`` :func:`contributions`.

    >>> silvanforge.reference.predict(forest, X, output="margin")   # doctest: +SKIP
    """
    check_output(output, ("value", "margin", "leaf", "contribs"))
    by_block = blockwise(X, forest, lambda part: predict(forest, part, output))
    if by_block is not None:  # a large sparse matrix, never densified whole
        return by_block
    if output == "contribs":
        return contributions(forest, X)
    if output == "leaf":
        return leaf_output(forest, X)
    return finish(forest, tree_sums(forest, as_matrix(X, forest)), output)


def check_output(output: str, allowed: tuple[str, ...] = ("value", "margin")) -> None:
    """Refuse an ``output`` not among ``allowed`` (what the caller computes)."""
    if output not in allowed:
        raise InputError(f"output must be {' or '.join(map(repr, allowed))}, "
                         f"not {output!r}")


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


# ---- SHAP contributions (path-dependent TreeSHAP) ------------------------------------

def contributions(forest: Forest, X: Any) -> np.ndarray:
    """Exact path-dependent TreeSHAP values in margin space, straight from the Shapley
    formula of each leaf's path (Lundberg et al. 2020, "From local explanations to
    global understanding with explainable AI for trees", and GPUTreeShap's per-path form).

    A leaf of value ``v`` whose path tests features ``j`` (repeats merged) contributes
    ``v * (o_i - z_i) * sum_S |S|! (d - |S| - 1)! / d! * prod_{j in S} o_j
    * prod_{j not in S, j != i} z_j`` to feature ``i``, where ``z_j`` is the product of
    the cover fractions of ``j``'s edges on the path and ``o_j`` is 1 when the row takes
    all of them. The last column is the expected value (the margin's base score plus each
    tree's cover-weighted mean leaf): each row sums to ``predict(output="margin")``.
    Shape (rows, n_features + 1) for one output, (rows, n_outputs, n_features + 1) for
    several.

    >>> phi = silvanforge.reference.contributions(forest, X)    # doctest: +SKIP
    >>> np.allclose(phi.sum(axis=-1), predict(forest, X, "margin"))  # doctest: +SKIP
    True
    """
    fractions = cover.edge_fractions(forest)
    rows = as_matrix(X, forest)
    n, n_features = len(rows), forest.n_features
    phi = np.zeros((n, forest.n_outputs, n_features + 1))
    scales = cover.tree_scales(forest)
    for t in range(forest.n_trees):
        nodes = np.arange(forest.tree_offsets[t], forest.tree_offsets[t + 1])
        internal = nodes[~forest.is_leaf[nodes]]
        column = {int(node): j for j, node in enumerate(internal)}
        goes_left = _go_left(forest, internal[None, :], rows[:, forest.feature[internal]])
        outputs = slice(int(forest.tree_output[t]),
                        int(forest.tree_output[t]) + forest.leaf_width)
        for leaf, path in _leaf_paths(forest, t):
            value = forest.leaf_value[leaf] * scales[t]
            zero: dict[int, float] = {}
            one: dict[int, np.ndarray] = {}
            for node, child, left in path:
                f = int(forest.feature[node])
                took = goes_left[:, column[node]] == left
                zero[f] = zero.get(f, 1.0) * fractions[child]
                one[f] = one.get(f, True) & took
            features = list(zero)
            z = np.array([zero[f] for f in features])
            o = np.stack([one[f] for f in features], axis=1).astype(np.float64) \
                if features else np.zeros((n, 0))
            phi[:, outputs, n_features] += value * np.prod(z)
            for i, f in enumerate(features):
                weight = _shapley_weight(np.delete(z, i), np.delete(o, i, axis=1))
                phi[:, outputs, f] += ((o[:, i] - z[i]) * weight)[:, None] * value
    phi[:, :, n_features] += forest.base_score
    return phi[:, 0, :] if forest.n_outputs == 1 else phi


def _shapley_weight(z: np.ndarray, o: np.ndarray) -> np.ndarray:
    """Per row: sum over subsets S of the ``m`` other elements of
    ``|S|! (m - |S|)! / (m + 1)! * prod_{S} o * prod_{not S} z``, from the coefficients
    of ``prod_j (z_j + o_j y)`` (the coefficient of ``y^s`` sums the subsets of size s)."""
    n, m = o.shape
    coef = np.zeros((n, m + 1))
    coef[:, 0] = 1.0
    for j in range(m):
        coef[:, 1:] = coef[:, 1:] * z[j] + coef[:, :-1] * o[:, j:j + 1]
        coef[:, 0] *= z[j]
    weights = np.array([factorial(s) * factorial(m - s) / factorial(m + 1)
                        for s in range(m + 1)])
    return coef @ weights


def _leaf_paths(f: Forest, t: int) -> Iterator[tuple[int, list[tuple[int, int, bool]]]]:
    """Each leaf of tree ``t`` (global index) with its path: (node, child, went left)
    for every internal node from the root down, global indices."""
    base = int(f.tree_offsets[t])
    stack: list[tuple[int, list]] = [(base, [])]
    while stack:
        node, path = stack.pop()
        if f.is_leaf[node]:
            yield node, path
            continue
        left, right = base + int(f.left[node]), base + int(f.right[node])
        stack.append((right, path + [(node, right, False)]))
        stack.append((left, path + [(node, left, True)]))
