"""ONNX-ML frontend: parity with onnxruntime (the reference implementation of ONNX-ML).

Every model is run by onnxruntime on float32 rows (with NaN and rows exactly on
thresholds) and by the reference evaluator. "margin" has no onnxruntime output of its
own: it is checked against the same model with post_transform set to NONE.
"""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as TP  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

import silvanforge  # noqa: E402
from silvanforge.errors import (ModelFormatError, SilvanForgeError,  # noqa: E402
                                UnsupportedModelError)
from silvanforge.frontends import onnx as onnx_frontend  # noqa: E402
from silvanforge.model import transforms  # noqa: E402
from silvanforge.reference import predict  # noqa: E402
from util import assert_parity, with_nans  # noqa: E402

ort.set_default_logger_severity(4)
GRID = np.array([-1.0, -0.5, 0.0, 0.25, 0.5, 1.0, 2.0, 3.0], dtype=np.float32)
NF = 4


# ---- helpers ------------------------------------------------------------------------------

def _session(model):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])


def _tree_node(model):
    return next(n for n in model.graph.node if n.domain == "ai.onnx.ml"
                and n.op_type.startswith("TreeEnsemble"))


def _value_name(model):
    node = _tree_node(model)
    return node.output[1] if node.op_type == "TreeEnsembleClassifier" else node.output[0]


def ort_value(model, X):
    """onnxruntime's score output of the tree operator (as it leaves the graph)."""
    names = [o.name for o in model.graph.output]
    out = dict(zip(names, _session(model).run(None, {model.graph.input[0].name: X})))
    for name in names:  # the first float output that is not a label
        v = np.asarray(out[name]) if not isinstance(out[name], list) else None
        if v is not None and v.dtype.kind == "f" and v.ndim == 2:
            return v
    raise AssertionError("no float score output")


def without_post(model):
    m = copy.deepcopy(model)
    node = _tree_node(m)
    for a in node.attribute:
        if a.name == "post_transform":
            if a.type == onnx.AttributeProto.INT:
                a.i = 0
            else:
                a.s = b"NONE"
    return m


def parity(actual, expected, what=""):
    """assert_parity on the finite entries; NaN and infinities must sit at the same places."""
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    assert actual.shape == expected.shape, what
    finite = np.isfinite(expected)
    np.testing.assert_array_equal(np.where(finite, 0, actual), np.where(finite, 0, expected),
                                  err_msg=f"{what}: non-finite entries differ")
    assert_parity(np.where(finite, actual, 0), np.where(finite, expected, 0), what)


def check(model, X, what=""):
    """Value and margin of the loaded forest equal onnxruntime's, bytes and object."""
    forest = silvanforge.load(model.SerializeToString())
    assert forest.n_trees >= 1
    parity(predict(forest, X, output="value"), ort_value(model, X), f"{what} value")
    parity(predict(forest, X, output="margin"), ort_value(without_post(model), X),
           f"{what} margin")
    forest2 = silvanforge.load(model)
    parity(predict(forest2, X), predict(forest, X), f"{what} live object")
    return forest


