"""scikit-learn frontend: fitted tree estimators (live objects only) → :class:`Forest`.

scikit-learn has no model file format of its own: its files are pickles, which SilvanForge
refuses, so only live fitted estimators are accepted (:func:`load_object`). The fitted
attributes are read directly; scikit-learn is imported lazily, only to recognise types.

Supported, with the semantics of scikit-learn 1.9's own predict code:

* ``DecisionTree*``, ``ExtraTree*``, ``RandomForest*``, ``ExtraTrees*``: rows are cast to
  float32 and compared ``x <= threshold`` against float64 thresholds; NaN follows the
  node's ``missing_go_to_left``. Classifiers give ``predict_proba`` (the leaves hold class
  fractions), regressors ``predict`` (a row of ``n_outputs_`` numbers for multi-output
  regression). Forests average their trees. These models have no margin of their own:
  the margin equals the value (identity transform).
* ``GradientBoosting*``: float32 rows, ``x <= threshold``; the learning rate is folded into
  the leaves and the constant initial prediction ("zero" or a constant ``Dummy*``
  estimator) becomes the base score. Margin = ``decision_function`` (regressors: the raw
  prediction, which is ``predict``). scikit-learn refuses NaN at predict time; should a
  NaN reach its tree walk it goes right, and so it does here.
* ``HistGradientBoosting*``: float64 rows, ``x <= threshold``, NaN by
  ``missing_go_to_left``; categorical features (mask, indices, names or ``"from_dtype"``)
  become category-set splits where an unknown, negative or non-whole category goes the
  missing-value way, as in scikit-learn. Margin = ``decision_function`` / raw prediction.
* ``IsolationForest``: value = ``predict`` (+1 inlier / -1 outlier), margin = the mean
  path length; :func:`isolation_forest_output` switches the value to
  ``decision_function`` or ``score_samples``.

Multi-output classifiers (whose ``predict_proba`` is a list of arrays) and other
estimators raise :class:`UnsupportedModelError`.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import (MissingDependencyError, ModelFormatError, UnsupportedModelError,
                      version_of)
from ..model.builder import Tree, build_forest, int_array
from ..model.forest import MAX_CATEGORY, MISSING_NAN, OP_LE, Forest

_SUPPORTED = (
    "DecisionTreeClassifier/Regressor, ExtraTreeClassifier/Regressor, "
    "RandomForestClassifier/Regressor, ExtraTreesClassifier/Regressor, "
    "GradientBoostingClassifier/Regressor, HistGradientBoostingClassifier/Regressor, "
    "IsolationForest")


def load_object(obj: Any) -> Forest:
    """A fitted scikit-learn tree model as a :class:`Forest`.

    >>> from sklearn.ensemble import RandomForestClassifier          # doctest: +SKIP
    >>> forest = load_object(RandomForestClassifier().fit(X, y))    # doctest: +SKIP
    """
    loader = _loader_for(obj)
    _require_fitted(obj)
    return loader(obj)


def isolation_forest_output(forest: Forest, output: str) -> Forest:
    """Switch an IsolationForest's value between scikit-learn's three outputs.

    ``output`` is ``"predict"`` (the default after loading: +1 / -1),
    ``"decision_function"`` or ``"score_samples"``.

    >>> scores = reference.predict(isolation_forest_output(f, "score_samples"), X)  # doctest: +SKIP
    """
    if forest.post_transform not in ("isolation_label", "isolation_score"):
        raise UnsupportedModelError("isolation_forest_output needs a Forest loaded from "
                                    "a scikit-learn IsolationForest")
    params = dict(forest.transform_params)
    offset = params.get("sklearn_offset", params.get("offset", 0.0))
    choices = {
        "predict": ("isolation_label", offset),
        "decision_function": ("isolation_score", offset),
        "score_samples": ("isolation_score", 0.0),
    }
    if output not in choices:
        raise ValueError(f"output must be one of {sorted(choices)}, not {output!r}")
    transform, params["offset"] = choices[output]
    params["sklearn_offset"] = offset
    return forest.replace(post_transform=transform, transform_params=params)


# ---- dispatch ------------------------------------------------------------------------

# The oldest scikit-learn whose models this reads (pyproject.toml's floor): before 1.4,
# classifier leaves held class counts and gradient boosting other loss objects, which
# would be read as fractions and refused.
OLDEST = (1, 4)


def installed_version() -> tuple[int, int]:
    """The installed scikit-learn's (major, minor) version.

    >>> installed_version() >= OLDEST                          # doctest: +SKIP
    True
    """
    import sklearn

    return version_of(sklearn)


def _loader_for(obj: Any) -> Callable[[Any], Forest]:
    import sklearn
    from sklearn import ensemble, tree
    from sklearn.pipeline import Pipeline

    if installed_version() < OLDEST:
        raise MissingDependencyError(
            f"scikit-learn {sklearn.__version__} is older than SilvanForge reads "
            f"({'.'.join(map(str, OLDEST))} and later: leaves hold class fractions); "
            "install it with: pip install 'silvanforge[sklearn]'")

    name = type(obj).__name__
    if isinstance(obj, Pipeline):
        raise UnsupportedModelError(
            "a scikit-learn Pipeline is not a tree model: pass its final estimator "
            "(pipeline[-1]) and apply the preprocessing steps to the input yourself")
    table: Sequence[tuple[type, Callable[[Any], Forest]]] = (
        (tree.BaseDecisionTree, _load_single_tree),
        (ensemble.IsolationForest, _load_isolation_forest),
        (ensemble.RandomForestClassifier, _load_random_forest),
        (ensemble.RandomForestRegressor, _load_random_forest),
        (ensemble.ExtraTreesClassifier, _load_random_forest),
        (ensemble.ExtraTreesRegressor, _load_random_forest),
        (ensemble.GradientBoostingClassifier, _load_gradient_boosting),
        (ensemble.GradientBoostingRegressor, _load_gradient_boosting),
        (ensemble.HistGradientBoostingClassifier, _load_hist_gradient_boosting),
        (ensemble.HistGradientBoostingRegressor, _load_hist_gradient_boosting),
    )
    for cls, loader in table:
        if isinstance(obj, cls):
            return loader
    raise UnsupportedModelError(
        f"scikit-learn {name} is not a supported tree model; supported: {_SUPPORTED}")


def _require_fitted(obj: Any) -> None:
    from sklearn.exceptions import NotFittedError
    from sklearn.utils.validation import check_is_fitted

    try:
        check_is_fitted(obj)
    except NotFittedError:
        raise UnsupportedModelError(
            f"this scikit-learn {type(obj).__name__} is not fitted; call fit() before "
            f"loading it") from None


def _described(obj: Any, pandas: dict[str, tuple] | None = None) -> dict[str, Any]:
    """The Forest fields every estimator shares: names, source and pandas categories.

    ``pandas_categories`` is always a mapping: scikit-learn converts a pandas categorical
    column it has no encoder for by its values, which is what a mapping that does not name
    the column means to ``inputs.as_matrix``.
    """
    import sklearn

    names = getattr(obj, "feature_names_in_", None)
    return {"feature_names": None if names is None else tuple(str(n) for n in names),
            "source": f"scikit-learn {sklearn.__version__}",
            "pandas_categories": dict(pandas or {})}


def _classes(obj: Any) -> tuple | None:
    classes = getattr(obj, "classes_", None)
    return None if classes is None else tuple(np.asarray(classes).tolist())


# ---- sklearn.tree.Tree → builder.Tree -------------------------------------------------

def _tree_structure(tree_: Any, where: str) -> dict[str, np.ndarray]:
    """The node arrays of a fitted ``sklearn.tree._tree.Tree``, checked for size."""
    try:
        arrays = {
            "left": np.asarray(tree_.children_left),
            "right": np.asarray(tree_.children_right),
            "feature": np.asarray(tree_.feature),
            "threshold": np.asarray(tree_.threshold, dtype=np.float64),
            "default_left": np.asarray(tree_.missing_go_to_left).astype(bool),
            "value": np.asarray(tree_.value, dtype=np.float64),
            "cover": np.asarray(tree_.weighted_n_node_samples, dtype=np.float64),
        }
    except AttributeError as exc:
        raise ModelFormatError(f"{where}: not a fitted scikit-learn tree ({exc})") from None
    n = len(arrays["left"])
    for name, arr in arrays.items():
        if len(arr) != n:
            raise ModelFormatError(f"{where}: {name} has {len(arr)} entries for {n} nodes")
    if arrays["value"].ndim != 3:
        raise ModelFormatError(f"{where}: value has shape {arrays['value'].shape}, "
                               f"expected (nodes, outputs, classes)")
    return arrays


def _map_features(feature: Any, left: np.ndarray, feature_map: np.ndarray | None,
                  where: str) -> np.ndarray:
    """Tree-local feature indices → the model's input columns (leaves get 0)."""
    feature = int_array(feature, f"{where}: features")
    internal = np.asarray(left) >= 0
    if feature_map is None:
        return np.where(internal, feature, 0)
    bad = internal & ((feature < 0) | (feature >= len(feature_map)))
    if bad.any():
        node = int(np.flatnonzero(bad)[0])
        raise ModelFormatError(f"{where}, node {node}: feature index {int(feature[node])} "
                               f"out of range ({len(feature_map)} features)")
    return np.where(internal, feature_map[np.where(internal, feature, 0)], 0)


