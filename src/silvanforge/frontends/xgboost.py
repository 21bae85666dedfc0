"""XGBoost frontend: JSON / UBJSON model files (XGBoost 1.0 to 3.x) and live boosters.

Semantics, checked against XGBoost 3.2, and 1.7 in CI's floor job, by
``tests/test_xgboost.py``:

* Numeric split: ``x < split_condition`` goes left, compared in float32 (thresholds are
  float32 in the file; inputs are cast to float32); NaN takes ``default_left``.
* Categorical split (``split_type`` 1): XGBoost sends the categories of the node's set
  to the RIGHT child and everything else (other, negative, >= 2**24 categories) left.
  The Forest's convention is "test holds → left", so such nodes get their children and
  their default direction swapped. Files written by XGBoost before 2.0 (1.5-1.7) are
  predicted as those versions did: a negative value, and one at or beyond the node's
  bitset (32 categories a word, as many words as its largest category needs), takes the
  default direction (``negative_category`` and ``beyond_category`` "missing").
* Leaf values are the ``split_conditions`` entries of leaves (scalar trees); vector-leaf
  trees (``multi_strategy="multi_output_tree"``) keep theirs in ``leaf_weights`` (3.2+,
  indexed by the leaf's ``right_children`` entry) or in ``base_weights`` (2.x).
* ``base_score`` is stored in output space (a float string in 1.x/2.x, a vector string
  per class/target in 3.x); the margin-space base score is the objective's link of it
  (logit for logistic objectives, log for count/survival/gamma/tweedie, identity else).
* DART: each tree's ``weight_drop`` is folded into its leaf values (XGBoost weighs the
  trees by it at inference).
* Trees used: a file or a ``Booster`` gives every tree, as ``Booster.predict`` and
  ``inplace_predict`` do by default, even when the model stores a ``best_iteration``
  from early stopping. An sklearn wrapper (``XGBModel``) gives the trees up to its
  ``best_iteration``, as its own ``predict``/``predict_proba`` do (rounds counted by
  ``iteration_indptr``, or before 2.0 as ``num_parallel_tree`` trees per class).
* Covers (``sum_hessian``, the training hessian that reached each node) are kept for
  TreeSHAP; the JSON holds them as float32, which ``pred_contribs`` computes with.
* pandas categories: XGBoost 3.1+ stores the training categories (``cats``) and
  re-codes a DataFrame's categorical columns against them; the Forest records them as
  ``pandas_categories``. XGBoost rejects a category it never saw, and so does
  SilvanForge (``unseen_category="error"``). Older files carry no categories: a
  DataFrame's own codes are used, as those XGBoost versions did.
"""

from __future__ import annotations

import math
import re
from typing import Any, Sequence

import numpy as np

from .. import progress
from ..errors import ModelFormatError, UnsupportedModelError
from ..model.builder import Tree, Trees, build_forest, float_array, int_array
from ..model.forest import MAX_CATEGORY, Forest
from . import numbers, ubjson

# Reading a tree of the document (depth 8, ~500 nodes) takes ~0.25 ms one by one and
# ~0.12 ms in columns (_plain_trees) on the 2-core development machine
# (benchmarks/results-2026-11-25-compile-scale-scan, -26-compile-scale): the
# predictions that show a progress bar for big models (silvanforge.progress).
S_PER_TREE = 2.5e-4
S_PER_PLAIN_TREE = 1.2e-4

# objective → (post-transform, link from output-space base_score to margin space)
_OBJECTIVES: dict[str, tuple[str, str]] = {
    "reg:squarederror": ("identity", "identity"),
    "reg:linear": ("identity", "identity"),  # the pre-1.0 name of squarederror
    "reg:squaredlogerror": ("identity", "identity"),
    "reg:pseudohubererror": ("identity", "identity"),
    "reg:absoluteerror": ("identity", "identity"),
    "reg:quantileerror": ("identity", "identity"),
    "reg:logistic": ("sigmoid", "logit"),
    "binary:logistic": ("sigmoid", "logit"),
    # XGBoost >= 1.3 (PR #6517) takes logitraw's base_score as a margin already.
    "binary:logitraw": ("identity", "identity"),
    "binary:hinge": ("hinge", "identity"),
    "count:poisson": ("exp", "log"),
    "survival:cox": ("exp", "log"),
    "survival:aft": ("exp", "log"),
    "reg:gamma": ("exp", "log"),
    "reg:tweedie": ("exp", "log"),
    "multi:softmax": ("argmax", "identity"),
    "multi:softprob": ("softmax", "identity"),
    "rank:pairwise": ("identity", "identity"),
    "rank:ndcg": ("identity", "identity"),
    "rank:map": ("identity", "identity"),
}