def rows(thresholds=(), n=60, seed=0, nan_rate=0.15):
    """Random rows, rows on the grid and on the model's thresholds, and NaNs."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, NF)).astype(np.float32)
    on = rng.choice(np.r_[GRID, np.asarray(thresholds, np.float32)], size=(n, NF))
    X = np.vstack([X, on.astype(np.float32), with_nans(on, nan_rate, seed)])
    return X


def make_model(node, n_features=NF, ml_opset=3, in_type=TP.FLOAT, cast_to=None,
               classifier=False, string_labels=False, out_type=TP.FLOAT):
    """A graph input X → [Cast] → the tree node → outputs."""
    nodes = []
    src = "X"
    if cast_to is not None:
        nodes.append(helper.make_node("Cast", ["X"], ["Xc"], to=cast_to))
        src = "Xc"
    node.input[0] = src
    nodes.append(node)
    inputs = [helper.make_tensor_value_info("X", in_type, [None, n_features])]
    if classifier:
        outputs = [helper.make_tensor_value_info(node.output[0], TP.STRING if string_labels
                                                 else TP.INT64, [None]),
                   helper.make_tensor_value_info(node.output[1], TP.FLOAT, [None, None])]
    else:
        outputs = [helper.make_tensor_value_info(node.output[0], out_type, [None, None])]
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("ai.onnx.ml", ml_opset)])
    model.ir_version = 8
    return model


# ---- random hand-built trees ----------------------------------------------------------------

def random_trees(rng, n_trees, max_depth, modes, max_nodes=40):
    """Trees as lists of dicts (pos 0 = root): branch {mode, f, t, tracks, T, F} or leaf."""
    trees = []
    for _ in range(n_trees):
        nodes = [None]
        frontier = [(0, 0, True)]
        while frontier:
            pos, depth, deep = frontier.pop()
            grow = depth < max_depth and len(nodes) < max_nodes and (
                rng.random() < (0.93 if deep else 0.3))
            if not grow:
                nodes[pos] = {"leaf": True}
                continue
            t, f = len(nodes), len(nodes) + 1
            nodes += [None, None]
            nodes[pos] = {"leaf": False, "mode": modes[rng.integers(len(modes))],
                          "f": int(rng.integers(NF)), "t": float(rng.choice(GRID)),
                          "tracks": int(rng.integers(2)), "T": t, "F": f,
                          "members": sorted(set(rng.integers(0, 4, rng.integers(1, 4))
                                                .tolist()))}
            side = rng.integers(2)
            frontier += [(t, depth + 1, deep and side == 0), (f, depth + 1, deep and side == 1)]
        trees.append(nodes)
    return trees


def v3_node(trees, leaf_weights, n_out, classifier=False, labels=None, permute=None,
            **attrs):
    """TreeEnsembleRegressor/Classifier from ``random_trees``; leaf_weights(tree, pos) →
    [(target, weight), ...]. ``permute`` renumbers node ids (the root stays listed first)."""
    a = {k: [] for k in ("treeids", "nodeids", "featureids", "values", "modes",
                         "truenodeids", "falsenodeids", "tracks")}
    tt, tn, ti, tw = [], [], [], []
    for t, nodes in enumerate(trees):
        ids = list(range(len(nodes)))
        if permute is not None:
            ids = [0] + list(permute.permutation(np.arange(1, len(nodes)))) if len(nodes) > 1 \
                else [0]
            ids = [int(i) for i in ids]
        for pos, nd in enumerate(nodes):
            a["treeids"].append(t)
            a["nodeids"].append(ids[pos])
            if nd["leaf"]:
                a["modes"].append("LEAF")
                a["featureids"].append(0)
                a["values"].append(0.0)
                a["truenodeids"].append(0)
                a["falsenodeids"].append(0)
                a["tracks"].append(0)
                for target, w in leaf_weights(t, pos):
                    tt.append(t)
                    tn.append(ids[pos])
                    ti.append(target)
                    tw.append(w)
            else:
                a["modes"].append(nd["mode"])
                a["featureids"].append(nd["f"])
                a["values"].append(nd["t"])
                a["truenodeids"].append(ids[nd["T"]])
                a["falsenodeids"].append(ids[nd["F"]])
                a["tracks"].append(nd["tracks"])
    p = "class" if classifier else "target"
    kw = dict(nodes_treeids=a["treeids"], nodes_nodeids=a["nodeids"],
              nodes_featureids=a["featureids"], nodes_values=a["values"],
              nodes_modes=a["modes"], nodes_truenodeids=a["truenodeids"],
              nodes_falsenodeids=a["falsenodeids"],
              nodes_missing_value_tracks_true=a["tracks"],
              **{f"{p}_treeids": tt, f"{p}_nodeids": tn, f"{p}_ids": ti,
                 f"{p}_weights": tw})
    if classifier:
        if labels and isinstance(labels[0], str):
            kw["classlabels_strings"] = labels
        else:
            kw["classlabels_int64s"] = labels or list(range(n_out))
        kw.update(attrs)
        return helper.make_node("TreeEnsembleClassifier", ["X"], ["label", "probabilities"],
                                domain="ai.onnx.ml", **kw)
    kw.update(attrs)
    return helper.make_node("TreeEnsembleRegressor", ["X"], ["Y"], domain="ai.onnx.ml",
                            n_targets=n_out, **kw)


_V5 = {"BRANCH_LEQ": 0, "BRANCH_LT": 1, "BRANCH_GTE": 2, "BRANCH_GT": 3, "BRANCH_EQ": 4,
       "BRANCH_NEQ": 5, "BRANCH_MEMBER": 6}


def v5_node(trees, leaf_target, n_out, dtype=np.float32, **attrs):
    """TreeEnsemble (opset 5) from ``random_trees``: branches by position, leaves apart."""
    feat, splits, modes, tr, fa, tl, fl, tracks, members = [], [], [], [], [], [], [], [], []
    # Leaf slots below the number of branch positions are placeholders: a real leaf index
    # then never equals a branch position (onnxruntime compares a root's two child ids
    # without their leaf flags), and a one-leaf tree uses the slot of its root position.
    n_branch = sum(max(1, sum(not nd["leaf"] for nd in nodes)) for nodes in trees)
    lt, lw, roots = [0] * n_branch, [0.0] * n_branch, []
    for t, nodes in enumerate(trees):
        if nodes[0]["leaf"]:  # a one-leaf tree: a root whose both children are leaf #root
            r = len(feat)
            roots.append(r)
            feat.append(0)
            splits.append(0.0)
            modes.append(0)
            tr.append(r)
            fa.append(r)
            tl.append(1)
            fl.append(1)
            tracks.append(0)
            lt[r], lw[r] = leaf_target(t, 0)
            continue
        branch_pos, leaf_pos = {}, {}
        for pos, nd in enumerate(nodes):
            if nd["leaf"]:
                leaf_pos[pos] = len(lt)
                target, w = leaf_target(t, pos)
                lt.append(target)
                lw.append(w)
            else:
                branch_pos[pos] = len(feat) + len(branch_pos)
        base = len(feat)
        roots.append(branch_pos[0])
        for pos, nd in enumerate(nodes):
            if nd["leaf"]:
                continue
            feat.append(nd["f"])
            splits.append(nd["t"])
            modes.append(_V5[nd["mode"]])
            for ref, ids, leafs in ((nd["T"], tr, tl), (nd["F"], fa, fl)):
                if nodes[ref]["leaf"]:
                    ids.append(leaf_pos[ref])
                    leafs.append(1)
                else:
                    ids.append(branch_pos[ref])
                    leafs.append(0)
            tracks.append(nd["tracks"])
            if nd["mode"] == "BRANCH_MEMBER":
                members += nd["members"] + [np.nan]
        assert base + len(branch_pos) == len(feat)
    kw = dict(nodes_featureids=feat,
              nodes_splits=numpy_helper.from_array(np.array(splits, dtype)),
              nodes_modes=numpy_helper.from_array(np.array(modes, np.uint8)),
              nodes_truenodeids=tr, nodes_falsenodeids=fa, nodes_trueleafs=tl,
              nodes_falseleafs=fl, nodes_missing_value_tracks_true=tracks, tree_roots=roots,
              leaf_targetids=lt, leaf_weights=numpy_helper.from_array(np.array(lw, dtype)),
              n_targets=n_out)
    if members:
        kw["membership_values"] = numpy_helper.from_array(np.array(members, dtype))
    kw.update(attrs)
    return helper.make_node("TreeEnsemble", ["X"], ["Y"], domain="ai.onnx.ml", **kw)


def stump(mode="BRANCH_LEQ", tracks=0, threshold=0.5, weights=(1.0, 2.0)):
    return [[{"leaf": False, "mode": mode, "f": 0, "t": threshold, "tracks": tracks,
              "T": 1, "F": 2, "members": [0, 2]}, {"leaf": True}, {"leaf": True}]], weights


# ---- converters: skl2onnx, onnxmltools --------------------------------------------------------

def _data(n=200, seed=0):
    from sklearn.datasets import make_classification

    X, y = make_classification(n, NF, n_informative=3, n_redundant=0, random_state=seed)
    return X.astype(np.float32), y


def _model_rows(forest, X, seed=0):
    """Rows from X plus rows whose values are the forest's own thresholds, plus NaN."""
    thr = forest.threshold[~forest.is_leaf].astype(np.float32)
    rng = np.random.default_rng(seed)
    on = X[:40].copy()
    cols = rng.integers(NF, size=len(on))
    on[np.arange(len(on)), cols] = rng.choice(thr, size=len(on))
    return np.vstack([X[:80], on, with_nans(X[:40], 0.3, seed)])


