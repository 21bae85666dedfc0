"""ONNX-ML frontend: one ai.onnx.ml tree-ensemble operator → :class:`Forest`.

Accepted: ``TreeEnsembleRegressor`` and ``TreeEnsembleClassifier`` (ai.onnx.ml opsets 1
and 3, and the deprecated copies in opset 5) and ``TreeEnsemble`` (opset 5). The graph
must hold exactly one of them, fed by the graph input directly or through ``Cast`` /
``Identity`` nodes, and its score output must reach a graph output through nodes that
keep the values (``Identity``, ``Cast`` to float, ``ZipMap``, a multiplication by one).
Label-side nodes converters add (``ArgMax``, ``Cast``, ``LabelEncoder``) are allowed.

The semantics are onnxruntime's (the reference implementation), checked against
onnxruntime 1.31:

* the root of a ``TreeEnsembleRegressor/Classifier`` tree is the first node listed
  with that tree id (each tree's nodes must be listed together);
* a branch goes to the true child when the comparison holds, or when the value is NaN
  and ``nodes_missing_value_tracks_true`` is set; NaN otherwise fails every comparison
  except ``BRANCH_NEQ``. ``>``, ``>=`` and ``!=`` are normalised by swapping children;
* thresholds are compared in the precision of the operator's input;
* ``BRANCH_MEMBER`` (opset 5) is a chain of equality tests: set membership, exact;
* a single-target regressor ignores LOGISTIC / SOFTMAX / SOFTMAX_ZERO (only PROBIT
  applies); with several targets, a target's base value is only added for rows where
  some reached leaf has a weight for that target;
* binary classifiers with one score column output ``[1 - s, s]`` or ``[-s, s]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ModelFormatError, UnsupportedModelError, require
from ..model.builder import Tree, build_forest, check_outputs, float_array, int_array
from ..model.forest import MAX_CATEGORY, OP_EQ, OP_LE, OP_LT, Forest

_ML = "ai.onnx.ml"
_TREE_OPS = ("TreeEnsembleRegressor", "TreeEnsembleClassifier", "TreeEnsemble")
_FLOAT, _DOUBLE = 1, 11  # TensorProto element types
_DTYPES = {_FLOAT: np.float32, _DOUBLE: np.float64}
# (split op, test holds when the ONNX comparison holds?) per ONNX mode.
_MODES = {
    "BRANCH_LEQ": (OP_LE, True), "BRANCH_LT": (OP_LT, True),
    "BRANCH_GTE": (OP_LT, False), "BRANCH_GT": (OP_LE, False),
    "BRANCH_EQ": (OP_EQ, True), "BRANCH_NEQ": (OP_EQ, False),
}
_V5_MODES = ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ",
             "BRANCH_NEQ", "BRANCH_MEMBER"]
_TRANSFORMS = ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT"]
# TreeEnsemble's integer post_transform as onnxruntime 1.31 reads it (its own enum order;
# the ONNX specification lists 1 as SOFTMAX and 2 as LOGISTIC, onnxruntime swaps them).
_V5_TRANSFORMS = ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT"]
_AGGREGATES = ["AVERAGE", "SUM", "MIN", "MAX"]  # opset-5 order
# Unrolling shared subtrees (opset 5 addresses nodes by position) is bounded.
_MAX_NODES = 1 << 22
# Nodes allowed after the tree operator, and those that pass the scores on unchanged.
_DOWNSTREAM_OPS = {"Identity", "Cast", "ZipMap", "ArgMax", "LabelEncoder", "Mul", "Div"}


def load_bytes(data: bytes) -> Forest:
    """Parse an .onnx file's bytes (never loading external data) into a Forest."""
    onnx = require("onnx", "onnx")
    from google.protobuf.message import DecodeError

    try:
        model = onnx.load_model_from_string(bytes(data))
    except (DecodeError, RuntimeError, ValueError, TypeError) as exc:
        raise ModelFormatError(f"not a valid ONNX protobuf: {exc}") from None
    return _convert(model)


def load_object(obj: Any) -> Forest:
    """Convert an in-memory ``onnx.ModelProto``."""
    onnx = require("onnx", "onnx")
    if not isinstance(obj, onnx.ModelProto):
        raise UnsupportedModelError(f"expected an onnx.ModelProto, not {type(obj).__name__}")
    return _convert(obj)


# ---- attributes ---------------------------------------------------------------------------