def _sk_tree(tree_: Any, where: str, leaf_value: Callable[[np.ndarray], np.ndarray],
             *, nan_left: bool | None = None, feature_map: np.ndarray | None = None,
             output: int = 0) -> Tree:
    """One scikit-learn tree; ``nan_left`` overrides ``missing_go_to_left`` when set."""
    a = _tree_structure(tree_, where)
    return Tree(
        left=a["left"], right=a["right"],
        feature=_map_features(a["feature"], a["left"], feature_map, where),
        threshold=a["threshold"], leaf_value=leaf_value(a["value"]),
        default_left=a["default_left"] if nan_left is None else nan_left,
        split_op=OP_LE, missing=MISSING_NAN, output=output, cover=a["cover"],
        source_id=np.arange(len(a["left"])))  # apply's node ids: sklearn's own order


def _tree_model_kind(est: Any) -> tuple[bool, int]:
    """(is a classifier, number of outputs) of a tree or forest of trees."""
    from sklearn.base import is_classifier

    n_outputs = int(getattr(est, "n_outputs_", 1))
    classifier = is_classifier(est)
    if classifier and n_outputs != 1:
        raise UnsupportedModelError(
            f"multi-output classification ({n_outputs} targets) is not supported: "
            f"{type(est).__name__}.predict_proba returns a list of arrays; fit one "
            f"classifier per target")
    return classifier, n_outputs