SKLEARN_CASES = ["dt_reg", "rf_reg", "gb_reg", "dt_bin", "rf_bin", "gb_bin", "dt_multi",
                 "rf_multi", "gb_multi", "gb_multi_str", "dt_bin_str", "rf_reg_multi"]


@pytest.mark.parametrize("case", SKLEARN_CASES)
def test_skl2onnx(case):
    from skl2onnx import to_onnx
    from sklearn.ensemble import (GradientBoostingClassifier, GradientBoostingRegressor,
                                  RandomForestClassifier, RandomForestRegressor)
    from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

    X, y = _data()
    y3 = np.arange(len(y)) % 3
    kind, task = case.split("_")[0], case.split("_")[1]
    est = {
        ("dt", "reg"): DecisionTreeRegressor(max_depth=4),
        ("rf", "reg"): RandomForestRegressor(3, max_depth=4, random_state=0),
        ("gb", "reg"): GradientBoostingRegressor(n_estimators=3, max_depth=3),
        ("dt", "bin"): DecisionTreeClassifier(max_depth=4),
        ("rf", "bin"): RandomForestClassifier(3, max_depth=4, random_state=0),
        ("gb", "bin"): GradientBoostingClassifier(n_estimators=3, max_depth=2),
        ("dt", "multi"): DecisionTreeClassifier(max_depth=4),
        ("rf", "multi"): RandomForestClassifier(3, max_depth=4, random_state=0),
        ("gb", "multi"): GradientBoostingClassifier(n_estimators=3, max_depth=2),
    }[kind, task]
    target = {"reg": X[:, 0] * 2 + y, "bin": y, "multi": y3}[task]
    if case.endswith("_str"):
        target = np.array(["cat", "dog", "emu"])[target]
    if case == "rf_reg_multi":
        target = np.c_[X[:, 0] + y, X[:, 1] - y]
    est.fit(X, target)
    options = {"zipmap": False} if task != "reg" else None
    model = to_onnx(est, X[:1], options=options)
    forest = silvanforge.load(model.SerializeToString())
    assert forest.source.startswith("onnx skl2onnx")
    if task != "reg":
        assert forest.class_labels == tuple(est.classes_.tolist())
    check(model, _model_rows(forest, X), case)


def test_skl2onnx_zipmap_graph():
    """The default graph (ZipMap, Cast on the label) is accepted; scores match."""
    from skl2onnx import to_onnx
    from sklearn.tree import DecisionTreeClassifier

    X, y = _data()
    model = to_onnx(DecisionTreeClassifier(max_depth=3).fit(X, y), X[:1])
    assert {n.op_type for n in model.graph.node} >= {"ZipMap"}
    forest = silvanforge.load(model)
    out = _session(model).run(None, {"X": X})[1]
    probs = np.array([[row[c] for c in (0, 1)] for row in out])
    assert_parity(predict(forest, X), probs, "zipmap")


