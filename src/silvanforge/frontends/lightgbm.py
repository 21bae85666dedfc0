"""LightGBM frontend: the text model format and live ``Booster`` / ``LGBMModel`` objects.

The text format (what ``Booster.save_model`` and ``model_to_string`` write) is a header of
``key=value`` lines, one block per tree (``Tree=i`` and ``key=value`` lines holding
space-separated arrays), ``end of trees``, then feature importances, the training
parameters and, last, ``pandas_categorical:`` with JSON. Only the parts that change
predictions are interpreted; everything is checked, since the file is untrusted.

LightGBM's prediction semantics (``include/LightGBM/tree.h``, verified by the tests):

* thresholds and inputs are doubles; ``x <= threshold`` goes left;
* ``decision_type`` bit 0 marks a categorical split, bit 1 "default left", bits 2-3 the
  missing type: None (NaN becomes 0), Zero (NaN becomes 0 and zero takes the default
  direction), NaN (NaN takes the default direction);
* a categorical split sends a category in its bitset left; NaN and negative values go
  right whatever the missing type;
* before any of that, the dense-row reader drops every ``|x| <= kZeroThreshold``
  (``1e-35f``), so such inputs act as exactly 0. Numeric thresholds in that band are
  moved to an equivalent threshold outside it so that the Forest, which compares the raw
  value, takes the same branch (see :func:`_zero_band_thresholds`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ModelFormatError, UnsupportedModelError
from ..model.builder import Tree, build_forest
from ..model.forest import (MAX_CATEGORY, MISSING_NAN, MISSING_NONE, MISSING_ZERO, OP_LE,
                            Forest)
from . import numbers

# LightGBM's kZeroThreshold is the float literal 1e-35f, used as a double.
K_ZERO = float(np.float32(1e-35))
_BELOW_ZERO_BAND = float(np.nextafter(-K_ZERO, -np.inf))

# LightGBM's missing types 0, 1 and 2 (3 is refused) as ours.
_MISSING_TYPES = np.array([MISSING_NONE, MISSING_ZERO, MISSING_NAN])
_SUPPORTED_VERSIONS = ("v2", "v3", "v4")

# One number / integer, and a whole field of them, as LightGBM writes them (strtod
# syntax without hex or underscores, which Python's float() would also accept).
_NUM = r"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf|infinity|nan)"
_INT = r"[+-]?\d+"
_NUM_FIELD = re.compile(rf"\s*(?:{_NUM}(?:\s+{_NUM})*)?\s*", re.IGNORECASE)
_INT_FIELD = re.compile(rf"\s*(?:{_INT}(?:\s+{_INT})*)?\s*")
# Fields numpy parses whole (frontends/numbers.py): finite numbers, and integers of at
# most 15 digits (exact in the float64 numpy reads them as).
_PLAIN_NUM = r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?"
_PLAIN_NUM_FIELD = re.compile(rf"\s*(?:{_PLAIN_NUM}(?: {_PLAIN_NUM})*)?\s*")
_SHORT_INT_FIELD = re.compile(r"\s*(?:[+-]?\d{1,15}(?: [+-]?\d{1,15})*)?\s*")

_IDENTITY_OBJECTIVES = {
    "regression", "regression_l2", "l2", "mean_squared_error", "mse", "regression_l1",
    "l1", "mean_absolute_error", "mae", "huber", "fair", "quantile", "mape",
    "mean_absolute_percentage_error", "lambdarank", "rank_xendcg", "xendcg",
    "xe_ndcg", "xe_ndcg_mart", "xendcg_mart", "none", "null", "custom", "na",
}
# Objectives whose ConvertOutput squares back a model trained on sqrt(label).
_SQRT_OBJECTIVES = {
    "regression", "regression_l2", "l2", "mean_squared_error", "mse", "regression_l1",
    "l1", "mean_absolute_error", "mae", "huber", "fair", "quantile", "mape",
    "mean_absolute_percentage_error",
}
_EXP_OBJECTIVES = {"poisson", "gamma", "tweedie"}

_TREE_KEYS_REQUIRED = ("num_leaves", "num_cat", "leaf_value")
_TREE_SPLIT_KEYS = ("split_feature", "threshold", "decision_type", "left_child",
                    "right_child")
_TREE_LINEAR_KEYS = ("leaf_const", "num_features", "leaf_features", "leaf_coeff")
# Written by LightGBM but irrelevant to predictions: checked for form, then ignored
# (the counts are TreeSHAP's covers, read by _data_counts).
_TREE_INFO_KEYS = {"split_gain": "internal", "leaf_weight": "leaf", "leaf_count": "leaf",
                   "internal_value": "internal", "internal_weight": "internal",
                   "internal_count": "internal", "shrinkage": "one"}
_TREE_KEYS = set(_TREE_KEYS_REQUIRED) | set(_TREE_SPLIT_KEYS) | set(_TREE_LINEAR_KEYS) | {
    "cat_boundaries", "cat_threshold", "is_linear"} | set(_TREE_INFO_KEYS)


@dataclass
class _Header:
    version: str = ""
    num_class: int = 1
    num_tree_per_iteration: int = 1
    max_feature_idx: int = -1
    objective: str = ""
    average_output: bool = False
    feature_names: list[str] | None = None
    feature_infos: list[str] | None = None
    keys: set[str] = field(default_factory=set)


# ---- public entry points -----------------------------------------------------------------

def load_bytes(data: bytes) -> Forest:
    """Parse a LightGBM text model (``Booster.save_model`` / ``model_to_string``).

    >>> forest = load_bytes(open("model.txt", "rb").read())    # doctest: +SKIP
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ModelFormatError(f"LightGBM model text is not UTF-8 ({exc})") from None
    return parse_model_text(text)