def _leaf_reader(classifier: bool, width: int) -> Callable[[np.ndarray], np.ndarray]:
    """How a tree's ``value`` (nodes, outputs, classes) becomes leaf values."""
    def read(value: np.ndarray) -> np.ndarray:
        if classifier:
            # Since scikit-learn 1.4 classifier leaves hold class fractions: the tree's
            # predict_proba is the leaf row as it is.
            if value.shape[1] != 1 or value.shape[2] != width:
                raise ModelFormatError(f"tree value of shape {value.shape}; expected "
                                       f"(nodes, 1, {width})")
            return value[:, 0, :]
        if value.shape[1] != width or value.shape[2] != 1:
            raise ModelFormatError(f"tree value of shape {value.shape}; expected "
                                   f"(nodes, {width}, 1)")
        return value[:, :, 0]
    return read


def _trees_forest(obj: Any, estimators: Sequence[Any], average: bool) -> Forest:
    classifier, n_outputs = _tree_model_kind(obj)
    width = len(obj.classes_) if classifier else n_outputs
    read = _leaf_reader(classifier, width)
    trees = [_sk_tree(est.tree_, f"tree {t}", read) for t, est in enumerate(estimators)]
    return build_forest(
        trees, n_features=obj.n_features_in_, n_outputs=width, base_score=0.0,
        average=average, post_transform="identity", input_dtype=np.float32,
        class_labels=_classes(obj) if classifier else None,
        objective=type(obj).__name__, **_described(obj))


def _load_single_tree(obj: Any) -> Forest:
    return _trees_forest(obj, [obj], average=False)


def _load_random_forest(obj: Any) -> Forest:
    return _trees_forest(obj, list(obj.estimators_), average=True)


# ---- GradientBoosting -----------------------------------------------------------------