def _convert_or_skip(convert, est, name):
    from onnxmltools.convert.common.data_types import FloatTensorType

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return convert(est, initial_types=[("X", FloatTensorType([None, NF]))])
    except Exception as exc:  # the converters lag behind the libraries
        reason = f"onnxmltools cannot convert {name}: {type(exc).__name__}: {exc}"
        print(reason)
        pytest.skip(reason)


@pytest.mark.parametrize("task", ["reg", "bin", "multi"])
def test_onnxmltools_xgboost(task):
    xgb = pytest.importorskip("xgboost")
    from onnxmltools import convert_xgboost

    X, y = _data()
    X[::7, 1] = np.nan
    est = (xgb.XGBRegressor if task == "reg" else xgb.XGBClassifier)(
        n_estimators=3, max_depth=3)
    est.fit(X, {"reg": X[:, 0] + y, "bin": y, "multi": np.arange(len(y)) % 3}[task])
    model = _convert_or_skip(convert_xgboost, est, f"XGBoost {task}")
    forest = silvanforge.load(model.SerializeToString())
    check(model, _model_rows(forest, np.nan_to_num(X)), f"xgboost {task}")


@pytest.mark.parametrize("task", ["reg", "bin", "multi"])
def test_onnxmltools_lightgbm(task):
    lgb = pytest.importorskip("lightgbm")
    from onnxmltools import convert_lightgbm

    X, y = _data()
    X[::7, 1] = np.nan
    est = (lgb.LGBMRegressor if task == "reg" else lgb.LGBMClassifier)(
        n_estimators=3, num_leaves=6, verbose=-1)
    est.fit(X, {"reg": X[:, 0] + y, "bin": y, "multi": np.arange(len(y)) % 3}[task])
    conv = (lambda e, **kw: convert_lightgbm(e, zipmap=False, **kw)) if task != "reg" \
        else convert_lightgbm
    model = _convert_or_skip(conv, est, f"LightGBM {task}")
    forest = silvanforge.load(model.SerializeToString())
    check(model, _model_rows(forest, np.nan_to_num(X)), f"lightgbm {task}")


# ---- hand-built: modes, NaN, transforms, opsets -------------------------------------------------

MODES = ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"]


@pytest.mark.parametrize("tracks", [0, 1])
@pytest.mark.parametrize("mode", MODES)
def test_modes_and_nan(mode, tracks):
    trees, (a, b) = stump(mode, tracks)
    node = v3_node(trees, lambda t, p: [(0, a if p == 1 else b)], 1)
    X = np.array([[0.5, 0, 0, 0], [0.25, 0, 0, 0], [1.0, 0, 0, 0], [np.nan, 0, 0, 0],
                  [np.inf, 0, 0, 0], [-np.inf, 0, 0, 0]], np.float32)
    forest = check(make_model(node), X, mode)
    # NaN: the true branch when tracked, else the comparison's result (only != holds).
    expected_true = tracks or mode == "BRANCH_NEQ"
    assert predict(forest, X[3:4])[0, 0] == (a if expected_true else b)


@pytest.mark.parametrize("tracks", [0, 1])
def test_member_mode_opset5(tracks):
    trees, _ = stump("BRANCH_MEMBER", tracks)
    node = v5_node(trees, lambda t, p: (0, 1.0 if p == 1 else 2.0), 1)
    X = np.array([[v, 0, 0, 0] for v in (0, 1, 2, 2.5, -2, 3, np.nan, np.inf, 1e9)],
                 np.float32)
    forest = check(make_model(node, ml_opset=5), X, "member")
    assert forest.has_categorical and forest.category_rule == "exact"


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT"])
@pytest.mark.parametrize("n_targets", [1, 2, 3])
def test_post_transforms_regressor(post, n_targets):
    rng = np.random.default_rng(n_targets)
    trees = random_trees(rng, 3, 4, MODES)
    small = post == "PROBIT"  # keep the sums inside (0, 1), where probit is finite

    def weights(t, p):
        w = rng.uniform(0.02, 0.3) if small else rng.normal()
        return [(k, w * (k + 1)) for k in range(n_targets)] + (
            [(0, 0.0)] if n_targets > 1 else [])

    base = [0.05] * n_targets if small else list(rng.normal(size=n_targets))
    node = v3_node(trees, weights, n_targets, post_transform=post, base_values=base)
    model = make_model(node)
    X = rows(GRID)
    if post != "PROBIT":
        check(model, X, f"{post} {n_targets}")
        return
    # onnxruntime adds the trees in float32, the reference in float64, so their margins
    # may differ by one float32 ulp; onnxruntime's float32 erfinv cancels badly near
    # p = 0.5 and turns that ulp into up to ~1e-4 relative (more right at 0.5). So: the
    # transform is bit-exact on onnxruntime's own margins, values agree to 1e-5 where
    # |probit| >= 0.25, and within the float32 quantisation (2e-3) closer to p = 0.5.
    forest = silvanforge.load(model)
    ort_margin = ort_value(without_post(model), X)
    parity(predict(forest, X, output="margin"), ort_margin, "probit margin")
    expected = ort_value(model, X)
    np.testing.assert_array_equal(
        transforms.apply("onnx_probit", {}, ort_margin.astype(np.float64)), expected)
    value = predict(forest, X)
    band = np.abs(np.nan_to_num(expected, nan=1.0)) < 0.25
    parity(np.where(band, 0, value), np.where(band, 0, expected), "probit value")
    assert np.all(np.abs(value - expected)[band] < 2e-3)


