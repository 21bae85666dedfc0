"""The in-memory model every frontend produces and every later stage consumes.

A :class:`Forest` is a structure of flat numpy arrays: one entry per node (all trees'
nodes concatenated, tree ``t`` owning ``tree_offsets[t]:tree_offsets[t+1]``) and one entry
per tree. Child indices are local to their tree (node 0 is the root). The arrays are
read-only and the Forest validates itself when built, so code downstream may trust it.

Split semantics, applied in this order at an internal node with input value ``x``
(already cast to ``input_dtype``, the precision the source library compares in):

1. ``missing`` rule: ``MISSING_NAN`` — a NaN takes the default direction;
   ``MISSING_ZERO`` — a NaN becomes 0.0, and ``|x| <= ZERO_THRESHOLD`` (LightGBM's
   ``1e-35f``) takes the default direction;
   ``MISSING_NONE`` — a NaN becomes 0.0 and is compared like any value (LightGBM's three
   ``missing_type`` values; every other library uses ``MISSING_NAN``).
2. ``split_op``: ``OP_LT`` goes left when ``x < threshold``, ``OP_LE`` when
   ``x <= threshold``, ``OP_EQ`` when ``x == threshold``; ``OP_CAT`` goes left when ``x``
   names a category of the node's set (its bitset, ``cat_words`` 32-bit words from
   ``cat_offset`` in ``cat_bitset``). Libraries whose matching side is the right one
   (XGBoost) or whose operators are ``>``, ``>=`` or ``!=`` (ONNX) are normalised by
   swapping the children, so "left" always means "the test holds".
3. A value names category ``c = trunc(x)`` by ``category_rule``: ``"truncate"`` — any
   ``x`` whose truncation is not negative, so ``-0.7`` names category 0 (LightGBM's integer
   cast); ``"nonnegative"`` — any ``x >= 0`` (XGBoost); ``"exact"`` — only a whole
   ``x >= 0`` (ONNX's set membership, scikit-learn's HistGradientBoosting encoder). Values that are negative under the rule are
   "not in the set", or take the default direction when ``negative_category ==
   "missing"``; values too large for the node's bitset (``cat_words * 32`` and more), and
   infinities, are not in it, or take the default direction when ``beyond_category ==
   "missing"`` (XGBoost before 2.0, which sized a node's bitset by its largest category).

A tree adds ``leaf_value[leaf]`` (``leaf_width`` numbers) to outputs
``tree_output[t] : tree_output[t] + leaf_width``. Linear leaves (LightGBM) replace the
constant by ``const + sum(coeff * x[feature])`` unless one of those features is NaN. The
per-output sum, divided by the number of trees of that output when ``average`` is set,
plus ``base_score``, is what ``post_transform`` (see ``transforms``) turns into the
library's predicted value. The margin is that same number, except where the library's
raw score is the plain sum of an averaging model (LightGBM's random forests):
``average_in_margin=False`` says so.

Two optional per-node arrays serve outputs other than predictions (None when the source
lacks them): ``cover`` is the training weight that reached each node (XGBoost's
``sum_hessian``, LightGBM's data counts, scikit-learn's ``weighted_n_node_samples``), which
TreeSHAP needs; ``source_id`` is the number the source library's own leaf output gives
each node (XGBoost, scikit-learn and ONNX node ids, LightGBM's leaf index within its tree);
None means the tree-local node index for a forest built by hand (no ``source``), and "no
ids" for one loaded from a library (an older SilvanForge's saved predictor): leaf output
then refuses it rather than guess.

``trees_per_round`` is how many trees one boosting round adds (classes × parallel trees;
1 for bagged forests): :meth:`Forest.slice` keeps whole rounds, as XGBoost's
``iteration_range`` does. ``leaf_layout`` is the shape of the library's leaf output:
``"trees"`` (rows, trees), ``"trees_1d"`` the same but 1-D for a single tree (XGBoost's),
or ``"rounds"`` (rows, rounds, trees_per_round), scikit-learn's GradientBoosting
classifiers' ``apply``.

``pandas_categories`` gives the training categories of pandas categorical columns, whose
index in that list is the code the trees see: a mapping matches columns by name (XGBoost
3.1+, scikit-learn), and a categorical column it does not name is read by its values, as
numpy would convert it; a sequence of lists matches the frame's categorical columns in
order (LightGBM, which stores no column names for them); None means the frame's own
category codes (XGBoost before 3.1). The same categories apply to polars ``Categorical``
and ``Enum`` columns and Arrow dictionary columns (:mod:`.columns`). A category the
training never saw is missing (``unseen_category`` "missing": LightGBM, scikit-learn)
or an :class:`~silvanforge.errors.InputError` (``"error"``: XGBoost 3.1+ refuses it).

``sparse_absent`` is what an entry a scipy.sparse matrix does not store means: ``"zero"``
(0.0: LightGBM, scikit-learn, and scipy's own ``toarray``) or ``"missing"`` (NaN:
XGBoost, whose DMatrix reads absent entries as missing).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np

from ..errors import InputError, ModelFormatError
from . import transforms

OP_LT, OP_LE, OP_EQ, OP_CAT = 0, 1, 2, 3
OP_NAMES = {OP_LT: "<", OP_LE: "<=", OP_EQ: "==", OP_CAT: "in"}
MISSING_NAN, MISSING_ZERO, MISSING_NONE = 0, 1, 2
MISSING_NAMES = {MISSING_NAN: "nan", MISSING_ZERO: "zero", MISSING_NONE: "none"}
# LightGBM's kZeroThreshold is the float 1e-35f, compared after promotion to double.
ZERO_THRESHOLD = float(np.float32(1e-35))
# Categories are whole numbers a float32 holds exactly; the bound also keeps a hostile
# model from asking for a huge bitset.
MAX_CATEGORY = 2**24 - 1

_NODE_ARRAYS = {
    "feature": np.int32,
    "threshold": np.float64,
    "left": np.int32,
    "right": np.int32,
    "default_left": np.bool_,
    "split_op": np.uint8,
    "missing": np.uint8,
    "cat_offset": np.int64,
    "cat_words": np.int32,
}

# Per-node arrays a forest may lack (see the module docstring).
_OPTIONAL_NODE_ARRAYS = {"cover": np.float64, "source_id": np.int64}
# The shape of the library's leaf output (module docstring).
LEAF_LAYOUTS = ("trees", "trees_1d", "rounds")


@dataclass(frozen=True, eq=False)
class LinearLeaves:
    """Linear models in leaves: ``const[n] + coeff[o:o+k] @ x[feature[o:o+k]]``.

    ``offset[n]`` and ``count[n]`` (per node, ``count`` 0 for constant leaves) index the
    flat ``feature`` and ``coeff`` arrays.
    """

    offset: np.ndarray
    count: np.ndarray
    const: np.ndarray
    feature: np.ndarray
    coeff: np.ndarray


@dataclass(frozen=True, eq=False)
class Forest:
    """An immutable decision forest with the exact semantics of its source library.

    Build one with :func:`silvanforge.load`; frontends build it from per-tree arrays
    with :func:`silvanforge.model.builder.build_forest`.

    >>> import silvanforge
    >>> forest = silvanforge.load("model.json")            # doctest: +SKIP
    >>> print(forest.summary())                            # doctest: +SKIP
    """

    # per node
    feature: np.ndarray
    threshold: np.ndarray
    left: np.ndarray
    right: np.ndarray
    default_left: np.ndarray
    split_op: np.ndarray
    missing: np.ndarray
    cat_offset: np.ndarray
    cat_words: np.ndarray
    leaf_value: np.ndarray  # (n_nodes, leaf_width)
    # per tree
    tree_offsets: np.ndarray  # (n_trees + 1,)
    tree_output: np.ndarray
    # shared storage
    cat_bitset: np.ndarray
    # model
    n_features: int
    n_outputs: int
    base_score: np.ndarray  # (n_outputs,)
    average: bool = False
    average_in_margin: bool = True
    post_transform: str = "identity"
    transform_params: Mapping[str, Any] = field(default_factory=dict)
    input_dtype: Any = np.float32
    category_rule: str = "truncate"
    negative_category: str = "not_in_set"
    beyond_category: str = "not_in_set"
    flat_output: bool = True
    linear: LinearLeaves | None = None
    feature_names: tuple[str, ...] | None = None
    pandas_categories: Mapping[str, tuple] | tuple[tuple, ...] | None = None
    class_labels: tuple | None = None
    unseen_category: str = "missing"
    sparse_absent: str = "zero"
    objective: str = ""
    source: str = ""
    trees_per_round: int = 1
    leaf_layout: str = "trees"
    # optional, per node
    cover: np.ndarray | None = None
    source_id: np.ndarray | None = None

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        for name, dtype in _NODE_ARRAYS.items():
            set_(self, name, _frozen(getattr(self, name), dtype))
        # A leaf's feature means nothing, but padded and self-looping walks load it like a
        # split's: it is 0 whatever the source said, so compiled code never reads past a
        # row (a saved predictor's leaf feature of 2^24 did; the fuzz harness found it).
        if self.feature.shape == self.left.shape:
            set_(self, "feature", _frozen(np.where(self.left < 0, 0, self.feature),
                                          _NODE_ARRAYS["feature"]))
        leaf_value = np.asarray(self.leaf_value, dtype=np.float64)
        if leaf_value.ndim == 1:
            leaf_value = leaf_value[:, None]
        set_(self, "leaf_value", _frozen(leaf_value, np.float64))
        for name, dtype in _OPTIONAL_NODE_ARRAYS.items():
            if getattr(self, name) is not None:
                set_(self, name, _frozen(getattr(self, name), dtype))
        set_(self, "tree_offsets", _frozen(self.tree_offsets, np.int64))
        set_(self, "tree_output", _frozen(self.tree_output, np.int32))
        set_(self, "cat_bitset", _frozen(self.cat_bitset, np.uint32))
        set_(self, "base_score", _frozen(np.atleast_1d(self.base_score), np.float64))
        set_(self, "n_features", int(self.n_features))
        set_(self, "n_outputs", int(self.n_outputs))
        set_(self, "trees_per_round", int(self.trees_per_round))
        set_(self, "input_dtype", np.dtype(self.input_dtype))
        set_(self, "transform_params", MappingProxyType(dict(self.transform_params)))
        cats = self.pandas_categories
        if isinstance(cats, Mapping):
            set_(self, "pandas_categories", MappingProxyType(
                {str(k): tuple(v) for k, v in cats.items()}))
        elif cats is not None:
            set_(self, "pandas_categories", tuple(tuple(v) for v in cats))
        if self.feature_names is not None:
            set_(self, "feature_names", tuple(str(n) for n in self.feature_names))
        if self.class_labels is not None:
            set_(self, "class_labels", tuple(self.class_labels))
        if self.linear is not None:
            lin = self.linear
            set_(self, "linear", LinearLeaves(
                offset=_frozen(lin.offset, np.int64), count=_frozen(lin.count, np.int32),
                const=_frozen(lin.const, np.float64), feature=_frozen(lin.feature, np.int32),
                coeff=_frozen(lin.coeff, np.float64)))
        set_(self, "_node_depth", _validate(self))

    # ---- shape ---------------------------------------------------------------------
    @property
    def n_trees(self) -> int:
        return len(self.tree_offsets) - 1

    @property
    def n_nodes(self) -> int:
        return len(self.left)

    @property
    def is_leaf(self) -> np.ndarray:
        """Per node: True for leaves."""
        return self.left < 0

    @property
    def n_leaves(self) -> int:
        return int(np.count_nonzero(self.is_leaf))

    @property
    def n_internal(self) -> int:
        return self.n_nodes - self.n_leaves

    @property
    def row_bytes(self) -> int:
        """The bytes of one row of inputs, in ``input_dtype``."""
        return self.n_features * self.input_dtype.itemsize

    @property
    def leaf_width(self) -> int:
        return self.leaf_value.shape[1]

    @property
    def node_depth(self) -> np.ndarray:
        """Per node: its depth in its tree (the root is at depth 0)."""
        return self._node_depth  # type: ignore[attr-defined]

    @property
    def tree_depths(self) -> np.ndarray:
        """Per tree: the depth of its deepest leaf (0 for a tree that is a single leaf)."""
        return np.maximum.reduceat(self.node_depth, self.tree_offsets[:-1])

    @property
    def shallowest_leaves(self) -> np.ndarray:
        """Per tree: the depth of its shallowest leaf (0 for a tree that is a single leaf)."""
        depth = np.where(self.is_leaf, self.node_depth.astype(np.int64),
                         np.iinfo(np.int64).max)
        return np.minimum.reduceat(depth, self.tree_offsets[:-1])

    @property
    def max_depth(self) -> int:
        return int(self.node_depth.max())

    @property
    def tree_sizes(self) -> np.ndarray:
        return np.diff(self.tree_offsets)

    @property
    def has_categorical(self) -> bool:
        return bool(np.any((self.split_op == OP_CAT) & ~self.is_leaf))

    @property
    def predicate(self) -> str | None:
        """The numeric split predicate, ``"<"`` or ``"<="``, or None when nodes mix them."""
        ops = set(np.unique(self.split_op[~self.is_leaf]).tolist()) - {OP_CAT}
        if len(ops) == 1:
            return OP_NAMES[ops.pop()]
        return None if ops else "<"

    def trees_per_output(self) -> np.ndarray:
        """How many trees add to each output (what ``average`` divides by)."""
        counts = np.zeros(self.n_outputs, dtype=np.int64)
        for k in range(self.leaf_width):
            counts += np.bincount(self.tree_output + k, minlength=self.n_outputs)
        return counts

    def tree(self, t: int) -> slice:
        """The slice of node arrays that tree ``t`` owns."""
        if not 0 <= t < self.n_trees:
            raise IndexError(f"tree {t} out of range (forest has {self.n_trees} trees)")
        return slice(int(self.tree_offsets[t]), int(self.tree_offsets[t + 1]))

    def node_fields(self) -> list[str]:
        """The names of the per-node arrays this forest has (the optional ones when
        present; ``linear`` aside): what code that reorders or drops nodes must carry."""
        return [*_NODE_ARRAYS, "leaf_value",
                *(n for n in _OPTIONAL_NODE_ARRAYS if getattr(self, n) is not None)]

    @property
    def n_rounds(self) -> int:
        """How many boosting rounds (of ``trees_per_round`` trees each) the forest has."""
        return self.n_trees // self.trees_per_round

    def take_trees(self, trees: Any) -> "Forest":
        """The forest of trees ``trees`` (tree indices, in the order given): tree ``i`` of
        the result is tree ``trees[i]`` of this one. Every per-node array
        (:meth:`node_fields`, linear leaves') moves with its tree; category sets and
        linear-leaf coefficients are shared storage that nodes index by offset, so they
        stay whole. Model-level fields stay as they are.

        >>> forest.take_trees([2, 0]).n_trees                    # doctest: +SKIP
        2
        """
        order = np.asarray(trees, dtype=np.int64).reshape(-1)
        sizes = self.tree_sizes[order]
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        # Global id, in this forest, of each node of the new one.
        take = np.repeat(self.tree_offsets[:-1][order] - offsets[:-1], sizes) \
            + np.arange(int(offsets[-1]))
        changes: dict[str, Any] = {name: getattr(self, name)[take]
                                   for name in self.node_fields()}
        if self.linear is not None:
            lin = self.linear
            changes["linear"] = replace(lin, offset=lin.offset[take],
                                        count=lin.count[take], const=lin.const[take])
        return self.replace(tree_offsets=offsets, tree_output=self.tree_output[order],
                            **changes)

    def slice(self, begin: int, end: int) -> "Forest":
        """The trees of boosting rounds ``begin`` to ``end`` (excluded), XGBoost's
        ``iteration_range``: every class's trees and every parallel tree of those rounds;
        ``end`` 0 means the last round, so ``(0, 0)`` keeps every tree. Base score,
        transform and averaging stay (an averaging forest averages the trees kept).

        >>> forest.slice(0, 10).n_trees == 10 * forest.trees_per_round  # doctest: +SKIP
        True
        """
        rounds = self.n_rounds
        for name, value in (("begin", begin), ("end", end)):
            if isinstance(value, (bool, np.bool_)) or not isinstance(value,
                                                                     (int, np.integer)):
                raise InputError(f"iteration_range {name} must be an int, not {value!r}")
        begin, end = int(begin), int(end) or rounds
        if not 0 <= begin < end <= rounds:
            raise InputError(f"iteration_range ({begin}, {end}) is out of range: the model "
                             f"has {rounds} rounds of {self.trees_per_round} tree(s); give "
                             f"0 <= begin < end <= {rounds} (end 0 means {rounds})")
        if (begin, end) == (0, rounds):
            return self
        k = self.trees_per_round
        return self.take_trees(np.arange(begin * k, end * k))

    def category_set(self, node: int) -> np.ndarray:
        """The categories of a categorical node (global node index), sorted."""
        words = self.cat_bitset[self.cat_offset[node]:
                                self.cat_offset[node] + self.cat_words[node]]
        bits = np.unpackbits(words.astype("<u4").view(np.uint8), bitorder="little")
        return np.flatnonzero(bits)

    def summary(self) -> str:
        """A short human-readable description.

        >>> print(forest.summary())                        # doctest: +SKIP
        Forest from xgboost 3.2.0 (binary:logistic)
          trees 100, features 28, outputs 1, max depth 6 ...
        """
        depths = self.tree_depths
        lines = [
            f"Forest from {self.source or 'unknown source'}"
            + (f" ({self.objective})" if self.objective else ""),
            f"  trees {self.n_trees}, features {self.n_features}, outputs {self.n_outputs}"
            f" (leaf width {self.leaf_width})",
            f"  nodes {self.n_nodes}: {self.n_internal} internal, {self.n_leaves} leaves;"
            f" depth max {self.max_depth}, mean {depths.mean():.1f}" if self.n_trees
            else "  no trees",
            f"  split predicate {self.predicate or 'mixed'}"
            + (", categorical splits" if self.has_categorical else "")
            + (", linear leaves" if self.linear is not None else ""),
            f"  margin = {'mean' if self.average and self.average_in_margin else 'sum'}"
            f" of trees + base score"
            f" {np.array2string(self.base_score, precision=6, threshold=6)}",
            f"  post-transform {self.post_transform}"
            + (f" {dict(self.transform_params)}" if self.transform_params else ""),
            f"  inputs compared as {self.input_dtype.name}",
        ]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (f"<Forest {self.source or ''} {self.objective}: {self.n_trees} trees, "
                f"{self.n_features} features, {self.n_outputs} outputs>")

    def replace(self, **changes: Any) -> "Forest":
        """A copy with some fields changed (validated again)."""
        values = self._fields()
        values.update(changes)
        return Forest(**values)

    def _fields(self) -> dict[str, Any]:
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        for name in ("transform_params", "pandas_categories"):
            if isinstance(values[name], Mapping):
                values[name] = dict(values[name])  # read-only views do not pickle
        return values

    def __reduce__(self) -> tuple:
        return (_from_fields, (self._fields(),))


def _from_fields(values: dict[str, Any]) -> Forest:
    return Forest(**values)


def _frozen(a: Any, dtype: Any) -> np.ndarray:
    arr = np.array(a, dtype=dtype, copy=True)
    arr.flags.writeable = False
    return arr


def _where(forest: Forest, node: int) -> str:
    t = int(np.searchsorted(forest.tree_offsets, node, side="right") - 1)
    return f"tree {t}, node {node - int(forest.tree_offsets[t])}"


def _fail(forest: Forest, mask: np.ndarray, problem: str) -> None:
    bad = np.flatnonzero(mask)
    if len(bad):
        more = f" (and {len(bad) - 1} more nodes)" if len(bad) > 1 else ""
        raise ModelFormatError(f"{_where(forest, int(bad[0]))}: {problem}{more}")


def _validate(f: Forest) -> np.ndarray:
    """Check every invariant the docstring promises; return the depth of every node."""
    n = f.n_nodes
    offsets = f.tree_offsets
    if f.n_outputs < 1:
        raise ModelFormatError(f"a forest needs at least one output, not {f.n_outputs}")
    if f.n_features < 0:
        raise ModelFormatError(f"negative number of features: {f.n_features}")
    if len(offsets) < 1 or offsets[0] != 0 or offsets[-1] != n or np.any(np.diff(offsets) < 1):
        raise ModelFormatError("tree offsets must start at 0, end at the node count and "
                               "give every tree at least one node")
    for name in list(_NODE_ARRAYS) + ["leaf_value"]:
        if len(getattr(f, name)) != n:
            raise ModelFormatError(f"node array {name!r} has {len(getattr(f, name))} "
                                   f"entries, expected {n}")
    if len(f.tree_output) != f.n_trees:
        raise ModelFormatError(f"tree_output has {len(f.tree_output)} entries for "
                               f"{f.n_trees} trees")
    if f.base_score.shape != (f.n_outputs,) or not np.all(np.isfinite(f.base_score)):
        raise ModelFormatError(f"base score must be {f.n_outputs} finite numbers, got "
                               f"{f.base_score.tolist()}")
    if f.leaf_width not in (1, f.n_outputs):
        raise ModelFormatError(f"leaf width {f.leaf_width} must be 1 or the number of "
                               f"outputs ({f.n_outputs})")
    bad_out = (f.tree_output < 0) | (f.tree_output + f.leaf_width > f.n_outputs)
    if np.any(bad_out):
        t = int(np.flatnonzero(bad_out)[0])
        raise ModelFormatError(f"tree {t}: output index {int(f.tree_output[t])} out of "
                               f"range for {f.n_outputs} outputs")
    if f.post_transform not in transforms.TRANSFORMS:
        raise ModelFormatError(f"unknown post-transform {f.post_transform!r}")
    if f.input_dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise ModelFormatError(f"input dtype must be float32 or float64, not {f.input_dtype}")
    if f.category_rule not in ("truncate", "nonnegative", "exact"):
        raise ModelFormatError(f"unknown category rule {f.category_rule!r}")
    if f.negative_category not in ("not_in_set", "missing"):
        raise ModelFormatError(f"unknown negative-category rule {f.negative_category!r}")
    if f.beyond_category not in ("not_in_set", "missing"):
        raise ModelFormatError(f"unknown beyond-category rule {f.beyond_category!r}")
    if f.unseen_category not in ("missing", "error"):
        raise ModelFormatError(f"unknown unseen-category rule {f.unseen_category!r}")
    if f.sparse_absent not in ("zero", "missing"):
        raise ModelFormatError(f"unknown sparse-absent rule {f.sparse_absent!r}")
    if f.trees_per_round < 1 or f.n_trees % f.trees_per_round:
        raise ModelFormatError(f"{f.n_trees} trees are not whole rounds of "
                               f"{f.trees_per_round} trees (trees_per_round)")
    if f.leaf_layout not in LEAF_LAYOUTS:
        raise ModelFormatError(f"unknown leaf layout {f.leaf_layout!r}")
    if f.feature_names is not None and len(f.feature_names) != f.n_features:
        raise ModelFormatError(f"{len(f.feature_names)} feature names for "
                               f"{f.n_features} features")

    leaf = f.left < 0
    internal = ~leaf
    _fail(f, leaf != (f.right < 0), "has one child; internal nodes need two")
    size = np.repeat(np.diff(offsets), np.diff(offsets))
    _fail(f, internal & ((f.left >= size) | (f.right >= size)),
          "child index out of range for its tree")
    _fail(f, internal & ((f.feature < 0) | (f.feature >= f.n_features)),
          f"feature index out of range (model has {f.n_features} features)")
    _fail(f, internal & (f.split_op > OP_CAT), "unknown split operator")
    _fail(f, internal & (f.missing > MISSING_NONE), "unknown missing-value rule")
    numeric = internal & (f.split_op != OP_CAT)
    _fail(f, numeric & np.isnan(f.threshold), "threshold is NaN")
    cat = internal & (f.split_op == OP_CAT)
    _fail(f, cat & ((f.cat_words < 0) | (f.cat_offset < 0)
                    | (f.cat_offset + f.cat_words > len(f.cat_bitset))),
          "category set out of range of the bitset storage")
    _fail(f, cat & (f.cat_words > (MAX_CATEGORY + 32) // 32),
          f"category set larger than the largest category {MAX_CATEGORY}")
    _fail(f, leaf & ~np.all(np.isfinite(f.leaf_value), axis=1), "leaf value is not finite")
    if f.linear is not None:
        _validate_linear(f, leaf)
    for name in _OPTIONAL_NODE_ARRAYS:
        if getattr(f, name) is not None and getattr(f, name).shape != (n,):
            raise ModelFormatError(f"node array {name!r} has shape "
                                   f"{getattr(f, name).shape}, expected ({n},)")
    if f.cover is not None:
        _fail(f, ~np.isfinite(f.cover) | (f.cover < 0), "cover is negative or not finite")
    if f.source_id is not None:
        _fail(f, (f.source_id < 0) | (f.source_id > np.iinfo(np.int32).max),
              "source node id out of range [0, 2^31 - 1]")

    # A tree: the root has no parent, every other node exactly one, and a walk from the
    # roots reaches every node (which rules out cycles).
    base = np.repeat(offsets[:-1], np.diff(offsets))
    children = np.concatenate([(f.left + base)[internal], (f.right + base)[internal]])
    indegree = np.bincount(children, minlength=n)
    is_root = np.zeros(n, dtype=bool)
    is_root[offsets[:-1]] = True
    _fail(f, is_root & (indegree > 0), "the root is the child of another node (a cycle)")
    _fail(f, ~is_root & (indegree > 1), "has more than one parent")
    # The children's global indices once: a level's step then costs its own nodes only
    # (recomputed a level, they made a 100,000-deep chain take 49 s).
    left, right = f.left + base, f.right + base
    depth = np.full(n, -1, dtype=np.int32)
    frontier = offsets[:-1].copy()
    level = 0
    while len(frontier):
        depth[frontier] = level
        frontier = frontier[internal[frontier]]
        frontier = np.concatenate([left[frontier], right[frontier]])
        level += 1
    _fail(f, depth < 0, "is unreachable from its root (a cycle or a dangling node)")
    depth.flags.writeable = False
    return depth


def _validate_linear(f: Forest, leaf: np.ndarray) -> None:
    lin = f.linear
    assert lin is not None
    n = f.n_nodes
    if len(lin.offset) != n or len(lin.count) != n or len(lin.const) != n:
        raise ModelFormatError("linear-leaf arrays must have one entry per node")
    if len(lin.feature) != len(lin.coeff):
        raise ModelFormatError("linear-leaf features and coefficients differ in length")
    _fail(f, (lin.count > 0) & ~leaf, "linear model on an internal node")
    _fail(f, (lin.count < 0) | (lin.offset < 0) | (lin.offset + lin.count > len(lin.feature)),
          "linear-leaf coefficients out of range")
    _fail(f, leaf & ~np.isfinite(lin.const), "linear-leaf constant is not finite")
    if np.any((lin.feature < 0) | (lin.feature >= f.n_features)) or not np.all(
            np.isfinite(lin.coeff)):
        raise ModelFormatError("linear leaves use a feature out of range or a "
                               "non-finite coefficient")