def load_object(obj: Any) -> Forest:
    """Load a live ``lightgbm.Booster`` or fitted ``LGBMModel`` (regressor, classifier, ranker).

    The trees are those ``predict`` uses by default: up to ``best_iteration`` when early
    stopping set one, else all of them.
    """
    import lightgbm  # noqa: F401  (lazy: only needed when the user hands us its objects)

    class_labels = None
    if isinstance(obj, lightgbm.LGBMModel):
        try:
            booster = obj.booster_
        except Exception as exc:  # LGBMNotFittedError and friends
            raise ModelFormatError(f"the {type(obj).__name__} is not fitted ({exc})") from None
        classes = getattr(obj, "classes_", None) if isinstance(
            obj, lightgbm.LGBMClassifier) else None
        if classes is not None:
            class_labels = tuple(c.item() if hasattr(c, "item") else c for c in classes)
    elif isinstance(obj, lightgbm.Booster):
        booster = obj
    else:
        raise UnsupportedModelError(f"cannot load a lightgbm {type(obj).__name__}; expected "
                                    f"a Booster or a fitted LGBMModel")
    # model_to_string(num_iteration=None) keeps best_iteration trees, the same default as
    # Booster.predict; it also appends pandas_categorical.
    forest = parse_model_text(booster.model_to_string())
    if class_labels is not None:
        forest = forest.replace(class_labels=class_labels)
    return forest