def test_softmax_zero_keeps_zero_scores():
    trees, _ = stump()
    node = v3_node(trees, lambda t, p: [(0, 1.0)] if p == 1 else [(1, 2.0)], 2,
                   post_transform="SOFTMAX_ZERO")
    X = np.array([[0.0, 0, 0, 0], [1.0, 0, 0, 0]], np.float32)
    forest = check(make_model(node), X)
    assert predict(forest, X)[0].tolist() == [1.0, 0.0]


@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE"])
def test_multi_target_vector_leaves_and_base(aggregate):
    rng = np.random.default_rng(5)
    trees = random_trees(rng, 4, 5, MODES)

    # Every leaf has weights for every target (some repeated: they add up).
    def weights(t, p):
        return [(k, float(rng.normal())) for k in (0, 1, 2, 1)]

    node = v3_node(trees, weights, 3, base_values=[0.5, -1.0, 2.0], aggregate_function=aggregate,
                   permute=rng)
    forest = check(make_model(node), rows(GRID), aggregate)
    assert forest.leaf_width == 3 and forest.average == (aggregate == "AVERAGE")


def test_base_dropped_for_target_without_weights():
    """onnxruntime adds a target's base only when some reached leaf has weight for it."""
    trees, _ = stump()
    node = v3_node(trees, lambda t, p: [(0, 1.0)], 2, base_values=[0.5, 7.0])
    forest = check(make_model(node), rows())
    assert forest.base_score.tolist() == [0.5, 0.0]
    # ... and refuses to guess when it depends on the row.
    node = v3_node(trees, lambda t, p: [(0, 1.0)] if p == 1 else [(1, 1.0)], 2,
                   base_values=[0.5, 7.0])
    with pytest.raises(UnsupportedModelError, match="base value"):
        silvanforge.load(make_model(node))


@pytest.mark.parametrize("ml_opset", [1, 3])
@pytest.mark.parametrize("in_type", [TP.FLOAT, TP.DOUBLE])
def test_opsets_and_input_types(ml_opset, in_type):
    rng = np.random.default_rng(ml_opset)
    trees = random_trees(rng, 3, 6, MODES)
    node = v3_node(trees, lambda t, p: [(0, float(rng.normal()))], 1, permute=rng,
                   base_values=[0.25])
    model = make_model(node, ml_opset=ml_opset, in_type=in_type)
    X = rows(GRID)
    forest = silvanforge.load(model)
    Xin = X.astype(np.float64) if in_type == TP.DOUBLE else X
    assert_parity(predict(forest, Xin), ort_value(model, Xin))
    assert forest.input_dtype == (np.float64 if in_type == TP.DOUBLE else np.float32)


def test_opset5_deprecated_regressor_same_as_opset3():
    """onnxruntime 1.31 refuses TreeEnsembleRegressor in ai.onnx.ml opset 5 (deprecated);
    SilvanForge reads it like opset 3, checked against the opset-3 copy."""
    rng = np.random.default_rng(3)
    trees = random_trees(rng, 2, 5, MODES)
    node = v3_node(trees, lambda t, p: [(0, float(rng.normal()))], 1)
    model5 = make_model(copy.deepcopy(node), ml_opset=5)
    with pytest.raises(Exception, match="deprecated"):
        _session(model5)
    X = rows(GRID)
    assert_parity(predict(silvanforge.load(model5), X), ort_value(make_model(node), X))


def test_double_thresholds():
    """nodes_values_as_tensor (double) with a double input: compared in double; with a
    float input onnxruntime refuses the model and so do we."""
    node = helper.make_node(
        "TreeEnsembleRegressor", ["X"], ["Y"], domain="ai.onnx.ml", n_targets=1,
        nodes_treeids=[0, 0, 0], nodes_nodeids=[0, 1, 2], nodes_featureids=[0, 0, 0],
        nodes_values_as_tensor=numpy_helper.from_array(np.array([0.1, 0, 0])),
        nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"], nodes_truenodeids=[1, 0, 0],
        nodes_falsenodeids=[2, 0, 0], target_treeids=[0, 0], target_nodeids=[1, 2],
        target_ids=[0, 0], target_weights=[1.0, 2.0])
    model = make_model(node, in_type=TP.DOUBLE)
    X = np.array([[0.1, 0, 0, 0], [np.float32(0.1), 0, 0, 0], [0.0999, 0, 0, 0]])
    forest = silvanforge.load(model)
    assert_parity(predict(forest, X), ort_value(model, X))
    assert predict(forest, X)[:2, 0].tolist() == [1.0, 2.0]
    # A float input cast to double: values are float32 first.
    model_cast = make_model(copy.deepcopy(node), cast_to=TP.DOUBLE)
    forest = silvanforge.load(model_cast)
    Xf = X.astype(np.float32)
    assert forest.input_dtype == np.float32
    assert_parity(predict(forest, Xf), ort_value(model_cast, Xf))
    with pytest.raises(UnsupportedModelError, match="double thresholds"):
        silvanforge.load(make_model(copy.deepcopy(node)))


