"""Assemble a Forest from per-tree arrays: the one path every frontend takes.

Frontends parse their format into :class:`Tree` values (tree-local node numbering,
root = node 0) and call :func:`build_forest`. Values from a model file are untrusted:
everything is converted here with range checks, so that a huge or fractional index in a
file becomes a :class:`ModelFormatError` instead of wrapping around silently.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from ..errors import ModelFormatError
from .forest import MAX_CATEGORY, MISSING_NAN, OP_CAT, OP_LT, Forest, LinearLeaves

_INT32 = np.iinfo(np.int32)


@dataclass
class Tree:
    """One tree as a frontend reads it; -1 children mark leaves.

    ``categories`` maps a node to the categories for which its test holds (the node then
    goes left and must have ``split_op`` ``OP_CAT``; the builder sets that). ``linear``
    maps a leaf to ``(const, features, coefficients)``. Scalars broadcast to every node.
    ``cover`` and ``source_id`` are the Forest's optional per-node arrays (its module
    docstring): give both for every tree of a forest, or for none.
    """

    left: Sequence[int] | np.ndarray
    right: Sequence[int] | np.ndarray
    feature: Sequence[int] | np.ndarray
    threshold: Sequence[float] | np.ndarray
    leaf_value: Sequence[float] | np.ndarray
    default_left: Sequence[bool] | np.ndarray | bool = False
    split_op: Sequence[int] | np.ndarray | int = OP_LT
    missing: Sequence[int] | np.ndarray | int = MISSING_NAN
    categories: Mapping[int, Iterable[int]] | None = None
    linear: Mapping[int, tuple[float, Sequence[int], Sequence[float]]] | None = None
    output: int = 0
    cover: Sequence[float] | np.ndarray | None = None
    source_id: Sequence[int] | np.ndarray | None = None


@dataclass
class Trees:
    """Many trees at once, for frontends that read a whole forest's columns together: a
    :class:`Tree`'s per-node fields concatenated in tree order (children still numbered
    within their tree), ``sizes`` the nodes of each tree and ``output`` each tree's
    output. Splits are numeric (no categories, no linear leaves: such forests come as a
    list of :class:`Tree`). Scalars broadcast to every node.

    >>> forest = build_forest(Trees(sizes=[3, 1], left=[1, -1, -1, -1],
    ...                             right=[2, -1, -1, -1], feature=0,
    ...                             threshold=[0.5, 0, 0, 0], leaf_value=[0, 1, 2, 3]),
    ...                       n_features=1, n_outputs=1)
    >>> forest.n_trees, forest.tree_offsets.tolist()
    (2, [0, 3, 4])
    """

    sizes: Sequence[int] | np.ndarray
    left: Sequence[int] | np.ndarray
    right: Sequence[int] | np.ndarray
    feature: Sequence[int] | np.ndarray | int
    threshold: Sequence[float] | np.ndarray
    leaf_value: Sequence[float] | np.ndarray
    default_left: Sequence[bool] | np.ndarray | bool = False
    split_op: Sequence[int] | np.ndarray | int = OP_LT
    missing: Sequence[int] | np.ndarray | int = MISSING_NAN
    output: Sequence[int] | np.ndarray | int = 0
    cover: Sequence[float] | np.ndarray | None = None
    source_id: Sequence[int] | np.ndarray | None = None


def int_array(values: Any, what: str, lo: int = _INT32.min, hi: int = _INT32.max) -> np.ndarray:
    """Whole numbers in [lo, hi] as int64, or ModelFormatError naming ``what``."""
    try:
        arr = np.asarray(values)
        if arr.dtype.kind == "f":
            if not np.isfinite(arr).all() or (arr != np.floor(arr)).any():
                raise ModelFormatError(f"{what}: expected whole numbers")
        elif arr.dtype.kind not in "iub" and arr.size:
            raise ModelFormatError(f"{what}: expected integers, got {arr.dtype} values")
        if arr.size and (arr.min() < lo or arr.max() > hi):
            raise ModelFormatError(f"{what}: value out of range [{lo}, {hi}]")
        return arr.astype(np.int64).reshape(-1)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ModelFormatError):
            raise
        raise ModelFormatError(f"{what}: expected a list of integers ({exc})") from None


def float_array(values: Any, what: str) -> np.ndarray:
    """Numbers as float64, or ModelFormatError naming ``what``."""
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ModelFormatError(f"{what}: expected numbers ({exc})") from None
    return arr


def _broadcast(value: Any, n: int, what: str, kind: str) -> np.ndarray:
    arr = (np.asarray(value) if kind == "b" else int_array(value, what)).reshape(-1)
    if arr.size == 1:
        arr = np.repeat(arr, n)
    if arr.size != n:
        raise ModelFormatError(f"{what}: {arr.size} entries for {n} nodes")
    return arr.astype(bool) if kind == "b" else arr


# Category sets are stored as bitsets, whose size follows the largest category, not the
# number listed: a 3 KB file naming category 2^24 - 1 at three nodes asked for 6 MB. The
# bitsets may take this many words beyond BITSET_WORDS_PER_CATEGORY for every category the
# file lists; more is refused before it is allocated (issue 26: memory proportional to
# the file).
MAX_UNBACKED_BITSET_WORDS = 1 << 22  # 16 MB
BITSET_WORDS_PER_CATEGORY = 32


class _BitsetBudget:
    """Counts the categories listed and the words their bitsets need, across a forest."""

    def __init__(self) -> None:
        self.listed = 0
        self.words = 0

    def bitset(self, cats: Iterable[int], what: str) -> np.ndarray:
        c = int_array(list(cats), what, 0, MAX_CATEGORY)
        self.listed += c.size
        self.words += int(c.max()) // 32 + 1 if c.size else 1
        allowed = MAX_UNBACKED_BITSET_WORDS + BITSET_WORDS_PER_CATEGORY * self.listed
        if self.words > allowed:
            raise ModelFormatError(
                f"{what}: the category sets need {self.words * 4 / 2**20:.0f} MB of "
                f"bitsets for {self.listed} listed categories (at most "
                f"{allowed * 4 / 2**20:.0f} MB): categories far larger than the sets hold")
        return _bitset(c)


def _bitset(c: np.ndarray) -> np.ndarray:
    words = np.zeros(int(c.max()) // 32 + 1 if c.size else 1, dtype=np.uint32)
    np.bitwise_or.at(words, c // 32, (np.uint32(1) << (c % 32).astype(np.uint32)))
    return words


# A model may have outputs that only its base score gives (no tree writes them), but
# never many: a count of outputs above both this and the values the file holds for them
# is a damaged or hostile file, refused before per-output arrays are allocated (a 4 KB
# XGBoost file claiming 2^31 - 1 classes made ``load`` allocate 16 GB).
MAX_UNBACKED_OUTPUTS = 1024


def check_outputs(n_outputs: int, values: int, where: str) -> None:
    """Refuse ``n_outputs`` outputs when the model gives only ``values`` values that could
    fill them (leaf weights, trees, base scores) and they are more than
    :data:`MAX_UNBACKED_OUTPUTS`: memory stays proportional to the file."""
    if n_outputs > max(values, MAX_UNBACKED_OUTPUTS):
        raise ModelFormatError(f"{where}: {n_outputs} outputs, but the model gives only "
                               f"{values} values for them")


def _optional_arrays(trees: Sequence[Tree] | Trees) -> dict[str, np.ndarray | None]:
    """The optional per-node arrays, concatenated: present when every tree has them
    (:class:`Trees` are one group of columns, named "trees")."""
    groups, names = ([trees], ["trees"]) if isinstance(trees, Trees) else \
        (trees, [f"tree {t}" for t in range(len(trees))])
    found: dict[str, np.ndarray | None] = {}
    for name, convert in (("cover", float_array), ("source_id", int_array)):
        given = [getattr(t, name) for t in groups]
        if any(g is None for g in given):
            found[name] = None
            continue
        parts = [convert(g, f"{where}: {name}").reshape(-1) for where, g in zip(names, given)]
        for where, part, tree in zip(names, parts, groups):
            if len(part) != len(tree.left):
                raise ModelFormatError(f"{where}: {len(part)} {name} values for "
                                       f"{len(tree.left)} nodes")
        found[name] = np.concatenate(parts)
    return found


def _node_columns(tree: Tree | Trees, where: str) -> dict[str, np.ndarray]:
    """The per-node columns of one tree, or of :class:`Trees` (then ``where`` names them
    all), converted and checked; categories come later (``cat_offset``, ``cat_words``
    are zeros)."""
    left = int_array(tree.left, f"{where}: left children")
    right = int_array(tree.right, f"{where}: right children")
    n = len(left)
    if n == 0:
        raise ModelFormatError(f"{where}: has no nodes")
    if len(right) != n:
        raise ModelFormatError(f"{where}: {n} left children but {len(right)} right")
    leaf = left < 0
    feature = _broadcast(tree.feature, n, f"{where}: features", "i")
    threshold = float_array(tree.threshold, f"{where}: thresholds").reshape(-1)
    if threshold.size != n:
        raise ModelFormatError(f"{where}: {threshold.size} thresholds for {n} nodes")
    value = float_array(tree.leaf_value, f"{where}: leaf values")
    if value.ndim == 1:
        value = value[:, None]
    if value.ndim != 2 or value.shape[0] != n:
        raise ModelFormatError(f"{where}: leaf values of shape {value.shape} for "
                               f"{n} nodes")
    # Leaves get feature 0 and threshold 0 so that code which loads a leaf's split
    # fields (self-looping leaves, padded walks) stays in bounds.
    return {"feature": np.where(leaf, 0, feature), "threshold": np.where(leaf, 0.0, threshold),
            "left": left, "right": right,
            "default_left": _broadcast(tree.default_left, n, f"{where}: default directions",
                                       "b"),
            "split_op": _broadcast(tree.split_op, n, f"{where}: split operators", "i"),
            "missing": _broadcast(tree.missing, n, f"{where}: missing rules", "i"),
            "cat_offset": np.zeros(n, dtype=np.int64), "cat_words": np.zeros(n, dtype=np.int64),
            "leaf_value": value}


def build_forest(trees: Sequence[Tree] | Trees, *, n_features: int, n_outputs: int,
                 base_score: Any = 0.0, linear_leaves: bool = False,
                 **model: Any) -> Forest:
    """Concatenate trees into a validated :class:`Forest`.

    ``trees``: a list of :class:`Tree`, or :class:`Trees` (numeric forests read in
    columns). ``model`` holds the Forest's model-level fields (``post_transform``,
    ``average``, ``input_dtype``, ``source``, ...). ``base_score`` broadcasts to
    ``n_outputs``.
    """
    if isinstance(trees, Trees):
        if linear_leaves:
            raise TypeError("Trees hold no linear leaves: give a list of Tree")
        return _forest(trees, _node_columns(trees, "trees"),
                       int_array(trees.sizes, "trees: sizes", 1),
                       _broadcast(trees.output, np.size(trees.sizes), "trees: outputs", "i"),
                       None, None, n_features=n_features, n_outputs=n_outputs,
                       base_score=base_score, **model)
    cols: dict[str, list[np.ndarray]] = {}
    lin_off, lin_cnt, lin_const, lin_feat, lin_coeff = [], [], [], [], []
    bitset: list[np.ndarray] = []
    budget = _BitsetBudget()
    n_bitset = 0
    n_lin = 0
    sizes, outputs = [], []
    for t, tree in enumerate(trees):
        where = f"tree {t}"
        columns = _node_columns(tree, where)
        n = len(columns["left"])
        split_op, cat_offset, cat_words = (columns[k] for k in (
            "split_op", "cat_offset", "cat_words"))
        for node, cats in (tree.categories or {}).items():
            if not 0 <= node < n:
                raise ModelFormatError(f"{where}: categories given for node {node}, "
                                       f"which does not exist")
            words = budget.bitset(cats, f"{where}, node {node}: categories")
            split_op[node] = OP_CAT
            cat_offset[node] = n_bitset
            cat_words[node] = len(words)
            bitset.append(words)
            n_bitset += len(words)
        for key, column in columns.items():
            cols.setdefault(key, []).append(column)
        value = columns["leaf_value"]
        if linear_leaves:
            off = np.zeros(n, dtype=np.int64)
            cnt = np.zeros(n, dtype=np.int64)
            const = value[:, 0].copy()
            for node, (c0, feats, coeffs) in (tree.linear or {}).items():
                if not 0 <= node < n:
                    raise ModelFormatError(f"{where}: linear model for node {node}, "
                                           f"which does not exist")
                feats = int_array(feats, f"{where}, node {node}: linear features")
                coeffs = float_array(coeffs, f"{where}, node {node}: linear coefficients")
                if feats.shape != coeffs.reshape(-1).shape:
                    raise ModelFormatError(f"{where}, node {node}: {len(feats)} linear "
                                           f"features but {coeffs.size} coefficients")
                off[node], cnt[node], const[node] = n_lin, len(feats), float(c0)
                lin_feat.append(feats)
                lin_coeff.append(coeffs.reshape(-1))
                n_lin += len(feats)
            lin_off.append(off)
            lin_cnt.append(cnt)
            lin_const.append(const)
        sizes.append(n)
        outputs.append(tree.output)
    if not trees:
        raise ModelFormatError("the model has no trees")
    widths = {v.shape[1] for v in cols["leaf_value"]}
    if len(widths) != 1:
        raise ModelFormatError(f"trees disagree on the leaf width: {sorted(widths)}")
    linear = None
    if linear_leaves:
        linear = LinearLeaves(
            offset=np.concatenate(lin_off), count=np.concatenate(lin_cnt),
            const=np.concatenate(lin_const),
            feature=np.concatenate(lin_feat) if lin_feat else np.zeros(0, np.int32),
            coeff=np.concatenate(lin_coeff) if lin_coeff else np.zeros(0))
    return _forest(trees, {k: np.concatenate(v) for k, v in cols.items()},
                   np.asarray(sizes, dtype=np.int64), int_array(outputs, "tree outputs"),
                   np.concatenate(bitset) if bitset else None, linear,
                   n_features=n_features, n_outputs=n_outputs, base_score=base_score,
                   **model)


def _forest(trees: Sequence[Tree] | Trees, arrays: dict[str, np.ndarray], sizes: np.ndarray,
            outputs: np.ndarray, bitset: np.ndarray | None, linear: LinearLeaves | None, *,
            n_features: int, n_outputs: int, base_score: Any, **model: Any) -> Forest:
    """The Forest of ``trees``' concatenated node columns ``arrays``."""
    if sizes.sum() != len(arrays["left"]):
        raise ModelFormatError(f"trees: sizes add up to {int(sizes.sum())} nodes, but "
                               f"{len(arrays['left'])} are given")
    # A scalar tree writes one output, a tree of vector leaves its leaves' width.
    width = arrays["leaf_value"].shape[1]
    check_outputs(n_outputs, np.size(base_score) + len(sizes) * width, "forest")
    base = np.broadcast_to(float_array(base_score, "base score").reshape(-1), (n_outputs,)) \
        if np.size(base_score) in (1, n_outputs) else None
    if base is None:
        raise ModelFormatError(f"{np.size(base_score)} base scores for {n_outputs} outputs")
    return Forest(
        **arrays, **_optional_arrays(trees),
        tree_offsets=np.concatenate([[0], np.cumsum(sizes)]), tree_output=outputs,
        cat_bitset=np.zeros(0, np.uint32) if bitset is None else bitset,
        n_features=n_features, n_outputs=n_outputs, base_score=base,
        linear=linear, **model)