class _Attrs:
    """Typed access to a node's attributes; wrong types are ModelFormatErrors."""

    def __init__(self, node: Any) -> None:
        self.op = node.op_type
        self.by_name = {a.name: a for a in node.attribute}

    def _get(self, name: str, kind: str) -> Any:
        from onnx import AttributeProto

        attr = self.by_name.get(name)
        if attr is None:
            return None
        expected = getattr(AttributeProto, kind)
        if attr.type != expected:
            raise ModelFormatError(f"{self.op} attribute {name!r}: expected "
                                   f"{kind}, got {AttributeProto.AttributeType.Name(attr.type)}")
        return attr

    def ints(self, name: str) -> np.ndarray | None:
        attr = self._get(name, "INTS")
        return None if attr is None else np.array(attr.ints, dtype=np.int64)

    def floats(self, name: str) -> np.ndarray | None:
        attr = self._get(name, "FLOATS")
        return None if attr is None else np.array(attr.floats, dtype=np.float32)

    def strings(self, name: str) -> list[str] | None:
        attr = self._get(name, "STRINGS")
        if attr is None:
            return None
        try:
            return [s.decode("utf-8") for s in attr.strings]
        except UnicodeDecodeError:
            raise ModelFormatError(f"{self.op} attribute {name!r}: not UTF-8 text") from None

    def string(self, name: str, default: str) -> str:
        attr = self._get(name, "STRING")
        if attr is None:
            return default
        try:
            return attr.s.decode("utf-8")
        except UnicodeDecodeError:
            raise ModelFormatError(f"{self.op} attribute {name!r}: not UTF-8 text") from None

    def int(self, name: str, default: int) -> int:
        attr = self._get(name, "INT")
        return default if attr is None else int(attr.i)

    def tensor(self, name: str) -> np.ndarray | None:
        from onnx import TensorProto, numpy_helper

        attr = self._get(name, "TENSOR")
        if attr is None:
            return None
        if attr.t.data_location == TensorProto.EXTERNAL:
            raise UnsupportedModelError(f"{self.op} attribute {name!r} is stored as external "
                                        f"data, which SilvanForge never loads")
        try:
            return numpy_helper.to_array(attr.t).reshape(-1)
        except (ValueError, TypeError) as exc:
            raise ModelFormatError(f"{self.op} attribute {name!r}: bad tensor ({exc})") from None


def _numbers(attrs: _Attrs, name: str, tensor_types: tuple = (np.float64,)) -> np.ndarray | None:
    """``name`` (floats) or ``name_as_tensor`` (double), never both; None when absent."""
    plain = attrs.floats(name)
    tensor = attrs.tensor(f"{name}_as_tensor")
    if plain is not None and tensor is not None and len(plain) and len(tensor):
        raise ModelFormatError(f"{attrs.op}: both {name!r} and {name}_as_tensor are given")
    if tensor is not None and len(tensor):
        if tensor.dtype not in tensor_types:
            raise ModelFormatError(f"{attrs.op} attribute {name}_as_tensor: expected double "
                                   f"values, got {tensor.dtype}")
        return tensor.astype(np.float64)
    return plain


def _same_length(op: str, arrays: dict[str, Any]) -> int:
    lengths = {k: len(v) for k, v in arrays.items()}
    if len(set(lengths.values())) > 1:
        raise ModelFormatError(f"{op}: attribute lengths differ: "
                               + ", ".join(f"{k} {n}" for k, n in lengths.items()))
    return next(iter(lengths.values()))


# ---- graph --------------------------------------------------------------------------------

@dataclass
class _Graph:
    node: Any              # the tree operator
    ml_opset: int
    input_dtype: Any       # precision the values reach the operator in (float32 if any step)
    op_dtype: Any          # element type of the operator's input
    width: int | None      # input width from the graph input's shape, when known


def _is_one(tensor_name: str, inits: dict) -> bool:
    from onnx import numpy_helper

    from onnx import TensorProto

    t = inits.get(tensor_name)
    # External data would be read from disk: never follow it.
    if t is None or t.data_location == TensorProto.EXTERNAL:
        return False
    try:
        values = numpy_helper.to_array(t)
    except (ValueError, TypeError):
        return False
    return values.size > 0 and values.dtype.kind == "f" and bool(np.all(values == 1))