def test_float_thresholds_with_cast_to_float():
    """A double graph input cast to float: thresholds compared in float32."""
    trees, _ = stump(threshold=0.1)
    node = v3_node(trees, lambda t, p: [(0, float(p))], 1)
    model = make_model(node, in_type=TP.DOUBLE, cast_to=TP.FLOAT)
    X = np.array([[0.1, 0, 0, 0], [0.10000000149, 0, 0, 0], [0.1000001, 0, 0, 0]])
    forest = silvanforge.load(model)
    assert forest.input_dtype == np.float32
    assert_parity(predict(forest, X), ort_value(model, X))


# ---- TreeEnsemble (opset 5) ------------------------------------------------------------------

@pytest.mark.parametrize("post", [0, 1, 2, 3])
@pytest.mark.parametrize("n_targets", [1, 3])
def test_tree_ensemble_v5(post, n_targets):
    rng = np.random.default_rng(post + 10 * n_targets)
    trees = random_trees(rng, 4, 6, MODES + ["BRANCH_MEMBER"])
    trees.append([{"leaf": True}])  # a one-leaf tree
    node = v5_node(trees, lambda t, p: (int(rng.integers(n_targets)), float(rng.normal())),
                   n_targets, post_transform=post, aggregate_function=int(rng.integers(2)))
    X = rows(GRID)
    X[::5, :] = np.round(X[::5, :])
    check(make_model(node, ml_opset=5), X, f"v5 {post}")


def test_tree_ensemble_v5_double_and_shared_nodes():
    """A leaf may be shared by two branches; a shared branch is refused (onnxruntime
    refuses it too)."""
    node = helper.make_node(
        "TreeEnsemble", ["X"], ["Y"], domain="ai.onnx.ml", n_targets=1,
        nodes_featureids=[0, 1], nodes_splits=numpy_helper.from_array(np.array([0.5, 0.25])),
        nodes_modes=numpy_helper.from_array(np.array([0, 3], np.uint8)),
        nodes_truenodeids=[1, 0], nodes_falsenodeids=[0, 1], nodes_trueleafs=[0, 1],
        nodes_falseleafs=[1, 1], tree_roots=[0], leaf_targetids=[0, 0],
        leaf_weights=numpy_helper.from_array(np.array([1.0, 2.0])))
    model = make_model(node, ml_opset=5, in_type=TP.DOUBLE, out_type=TP.DOUBLE)
    forest = silvanforge.load(model)
    assert forest.n_nodes == 5 and forest.input_dtype == np.float64
    X = rows(GRID).astype(np.float64)
    parity(predict(forest, X), ort_value(model, X))
    shared = copy.deepcopy(node)
    _set(shared, "nodes_featureids", [0, 1, 2])
    _set(shared, "nodes_splits", numpy_helper.from_array(np.array([0.5, 0.25, 1.0])))
    _set(shared, "nodes_modes", numpy_helper.from_array(np.array([0, 3, 1], np.uint8)))
    _set(shared, "nodes_truenodeids", [1, 0, 1])
    _set(shared, "nodes_falsenodeids", [2, 1, 0])
    _set(shared, "nodes_trueleafs", [0, 1, 0])
    _set(shared, "nodes_falseleafs", [0, 1, 1])
    with pytest.raises(ModelFormatError, match="reached twice"):
        silvanforge.load(make_model(shared, ml_opset=5, in_type=TP.DOUBLE))


def test_v5_min_max_and_non_integer_members_unsupported():
    trees, _ = stump()
    for agg in (2, 3):
        node = v5_node(trees, lambda t, p: (0, 1.0), 1, aggregate_function=agg)
        with pytest.raises(UnsupportedModelError, match="MIN and MAX"):
            silvanforge.load(make_model(node, ml_opset=5))
    trees[0][0]["mode"] = "BRANCH_MEMBER"
    trees[0][0]["members"] = [0.5, 2]
    node = v5_node(trees, lambda t, p: (0, 1.0), 1)
    with pytest.raises(UnsupportedModelError, match="whole numbers"):
        silvanforge.load(make_model(node, ml_opset=5))


# ---- classifiers ------------------------------------------------------------------------------