_NUMBER = re.compile(r"\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*|\s*[-+]?(inf|nan)\s*",
                     re.IGNORECASE)
_F32 = np.float32


# ---- entry points --------------------------------------------------------------------

def load_bytes(data: bytes) -> Forest:
    """Load an XGBoost JSON or UBJSON model file's bytes.

    >>> forest = load_bytes(open("model.ubj", "rb").read())     # doctest: +SKIP
    """
    return forest_from_document(parse_document(data))


def load_object(obj: Any) -> Forest:
    """Load a live ``xgboost.Booster`` or sklearn-wrapper ``XGBModel``.

    >>> forest = load_object(xgboost.XGBRegressor().fit(X, y))  # doctest: +SKIP
    """
    import xgboost

    n_iterations = None
    if isinstance(obj, xgboost.XGBModel):
        booster = obj.get_booster()
        # The wrapper predicts with the trees up to best_iteration after early stopping.
        try:
            n_iterations = int(obj.best_iteration) + 1
        except AttributeError:
            n_iterations = None
    elif isinstance(obj, xgboost.Booster):
        booster = obj
    else:
        raise UnsupportedModelError(
            f"cannot load a {type(obj).__module__}.{type(obj).__qualname__}: expected an "
            f"xgboost.Booster or an XGBoost scikit-learn model")
    doc = parse_document(bytes(booster.save_raw("json")))
    return forest_from_document(doc, n_iterations=n_iterations)


# Per-node lists of a tree that predictions seldom or never read: their numbers are
# parsed only when read (a third of a JSON model's numbers; docs/ARCHITECTURE.md
# "Loading big models"). base_weights holds XGBoost 2.x's vector leaves.
UNUSED_LISTS = ("base_weights", "loss_changes", "parents")
# What bytes.strip() takes for blanks.
_BLANKS = re.compile(rb"[ \t\n\r\x0b\x0c]*")


def parse_document(data: bytes) -> dict:
    """JSON or UBJSON bytes → the model document (a dict)."""
    # Blanks skipped by matching, not stripping: a slice of the text would copy it (0.1 s
    # for 185 MB).
    start = _BLANKS.match(data).end()
    if data[start:start + 1] != b"{":
        raise ModelFormatError("an XGBoost model must start with '{' (JSON or UBJSON)")
    after = _BLANKS.match(data, start + 1).end()
    if data[after:after + 1] in (b'"', b"}"):
        try:
            doc = numbers.loads_json(data, UNUSED_LISTS)
        except UnicodeDecodeError as exc:
            raise ModelFormatError(f"the JSON model is not valid UTF-8: {exc}") from None
        except RecursionError:
            raise ModelFormatError("the JSON model is nested too deeply") from None
        except ValueError as exc:
            raise ModelFormatError(f"invalid JSON (truncated or corrupt?): {exc}") from None
    else:
        doc = ubjson.decode(data)
    if not isinstance(doc, dict):
        raise ModelFormatError("the model document must be an object")
    return doc


# ---- field access --------------------------------------------------------------------

def _get(obj: Any, key: str, where: str, kind: type | tuple = dict, default: Any = ...) -> Any:
    if not isinstance(obj, dict):
        raise ModelFormatError(f"{where}: expected an object")
    if key not in obj:
        if default is not ...:
            return default
        raise ModelFormatError(f"{where}: missing field {key!r}")
    value = obj[key]
    if not isinstance(value, kind):
        raise ModelFormatError(f"{where}.{key}: expected {_kind_name(kind)}, got "
                               f"{type(value).__name__}")
    return value


def _kind_name(kind: type | tuple) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = {dict: "an object", list: "an array", str: "a string", np.ndarray: "an array",
             numbers.Unread: "an array", int: "an integer", float: "a number"}
    return " or ".join(dict.fromkeys(names.get(k, k.__name__) for k in kinds))


def _array(obj: dict, key: str, where: str, default: Any = ...) -> Any:
    """An array field (a JSON list or a typed UBJSON array)."""
    value = _get(obj, key, where, (list, np.ndarray, numbers.Unread), default)
    if isinstance(value, numbers.Unread):
        value = value.read()
        if value is None:
            raise ModelFormatError(f"{where}.{key}: expected numbers")
    if isinstance(value, list) and any(isinstance(v, (str, dict, list, type(None)))
                                       for v in value):
        raise ModelFormatError(f"{where}.{key}: expected numbers, found "
                               f"{next(type(v).__name__ for v in value if isinstance(v, (str, dict, list, type(None))))}")
    return value