def _find_graph(model: Any) -> _Graph:
    graph = model.graph
    opsets = {o.domain or "": int(o.version) for o in model.opset_import}
    trees = [n for n in graph.node if n.domain == _ML and n.op_type in _TREE_OPS]
    if not trees:
        ops = sorted({n.op_type for n in graph.node}) or ["no nodes"]
        raise UnsupportedModelError(f"the graph has no ai.onnx.ml tree-ensemble operator "
                                    f"(it has: {', '.join(ops)})")
    if len(trees) > 1:
        raise UnsupportedModelError(f"the graph has {len(trees)} tree-ensemble operators; "
                                    f"SilvanForge supports exactly one")
    tree = trees[0]
    if _ML not in opsets:
        raise ModelFormatError("the model uses ai.onnx.ml operators but imports no "
                               "ai.onnx.ml opset")
    ml_opset = opsets[_ML]
    if tree.op_type == "TreeEnsemble" and ml_opset < 5:
        raise ModelFormatError(f"TreeEnsemble needs ai.onnx.ml opset 5, the model imports "
                               f"{ml_opset}")
    if not tree.input or not tree.output:
        raise ModelFormatError(f"{tree.op_type} has no input or output")
    inits = {t.name: t for t in graph.initializer}
    producers = {out: n for n in graph.node for out in n.output}
    inputs = {i.name: i for i in graph.input if i.name not in inits}

    # Upstream: graph input, then Cast / Identity only.
    upstream = set()
    types: list[int] = []
    name = tree.input[0]
    while name in producers:
        node = producers[name]
        if node.op_type not in ("Cast", "Identity") or node.domain not in ("", "ai.onnx"):
            raise UnsupportedModelError(f"the tree ensemble's input comes from a "
                                        f"{node.op_type} node; only Cast and Identity may "
                                        f"sit between the graph input and the trees")
        if node.op_type == "Cast":
            to = _Attrs(node).int("to", 0)
            if to not in _DTYPES:
                raise UnsupportedModelError(f"the input is cast to element type {to}; only "
                                            f"float and double inputs are supported")
            types.append(to)
        upstream.add(id(node))
        if len(upstream) > len(graph.node) or not node.input:
            raise ModelFormatError("the nodes before the tree ensemble form a cycle")
        name = node.input[0]
    if name not in inputs:
        raise UnsupportedModelError(f"the tree ensemble's input {name!r} is not a graph input")
    tensor_type = inputs[name].type.tensor_type
    types.insert(0, tensor_type.elem_type)
    if types[0] not in _DTYPES:
        raise UnsupportedModelError(f"graph input {name!r} has element type {types[0]}; only "
                                    f"float and double inputs are supported")
    width = None
    if tensor_type.HasField("shape"):
        dims = tensor_type.shape.dim
        if len(dims) != 2:
            raise UnsupportedModelError(f"graph input {name!r} has rank {len(dims)}; "
                                        f"expected (rows, features)")
        if dims[1].HasField("dim_value") and dims[1].dim_value > 0:
            width = int(dims[1].dim_value)
    input_dtype = np.float32 if _FLOAT in types else np.float64

    # Downstream: whitelisted nodes fed only by the trees (or by each other).
    derived = set(tree.output)
    value = tree.output[1] if tree.op_type == "TreeEnsembleClassifier" else tree.output[0]
    if tree.op_type == "TreeEnsembleClassifier" and len(tree.output) < 2:
        raise ModelFormatError("TreeEnsembleClassifier needs two outputs (label, scores)")
    keeps = {value}
    for node in graph.node:
        if node is tree or id(node) in upstream:
            continue
        if node.op_type not in _DOWNSTREAM_OPS:
            raise UnsupportedModelError(f"the graph has a {node.op_type} node; SilvanForge "
                                        f"accepts only a tree ensemble with Cast, Identity, "
                                        f"ZipMap, ArgMax and LabelEncoder around it")
        fed = [i for i in node.input if i and i not in inits]
        if not fed or any(i not in derived for i in fed):
            raise UnsupportedModelError(f"{node.op_type} node {node.name!r} takes inputs that "
                                        f"do not come from the tree ensemble")
        derived.update(node.output)
        if node.input[0] in keeps and _keeps_values(node, inits):
            keeps.update(node.output[:1])
    if not any(o.name in keeps for o in graph.output):
        raise UnsupportedModelError("no graph output carries the tree ensemble's scores "
                                    "unchanged")
    return _Graph(tree, ml_opset, input_dtype, _DTYPES[types[-1]], width)


def _keeps_values(node: Any, inits: dict) -> bool:
    if node.op_type in ("Identity", "ZipMap"):
        return True
    if node.op_type == "Cast":
        return _Attrs(node).int("to", 0) in _DTYPES
    if node.op_type in ("Mul", "Div") and len(node.input) == 2:
        return _is_one(node.input[1], inits) or (node.op_type == "Mul"
                                                 and _is_one(node.input[0], inits))
    return False


# ---- trees --------------------------------------------------------------------------------

@dataclass
class _Raw:
    """One tree as parsed: Forest-ready arrays plus per-leaf raw ONNX weights."""

    left: list = field(default_factory=list)
    right: list = field(default_factory=list)
    feature: list = field(default_factory=list)
    threshold: list = field(default_factory=list)
    default_left: list = field(default_factory=list)
    split_op: list = field(default_factory=list)
    categories: dict = field(default_factory=dict)
    weights: list = field(default_factory=list)   # per node: (n_classes,) sum, or None
    has: list = field(default_factory=list)       # per node: (n_classes,) bool: has a weight
    source_id: list = field(default_factory=list)  # per node: its ONNX id (leaf output)
    pending: dict = field(default_factory=dict)   # branch → (left ref, right ref) to visit


def _add_split(raw: _Raw, mode: str, feature: int, threshold: float, tracks: bool,
               true_child: int, false_child: int, where: str, source_id: int) -> int:
    """Append a branch; children are filled by the caller. Returns its local index."""
    idx = len(raw.left)
    if mode == "BRANCH_MEMBER":
        op, holds = OP_EQ, True  # replaced by OP_CAT through ``categories``
    elif mode in _MODES:
        op, holds = _MODES[mode]
    else:
        raise ModelFormatError(f"{where}: unknown node mode {mode!r}")
    # NaN takes the true branch when tracked; otherwise only "!=" holds for it.
    nan_true = tracks or mode == "BRANCH_NEQ"
    raw.left.append(-1)
    raw.right.append(-1)
    raw.feature.append(feature)
    raw.threshold.append(threshold)
    raw.split_op.append(op)
    raw.default_left.append(nan_true == holds)
    raw.weights.append(None)
    raw.has.append(None)
    raw.pending[idx] = (true_child, false_child) if holds else (false_child, true_child)
    raw.source_id.append(source_id)
    return idx


def _add_leaf(raw: _Raw, weights: np.ndarray, has: np.ndarray, source_id: int) -> int:
    idx = len(raw.left)
    raw.source_id.append(source_id)
    raw.left.append(-1)
    raw.right.append(-1)
    raw.feature.append(0)
    raw.threshold.append(0.0)
    raw.split_op.append(OP_LT)
    raw.default_left.append(False)
    raw.weights.append(weights)
    raw.has.append(has)
    return idx