BINARY = [(pat, pos, base, post)
          for pat in ((0,), (1,), (0, 1))
          for pos in (True, False)
          for base in (None, [0.1], [0.1, 0.2])
          for post in ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT")]


@pytest.mark.parametrize("pat,pos,base,post", BINARY)
def test_binary_classifier_layouts(pat, pos, base, post):
    """Every layout of onnxruntime's binary case: which class ids carry weights, weight
    signs, base_values of length 0, 1, 2, every post_transform."""
    rng = np.random.default_rng(len(pat))
    trees = random_trees(rng, 2, 3, MODES)

    def weights(t, p):
        w = rng.uniform(0.05, 0.3) * (1 if pos or p % 2 else -1)
        return [(c, w + 0.05 * c) for c in pat]

    attrs = {"post_transform": post}
    if base is not None:
        attrs["base_values"] = base
    node = v3_node(trees, weights, 2, classifier=True, **attrs)
    model = make_model(node, classifier=True)
    single_column = pat == (0,) and (base is None or len(base) < 2)
    if single_column and post == "PROBIT":
        with pytest.raises(UnsupportedModelError, match="PROBIT"):
            silvanforge.load(model)
        return
    check(model, rows(GRID), f"{pat} {pos} {base} {post}")


def test_binary_classifier_varying_class_weights_unsupported():
    trees, _ = stump()
    node = v3_node(trees, lambda t, p: [(0, 0.3)] if p == 1 else [(0, 0.2), (1, 0.5)], 2,
                   classifier=True)
    with pytest.raises(UnsupportedModelError, match="only some leaves"):
        silvanforge.load(make_model(node, classifier=True))


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"])
@pytest.mark.parametrize("labels", [[3, 5, 9, 11], ["a", "b", "c"]])
def test_multiclass_hand_built(post, labels):
    rng = np.random.default_rng(len(labels))
    trees = random_trees(rng, 3, 5, MODES)
    n = len(labels)
    node = v3_node(trees, lambda t, p: [(int(rng.integers(n)), float(rng.normal()))
                                        for _ in range(2)], n, classifier=True,
                   labels=labels, post_transform=post,
                   base_values=list(rng.normal(size=n)))
    forest = check(make_model(node, classifier=True, string_labels=isinstance(labels[0], str)),
                   rows(GRID), post)
    assert forest.class_labels == tuple(labels)


# ---- property test ------------------------------------------------------------------------------

@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_targets=st.integers(1, 3),
       depth=st.integers(1, 20), v5=st.booleans(),
       post=st.sampled_from(["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"]),
       average=st.booleans())
def test_random_ensembles_match_onnxruntime(seed, n_targets, depth, v5, post, average):
    rng = np.random.default_rng(seed)
    modes = MODES + (["BRANCH_MEMBER"] if v5 else [])
    trees = random_trees(rng, int(rng.integers(1, 4)), depth, modes, max_nodes=60)
    agg = "AVERAGE" if average else "SUM"
    if v5:
        node = v5_node(trees, lambda t, p: (int(rng.integers(n_targets)),
                                            float(rng.normal())),
                       n_targets, post_transform=["NONE", "LOGISTIC", "SOFTMAX",
                                                  "SOFTMAX_ZERO"].index(post),
                       aggregate_function=0 if average else 1)
    else:
        full = n_targets == 1 or rng.random() < 0.5

        def weights(t, p):
            if n_targets == 1:
                return [(0, float(rng.normal()))]
            ks = range(n_targets) if full else rng.choice(n_targets, rng.integers(1, 3))
            return [(int(k), float(rng.normal())) for k in ks]

        base = {"base_values": list(rng.normal(size=n_targets))} if full else {}
        node = v3_node(trees, weights, n_targets, permute=rng, post_transform=post,
                       aggregate_function=agg, **base)
    X = rows(GRID, n=20, seed=seed % 1000)
    X[::3] = np.round(X[::3])
    check(make_model(node, ml_opset=5 if v5 else 3), X, f"seed {seed}")


# ---- bad models ---------------------------------------------------------------------------------

def _good_v3():
    trees, _ = stump()
    return v3_node(trees, lambda t, p: [(0, float(p))], 1)


def _set(node, name, value):
    for a in node.attribute:
        if a.name == name:
            node.attribute.remove(a)
            break
    node.attribute.append(helper.make_attribute(name, value))
    return node


