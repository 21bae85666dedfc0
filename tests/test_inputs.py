"""Inputs where they live: named frames (pandas, polars, Arrow, dicts) matched to the
model's features by name, categoricals mapped to the training codes, scipy.sparse read by
each library's rule, and Arrow/polars read without pandas. Every case is checked against
the training library's own predictions, through the reference and a compiled predictor
(the one input path they share)."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import silvanforge
from silvanforge import reference
from silvanforge.errors import CompileForbiddenError, InputError, version_of
from silvanforge.model import columns, sparse

from util import assert_parity

pd = pytest.importorskip("pandas", reason="pandas is part of the dev extra")
pa = pytest.importorskip("pyarrow", reason="pyarrow is part of the dev extra")
pl = pytest.importorskip("polars", reason="polars is part of the dev extra")
sp = pytest.importorskip("scipy.sparse", reason="scipy is part of the dev extra")
xgb = pytest.importorskip("xgboost", reason="xgboost is part of the dev extra")
lgb = pytest.importorskip("lightgbm", reason="lightgbm is part of the dev extra")
ensemble = pytest.importorskip("sklearn.ensemble", reason="scikit-learn is part of dev")

warnings.filterwarnings("ignore", category=UserWarning, module="(xgboost|lightgbm|sklearn)")
# XGBoost stores a frame's categories in its model from 3.1; before, a model has codes
# only, and the frame's own codes are read (docs/INPUTS.md).
needs_stored_categories = pytest.mark.skipif(
    version_of(xgb) < (3, 1), reason=f"needs XGBoost 3.1 (categories stored in the model); "
    f"{xgb.__version__} is installed")
NAMES = ["age", "height", "weight", "score", "zeta"]
COLORS = ["red", "green", "blue", "cyan"]


def _numeric_frame(n: int = 200, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, len(NAMES)))
    X[rng.random(X.shape) < 0.1] = np.nan
    return pd.DataFrame(X, columns=NAMES), np.nan_to_num(X[:, 0]) * 2 + np.nan_to_num(X[:, 3])


@pytest.fixture(scope="module")
def named():
    """An XGBoost model trained on a named frame, its compiled predictor, test rows."""
    df, y = _numeric_frame()
    model = xgb.XGBRegressor(n_estimators=8, max_depth=4).fit(df, y)
    return model, silvanforge.compile(model, n_jobs=1), _numeric_frame(60, seed=1)[0]


def _as(kind: str, frame):
    """``frame`` (pandas) as another named input."""
    if kind == "pandas":
        return frame
    if kind == "polars":
        return pl.from_pandas(frame)
    if kind == "arrow":
        return pa.Table.from_pandas(frame, preserve_index=False)
    if kind == "batch":
        return pa.RecordBatch.from_pandas(frame, preserve_index=False)
    return {c: frame[c].to_numpy() for c in frame.columns}


# ---- names ------------------------------------------------------------------------------

@settings(max_examples=12, deadline=None)
@given(order=st.permutations(NAMES), kind=st.sampled_from(
    ["pandas", "polars", "arrow", "batch", "dict"]))
def test_columns_in_any_order_are_matched_by_name(named, order, kind):
    model, predictor, test = named
    expected = model.predict(test)
    data = _as(kind, test[list(order)])
    assert_parity(reference.predict(silvanforge.load(model), data), expected, kind)
    assert_parity(predictor.predict(data), expected, kind)


@pytest.mark.parametrize("change, message", [
    (lambda t: t.drop(columns=["zeta"]), "missing 'zeta'"),
    (lambda t: t.assign(extra=1.0), "unknown 'extra'"),
    (lambda t: t.rename(columns={"age": "Age"}), "missing 'age'; unknown 'Age'"),
])
def test_missing_and_unknown_columns_are_named(named, change, message):
    model, predictor, test = named
    for evaluate in (predictor.predict, lambda X: reference.predict(predictor.forest, X)):
        with pytest.raises(InputError, match=message):
            evaluate(change(test))
    with pytest.raises(InputError, match="more than once"):
        predictor.predict(pa.table([test[c] for c in NAMES[:4] + ["age"]],
                                   names=NAMES[:4] + ["age"]))


@pytest.mark.parametrize("kind", ["pandas", "polars", "arrow", "batch", "dict"])
@pytest.mark.parametrize("dtypes", [
    ["float32"] * 5, ["float64"] * 5, ["int64"] * 5, ["bool"] * 5,
    ["float32", "float64", "int32", "uint16", "int8"],
    ["float32", "bool", "float64", "int8", "int8"],
    ["float32", "int64", "float64", "float64", "float64"], ["uint64", "int64"] * 2 + ["int64"],
    ["float64", "float64", "Float64", "float64", "float64"],
    ["float32", "Int32", "float32", "float32", "float32"],
    ["float64", "float64", "category", "float64", "float64"]])
def test_a_frame_of_numbers_is_read_whole_as_column_by_column(named, dtypes, kind,
                                                             monkeypatch):
    """A frame (pandas, polars, Arrow) or dict of numbers one array holds exactly is read
    as one array (one to_numpy or to_tensor: ~40 µs for a row where column by column
    took 0.1-1.7 ms); the values are those the columns give one by one, big integers and
    nulls included."""
    from silvanforge.model.tables import table_rows

    model, predictor, test = named
    rng = np.random.default_rng(len(dtypes[0]))
    frame = test.copy()
    for name, dtype in zip(NAMES, dtypes):
        if dtype == "category":
            frame[name] = pd.Categorical(rng.integers(0, 3, len(frame)))
        elif dtype == "Int32":  # nullable: a null is a missing value
            frame[name] = pd.array(rng.integers(0, 9, len(frame)), dtype="Int32")
            frame.loc[frame.index[::7], name] = pd.NA
        elif dtype[0] in "iu" or dtype == "bool":
            # 2**60 + 2**36 + 1 rounds up to float32, but through float64 (to
            # 2**60 + 2**36, a tie) down: a mix of int64 columns is read by columns.
            big = 2**60 + 2**36 + 1 if dtype.endswith("64") else 7
            frame[name] = (rng.integers(0, 5, len(frame)) * big).astype(dtype)
        else:
            frame[name] = frame[name].astype(dtype)
    if kind == "dict" and any(d == "category" or d[0].isupper() for d in dtypes):
        pytest.skip("a dict holds numpy arrays: no categorical or nullable column")
    try:
        data = _as(kind, frame[NAMES[::-1]])  # matched by name, not position
    except pl.exceptions.ComputeError as exc:  # polars 1.0: categories are strings
        pytest.skip(f"polars {pl.__version__} cannot hold this frame: {exc}")
    cols = columns.reader(data)
    whole = cols.block()
    # What each kind reads whole: numbers of numpy's kinds (pandas' nullable and
    # categorical columns are not; Arrow and polars have them as plain numbers or
    # dictionaries, and their booleans as bits).
    plain = [np.dtype(d.lower()) if kind not in ("pandas", "dict") else np.dtype(d)
             for d in dtypes if d != "category" and (kind != "pandas" or d[0].islower())
             and (kind in ("pandas", "dict") or d != "bool")]
    exact = len(plain) == len(dtypes) and (len(set(plain)) == 1 or all(
        d.kind == "f" or d.kind in "iu" and d.itemsize <= 4 for d in plain))
    assert (whole is not None) == exact
    got = table_rows(data, predictor.forest)
    monkeypatch.setattr(type(cols), "block", lambda self: None)
    np.testing.assert_array_equal(got, table_rows(data, predictor.forest))
    assert got.flags.c_contiguous and got.dtype == predictor.forest.input_dtype


def test_arrow_columns_to_tensor_cannot_read_go_one_by_one(named):
    # Arrow's to_tensor has no half floats: those tables go column by column.
    model, predictor, test = named
    table = pa.table({name: pa.array(test[name].to_numpy(np.float16)) if i == 2 else
                      test[name] for i, name in enumerate(NAMES)})
    assert columns.reader(table).block() is None
    expected = reference.predict(predictor.forest, test.astype({NAMES[2]: np.float16}))
    np.testing.assert_array_equal(predictor.predict(table), expected)


def test_generic_names_and_numpy_are_positional(named):
    model, predictor, test = named
    X = test.to_numpy()
    # numpy is positional, even for a named model.
    assert_parity(predictor.predict(X), model.predict(test))
    # A model trained on numpy (LightGBM's Column_0, ...) reads any frame by position.
    booster = lgb.train({"verbose": -1, "num_leaves": 7}, lgb.Dataset(np.nan_to_num(X),
                                                                      np.arange(len(X))), 3)
    forest = silvanforge.load(booster)
    assert forest.feature_names[0] == "Column_0"
    renamed = test.set_axis(list("vwxyz"), axis=1)
    assert_parity(reference.predict(forest, renamed), booster.predict(X))
    with pytest.raises(InputError, match="expects 5 features"):
        reference.predict(forest, renamed.iloc[:, :4])


def test_non_numeric_columns_are_refused(named):
    _, predictor, test = named
    with pytest.raises(InputError, match="'age'.*Arrow type string"):
        predictor.predict(pa.table({**{c: test[c] for c in NAMES},
                                    "age": ["a"] * len(test)}))
    with pytest.raises(InputError, match="'age'"):
        predictor.predict({**{c: test[c].to_numpy() for c in NAMES}, "age": ["a"] * len(test)})
    with pytest.raises(InputError, match="LazyFrame"):
        predictor.predict(pl.from_pandas(test).lazy())


# ---- categoricals -----------------------------------------------------------------------

def _categorical_frame(n: int, seed: int, colors=COLORS):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    c = rng.choice(colors, n)
    frame = pd.DataFrame({"x": x, "color": pd.Categorical(c, categories=sorted(set(colors)))})
    return frame, x + (c == "green") * 3.0 + (c == "blue") * -2.0


def _categorical_inputs(frame):
    """The same rows as pandas (categories in another order), polars Categorical and
    Enum, and Arrow dictionary columns."""
    shuffled = frame.assign(color=frame.color.cat.reorder_categories(
        frame.color.cat.categories[::-1]))
    colors = [None if pd.isna(v) else v for v in frame.color.astype(object)]
    enum = pl.Enum(sorted({c for c in colors if c is not None} | {"zzz"}))
    plain = pl.DataFrame({"x": frame.x.to_numpy(), "color": colors})
    return {
        "pandas": shuffled[["color", "x"]],
        "polars": plain.with_columns(pl.col("color").cast(pl.Categorical)),
        "polars enum": plain.with_columns(pl.col("color").cast(enum)),
        "arrow": pa.table({"color": pa.array(colors).dictionary_encode(), "x": frame.x}),
    }


@pytest.fixture(scope="module")
def categorical_models():
    train, y = _categorical_frame(400, 2)
    return train, {
        "lightgbm": lgb.LGBMRegressor(n_estimators=6, num_leaves=7, verbose=-1,
                                      min_child_samples=5).fit(train, y),
        "xgboost": xgb.XGBRegressor(n_estimators=6, max_depth=3, enable_categorical=True,
                                    tree_method="hist").fit(train, y),
        "sklearn": ensemble.HistGradientBoostingRegressor(
            max_iter=6, categorical_features="from_dtype").fit(train, y),
    }


@pytest.mark.parametrize("library", ["lightgbm", pytest.param(
    "xgboost", marks=needs_stored_categories), "sklearn"])
def test_categoricals_map_to_the_training_codes(categorical_models, library):
    _, models = categorical_models
    model = models[library]
    test, _ = _categorical_frame(80, 3, colors=COLORS[:3])  # cyan absent: codes shift
    expected = model.predict(test)
    forest = silvanforge.load(model)
    predictor = silvanforge.compile(model, n_jobs=1)
    for kind, data in _categorical_inputs(test).items():
        assert_parity(reference.predict(forest, data), expected, f"{library} {kind}")
        assert_parity(predictor.predict(data), expected, f"{library} {kind} compiled")


@pytest.mark.parametrize("library", ["lightgbm", "sklearn"])
def test_unseen_categories_are_missing_like_the_library(categorical_models, library):
    model = categorical_models[1][library]
    test, _ = _categorical_frame(50, 4, colors=COLORS + ["magenta"])
    test.loc[::7, "color"] = None
    expected = model.predict(test)
    for kind, data in _categorical_inputs(test).items():
        assert_parity(reference.predict(silvanforge.load(model), data), expected, kind)


@needs_stored_categories
def test_unseen_categories_are_refused_for_xgboost(categorical_models):
    model = categorical_models[1]["xgboost"]
    # (XGBoost 3.2 refuses "zzz", sorted after every training category, but reads
    # "magenta", sorted among them, as the next one, "red": a lookup that never checks
    # equality. SilvanForge refuses every unseen category.)
    test, _ = _categorical_frame(20, 5, colors=["red", "zzz"])
    with pytest.raises(Exception, match="not in the training set"):
        model.predict(test)  # XGBoost's own answer
    for kind, data in _categorical_inputs(test).items():
        with pytest.raises(InputError, match="'color': category 'zzz'"):
            reference.predict(silvanforge.load(model), data)


# ---- scipy.sparse -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def sparse_case():
    rng = np.random.default_rng(6)
    X = rng.normal(size=(400, 6))
    X[rng.random(X.shape) < 0.3] = np.nan
    y = np.nan_to_num(X[:, 0]) + np.isnan(X[:, 1]) * 2.0 + (X[:, 2] > 0)
    dense = np.where(rng.random((120, 6)) < 0.6, 0.0, rng.normal(size=(120, 6)))
    dense[3, 4] = np.nan  # a stored NaN stays missing
    models = {
        "xgboost": xgb.XGBRegressor(n_estimators=6, max_depth=4).fit(X, y),
        "lightgbm": lgb.LGBMRegressor(n_estimators=6, num_leaves=7, verbose=-1,
                                      min_child_samples=3).fit(X, y),
        "sklearn": ensemble.RandomForestRegressor(4, max_depth=5, random_state=0).fit(
            np.nan_to_num(X), y),
    }
    predictors = {name: silvanforge.compile(model, n_jobs=1) for name, model in models.items()}
    return models, dense, predictors


@pytest.mark.parametrize("library, absent", [
    ("xgboost", "missing"), ("lightgbm", "zero"), ("sklearn", "zero")])
@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_sparse_absent_entries_follow_the_library(sparse_case, library, absent, fmt,
                                                  monkeypatch):
    models, dense, predictors = sparse_case
    model = models[library]
    if library == "sklearn":  # its forests refuse NaN
        dense = np.nan_to_num(dense)
    X = sp.csr_matrix(dense).asformat(fmt)
    expected = model.predict(X if fmt != "coo" else X.tocsr())
    forest = silvanforge.load(model)
    assert forest.sparse_absent == absent
    assert_parity(reference.predict(forest, X), expected, f"{library} {fmt}")
    predictor = predictors[library]
    assert_parity(predictor.predict(X), expected, f"{library} {fmt} compiled")
    # Blocks of 7 rows: a large matrix is predicted a block at a time, never whole.
    monkeypatch.setattr(sparse, "BLOCK_CELLS", 7 * 6)
    assert sparse.blocks(X, forest) is not None
    assert_parity(predictor.predict(X), expected, f"{library} {fmt} by blocks")
    assert_parity(reference.predict(forest, X), expected, f"{library} {fmt} by blocks")


def test_sparse_histgradientboosting_reads_absent_as_zero(sparse_case):
    """scikit-learn's HistGradientBoosting refuses sparse input and asks for
    ``toarray()``, whose absent entries are 0.0: that is what SilvanForge reads."""
    _, dense, _ = sparse_case
    rng = np.random.default_rng(7)
    X = rng.normal(size=(300, 6))
    model = ensemble.HistGradientBoostingRegressor(max_iter=5).fit(X, X[:, 0] + (X[:, 1] > 0))
    with pytest.raises(TypeError, match="toarray"):
        model.predict(sp.csr_matrix(dense))
    assert_parity(reference.predict(silvanforge.load(model), sp.csr_matrix(dense)),
                  model.predict(dense))


def test_sparse_duplicates_and_width(sparse_case):
    models, _, _ = sparse_case
    forest = silvanforge.load(models["lightgbm"])
    # Duplicate entries are summed (scipy's rule), without changing the caller's matrix.
    X = sp.csr_matrix((np.array([1.0, 2.0]), np.array([0, 0]), np.array([0, 2])),
                      shape=(1, 6))
    assert not X.has_canonical_format
    np.testing.assert_array_equal(reference.predict(forest, X),
                                  reference.predict(forest, np.array([[3.0, 0, 0, 0, 0, 0]])))
    assert len(X.data) == 2
    with pytest.raises(InputError, match="expects 6 features"):
        reference.predict(forest, sp.csr_matrix((2, 5)))


# ---- Arrow and polars without pandas, without copies ------------------------------------

def test_arrow_numeric_columns_are_read_in_place():
    table = pa.table({"a": np.arange(5.0), "b": np.arange(5, dtype=np.int32)})
    for i in range(2):
        (segment,) = columns.reader(table).segments(i)
        buffer = table.column(i).chunks[0].buffers()[1]
        assert segment.__array_interface__["data"][0] == buffer.address
    frame = pl.DataFrame({"a": np.arange(5.0)})
    (segment,) = columns.reader(frame).segments(0)
    assert np.shares_memory(segment, frame["a"].to_numpy())


def test_arrow_and_polars_do_not_import_pandas():
    code = """