def _constant_init(obj: Any) -> np.ndarray:
    """The initial raw prediction of a GradientBoosting model, when it is a constant."""
    from sklearn.dummy import DummyClassifier, DummyRegressor

    init = obj.init_
    constant = (isinstance(init, str) and init == "zero") or isinstance(
        init, DummyRegressor) or (isinstance(init, DummyClassifier)
                                  and init.strategy != "stratified")
    if not constant:
        raise UnsupportedModelError(
            f"{type(obj).__name__} with init={type(init).__name__}: only the default "
            f"(constant) init estimator or init='zero' can be compiled, because another "
            f"init estimator's prediction depends on the row")
    row = np.zeros((1, obj.n_features_in_), dtype=np.float32)
    with warnings.catch_warnings():
        # A model fitted on a DataFrame warns about the missing column names; the
        # constant does not depend on them.
        warnings.simplefilter("ignore")
        raw = obj._raw_predict_init(row)
    return np.asarray(raw, dtype=np.float64).reshape(-1)


def _load_gradient_boosting(obj: Any) -> Forest:
    from sklearn.base import is_classifier

    estimators = np.asarray(obj.estimators_, dtype=object)
    if estimators.ndim != 2 or estimators.size == 0:
        raise ModelFormatError(f"estimators_ has shape {estimators.shape}; expected "
                               f"(stages, trees per stage)")
    k_trees = estimators.shape[1]
    lr = float(obj.learning_rate)
    read = _leaf_reader(False, 1)

    def scaled(value: np.ndarray) -> np.ndarray:
        # sklearn adds learning_rate * value per tree: the same product, folded in.
        return lr * read(value)

    trees = []
    for stage in range(estimators.shape[0]):
        for k in range(k_trees):
            # sklearn's GradientBoosting tree walk has no missing-value branch: a NaN
            # fails "x <= threshold" and goes right whatever missing_go_to_left says.
            trees.append(_sk_tree(estimators[stage, k].tree_, f"tree {len(trees)}",
                                  scaled, nan_left=False, output=k))
    transform, params = "identity", {}
    if is_classifier(obj):
        transform, params = _gb_classifier_transform(obj, k_trees)
    return build_forest(
        trees, n_features=obj.n_features_in_, n_outputs=k_trees,
        base_score=_constant_init(obj), post_transform=transform, transform_params=params,
        input_dtype=np.float32, trees_per_round=k_trees,
        # apply: (rows, stages, trees a stage) for classifiers, (rows, stages) else.
        leaf_layout="rounds" if is_classifier(obj) else "trees",
        class_labels=_classes(obj) if is_classifier(obj) else None,
        objective=f"{type(obj).__name__}(loss={obj.loss!r})", **_described(obj))


def _gb_classifier_transform(obj: Any, k_trees: int) -> tuple[str, dict]:
    loss = type(obj._loss).__name__
    if k_trees == 1 and loss == "HalfBinomialLoss":
        return "sigmoid_pair", {}
    if k_trees == 1 and loss == "ExponentialLoss":
        # ExponentialLoss.predict_proba: p = expit(2 * raw).
        return "sigmoid_pair", {"alpha": 2.0}
    if k_trees > 1 and loss == "HalfMultinomialLoss":
        return "softmax", {}
    raise UnsupportedModelError(f"{type(obj).__name__} with loss {loss} and {k_trees} "
                                f"trees per stage is not supported")


# ---- HistGradientBoosting -------------------------------------------------------------

def _bits(words: np.ndarray) -> np.ndarray:
    """The set members of a little-endian uint32 bitset."""
    bits = np.unpackbits(np.asarray(words, dtype="<u4").view(np.uint8), bitorder="little")
    return np.flatnonzero(bits)