def _unroll(root: Any, is_leaf_fn, make_split, make_leaf, budget: list) -> _Raw:
    """Depth-first copy of a tree from ``root`` into tree-local numbering (root = 0).

    ``make_split`` records each branch's child references in ``pending``. The nodes were
    checked acyclic beforehand, so the walk ends; ``budget`` bounds shared subtrees.
    """
    raw = _Raw()
    stack = [(root, -1, False)]  # (ref, parent local index, is left child)
    while stack:
        ref, parent, as_left = stack.pop()
        budget[0] -= 1
        if budget[0] < 0:
            raise UnsupportedModelError(f"the trees unroll to more than {_MAX_NODES} nodes")
        if is_leaf_fn(ref):
            idx = make_leaf(raw, ref)
        else:
            idx = make_split(raw, ref)
        if parent >= 0:
            (raw.left if as_left else raw.right)[parent] = idx
        if not is_leaf_fn(ref):
            left_ref, right_ref = raw.pending.pop(idx)
            stack.append((right_ref, idx, False))
            stack.append((left_ref, idx, True))
    return raw


def _check_acyclic(n: int, edges: list[tuple[int, int]], what: str) -> None:
    """Kahn's algorithm over node positions; a leftover node lies on a cycle."""
    if not edges:
        return
    src = np.array([e[0] for e in edges], dtype=np.int64)
    dst = np.array([e[1] for e in edges], dtype=np.int64)
    indeg = np.bincount(dst, minlength=n)
    order = np.argsort(src, kind="stable")
    src_sorted = src[order]
    starts = np.searchsorted(src_sorted, np.arange(n + 1))
    queue = list(np.flatnonzero(indeg == 0))
    seen = 0
    while queue:
        u = queue.pop()
        seen += 1
        for k in order[starts[u]:starts[u + 1]]:
            v = dst[k]
            indeg[v] -= 1
            if indeg[v] == 0:
                queue.append(v)
    if seen < n:
        bad = int(np.flatnonzero(indeg > 0)[0])
        raise ModelFormatError(f"{what} {bad} lies on a cycle")


# ---- TreeEnsembleRegressor / TreeEnsembleClassifier (opsets 1, 3) -------------------------