def parse_model_text(text: str) -> Forest:
    """Parse LightGBM model text into a :class:`Forest`."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if not lines or lines[0].strip() != "tree":
        raise ModelFormatError("LightGBM model text must start with the line 'tree'")
    header, pos = _parse_header(lines)
    blocks, pos = _split_trees(lines, pos)
    tail = lines[pos:]
    k = header.num_tree_per_iteration
    if len(blocks) % k:
        raise ModelFormatError(f"{len(blocks)} trees is not a whole number of iterations of "
                               f"{k} trees (num_tree_per_iteration)")
    n_features = header.max_feature_idx + 1
    trees = []
    linear = False
    for t, block in enumerate(blocks):
        tree, is_linear = _parse_tree(t, block, n_features)
        tree.output = t % k
        trees.append(tree)
        linear |= is_linear
    transform, params = _objective_transform(header)
    pandas_categories = _pandas_categories(tail)
    return build_forest(
        trees, n_features=n_features, n_outputs=k, base_score=0.0, linear_leaves=linear,
        # A random forest's raw_score is the sum of its trees; predict() transforms the mean.
        average=header.average_output, average_in_margin=False,
        post_transform=transform, transform_params=params,
        input_dtype=np.float64, category_rule="truncate", negative_category="not_in_set",
        flat_output=True, trees_per_round=k, feature_names=header.feature_names,
        pandas_categories=pandas_categories, objective=header.objective or "none",
        source=f"lightgbm {header.version}")


# ---- header and sections -----------------------------------------------------------------

def _parse_int(value: str, what: str, lo: int, hi: int) -> int:
    value = value.strip()
    if not re.fullmatch(_INT, value):
        raise ModelFormatError(f"{what}: expected an integer, got {value[:40]!r}")
    number = int(value)
    if not lo <= number <= hi:
        raise ModelFormatError(f"{what}: {number} out of range [{lo}, {hi}]")
    return number


def _parse_header(lines: list[str]) -> tuple[_Header, int]:
    """The header's fields and the index of the first line after it."""
    h = _Header()
    pos = 1
    while pos < len(lines):
        line = lines[pos].strip()
        if line.startswith("Tree=") or line == "end of trees":
            break
        pos += 1
        if not line:
            continue
        if line == "average_output":
            h.average_output = True
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ModelFormatError(f"header line {pos}: expected key=value, got "
                                   f"{line[:60]!r}")
        if key in h.keys:
            raise ModelFormatError(f"header: {key!r} given twice")
        h.keys.add(key)
        if key == "version":
            h.version = value.strip()
        elif key == "num_class":
            h.num_class = _parse_int(value, "header: num_class", 1, 2**31 - 1)
        elif key == "num_tree_per_iteration":
            h.num_tree_per_iteration = _parse_int(value, "header: num_tree_per_iteration",
                                                  1, 2**31 - 1)
        elif key == "label_index":
            _parse_int(value, "header: label_index", -1, 2**31 - 1)
        elif key == "max_feature_idx":
            h.max_feature_idx = _parse_int(value, "header: max_feature_idx", -1, 2**31 - 2)
        elif key == "objective":
            h.objective = value.strip()
        elif key == "feature_names":
            h.feature_names = value.split()
        elif key == "feature_infos":
            h.feature_infos = value.split()
        # other keys (tree_sizes, monotone_constraints, ...) do not change predictions
    if pos >= len(lines):
        raise ModelFormatError("truncated model: no trees and no 'end of trees' line")
    # LightGBM itself refuses a model without feature_names or feature_infos.
    for key in ("version", "num_class", "num_tree_per_iteration", "max_feature_idx",
                "feature_names", "feature_infos"):
        if key not in h.keys:
            raise ModelFormatError(f"header: the required field {key!r} is missing")
    if h.version not in _SUPPORTED_VERSIONS:
        raise UnsupportedModelError(f"header: LightGBM model version {h.version!r} is not "
                                    f"supported (expected one of {_SUPPORTED_VERSIONS})")
    if h.num_tree_per_iteration != h.num_class:
        raise UnsupportedModelError(f"header: num_tree_per_iteration "
                                    f"({h.num_tree_per_iteration}) differs from num_class "
                                    f"({h.num_class})")
    n_features = h.max_feature_idx + 1
    for name, values in (("feature_names", h.feature_names),
                         ("feature_infos", h.feature_infos)):
        if values is not None and len(values) != n_features:
            raise ModelFormatError(f"header: {name} has {len(values)} entries but "
                                   f"max_feature_idx={h.max_feature_idx} means {n_features}")
    return h, pos