def _param_number(value: Any, what: str) -> float:
    """A number XGBoost stores as a string parameter ("5E-1"), or a plain number."""
    if isinstance(value, bool):
        raise ModelFormatError(f"{what}: expected a number, got a boolean")
    if isinstance(value, (int, float, np.integer, np.floating)):
        return float(value)
    if isinstance(value, str) and _NUMBER.fullmatch(value):
        return float(value)
    raise ModelFormatError(f"{what}: expected a number, got {str(value)[:40]!r}")


def _param_int(value: Any, what: str, lo: int = 0, hi: int = 2**31 - 1) -> int:
    number = _param_number(value, what)
    if not math.isfinite(number) or number != int(number) or not lo <= number <= hi:
        raise ModelFormatError(f"{what}: expected a whole number in [{lo}, {hi}], got "
                               f"{value!r}")
    return int(number)


def _base_scores(value: Any, what: str) -> np.ndarray:
    """base_score: "5E-1" (1.x/2.x), "[5E-1]" or "[1E0,2E0]" (3.x), or a number."""
    if isinstance(value, str) and value.strip().startswith("["):
        inner = value.strip()
        if not inner.endswith("]"):
            raise ModelFormatError(f"{what}: malformed vector {value[:40]!r}")
        parts = inner[1:-1].split(",")
        scores = [_param_number(p, what) for p in parts]
    else:
        scores = [_param_number(value, what)]
    # XGBoost holds base_score as float32.
    return np.asarray(scores, dtype=_F32).astype(np.float64)


# ---- document → Forest ---------------------------------------------------------------

def forest_from_document(doc: dict, n_iterations: int | None = None) -> Forest:
    """Build the Forest of an XGBoost model document (parsed JSON/UBJSON).

    ``n_iterations`` keeps only the trees of the first boosting rounds (the sklearn
    wrapper's ``best_iteration``).
    """
    learner = _get(doc, "learner", "model")
    version = doc.get("version")
    source = "xgboost"
    before_2 = False
    if isinstance(version, np.ndarray) and version.dtype.kind == "f":
        # Read as numbers by frontends/numbers.py: whole ones are the version's ints.
        version = [int(v) if v.is_integer() else v for v in version.tolist()]
    if isinstance(version, (list, np.ndarray)) and len(version) == 3 and all(
            isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in version):
        source = "xgboost " + ".".join(str(int(v)) for v in version)
        before_2 = int(version[0]) < 2

    objective = _get(_get(learner, "objective", "learner"), "name", "learner.objective", str)
    booster = _get(learner, "gradient_booster", "learner")
    booster_name = _get(booster, "name", "learner.gradient_booster", str)
    weight_drop = None
    if booster_name == "gblinear":
        raise UnsupportedModelError(
            "this is a gblinear (linear booster) model, which has no trees; SilvanForge "
            "compiles tree models only (booster 'gbtree' or 'dart')")
    if booster_name == "dart":
        weight_drop = float_array(_array(booster, "weight_drop", "learner.gradient_booster"),
                                  "learner.gradient_booster.weight_drop").reshape(-1)
        booster = _get(booster, "gbtree", "learner.gradient_booster")
    elif booster_name != "gbtree":
        raise UnsupportedModelError(f"unsupported booster {booster_name!r} (expected "
                                    f"'gbtree' or 'dart')")
    if objective not in _OBJECTIVES:
        raise UnsupportedModelError(f"unsupported XGBoost objective {objective!r}")
    transform, link = _OBJECTIVES[objective]

    mparam = _get(learner, "learner_model_param", "learner")
    where = "learner.learner_model_param"
    n_features = _param_int(_get(mparam, "num_feature", where, (str, int, float)),
                            f"{where}.num_feature")
    num_class = _param_int(mparam.get("num_class", "0"), f"{where}.num_class")
    num_target = _param_int(mparam.get("num_target", "1"), f"{where}.num_target", lo=1)
    if num_class > 1 and num_target > 1:
        raise UnsupportedModelError("a model with both several classes and several "
                                    "targets is not supported")
    n_outputs = max(num_class, num_target, 1)
    base = _base_scores(_get(mparam, "base_score", where, (str, int, float)),
                        f"{where}.base_score")
    if base.size not in (1, n_outputs):
        raise ModelFormatError(f"{where}.base_score: {base.size} values for {n_outputs} "
                               f"outputs")
    base_margin = _link(base, link, objective)

    model = _get(booster, "model", "learner.gradient_booster")
    trees = _read_trees(model, n_features, n_outputs, weight_drop, n_iterations)
    feature_names = _feature_names(learner, n_features)
    vector = not isinstance(trees, Trees) and bool(trees) and \
        np.ndim(trees[0].leaf_value) == 2 and np.shape(trees[0].leaf_value)[1] > 1
    fields = dict(
        n_features=n_features, n_outputs=n_outputs, base_score=base_margin,
        trees_per_round=_trees_per_round(model, vector, n_outputs), leaf_layout="trees_1d",
        post_transform=transform, input_dtype=np.float32, category_rule="nonnegative",
        negative_category="missing" if before_2 else "not_in_set",
        beyond_category="missing" if before_2 else "not_in_set",
        flat_output=True, feature_names=feature_names,
        pandas_categories=_pandas_categories(model, feature_names),
        # XGBoost's DMatrix reads a sparse matrix's absent entries as missing, and 3.1+
        # refuses a category its training never saw (both checked by the tests).
        sparse_absent="missing", unseen_category="error",
        objective=objective, source=source)
    try:
        return build_forest(trees, **fields)
    except ModelFormatError:
        if not isinstance(trees, Trees):
            raise
    # Trees read at once whose Forest is refused (a child out of range, a cycle, a NaN
    # threshold, pruned nodes...): read one by one, which drops pruned nodes and names
    # the tree and node of anything else.
    return build_forest(_read_trees(model, n_features, n_outputs, weight_drop,
                                    n_iterations, at_once=False), **fields)