import sys


class NoPandas:  # pyarrow imports pandas when it can: here it cannot
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "pandas":
            raise ModuleNotFoundError("pandas is blocked", name=name)


sys.meta_path.insert(0, NoPandas())
import numpy as np, polars as pl, pyarrow as pa, silvanforge
from silvanforge import reference
forest = silvanforge.load(sys.argv[1])
cols = {f"f{i}": np.linspace(-1, 1, 9) for i in range(forest.n_features)}
a = reference.predict(forest, pa.table(cols))
b = reference.predict(forest, pl.DataFrame(cols))
assert np.array_equal(a, b) and len(a) == 9
assert "pandas" not in sys.modules, "pandas was imported"
"""
    model = os.path.join(os.path.dirname(silvanforge.__file__), "examples",
                         "xgboost_classifier.json")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", code, model], capture_output=True,
                          text=True, env=env)
    assert done.returncode == 0, done.stderr[-2000:]


# ---- SILVANFORGE_COMPILE=forbid ---------------------------------------------------------

def test_compile_forbidden_by_the_environment(named, monkeypatch):
    model, predictor, test = named
    saved = predictor.to_bytes()
    monkeypatch.setenv("SILVANFORGE_COMPILE", "forbid")
    with pytest.raises(CompileForbiddenError, match="SILVANFORGE_COMPILE=forbid"):
        silvanforge.compile(model)
    with pytest.raises(CompileForbiddenError, match="SILVANFORGE_COMPILE"):
        silvanforge.Predictor.from_bytes(saved, trust_code=False)
    # A trusted saved predictor built for this CPU loads without compiling.
    loaded = silvanforge.Predictor.from_bytes(saved)
    assert_parity(loaded.predict(test), model.predict(test))
    # Outputs whose kernels are built on first use are compiles too.
    for output in ("leaf", "contribs"):
        with pytest.raises(CompileForbiddenError, match="SILVANFORGE_COMPILE"):
            loaded.predict(test, output=output)
    monkeypatch.setenv("SILVANFORGE_COMPILE", "sometimes")
    with pytest.raises(silvanforge.SilvanForgeError, match="expected 'allow' or 'forbid'"):
        silvanforge.compile(model)