def _parse_v3(attrs: _Attrs, n_out: int, prefix: str, width: int | None,
              thr_float32: bool) -> tuple[list[_Raw], dict]:
    op = attrs.op
    nodes = {k: attrs.ints(f"nodes_{k}") for k in
             ("treeids", "nodeids", "featureids", "truenodeids", "falsenodeids")}
    modes = attrs.strings("nodes_modes")
    values = _numbers(attrs, "nodes_values")
    for k, v in list(nodes.items()) + [("modes", modes), ("values", values)]:
        if v is None:
            raise ModelFormatError(f"{op}: attribute nodes_{k} is missing")
    n = _same_length(op, {**{f"nodes_{k}": v for k, v in nodes.items()},
                          "nodes_modes": modes, "nodes_values": values})
    if n == 0:
        raise ModelFormatError(f"{op}: the ensemble has no nodes")
    tracks = attrs.ints("nodes_missing_value_tracks_true")
    if tracks is None or len(tracks) == 0:
        tracks = np.zeros(n, dtype=np.int64)
    if len(tracks) != n:
        raise ModelFormatError(f"{op}: nodes_missing_value_tracks_true has {len(tracks)} "
                               f"entries for {n} nodes")
    if np.any((tracks != 0) & (tracks != 1)):
        raise ModelFormatError(f"{op}: nodes_missing_value_tracks_true must be 0 or 1")
    tree_ids = int_array(nodes["treeids"], f"{op} nodes_treeids")
    node_ids = int_array(nodes["nodeids"], f"{op} nodes_nodeids")
    features = int_array(nodes["featureids"], f"{op} nodes_featureids", 0)
    true_ids = int_array(nodes["truenodeids"], f"{op} nodes_truenodeids")
    false_ids = int_array(nodes["falsenodeids"], f"{op} nodes_falsenodeids")
    is_leaf = np.array([m == "LEAF" for m in modes])
    for i, m in enumerate(modes):
        if m != "LEAF" and m not in _MODES:
            raise ModelFormatError(f"tree {tree_ids[i]}, node {node_ids[i]}: unknown node "
                                   f"mode {m!r}")

    index: dict[tuple[int, int], int] = {}
    for i, key in enumerate(zip(tree_ids.tolist(), node_ids.tolist())):
        if key in index:
            raise ModelFormatError(f"tree {key[0]}: node id {key[1]} appears twice")
        index[key] = i

    # Leaf weights (weights on branch nodes are ignored, as onnxruntime does).
    t_tree = attrs.ints(f"{prefix}_treeids")
    t_node = attrs.ints(f"{prefix}_nodeids")
    t_ids = attrs.ints(f"{prefix}_ids")
    t_w = _numbers(attrs, f"{prefix}_weights")
    for k, v in (("treeids", t_tree), ("nodeids", t_node), ("ids", t_ids), ("weights", t_w)):
        if v is None:
            raise ModelFormatError(f"{op}: attribute {prefix}_{k} is missing")
    _same_length(op, {f"{prefix}_treeids": t_tree, f"{prefix}_nodeids": t_node,
                      f"{prefix}_ids": t_ids, f"{prefix}_weights": t_w})
    t_ids = int_array(t_ids, f"{op} {prefix}_ids", 0, n_out - 1)
    check_outputs(n_out, len(t_w), op)  # before the (nodes, outputs) arrays below
    t_w = float_array(t_w, f"{op} {prefix}_weights")
    if not np.all(np.isfinite(t_w)):
        raise ModelFormatError(f"{op}: {prefix}_weights holds a non-finite value")
    leaf_sum = np.zeros((n, n_out))
    leaf_has = np.zeros((n, n_out), dtype=bool)
    leaf_count = np.zeros(n, dtype=np.int64)
    for tt, nn, cc, ww in zip(t_tree.tolist(), t_node.tolist(), t_ids.tolist(), t_w.tolist()):
        i = index.get((tt, nn))
        if i is None:
            raise ModelFormatError(f"{prefix} weight for tree {tt}, node {nn}, which does "
                                   f"not exist")
        if is_leaf[i]:
            leaf_sum[i, cc] += ww
            leaf_has[i, cc] = True
            leaf_count[i] += 1
    info = {"all_weights": t_w, "weight_ids": t_ids, "leaf_count": leaf_count}

    # Trees: each tree's nodes listed together, the first one its root.
    starts = np.flatnonzero(np.r_[True, tree_ids[1:] != tree_ids[:-1]])
    if len(set(tree_ids[starts].tolist())) != len(starts):
        raise UnsupportedModelError(f"{op}: the nodes of a tree are not listed together; "
                                    f"onnxruntime then starts a new tree at each change of "
                                    f"tree id")
    if width is not None:
        bad = ~is_leaf & (features >= width)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ModelFormatError(f"tree {tree_ids[i]}, node {node_ids[i]}: feature "
                                   f"{features[i]} out of range for the input's {width} "
                                   f"columns")
    values = values.astype(np.float32 if thr_float32 else np.float64)

    def child(i: int, target: int, which: str) -> int:
        # onnxruntime also insists on child ids below the number of nodes.
        j = index.get((int(tree_ids[i]), int(target))) if 0 <= target < n else None
        if j is None:
            raise ModelFormatError(f"tree {tree_ids[i]}, node {node_ids[i]}: {which} child "
                                   f"{target} does not exist")
        return j

    edges = []
    kids: dict[int, tuple[int, int]] = {}
    for i in np.flatnonzero(~is_leaf).tolist():
        kids[i] = (child(i, true_ids[i], "true"), child(i, false_ids[i], "false"))
        edges += [(i, kids[i][0]), (i, kids[i][1])]
    _check_acyclic(n, edges, "node at position")
    parents = np.bincount([e[1] for e in edges], minlength=n) if edges else np.zeros(n, int)
    ends = np.r_[starts[1:], n]
    for s, e in zip(starts.tolist(), ends.tolist()):
        tree = int(tree_ids[s])
        if parents[s] > 0:
            orphans = [int(node_ids[i]) for i in range(s, e) if parents[i] == 0]
            if len(orphans) == 1:
                raise UnsupportedModelError(
                    f"tree {tree}: onnxruntime takes the first node listed (node "
                    f"{node_ids[s]}) as the root, but the root is node {orphans[0]}")
            raise ModelFormatError(f"tree {tree}: no root (a node without a parent); "
                                   f"the nodes form a cycle")
        multi = [i for i in range(s, e) if parents[i] > 1]
        if multi:
            raise ModelFormatError(f"tree {tree}, node {node_ids[multi[0]]}: has more than "
                                   f"one parent")

    def make_split(raw: _Raw, i: int) -> int:
        where = f"tree {tree_ids[i]}, node {node_ids[i]}"
        return _add_split(raw, modes[i], int(features[i]), float(values[i]),
                          bool(tracks[i]), kids[i][0], kids[i][1], where, int(node_ids[i]))

    def make_leaf(raw: _Raw, i: int) -> int:
        return _add_leaf(raw, leaf_sum[i], leaf_has[i], int(node_ids[i]))

    budget = [_MAX_NODES]
    raws = []
    for s, e in zip(starts.tolist(), ends.tolist()):
        raw = _unroll(s, lambda i: bool(is_leaf[i]), make_split, make_leaf, budget)
        if len(raw.left) != e - s:
            unreached = sorted(set(range(s, e)) - _reached(s, kids))
            raise ModelFormatError(f"tree {tree_ids[s]}, node {node_ids[unreached[0]]}: "
                                   f"unreachable from the root")
        raws.append(raw)
    info["max_feature"] = int(features[~is_leaf].max(initial=-1))
    return raws, info


def _reached(root: int, kids: dict) -> set:
    seen, stack = set(), [root]
    while stack:
        i = stack.pop()
        if i in seen:
            continue
        seen.add(i)
        stack.extend(kids.get(i, ()))
    return seen


# ---- TreeEnsemble (opset 5) ---------------------------------------------------------------