def _split_trees(lines: list[str], pos: int) -> tuple[list[dict[str, str]], int]:
    """Per tree its ``key -> value`` fields; and the index of the line after 'end of trees'."""
    blocks: list[dict[str, str]] = []
    current: dict[str, str] | None = None
    while pos < len(lines):
        line = lines[pos].strip()
        pos += 1
        if line == "end of trees":
            return blocks, pos
        if not line:
            current = None
            continue
        if line.startswith("Tree="):
            t = len(blocks)
            index = _parse_int(line[5:], f"tree {t}: 'Tree=' line", 0, 2**31 - 1)
            if index != t:
                raise ModelFormatError(f"tree {t}: the block is numbered Tree={index}; "
                                       f"trees must be numbered 0, 1, 2, ... in order")
            current = {}
            blocks.append(current)
            continue
        if current is None:
            raise ModelFormatError(f"line {pos}: expected 'Tree=' or 'end of trees' after "
                                   f"a blank line, got {line[:60]!r}")
        key, sep, value = line.partition("=")
        if not sep:
            raise ModelFormatError(f"tree {len(blocks) - 1}: expected key=value, got "
                                   f"{line[:60]!r}")
        if key in current:
            raise ModelFormatError(f"tree {len(blocks) - 1}: field {key!r} given twice")
        current[key] = value
    raise ModelFormatError("truncated model: the 'end of trees' line is missing")


# ---- trees -------------------------------------------------------------------------------

def _floats(block: dict[str, str], key: str, n: int, where: str) -> np.ndarray:
    value = block[key]
    arr = numbers.parse_numbers(value, " ", _PLAIN_NUM_FIELD)
    if arr is None:
        if not _NUM_FIELD.fullmatch(value):
            raise ModelFormatError(f"{where}: field {key!r} holds a non-numeric token")
        arr = np.array(value.split(), dtype=np.float64)
    if len(arr) != n:
        raise ModelFormatError(f"{where}: field {key!r} has {len(arr)} entries, expected {n}")
    return arr


def _ints(block: dict[str, str], key: str, n: int | None, where: str,
          lo: int, hi: int) -> np.ndarray:
    value = block[key]
    parsed = numbers.parse_numbers(value, " ", _SHORT_INT_FIELD, integers=True)
    if parsed is not None:
        arr = parsed.astype(np.int64)
    else:
        if not _INT_FIELD.fullmatch(value):
            raise ModelFormatError(f"{where}: field {key!r} holds a token that is not an "
                                   "integer")
        tokens = value.split()
        if any(len(tok.lstrip("+-")) > 18 for tok in tokens):
            raise ModelFormatError(f"{where}: field {key!r} holds an integer out of range")
        arr = np.array(tokens, dtype=np.int64)
    if n is not None and len(arr) != n:
        raise ModelFormatError(f"{where}: field {key!r} has {len(arr)} entries, expected {n}")
    bad = np.flatnonzero((arr < lo) | (arr > hi))
    if len(bad):
        i = int(bad[0])
        raise ModelFormatError(f"{where}: {key}[{i}] = {int(arr[i])} is out of range "
                               f"[{lo}, {hi}]")
    return arr


def _scalar_int(block: dict[str, str], key: str, where: str, lo: int, hi: int) -> int:
    return _parse_int(block[key], f"{where}: field {key!r}", lo, hi)


def _require(block: dict[str, str], keys: tuple[str, ...], where: str) -> None:
    for key in keys:
        if key not in block:
            raise ModelFormatError(f"{where}: the required field {key!r} is missing")


def _zero_band_thresholds(t: np.ndarray) -> np.ndarray:
    """Thresholds that split raw inputs as ``t`` splits LightGBM's zero-dropped inputs.

    LightGBM reads every ``|x| <= K_ZERO`` as 0, so the whole band goes where 0 goes:
    left when a threshold is ``>= 0``. A threshold inside the band is moved to its edge
    accordingly.

    >>> _zero_band_thresholds(np.array([-1e-36, 0.0, 1e-36, 0.5])).tolist() == [
    ...     _BELOW_ZERO_BAND, K_ZERO, K_ZERO, 0.5]
    True
    """
    return np.where((-K_ZERO <= t) & (t < 0.0), _BELOW_ZERO_BAND,
                    np.where((0.0 <= t) & (t < K_ZERO), K_ZERO, t))