class _HistCategories:
    """How HistGradientBoosting turns a categorical input value into a category code.

    Every categorical feature goes through the model's OrdinalEncoder: the code is the
    position of the value among the sorted training categories, and any other value
    (unseen, negative, fractional, NaN) becomes NaN, i.e. missing. Numeric categories
    that are whole numbers in [0, MAX_CATEGORY] are matched on the raw value (with
    ``category_rule="exact"``); other categories (strings, pandas categoricals from
    ``"from_dtype"``) are matched by the input code that ``pandas_categories`` gives.
    """

    def __init__(self, obj: Any) -> None:
        n = int(obj.n_features_in_)
        self.is_cat = np.zeros(n, dtype=bool)
        # model column (after the preprocessor's reordering) → input column
        self.column = np.arange(n)
        # input column → the raw value of each code, or None to match codes
        self.code_value: dict[int, np.ndarray | None] = {}
        self.pandas: dict[str, tuple] = {}
        if getattr(obj, "_preprocessor", None) is None:
            return
        self.is_cat = np.asarray(obj.is_categorical_, dtype=bool)
        if len(self.is_cat) != n:
            raise ModelFormatError(f"is_categorical_ has {len(self.is_cat)} entries for "
                                   f"{n} features")
        # The ColumnTransformer puts the encoded categorical columns first.
        self.column = np.concatenate([np.flatnonzero(self.is_cat),
                                      np.flatnonzero(~self.is_cat)])
        encoder = obj._preprocessor.named_transformers_["encoder"]
        names = _described(obj)["feature_names"]
        from_dtype = isinstance(obj.categorical_features, str)
        for col, cats in zip(np.flatnonzero(self.is_cat), encoder.categories_):
            cats = np.asarray(cats)
            if len(cats) and _is_nan(cats[-1]):
                cats = cats[:-1]  # the encoder lists NaN last; it is the missing value
            if not from_dtype and cats.dtype.kind in "iuf":
                self.code_value[col] = _whole_categories(cats, col, names)
            elif names is None:
                raise UnsupportedModelError(
                    f"categorical feature {col} has non-numeric categories but the model "
                    f"has no column names to match pandas categories by")
            else:
                self.code_value[col] = None
                self.pandas[names[col]] = tuple(cats.tolist())

    def category_set(self, col: int, codes: np.ndarray, where: str) -> np.ndarray:
        values = self.code_value.get(col)
        if values is None:
            return codes
        if codes.size and codes.max() >= len(values):
            raise ModelFormatError(f"{where}: category code {int(codes.max())} out of "
                                   f"range ({len(values)} categories)")
        return values[codes]


def _is_nan(v: Any) -> bool:
    try:
        return bool(np.isnan(v))
    except TypeError:
        return v is None


def _whole_categories(cats: np.ndarray, col: int, names: tuple | None) -> np.ndarray:
    what = repr(names[col]) if names else str(col)
    ok = np.isfinite(cats) & (cats == np.floor(cats)) & (cats >= 0) & (cats <= MAX_CATEGORY)
    if not np.all(ok):
        bad = float(cats[~ok][0])
        raise UnsupportedModelError(
            f"categorical feature {what} has the training category {bad:g}; SilvanForge's "
            f"category splits need whole numbers in [0, {MAX_CATEGORY}] (recode the "
            f"column, or pass it as a pandas categorical)")
    return cats.astype(np.int64)


def _hist_tree(predictor: Any, where: str, cats: _HistCategories,
               known: np.ndarray, f_idx_map: np.ndarray, output: int) -> Tree:
    nodes = predictor.nodes
    try:
        is_leaf = np.asarray(nodes["is_leaf"]).astype(bool)
        left = np.where(is_leaf, -1, int_array(nodes["left"], f"{where}: left children"))
        right = np.where(is_leaf, -1, int_array(nodes["right"], f"{where}: right children"))
        feature = _map_features(nodes["feature_idx"], left, cats.column, where)
        threshold = np.asarray(nodes["num_threshold"], dtype=np.float64)
        default_left = np.asarray(nodes["missing_go_to_left"]).astype(bool)
        is_cat = np.asarray(nodes["is_categorical"]).astype(bool) & ~is_leaf
        bitset_idx = np.asarray(nodes["bitset_idx"])
        value = np.asarray(nodes["value"], dtype=np.float64)
        # Training samples per node (HistGradientBoosting keeps no weighted count).
        cover = np.asarray(nodes["count"], dtype=np.float64)
    except (ValueError, KeyError) as exc:
        raise ModelFormatError(f"{where}: malformed predictor nodes ({exc})") from None
    raw_left = np.asarray(predictor.raw_left_cat_bitsets)
    categories: dict[int, np.ndarray] = {}
    for node in np.flatnonzero(is_cat):
        at = f"{where}, node {node}"
        b = int(bitset_idx[node])
        model_col = int(nodes["feature_idx"][node])
        col = int(feature[node])
        if not 0 <= b < len(raw_left) or not 0 <= model_col < len(f_idx_map) \
                or not 0 <= int(f_idx_map[model_col]) < len(known):
            raise ModelFormatError(f"{at}: category bitset index out of range")
        goes_left = _bits(raw_left[b])
        known_codes = _bits(known[int(f_idx_map[model_col])])
        # sklearn: in the left set → left; a known category → right; anything else
        # (unknown, negative, NaN) → the missing-value side. Make "not in the set"
        # always the missing side: when missing goes left, test for the right-going
        # known categories and swap the children.
        if default_left[node]:
            codes = np.setdiff1d(known_codes, goes_left)
            left[node], right[node] = right[node], left[node]
        else:
            codes = goes_left
        default_left[node] = False
        categories[int(node)] = cats.category_set(col, codes, at)
    return Tree(left=left, right=right, feature=feature, threshold=threshold,
                leaf_value=value, default_left=default_left, split_op=OP_LE,
                missing=MISSING_NAN, categories=categories, output=output, cover=cover,
                source_id=np.arange(len(left)))  # the index into predictor.nodes