def _parse_v5(attrs: _Attrs, n_out: int, op_dtype: Any, width: int | None
              ) -> tuple[list[_Raw], dict]:
    op = attrs.op
    ints = {k: attrs.ints(k) for k in ("nodes_featureids", "nodes_truenodeids",
                                       "nodes_falsenodeids", "nodes_trueleafs",
                                       "nodes_falseleafs")}
    splits = attrs.tensor("nodes_splits")
    modes = attrs.tensor("nodes_modes")
    for k, v in list(ints.items()) + [("nodes_splits", splits), ("nodes_modes", modes)]:
        if v is None:
            raise ModelFormatError(f"{op}: attribute {k} is missing")
    n = _same_length(op, {**ints, "nodes_splits": splits, "nodes_modes": modes})
    if splits.dtype != op_dtype:
        raise ModelFormatError(f"{op}: nodes_splits are {splits.dtype} but the input is "
                               f"{np.dtype(op_dtype)}; onnxruntime requires the same type")
    tracks = attrs.ints("nodes_missing_value_tracks_true")
    if tracks is None or len(tracks) == 0:
        tracks = np.zeros(n, dtype=np.int64)
    if len(tracks) != n or np.any((tracks != 0) & (tracks != 1)):
        raise ModelFormatError(f"{op}: nodes_missing_value_tracks_true must hold {n} "
                               f"zeros or ones")
    mode_ids = int_array(modes, f"{op} nodes_modes", 0, 255)
    bad = mode_ids >= len(_V5_MODES)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ModelFormatError(f"node {i}: unknown node mode {int(mode_ids[i])}")
    features = int_array(ints["nodes_featureids"], f"{op} nodes_featureids", 0)
    true_ref = int_array(ints["nodes_truenodeids"], f"{op} nodes_truenodeids", 0)
    false_ref = int_array(ints["nodes_falsenodeids"], f"{op} nodes_falsenodeids", 0)
    true_leaf = int_array(ints["nodes_trueleafs"], f"{op} nodes_trueleafs", 0, 1).astype(bool)
    false_leaf = int_array(ints["nodes_falseleafs"], f"{op} nodes_falseleafs", 0, 1).astype(bool)
    roots = attrs.ints("tree_roots")
    if roots is None or len(roots) == 0:
        raise ModelFormatError(f"{op}: attribute tree_roots is missing or empty")
    roots = int_array(roots, f"{op} tree_roots", 0, n - 1)
    targets = attrs.ints("leaf_targetids")
    weights = attrs.tensor("leaf_weights")
    if targets is None or weights is None:
        raise ModelFormatError(f"{op}: leaf_targetids and leaf_weights are required")
    n_leaves = _same_length(op, {"leaf_targetids": targets, "leaf_weights": weights})
    if weights.dtype.kind != "f":
        raise ModelFormatError(f"{op}: leaf_weights must be floating point")
    targets = int_array(targets, f"{op} leaf_targetids", 0, n_out - 1)
    check_outputs(n_out, n_leaves, op)  # before a vector of outputs a leaf (make_leaf)
    weights = weights.astype(np.float64)
    if not np.all(np.isfinite(weights)):
        raise ModelFormatError(f"{op}: leaf_weights holds a non-finite value")
    for name, refs, leafy in (("true", true_ref, true_leaf), ("false", false_ref, false_leaf)):
        limit = np.where(leafy, n_leaves, n)
        bad = refs >= limit
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            kind = "leaf" if leafy[i] else "node"
            raise ModelFormatError(f"node {i}: {name} child {kind} {int(refs[i])} does not "
                                   f"exist")
    if width is not None and np.any(features >= width):
        i = int(np.flatnonzero(features >= width)[0])
        raise ModelFormatError(f"node {i}: feature {features[i]} out of range for the "
                               f"input's {width} columns")

    # Membership sets, NaN-separated, in the order of the MEMBER nodes.
    members: dict[int, list[int]] = {}
    member_nodes = np.flatnonzero(mode_ids == 6).tolist()
    if member_nodes:
        values = attrs.tensor("membership_values")
        if values is None:
            raise ModelFormatError(f"{op}: BRANCH_MEMBER nodes need membership_values")
        values = values.astype(np.float64)
        cut = np.flatnonzero(np.isnan(values))
        groups = np.split(values, cut)
        groups = [groups[0]] + [g[1:] for g in groups[1:]]
        for k, i in enumerate(member_nodes):
            group = groups[k] if k < len(groups) else np.zeros(0)
            if group.size == 0:
                raise ModelFormatError(f"node {i}: BRANCH_MEMBER node has an empty set")
            if np.any((group < 0) | (group != np.floor(group)) | (group > MAX_CATEGORY)):
                raise UnsupportedModelError(
                    f"node {i}: set members {group.tolist()[:5]} are not all whole numbers "
                    f"in [0, {MAX_CATEGORY}]; only such sets map to categorical splits")
            members[i] = sorted(set(group.astype(np.int64).tolist()))

    splits = splits.astype(np.float64)
    branch = [(i, r, f) for i, (r, f, tl, fl) in
              enumerate(zip(true_ref.tolist(), false_ref.tolist(), true_leaf, false_leaf))]
    edges = [(i, r) for i, r, _ in branch if not true_leaf[i]]
    edges += [(i, f) for i, _, f in branch if not false_leaf[i]]
    _check_acyclic(n, edges, "node")

    # Refs: (True, leaf index) or (False, node position).
    def children(i: int) -> tuple:
        return (bool(true_leaf[i]), int(true_ref[i])), (bool(false_leaf[i]), int(false_ref[i]))

    seen: set[int] = set()

    def make_split(raw: _Raw, ref: tuple) -> int:
        i = ref[1]
        if i in seen:
            # onnxruntime refuses a branch reached twice (leaves may be shared).
            raise ModelFormatError(f"node {i} is reached twice (shared by two parents or "
                                   f"trees)")
        seen.add(i)
        mode = _V5_MODES[mode_ids[i]]
        t, f = children(i)
        idx = _add_split(raw, mode, int(features[i]), float(splits[i]), bool(tracks[i]),
                         t, f, f"node {i}", i)
        if mode == "BRANCH_MEMBER":
            raw.categories[idx] = members[i]
        return idx

    def make_leaf(raw: _Raw, ref: tuple) -> int:
        w = np.zeros(n_out)
        has = np.zeros(n_out, dtype=bool)
        w[targets[ref[1]]] = weights[ref[1]]
        has[targets[ref[1]]] = True
        # Opset 5 numbers leaves apart from nodes: a leaf's id is its leaf index.
        return _add_leaf(raw, w, has, ref[1])

    budget = [_MAX_NODES]
    raws = []
    for t, r in enumerate(roots.tolist()):
        if true_ref[r] == false_ref[r]:
            # onnxruntime reads such a root as a one-leaf tree whose leaf is leaf_*[root];
            # the specification says leaf_*[truenodeids[root]]. Only agreeing cases pass.
            if not (true_leaf[r] and false_leaf[r] and true_ref[r] == r):
                raise UnsupportedModelError(
                    f"tree {t}: root node {r} has the same true and false child; "
                    f"onnxruntime and the ONNX specification read this differently")
            raw = _Raw()
            make_leaf(raw, (True, r))
            raws.append(raw)
            continue
        raws.append(_unroll((False, r), lambda ref: ref[0], make_split, make_leaf, budget))
    info = {"max_feature": int(features.max(initial=-1)) if n else -1}
    return raws, info