def _categories(words: np.ndarray, where: str) -> np.ndarray:
    bits = np.unpackbits(words.astype("<u4").view(np.uint8), bitorder="little")
    cats = np.flatnonzero(bits)
    if len(cats) and cats[-1] > MAX_CATEGORY:
        raise UnsupportedModelError(f"{where}: category {int(cats[-1])} is larger than the "
                                    f"largest supported category {MAX_CATEGORY}")
    return cats


def _parse_tree(t: int, block: dict[str, str], n_features: int) -> tuple[Tree, bool]:
    """One tree block as a builder Tree (internal nodes first, then leaves) and is_linear."""
    where = f"tree {t}"
    unknown = sorted(set(block) - _TREE_KEYS)
    if unknown:
        raise UnsupportedModelError(f"{where}: unknown field {unknown[0]!r} (a newer LightGBM "
                                    f"model format?)")
    _require(block, _TREE_KEYS_REQUIRED, where)
    n_leaves = _scalar_int(block, "num_leaves", where, 1, 2**30)
    n_cat = _scalar_int(block, "num_cat", where, 0, 2**30)
    n_int = n_leaves - 1
    leaf_value = _floats(block, "leaf_value", n_leaves, where)
    for key, kind in _TREE_INFO_KEYS.items():
        # LightGBM leaves some of these empty in single-leaf trees (leaf_weight).
        if key in block and block[key].strip():
            _floats(block, key, {"internal": n_int, "leaf": n_leaves, "one": 1}[kind], where)
    is_linear = "is_linear" in block and bool(_scalar_int(block, "is_linear", where, 0, 1))

    n = n_int + n_leaves
    left = np.full(n, -1, dtype=np.int64)
    right = np.full(n, -1, dtype=np.int64)
    feature = np.zeros(n, dtype=np.int64)
    threshold = np.zeros(n)
    default_left = np.zeros(n, dtype=bool)
    missing = np.full(n, MISSING_NAN, dtype=np.int64)
    values = np.zeros(n)
    values[n_int:] = leaf_value
    categories: dict[int, np.ndarray] = {}
    if n_int > 0:
        _require(block, _TREE_SPLIT_KEYS, where)
        feature[:n_int] = _ints(block, "split_feature", n_int, where, 0, n_features - 1)
        raw_threshold = _floats(block, "threshold", n_int, where)
        decision = _ints(block, "decision_type", n_int, where, 0, 15)
        for key, target in (("left_child", left), ("right_child", right)):
            child = _ints(block, key, n_int, where, -n_leaves, n_int - 1)
            # A negative child c names leaf ~c, which sits at node n_int + ~c here.
            target[:n_int] = np.where(child >= 0, child, n_int + ~child)
        bad_missing = np.flatnonzero(((decision >> 2) & 3) == 3)
        if len(bad_missing):
            i = int(bad_missing[0])
            raise ModelFormatError(f"{where}, node {i}: decision_type {int(decision[i])} has "
                                   f"an unknown missing type 3")
        boundaries, bitset = _cat_storage(block, n_cat, where)
        # Categorical splits send NaN right whatever the missing type (the arrays' start
        # values); the numeric ones are set as arrays, not node by node.
        is_cat = (decision & 1).astype(bool)
        for i in np.flatnonzero(is_cat).tolist():
            categories[i] = _node_categories(i, float(raw_threshold[i]), boundaries,
                                             bitset, where)
        numeric = np.flatnonzero(~is_cat)
        bad = numeric[np.isnan(raw_threshold[numeric])]
        if len(bad):
            raise ModelFormatError(f"{where}, node {int(bad[0])}: threshold is NaN")
        threshold[numeric] = _zero_band_thresholds(raw_threshold[numeric])
        missing[numeric] = _MISSING_TYPES[(decision[numeric] >> 2) & 3]
        default_left[numeric] = (decision[numeric] & 2) != 0
    elif n_cat:
        raise ModelFormatError(f"{where}: num_cat={n_cat} in a tree without splits")
    linear = _linear_leaves(block, n_leaves, n_int, n_features, where) if is_linear else None
    # pred_leaf numbers a tree's leaves 0..num_leaves-1 (internal nodes: their split index).
    source_id = np.r_[np.arange(n_int), np.arange(n_leaves)]
    tree = Tree(left=left, right=right, feature=feature, threshold=threshold,
                leaf_value=values, default_left=default_left, split_op=OP_LE,
                missing=missing, categories=categories, linear=linear, source_id=source_id,
                cover=_data_counts(block, n_int, n_leaves, where))
    return tree, is_linear