def _load_hist_gradient_boosting(obj: Any) -> Forest:
    from sklearn.base import is_classifier

    k_trees = int(obj.n_trees_per_iteration_)
    cats = _HistCategories(obj)
    known, f_idx_map = obj._bin_mapper.make_known_categories_bitsets()
    trees = []
    for it, predictors in enumerate(obj._predictors):
        if len(predictors) != k_trees:
            raise ModelFormatError(f"iteration {it} has {len(predictors)} trees, expected "
                                   f"{k_trees}")
        for k, predictor in enumerate(predictors):
            trees.append(_hist_tree(predictor, f"tree {len(trees)}", cats,
                                    np.asarray(known), np.asarray(f_idx_map), k))
    loss = type(obj._loss).__name__
    link = type(obj._loss.link).__name__
    if is_classifier(obj):
        transform = {"HalfBinomialLoss": "sigmoid_pair",
                     "HalfMultinomialLoss": "softmax"}.get(loss)
    else:
        transform = {"IdentityLink": "identity", "LogLink": "exp"}.get(link)
    if transform is None:
        raise UnsupportedModelError(f"{type(obj).__name__} with loss {loss} (link {link}) "
                                    f"is not supported")
    return build_forest(
        trees, n_features=obj.n_features_in_, n_outputs=k_trees,
        base_score=np.asarray(obj._baseline_prediction, dtype=np.float64).reshape(-1),
        post_transform=transform, input_dtype=np.float64, category_rule="exact",
        negative_category="missing", trees_per_round=k_trees, leaf_layout="rounds",
        class_labels=_classes(obj) if is_classifier(obj) else None,
        objective=f"{type(obj).__name__}(loss={obj.loss!r})", **_described(obj, cats.pandas))


# ---- IsolationForest ------------------------------------------------------------------

def _load_isolation_forest(obj: Any) -> Forest:
    from sklearn.ensemble._iforest import _average_path_length

    n_features = int(obj.n_features_in_)
    subsample = int(obj._max_features) != n_features
    trees = []
    for t, est in enumerate(obj.estimators_):
        where = f"tree {t}"
        depths = np.asarray(obj._decision_path_lengths[t], dtype=np.float64)
        paths = np.asarray(obj._average_path_length_per_tree[t], dtype=np.float64)

        def path_length(value: np.ndarray, depths=depths, paths=paths,
                        where=where) -> np.ndarray:
            if len(depths) != len(value) or len(paths) != len(value):
                raise ModelFormatError(f"{where}: path lengths for {len(depths)} nodes, "
                                       f"tree has {len(value)}")
            # What sklearn adds per tree: node depth (root = 1) + c(leaf samples) - 1.
            return depths + paths - 1.0

        features = np.asarray(obj.estimators_features_[t]) if subsample else None
        trees.append(_sk_tree(est.tree_, where, path_length, feature_map=features))
    c = float(_average_path_length([obj._max_samples])[0])
    offset = float(obj.offset_)
    return build_forest(
        trees, n_features=n_features, n_outputs=1, base_score=0.0, average=True,
        post_transform="isolation_label",
        transform_params={"c": c, "offset": offset, "sklearn_offset": offset},
        input_dtype=np.float32, objective="IsolationForest", **_described(obj))