# ---- assembly -----------------------------------------------------------------------------

def _has_score(raws: list[_Raw], k: int) -> bool | None:
    """Whether every row gets a weight for output ``k`` (True), none does (False), or it
    depends on the row (None): onnxruntime adds some base values only when it does."""
    if not any(w is not None and h[k] for raw in raws for w, h in zip(raw.weights, raw.has)):
        return False
    for raw in raws:
        leaves = [h for w, h in zip(raw.weights, raw.has) if w is not None]
        if all(h[k] for h in leaves):
            return True
    return None


def _trees(raws: list[_Raw], leaf_map) -> list[Tree]:
    trees = []
    for raw in raws:
        width = None
        values = []
        for w in raw.weights:
            v = None if w is None else np.asarray(leaf_map(w), dtype=np.float64)
            values.append(v)
            if v is not None:
                width = len(v)
        leaf_value = np.array([np.zeros(width) if v is None else v for v in values])
        trees.append(Tree(left=raw.left, right=raw.right, feature=raw.feature,
                          threshold=raw.threshold, leaf_value=leaf_value,
                          default_left=raw.default_left, split_op=raw.split_op,
                          categories=raw.categories or None, source_id=raw.source_id))
    return trees


_VECTOR_TRANSFORMS = {"NONE": "identity", "LOGISTIC": "sigmoid", "SOFTMAX": "softmax",
                      "SOFTMAX_ZERO": "onnx_softmax_zero", "PROBIT": "onnx_probit"}


def _regressor(raws: list[_Raw], n_out: int, base: np.ndarray | None, aggregate: str,
               post: str) -> dict:
    if aggregate not in ("SUM", "AVERAGE"):
        raise UnsupportedModelError(f"aggregate_function {aggregate}: a forest adds or "
                                    f"averages its trees; MIN and MAX are not supported")
    base = np.zeros(n_out) if base is None or len(base) == 0 else base
    if len(base) != n_out:
        raise ModelFormatError(f"{len(base)} base values for {n_out} targets")
    base = base.copy()
    if n_out > 1:
        for k in range(n_out):
            if base[k] == 0:
                continue
            has = _has_score(raws, k)
            if has is None:
                raise UnsupportedModelError(
                    f"target {k}: onnxruntime adds its base value only for rows that reach "
                    f"a leaf with a weight for it, and only some leaves have one")
            if not has:
                base[k] = 0.0
    if n_out == 1:
        # onnxruntime applies only PROBIT to a single target; the others are ignored.
        transform = "onnx_probit" if post == "PROBIT" else "identity"
    else:
        transform = _VECTOR_TRANSFORMS[post]
    return dict(trees=_trees(raws, lambda w: w), n_outputs=n_out, base_score=base,
                average=aggregate == "AVERAGE", post_transform=transform)