def _link(base: np.ndarray, link: str, objective: str) -> np.ndarray:
    """Output-space base_score → margin space (XGBoost's ProbToMargin)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        if link == "logit":
            margin = np.log(base / (1.0 - base))
        elif link == "log":
            margin = np.log(base)
        else:
            margin = base
    if not np.all(np.isfinite(margin)):
        raise ModelFormatError(f"base_score {base.tolist()} is outside the range of the "
                               f"{objective} objective")
    return margin


def _feature_names(learner: dict, n_features: int) -> tuple[str, ...] | None:
    names = learner.get("feature_names")
    if names is None or len(names) == 0:
        return None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ModelFormatError("learner.feature_names: expected an array of strings")
    if len(names) != n_features:
        raise ModelFormatError(f"learner.feature_names: {len(names)} names for "
                               f"{n_features} features")
    return tuple(names)


def _pandas_categories(model: dict, names: Sequence[str] | None) -> dict | None:
    """The training categories XGBoost 3.1+ stores (``cats``), per feature name."""
    cats = model.get("cats")
    if not isinstance(cats, dict) or names is None:
        return None
    enc = _get(cats, "enc", "cats", list, [])
    if len(enc) == 0:
        return None
    if len(enc) != len(names):
        raise ModelFormatError(f"cats.enc: {len(enc)} entries for {len(names)} features")
    out = {}
    for f, entry in enumerate(enc):
        where = f"cats.enc[{f}]"
        if not isinstance(entry, dict):
            raise ModelFormatError(f"{where}: expected an object")
        values = _array(entry, "values", where, [])
        if "offsets" in entry:
            offsets = int_array(_array(entry, "offsets", where), f"{where}.offsets")
            if len(offsets) == 0:
                continue  # a numeric feature
            raw = int_array(values, f"{where}.values", 0, 255).astype(np.uint8).tobytes()
            if offsets[0] != 0 or offsets[-1] != len(raw) or np.any(np.diff(offsets) < 0):
                raise ModelFormatError(f"{where}.offsets: not increasing from 0 to "
                                       f"{len(raw)}")
            try:
                out[names[f]] = tuple(raw[a:b].decode("utf-8")
                                      for a, b in zip(offsets[:-1], offsets[1:]))
            except UnicodeDecodeError:
                raise ModelFormatError(f"{where}: category is not valid UTF-8") from None
        elif len(values):
            numbers = float_array(values, f"{where}.values").reshape(-1)
            out[names[f]] = tuple(int(v) if v == int(v) else float(v) for v in numbers) \
                if np.all(np.isfinite(numbers)) else tuple(numbers.tolist())
    return out or None


def _read_trees(model: dict, n_features: int, n_outputs: int,
                weight_drop: np.ndarray | None, n_iterations: int | None,
                at_once: bool = True) -> list[Tree] | Trees:
    """The trees: in columns (:func:`_plain_trees`) when ``at_once`` and they are all
    plain, else one by one."""
    where = "gradient_booster.model"
    raw_trees = _get(model, "trees", where, list)
    tree_info = int_array(_array(model, "tree_info", where), f"{where}.tree_info",
                          0, n_outputs - 1)
    param = _get(model, "gbtree_model_param", where)
    num_trees = _param_int(_get(param, "num_trees", f"{where}.gbtree_model_param",
                                (str, int, float)), f"{where}.num_trees")
    if not (len(raw_trees) == num_trees == len(tree_info)):
        raise ModelFormatError(f"{where}: {len(raw_trees)} trees, num_trees {num_trees} "
                               f"and {len(tree_info)} tree_info entries disagree")
    if weight_drop is not None and len(weight_drop) != num_trees:
        raise ModelFormatError(f"dart weight_drop has {len(weight_drop)} weights for "
                               f"{num_trees} trees")
    if n_iterations is not None:
        num_trees = _trees_in_iterations(model, num_trees, n_iterations, n_outputs)
    plain = _plain_trees(raw_trees[:num_trees], tree_info[:num_trees], weight_drop) \
        if at_once else None
    if plain is not None:
        return plain
    trees = []
    with progress.bar("reading trees", num_trees * S_PER_TREE, num_trees, "tree") as shown:
        for t in range(num_trees):
            weight = 1.0 if weight_drop is None else float(weight_drop[t])
            trees.append(_read_tree(raw_trees[t], t, int(tree_info[t]), n_features,
                                    n_outputs, weight))
            shown.update()
    return trees


def _trees_per_round(model: dict, vector: bool, n_outputs: int) -> int:
    """How many trees a boosting round adds: ``iteration_indptr``'s step (XGBoost 2+),
    else ``num_parallel_tree`` times the classes a round boosts (one vector-leaf tree
    boosts them all)."""
    indptr = model.get("iteration_indptr")
    if indptr is not None and len(indptr) > 1:
        steps = np.unique(np.diff(int_array(indptr, "iteration_indptr", 0)))
        if len(steps) != 1 or steps[0] < 1:
            raise ModelFormatError(f"iteration_indptr: rounds of {steps.tolist()} trees; "
                                   "every round must add the same number")
        return int(steps[0])
    param = _get(model, "gbtree_model_param", "gradient_booster.model")
    parallel = _param_int(param.get("num_parallel_tree", "1"), "num_parallel_tree", lo=1)
    return parallel * (1 if vector else n_outputs)


def _trees_in_iterations(model: dict, num_trees: int, n_iterations: int,
                         n_outputs: int) -> int:
    """How many trees the first ``n_iterations`` boosting rounds hold."""
    indptr = model.get("iteration_indptr")
    if indptr is None or len(indptr) == 0:
        # Before 2.0 (no iteration_indptr, no vector-leaf trees): a round's trees are
        # num_parallel_tree per output.
        return min(num_trees, max(n_iterations, 0) * _trees_per_round(model, False,
                                                                      n_outputs))
    ptr = int_array(indptr, "iteration_indptr", 0, num_trees)
    if ptr[0] != 0 or ptr[-1] != num_trees or np.any(np.diff(ptr) < 0):
        raise ModelFormatError("iteration_indptr: must rise from 0 to the number of trees")
    return int(ptr[min(max(n_iterations, 0), len(ptr) - 1)])


def _read_tree(raw: Any, t: int, output: int, n_features: int, n_outputs: int,
               weight: float) -> Tree:
    where = f"tree {t}"
    if not isinstance(raw, dict):
        raise ModelFormatError(f"{where}: expected an object")
    tparam = _get(raw, "tree_param", where)
    n = _param_int(_get(tparam, "num_nodes", f"{where}.tree_param", (str, int, float)),
                   f"{where}: num_nodes", lo=1)
    width = _param_int(tparam.get("size_leaf_vector", "0"), f"{where}: size_leaf_vector")
    num_deleted = _param_int(tparam.get("num_deleted", "0"), f"{where}: num_deleted")

    def node_array(key: str, conv: Any, size: int = n, **kw: Any) -> np.ndarray:
        arr = conv(_array(raw, key, where), f"{where}: {key}", **kw).reshape(-1)
        if len(arr) != size:
            raise ModelFormatError(f"{where}: {key} has {len(arr)} entries, expected "
                                   f"{size} (num_nodes {n})")
        return arr

    left = node_array("left_children", int_array)
    right = node_array("right_children", int_array)
    feature = node_array("split_indices", int_array, lo=0, hi=2**63 - 1)
    cond = node_array("split_conditions", float_array).astype(_F32).astype(np.float64)
    default_left = node_array("default_left", int_array, lo=0, hi=1).astype(bool)
    # The training hessian that reached each node: TreeSHAP's cover (absent: none).
    cover = node_array("sum_hessian", float_array).astype(_F32).astype(np.float64) \
        if "sum_hessian" in raw else None
    split_type = np.zeros(n, dtype=np.int64)
    if "split_type" in raw:
        split_type = node_array("split_type", int_array, lo=0, hi=1)

    leaf = left < 0
    vector = width > 1
    if vector:
        if width != n_outputs:
            raise ModelFormatError(f"{where}: leaf vectors of size {width} for a model "
                                   f"with {n_outputs} outputs")
        values = _vector_leaves(raw, where, n, width, leaf, right)
        right = np.where(leaf, -1, right)
        output = 0
    else:
        # A scalar leaf's value is its split_condition.
        values = cond.copy()
    values = np.where(leaf[:, None] if values.ndim == 2 else leaf, values, 0.0) * weight

    internal = ~leaf
    bad = internal & (right < 0)
    if bad.any():
        raise ModelFormatError(f"{where}, node {int(np.flatnonzero(bad)[0])}: internal node "
                               f"without a right child")
    for name, child in (("left", left), ("right", right)):
        bad = internal & (child >= n)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ModelFormatError(f"{where}, node {i}: {name} child {int(child[i])} out of "
                                   f"range (the tree has {n} nodes)")
    bad = internal & (feature >= n_features)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ModelFormatError(f"{where}, node {i}: feature index {int(feature[i])} out of "
                               f"range (num_feature is {n_features})")
    bad = internal & (split_type == 0) & np.isnan(cond)
    if bad.any():
        raise ModelFormatError(f"{where}, node {int(np.flatnonzero(bad)[0])}: split "
                               f"threshold is NaN")
    bad = leaf & ~np.isfinite(values.reshape(n, -1)).all(axis=1)
    if bad.any():
        raise ModelFormatError(f"{where}, node {int(np.flatnonzero(bad)[0])}: leaf value "
                               f"is not finite")

    categories = _categories(raw, where, n, split_type, leaf)
    # XGBoost sends a categorical node's set to the right: swap so that left = in set.
    is_cat = internal & (split_type == 1)
    left, right = np.where(is_cat, right, left), np.where(is_cat, left, right)
    default_left = np.where(is_cat, ~default_left, default_left)

    keep = _reachable(left, right, leaf, where, num_deleted)
    node_id = np.arange(n)  # pred_leaf's numbering: the file's, deleted nodes included
    if keep is not None:
        left, right, feature, cond, default_left, values, categories, node_id = _compact(
            keep, left, right, feature, cond, default_left, values, categories, node_id)
        cover = None if cover is None else cover[keep]
        leaf = left < 0
    return Tree(left=left, right=np.where(leaf, -1, right), feature=np.where(leaf, 0, feature),
                threshold=np.where(leaf, 0.0, cond), leaf_value=values,
                default_left=default_left, categories=categories, output=output,
                source_id=node_id, cover=cover)


# The node arrays _read_tree reads for a scalar tree, and the category lists it reads
# when categories_nodes is there (a plain tree's are empty).
_NODE_FIELDS = ("left_children", "right_children", "split_indices", "split_conditions",
                "default_left")
_CATEGORY_FIELDS = ("categories", "categories_nodes", "categories_segments",
                    "categories_sizes")


def _plain_trees(raw_trees: list, tree_info: np.ndarray, weight_drop: np.ndarray | None
                 ) -> Trees | None:
    """Every tree at once, as :class:`Trees`, when each is plain: numeric splits, scalar
    leaves, no pruned nodes, every field as XGBoost writes it. Otherwise None, and
    :func:`_read_tree` reads them one by one. This is the same reading in columns
    (10,000 trees of depth 8: ~2.5 s one by one, docs/ARCHITECTURE.md "Loading big
    models"): the checks here are those of the one-by-one reading that the Forest does
    not make (whole numbers in range, every node's field); what the Forest refuses
    (children, features, thresholds, leaf values, reachability) sends the caller back
    to reading one by one, which names the tree and node. Tests check that both
    readings end the same way, Forest or error."""
    with progress.bar("reading trees", len(raw_trees) * S_PER_PLAIN_TREE, len(raw_trees),
                      "tree") as shown:
        return _columns(raw_trees, tree_info, weight_drop, shown)


def _columns(raw_trees: list, tree_info: np.ndarray, weight_drop: np.ndarray | None,
             shown: progress.Bar) -> Trees | None:
    """:func:`_plain_trees`' work, telling ``shown`` of each tree collected."""
    sizes = np.empty(len(raw_trees), dtype=np.int64)
    columns: dict[str, list] = {k: [] for k in (*_NODE_FIELDS, "sum_hessian", "split_type")}
    for t, raw in enumerate(raw_trees):
        shown.update()
        if type(raw) is not dict:
            return None
        tparam = raw.get("tree_param")
        if type(tparam) is not dict:
            return None
        n = tparam.get("num_nodes")
        if type(n) is not str or not (n.isascii() and n.isdigit()) or tparam.get(
                "size_leaf_vector", "0") not in ("0", "1") or tparam.get(
                "num_deleted", "0") not in ("0", 0):
            return None
        n = sizes[t] = int(n)
        for key, column in columns.items():
            value = raw.get(key)
            if value is None and key in ("sum_hessian", "split_type"):
                continue
            if type(value) is list:  # XGBoost 1.x writes default_left as true/false
                try:
                    value = np.array(value)
                except (ValueError, TypeError):  # lists of lists of other lengths
                    return None
                if value.dtype != bool:
                    return None
            if type(value) is not np.ndarray or value.shape != (n,):
                return None
            column.append(value)
        # _categories reads the four lists when categories_nodes is there: empty ones.
        if "categories_nodes" in raw and any(
                type(raw.get(key)) not in (list, np.ndarray) or len(raw[key])
                for key in _CATEGORY_FIELDS):
            return None
    n_trees = len(raw_trees)
    if n_trees == 0 or (sizes < 1).any() or len(columns["sum_hessian"]) not in (0, n_trees):
        return None
    try:
        cat = {k: np.concatenate(v) if v else None for k, v in columns.items()}
        left = int_array(cat["left_children"], "left_children")
        right = int_array(cat["right_children"], "right_children")
        feature = int_array(cat["split_indices"], "split_indices", 0, 2**63 - 1)
        default_left = int_array(cat["default_left"], "default_left", 0, 1).astype(bool)
        split_type = cat["split_type"]
        if split_type is not None and len(split_type) and \
                (len(split_type) != len(left) or (split_type != 0).any()):
            return None
    except ModelFormatError:
        return None
    cond = cat["split_conditions"].astype(_F32).astype(np.float64)
    start = np.repeat(np.concatenate([[0], np.cumsum(sizes)[:-1]]), sizes)
    leaf = left < 0
    weight = 1.0 if weight_drop is None else np.repeat(weight_drop[:n_trees], sizes)
    hessian = cat["sum_hessian"]
    return Trees(sizes=sizes, left=left, right=np.where(leaf, -1, right),
                 feature=np.where(leaf, 0, feature), threshold=np.where(leaf, 0.0, cond),
                 leaf_value=np.where(leaf, cond, 0.0) * weight, default_left=default_left,
                 output=tree_info, source_id=np.arange(len(left)) - start,
                 cover=None if hessian is None else hessian.astype(_F32).astype(np.float64))


def _vector_leaves(raw: dict, where: str, n: int, width: int, leaf: np.ndarray,
                   right: np.ndarray) -> np.ndarray:
    """(n, width) leaf values of a multi-output ("multi_output_tree") tree, allocated
    once the file is known to hold ``width`` values a leaf (``width`` is the file's
    word: allocated first, a huge one took memory out of all proportion to the file)."""
    if "leaf_weights" in raw:
        # XGBoost 3.2+: a leaf's right_children entry indexes the leaf weights.
        weights = float_array(_array(raw, "leaf_weights", where),
                              f"{where}: leaf_weights").reshape(-1).astype(_F32)
        if len(weights) % width:
            raise ModelFormatError(f"{where}: leaf_weights has {len(weights)} entries, "
                                   f"not a multiple of the leaf size {width}")
        n_leaf = len(weights) // width
        idx = right[leaf]
        if np.any((idx < 0) | (idx >= n_leaf)):
            node = int(np.flatnonzero(leaf)[np.flatnonzero((idx < 0) | (idx >= n_leaf))[0]])
            raise ModelFormatError(f"{where}, node {node}: leaf index {int(right[node])} out "
                                   f"of range ({n_leaf} leaf vectors)")
        out = np.zeros((n, width))
        out[leaf] = weights.reshape(n_leaf, width)[idx]
        return out
    weights = float_array(_array(raw, "base_weights", where),
                          f"{where}: base_weights").reshape(-1).astype(_F32)
    if len(weights) != n * width:
        raise ModelFormatError(f"{where}: base_weights has {len(weights)} entries, "
                               f"expected {n * width} ({n} nodes × {width} outputs)")
    out = np.zeros((n, width))
    out[leaf] = weights.reshape(n, width)[leaf]
    return out


def _categories(raw: dict, where: str, n: int, split_type: np.ndarray,
                leaf: np.ndarray) -> dict[int, np.ndarray]:
    """The category set of every categorical node, from the flat categories_* arrays."""
    if "categories_nodes" not in raw:
        if np.any(split_type[~leaf] == 1):
            raise ModelFormatError(f"{where}: categorical splits but no categories")
        return {}
    nodes = int_array(_array(raw, "categories_nodes", where), f"{where}: categories_nodes",
                      0, n - 1)
    segs = int_array(_array(raw, "categories_segments", where),
                     f"{where}: categories_segments", 0)
    sizes = int_array(_array(raw, "categories_sizes", where), f"{where}: categories_sizes", 0)
    flat = int_array(_array(raw, "categories", where), f"{where}: categories",
                     0, MAX_CATEGORY)
    if not len(nodes) == len(segs) == len(sizes):
        raise ModelFormatError(f"{where}: categories_nodes, _segments and _sizes differ in "
                               f"length ({len(nodes)}, {len(segs)}, {len(sizes)})")
    out: dict[int, np.ndarray] = {}
    for node, seg, size in zip(nodes.tolist(), segs.tolist(), sizes.tolist()):
        if seg + size > len(flat):
            raise ModelFormatError(f"{where}, node {node}: category segment "
                                   f"[{seg}, {seg + size}) beyond the {len(flat)} categories")
        if split_type[node] != 1 or leaf[node]:
            raise ModelFormatError(f"{where}, node {node}: has categories but is not a "
                                   f"categorical split")
        if node in out:
            raise ModelFormatError(f"{where}, node {node}: categories listed twice")
        out[node] = flat[seg:seg + size]
    for node in np.flatnonzero((split_type == 1) & ~leaf).tolist():
        # A categorical split with an empty set sends everything to XGBoost's left.
        out.setdefault(node, np.zeros(0, dtype=np.int64))
    return out


def _reachable(left: np.ndarray, right: np.ndarray, leaf: np.ndarray, where: str,
               num_deleted: int) -> np.ndarray | None:
    """Check the nodes form a tree from node 0; the mask of live nodes if some are not.

    XGBoost keeps pruned ("deleted") nodes in the arrays, unreachable; up to
    ``num_deleted`` such nodes are dropped, anything more is an error.
    """
    n = len(left)
    internal = ~leaf
    children = np.concatenate([left[internal], right[internal]])
    indegree = np.bincount(children, minlength=n)
    if indegree[0] > 0:
        parent = int(np.flatnonzero(internal & ((left == 0) | (right == 0)))[0])
        raise ModelFormatError(f"{where}, node {parent}: points back to the root (a cycle)")
    if np.any(indegree > 1):
        node = int(np.flatnonzero(indegree > 1)[0])
        raise ModelFormatError(f"{where}, node {node}: has more than one parent (a cycle "
                               f"or shared subtree)")
    seen = np.zeros(n, dtype=bool)
    frontier = np.array([0])
    while len(frontier):
        seen[frontier] = True
        frontier = frontier[internal[frontier]]
        frontier = np.concatenate([left[frontier], right[frontier]])
    if seen.all():
        return None
    lost = np.flatnonzero(~seen)
    if len(lost) > num_deleted:
        raise ModelFormatError(f"{where}, node {int(lost[0])}: unreachable from the root "
                               f"(a cycle or a dangling node; {len(lost)} such nodes)")
    return seen


def _compact(keep: np.ndarray, left: np.ndarray, right: np.ndarray, *arrays: Any) -> tuple:
    """Drop the nodes not in ``keep`` and renumber the children."""
    new_id = np.cumsum(keep) - 1
    out_left = np.where(left[keep] >= 0, new_id[np.maximum(left[keep], 0)], -1)
    out_right = np.where(left[keep] >= 0, new_id[np.maximum(right[keep], 0)], -1)
    rest = []
    for arr in arrays:
        if isinstance(arr, dict):
            rest.append({int(new_id[k]): v for k, v in arr.items() if keep[k]})
        else:
            rest.append(arr[keep])
    return (out_left, out_right, *rest)