def test_not_protobuf_and_truncated():
    with pytest.raises(ModelFormatError):
        onnx_frontend.load_bytes(b"\x08\x07garbage\xff\xff\xff")
    data = make_model(_good_v3()).SerializeToString()
    with pytest.raises(SilvanForgeError):
        silvanforge.load(data[: len(data) // 2])
    with pytest.raises(SilvanForgeError):
        silvanforge.load(data[:-3])
    with pytest.raises(UnsupportedModelError):
        onnx_frontend.load_object("not a model")


def test_graph_without_or_with_two_tree_ops():
    graph = helper.make_graph([helper.make_node("Relu", ["X"], ["Y"])], "g",
                              [helper.make_tensor_value_info("X", TP.FLOAT, [None, NF])],
                              [helper.make_tensor_value_info("Y", TP.FLOAT, [None, NF])])
    with pytest.raises(UnsupportedModelError, match="no ai.onnx.ml tree"):
        silvanforge.load(helper.make_model(graph))
    model = make_model(_good_v3())
    second = copy.deepcopy(model.graph.node[0])
    second.output[0] = "Y2"
    model.graph.node.append(second)
    model.graph.output.append(helper.make_tensor_value_info("Y2", TP.FLOAT, [None, 1]))
    with pytest.raises(UnsupportedModelError, match="2 tree-ensemble operators"):
        silvanforge.load(model)


def test_other_ops_around_the_trees():
    model = make_model(_good_v3())
    model.graph.node.append(helper.make_node("Sigmoid", ["Y"], ["Z"]))
    model.graph.output[0].name = "Z"
    with pytest.raises(UnsupportedModelError, match="Sigmoid"):
        silvanforge.load(model)
    model = make_model(_good_v3())
    node = model.graph.node[0]
    model.graph.node.insert(0, helper.make_node("Abs", ["X"], ["Xa"]))
    node.input[0] = "Xa"
    with pytest.raises(UnsupportedModelError, match="Abs"):
        silvanforge.load(model)


@pytest.mark.parametrize("attr,value,match", [
    ("nodes_featureids", [0, 0], "lengths differ"),
    ("nodes_truenodeids", [7, 0, 0], "true child 7 does not exist"),
    ("nodes_truenodeids", [0, 0, 0], "cycle"),
    ("nodes_featureids", [9, 0, 0], "feature 9 out of range"),
    ("nodes_modes", ["BRANCH_ABOUT", "LEAF", "LEAF"], "unknown node mode"),
    ("nodes_nodeids", [0, 1, 1], "appears twice"),
    ("target_nodeids", [1, 5], "does not exist"),
    ("target_ids", [0, 3], "out of range"),
    ("nodes_values", [float("nan"), 0, 0], "NaN"),
    ("post_transform", "SQUASH", "post_transform"),
    ("nodes_missing_value_tracks_true", [2, 0, 0], "0 or 1"),
])
def test_bad_attributes(attr, value, match):
    node = _set(_good_v3(), attr, value)
    with pytest.raises(ModelFormatError, match=match):
        silvanforge.load(make_model(node).SerializeToString())


def test_bad_tree_structure():
    # Node 1 → node 2 → node 1, with node 0 pointing into the loop.
    node = _set(_good_v3(), "nodes_modes", ["BRANCH_LEQ", "BRANCH_LEQ", "BRANCH_LEQ"])
    _set(node, "nodes_truenodeids", [1, 2, 1])
    _set(node, "nodes_falsenodeids", [2, 2, 1])
    with pytest.raises(ModelFormatError):
        silvanforge.load(make_model(node))
    # Root listed second: onnxruntime would take node 1 as the root.
    node = _good_v3()
    for name, value in (("nodes_nodeids", [1, 0, 2]), ("nodes_truenodeids", [0, 0, 0]),
                        ("nodes_falsenodeids", [0, 0, 0])):
        _set(node, name, value)
    _set(node, "nodes_modes", ["LEAF", "BRANCH_LEQ", "LEAF"])
    _set(node, "nodes_truenodeids", [0, 0, 0])
    _set(node, "nodes_truenodeids", [0, 1, 0])
    _set(node, "nodes_falsenodeids", [0, 2, 0])
    _set(node, "target_nodeids", [1, 2])
    with pytest.raises(SilvanForgeError, match="root"):
        silvanforge.load(make_model(node))
    # Interleaved trees.
    node = _good_v3()
    _set(node, "nodes_treeids", [0, 1, 0])
    with pytest.raises(SilvanForgeError):
        silvanforge.load(make_model(node))


def test_bad_v5_models():
    trees, _ = stump()
    good = v5_node(trees, lambda t, p: (0, 1.0), 1)
    for attr, value, err in [
        ("nodes_truenodeids", [5], ModelFormatError),
        ("nodes_trueleafs", [0], ModelFormatError),       # node 0 → node 0: a cycle
        ("tree_roots", [3], ModelFormatError),
        ("leaf_targetids", [0, 2], ModelFormatError),
        ("nodes_modes", numpy_helper.from_array(np.array([9], np.uint8)), ModelFormatError),
        ("nodes_splits", numpy_helper.from_array(np.array([0.5])), ModelFormatError),
        ("aggregate_function", 7, ModelFormatError),
    ]:
        node = _set(copy.deepcopy(good), attr, value)
        with pytest.raises(err):
            silvanforge.load(make_model(node, ml_opset=5))
    member = copy.deepcopy(good)
    _set(member, "nodes_modes", numpy_helper.from_array(np.array([6], np.uint8)))
    with pytest.raises(ModelFormatError, match="membership_values"):
        silvanforge.load(make_model(member, ml_opset=5))


def test_single_target_leaf_with_two_weights_unsupported():
    trees, _ = stump()
    node = v3_node(trees, lambda t, p: [(0, 1.0), (0, 2.0)], 1)
    with pytest.raises(UnsupportedModelError, match="several weights"):
        silvanforge.load(make_model(node))


def test_n_features_and_source():
    model = make_model(_good_v3(), n_features=7)
    model.producer_name, model.producer_version = "maker", "1.0"
    forest = silvanforge.load(model)
    assert forest.n_features == 7 and forest.source == "onnx maker 1.0"
    model.graph.input[0].type.tensor_type.shape.dim[1].ClearField("dim_value")
    assert silvanforge.load(model).n_features == 1  # max feature id + 1