def _classifier(raws: list[_Raw], n_classes: int, base: np.ndarray | None, post: str,
                info: dict) -> dict:
    if n_classes < 2:
        raise UnsupportedModelError(f"a classifier with {n_classes} class label(s)")
    base = np.zeros(0) if base is None else base
    if n_classes > 2:
        if len(base) not in (0, n_classes):
            raise UnsupportedModelError(f"{len(base)} base values for {n_classes} classes")
        b = base if len(base) else np.zeros(n_classes)
        return dict(trees=_trees(raws, lambda w: w), n_outputs=n_classes, base_score=b,
                    post_transform=_VECTOR_TRANSFORMS[post])
    if len(base) > 2:
        raise UnsupportedModelError(f"{len(base)} base values for 2 classes")
    h0, h1 = _has_score(raws, 0), _has_score(raws, 1)
    if h0 is None or h1 is None:
        raise UnsupportedModelError(
            "binary classifier where only some leaves carry a weight for a class: "
            "onnxruntime's output then depends on which leaves a row reaches")
    b0 = float(base[0]) if len(base) else 0.0
    b1 = float(base[1]) if len(base) == 2 else 0.0
    # onnxruntime reads a class score it never set as 0, whatever base was added to it.
    if h1 and len(base) == 2:
        # It sets s1 = base[1] + (class-0 sum) and s0 = -s1, dropping the class-1 sums.
        return dict(trees=_trees(raws, lambda w: [-w[0], w[0]]), n_outputs=2,
                    base_score=[-b1 if h0 else 0.0, b1],
                    post_transform=_VECTOR_TRANSFORMS[post])
    if h1 or len(base) == 2:
        return dict(trees=_trees(raws, lambda w: [w[0], w[1] if h1 else 0.0]), n_outputs=2,
                    base_score=[b0 if h0 else 0.0, 0.0],
                    post_transform=_VECTOR_TRANSFORMS[post])
    # One score column s (class 0's sum plus base): onnxruntime widens it to two.
    if not h0:
        raise UnsupportedModelError("binary classifier without any class weight")
    ids = set(info["weight_ids"].tolist())
    binary_case = len(ids) == 1
    all_positive = not np.any(info["all_weights"] < 0)
    if post == "PROBIT":
        raise UnsupportedModelError("PROBIT on a binary classifier with one score column: "
                                    "onnxruntime leaves its second column unset")
    if binary_case and all_positive:
        margin_base = [1.0 - b0, b0]  # [1 - s, s]
    elif binary_case or len(base) == 0:
        margin_base = [-b0, b0]       # [-s, s]
    else:
        raise UnsupportedModelError("binary classifier with one score column and weights "
                                    "for several class ids: onnxruntime writes one column")
    transform = "onnx_binary_logistic" if post == "LOGISTIC" else "identity"
    return dict(trees=_trees(raws, lambda w: [-w[0], w[0]]), n_outputs=2,
                base_score=margin_base, post_transform=transform)


def _convert(model: Any) -> Forest:
    g = _find_graph(model)
    node = g.node
    attrs = _Attrs(node)
    op = node.op_type
    labels = None
    if op == "TreeEnsemble":
        n_out = attrs.int("n_targets", 0)
        if n_out < 1:
            raise ModelFormatError(f"TreeEnsemble: n_targets must be positive, not {n_out}")
        post_i = attrs.int("post_transform", 0)
        agg_i = attrs.int("aggregate_function", 1)
        if not 0 <= post_i < len(_V5_TRANSFORMS) or not 0 <= agg_i < len(_AGGREGATES):
            raise ModelFormatError(f"TreeEnsemble: unknown post_transform {post_i} or "
                                   f"aggregate_function {agg_i}")
        post, aggregate = _V5_TRANSFORMS[post_i], _AGGREGATES[agg_i]
        raws, info = _parse_v5(attrs, n_out, g.op_dtype, g.width)
        parts = _regressor(raws, n_out, None, aggregate, post)
    else:
        post = attrs.string("post_transform", "NONE")
        if post not in _TRANSFORMS:
            raise ModelFormatError(f"{op}: unknown post_transform {post!r}")
        base = _numbers(attrs, "base_values")
        base = None if base is None else base.astype(np.float64)
        if base is not None and not np.all(np.isfinite(base)):
            raise ModelFormatError(f"{op}: base_values holds a non-finite value")
        # Thresholds given as floats are float32 numbers; as_tensor ones are doubles,
        # which onnxruntime only accepts for a double input.
        as_tensor = attrs.tensor("nodes_values_as_tensor")
        thr32 = as_tensor is None or not len(as_tensor)
        if not thr32 and g.op_dtype == np.float32:
            raise UnsupportedModelError(f"{op}: double thresholds (nodes_values_as_tensor) "
                                        f"with a float input, which onnxruntime refuses")
        if op == "TreeEnsembleClassifier":
            ints = attrs.ints("classlabels_int64s")
            strs = attrs.strings("classlabels_strings")
            if (ints is None or not len(ints)) == (strs is None or not len(strs)):
                raise ModelFormatError(f"{op}: exactly one of classlabels_int64s and "
                                       f"classlabels_strings must be given")
            labels = tuple(ints.tolist()) if ints is not None and len(ints) else tuple(strs)
            raws, info = _parse_v3(attrs, len(labels), "class", g.width, thr32)
            parts = _classifier(raws, len(labels), base, post, info)
        else:
            n_out = attrs.int("n_targets", 0)
            if n_out < 1:
                raise ModelFormatError(f"{op}: n_targets must be positive, not {n_out}")
            raws, info = _parse_v3(attrs, n_out, "target", g.width, thr32)
            if n_out == 1 and np.any(info["leaf_count"] > 1):
                raise UnsupportedModelError(
                    f"{op}: a leaf has several weights for a single target; onnxruntime "
                    f"then uses only one of them")
            aggregate = attrs.string("aggregate_function", "SUM")
            if aggregate not in _AGGREGATES:
                raise ModelFormatError(f"{op}: unknown aggregate_function {aggregate!r}")
            parts = _regressor(raws, n_out, base, aggregate, post)
    n_features = g.width if g.width is not None else info["max_feature"] + 1
    trees = parts.pop("trees")
    source = " ".join(p for p in ("onnx", model.producer_name, model.producer_version) if p)
    return build_forest(
        trees, n_features=max(n_features, 0), input_dtype=g.input_dtype,
        category_rule="exact", flat_output=False, class_labels=labels,
        objective=f"{op}({post})", source=source, **parts)