def _data_counts(block: dict[str, str], n_int: int, n_leaves: int,
                 where: str) -> np.ndarray | None:
    """The training rows that reached each node (``internal_count``, ``leaf_count``):
    TreeSHAP's cover, as LightGBM's ``pred_contrib`` uses it; None when the file lacks
    them. A one-leaf tree may leave its count empty: its cover is never divided by."""
    if n_int == 0:
        counts = block.get("leaf_count", "").split()
        return np.array([float(counts[0]) if len(counts) == 1 else 0.0])
    if "internal_count" not in block or "leaf_count" not in block:
        return None
    counts = np.concatenate([_floats(block, "internal_count", n_int, where),
                             _floats(block, "leaf_count", n_leaves, where)])
    if not np.all(np.isfinite(counts)) or np.any(counts < 0):
        raise ModelFormatError(f"{where}: negative or non-finite data counts")
    return counts


def _cat_storage(block: dict[str, str], n_cat: int, where: str
                 ) -> tuple[np.ndarray, np.ndarray]:
    """cat_boundaries and cat_threshold (the concatenated 32-bit bitsets), checked."""
    if n_cat == 0:
        return np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int64)
    _require(block, ("cat_boundaries", "cat_threshold"), where)
    bitset = _ints(block, "cat_threshold", None, where, 0, 2**32 - 1)
    boundaries = _ints(block, "cat_boundaries", n_cat + 1, where, 0, len(bitset))
    if boundaries[0] != 0 or boundaries[-1] != len(bitset) or np.any(np.diff(boundaries) < 0):
        raise ModelFormatError(f"{where}: cat_boundaries must rise from 0 to the length of "
                               f"cat_threshold ({len(bitset)})")
    return boundaries, bitset


def _node_categories(i: int, thr: float, boundaries: np.ndarray, bitset: np.ndarray,
                     where: str) -> np.ndarray:
    n_cat = len(boundaries) - 1
    if not (np.isfinite(thr) and thr == int(thr) and 0 <= thr < n_cat):
        raise ModelFormatError(f"{where}, node {i}: categorical split names category set "
                               f"{thr!r}, but the tree has {n_cat} (num_cat)")
    c = int(thr)
    return _categories(bitset[boundaries[c]:boundaries[c + 1]], f"{where}, node {i}")


def _linear_leaves(block: dict[str, str], n_leaves: int, n_int: int, n_features: int,
                   where: str) -> dict[int, tuple[float, np.ndarray, np.ndarray]]:
    """Every leaf's linear model, keyed by its node index (leaves follow internal nodes)."""
    _require(block, _TREE_LINEAR_KEYS, where)
    const = _floats(block, "leaf_const", n_leaves, where)
    counts = _ints(block, "num_features", n_leaves, where, 0, 2**31 - 1)
    total = int(counts.sum())
    feats = _ints(block, "leaf_features", total, where, 0, n_features - 1)
    coeffs = _floats(block, "leaf_coeff", total, where)
    starts = np.concatenate([[0], np.cumsum(counts)])
    # A leaf without features still uses leaf_const (not leaf_value) as its output.
    return {n_int + j: (float(const[j]), feats[starts[j]:starts[j + 1]],
                        coeffs[starts[j]:starts[j + 1]]) for j in range(n_leaves)}


# ---- objective ---------------------------------------------------------------------------

def _objective_transform(h: _Header) -> tuple[str, dict[str, float]]:
    """The post-transform of the objective line (LightGBM's ConvertOutput)."""
    tokens = h.objective.split()
    name = tokens[0] if tokens else "none"
    params: dict[str, str] = {}
    flags: set[str] = set()
    for tok in tokens[1:]:
        key, sep, value = tok.partition(":")
        if sep:
            params[key] = value
        else:
            flags.add(tok)

    def number(key: str, default: float) -> float:
        if key not in params:
            return default
        value = params[key]
        if not re.fullmatch(_NUM, value, re.IGNORECASE) or not np.isfinite(float(value)):
            raise ModelFormatError(f"header: objective parameter {key}:{value!r} is not a "
                                   f"finite number")
        return float(value)

    unknown_flags = flags - {"sqrt"}
    if unknown_flags or ("sqrt" in flags and name not in _SQRT_OBJECTIVES):
        raise UnsupportedModelError(f"header: objective {h.objective!r} has an unsupported "
                                    f"option {sorted(flags)[0]!r}")
    if name in ("multiclass", "softmax", "multiclassova", "multiclass_ova", "ova", "ovr"):
        k = int(number("num_class", h.num_class))
        if k != h.num_class:
            raise ModelFormatError(f"header: objective says num_class:{k} but num_class is "
                                   f"{h.num_class}")
        if name in ("multiclass", "softmax"):
            return "softmax", {}
        return "sigmoid", {"alpha": number("sigmoid", 1.0)}
    if h.num_class != 1 and name not in ("none", "null", "custom", "na"):
        raise ModelFormatError(f"header: objective {name!r} with num_class={h.num_class}")
    if name == "binary":
        return "sigmoid", {"alpha": number("sigmoid", 1.0)}
    if name in ("cross_entropy", "xentropy"):
        return "sigmoid", {"alpha": 1.0}
    if name in ("cross_entropy_lambda", "xentlambda"):
        return "log1p_exp", {}
    if name in _EXP_OBJECTIVES:
        return "exp", {}
    if name in _IDENTITY_OBJECTIVES:
        return ("signed_square" if "sqrt" in flags else "identity"), {}
    raise UnsupportedModelError(f"header: unsupported objective {h.objective!r}")


# ---- pandas categoricals -----------------------------------------------------------------

def _pandas_categories(tail: list[str]) -> tuple[tuple, ...] | None:
    """Training categories of the pandas categorical columns, in column order.

    LightGBM stores them as a list in the order of the training frame's categorical
    columns (ordered ones included) and at prediction matches them to the frame's
    categorical columns by position, which a sequence in the Forest expresses.
    """
    lists = _read_pandas_categorical(tail)
    return None if lists is None else tuple(tuple(cats) for cats in lists)


def _read_pandas_categorical(tail: list[str]) -> list[list] | None:
    lines = [line.strip() for line in tail if line.strip()]
    if not lines or not lines[-1].startswith("pandas_categorical:"):
        return None
    try:
        value = json.loads(lines[-1][len("pandas_categorical:"):])
    except ValueError as exc:
        raise ModelFormatError(f"pandas_categorical: invalid JSON ({exc})") from None
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, list) for v in value):
        raise ModelFormatError("pandas_categorical: expected a list of lists of categories")
    for cats in value:
        if not all(isinstance(c, (str, int, float, bool)) for c in cats):
            raise ModelFormatError("pandas_categorical: categories must be strings or "
                                   "numbers")
    return value

