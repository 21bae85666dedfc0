"""Exported libraries (silvanforge export, Predictor.export, load_library): a C program
built against the header alone predicts what the reference predicts, from several
threads at once; cross-compiled objects are checked with readelf.

CI must run these: there a missing ``cc`` or ``readelf`` is a failure; elsewhere (no
``CI`` in the environment) a skip with the reason printed.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import silvanforge
from silvanforge import reference
from silvanforge.backends.cpu import Target
from silvanforge.cli import main
from silvanforge.errors import (BackendError, ContributionsError, InputError,
                                UnsupportedModelError)
from silvanforge.export import library
from silvanforge.runtime import export

from util import assert_parity

CHECK_C = Path(__file__).parent / "export_c" / "check.c"


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        reason = f"no {name} on the PATH"
        if os.environ.get("CI"):
            pytest.fail(f"{reason} (CI must run the export tests)")
        print(f"\nskipped: {reason}")
        pytest.skip(reason)
    return path


def _rows(n_features: int, n: int = 300, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, n_features))
    X[rng.random(X.shape) < 0.1] = np.nan
    return X


def _run_c(directory: Path, name: str, X: np.ndarray, threads: int = 0,
           leaf: int = 0, contribs: bool = False) -> Any:
    """Build tests/export_c/check.c against directory/NAME.h and libNAME.so, run it on
    ``X``: (value, margin, value from float32 rows), each rows x N_OUTPUTS; with
    ``leaf`` trees, (that, the leaf ids); with ``contribs``, (that, [ids,] the
    contributions from float64 and from float32 rows, each rows x N_OUTPUTS x
    (N_FEATURES + 1))."""
    cc = _tool("cc")
    exe = directory / f"check_{name}"
    flags = ["-DLEAF"] * bool(leaf) + ["-DCONTRIBS"] * contribs
    subprocess.run([cc, "-O1", *flags, f"-DNAME={name}",
                    f'-DHEADER="{name}.h"', "-I",
                    str(directory), str(CHECK_C), "-o", str(exe), "-L", str(directory),
                    f"-l{name}", f"-Wl,-rpath,{directory.resolve()}", "-pthread", "-lm"],
                   check=True)
    rows = np.ascontiguousarray(X, dtype=np.float64)
    rows.tofile(directory / "rows.bin")
    args = [str(exe), str(directory / "rows.bin"), str(len(rows)), str(directory / "out.bin")]
    done = subprocess.run(args + ([str(threads)] if threads else []), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, f"check exited {done.returncode}: {done.stderr}"
    data = (directory / "out.bin").read_bytes()
    n, F = rows.shape
    ids = np.frombuffer(data[len(data) - 4 * leaf * n:], np.int32)
    doubles = np.frombuffer(data[:len(data) - ids.nbytes])
    # value, margin, value32: 3 x K a row; the contributions: 2 x K x (F + 1).
    K = len(doubles) // (n * (3 + 2 * (F + 1) * contribs))
    got = [doubles[:3 * n * K].reshape(3, n, K)]
    if leaf:
        got.append(ids.reshape(n, leaf))
    if contribs:
        got.append(doubles[3 * n * K:].reshape(2, n, K, F + 1))
    return got[0] if len(got) == 1 else tuple(got)


def _check(forest, results: np.ndarray, X: np.ndarray) -> None:
    value, margin, value32 = results
    flat = forest.flat_output and forest.n_outputs == 1
    for got, output, rows in ((value, "value", X), (margin, "margin", X),
                              (value32, "value", X.astype(np.float32))):
        expected = reference.predict(forest, rows, output=output)
        assert_parity(got[:, 0] if flat else got, expected, output)


@pytest.fixture(scope="module")
def xgb_model(tmp_path_factory):
    xgb = pytest.importorskip("xgboost")
    X = _rows(6, 400)
    y = (np.nan_to_num(X[:, 0]) + np.nan_to_num(X[:, 1]) > 0).astype(int)
    path = tmp_path_factory.mktemp("xgb") / "clf.json"
    xgb.XGBClassifier(n_estimators=20, max_depth=4, n_jobs=1).fit(X, y).save_model(path)
    return path


def test_xgboost_library_from_c_matches_the_reference_in_threads(xgb_model, tmp_path):
    predictor = silvanforge.compile(xgb_model)
    written = predictor.export(tmp_path, name="xgbc")
    assert written.library == tmp_path / "libxgbc.so" and written.header.exists()
    header = written.header.read_text()
    assert "#define xgbc_N_FEATURES 6" in header and "#define xgbc_N_OUTPUTS 1" in header
    X = _rows(6, 300, seed=1)
    # float64 rows of more than a small call go to the main kernel as they are (it
    # rounds them in its row copy: xgbc.call64); float32 ones to xgbc.call.
    symbols = subprocess.run([_tool("readelf"), "-s", str(written.library)],
                             capture_output=True, text=True, check=True).stdout
    assert "xgbc.call64" in symbols and "rows_are_f64" in predictor.dump("lir")
    _check(predictor.forest, _run_c(tmp_path, "xgbc", X, threads=4), X)
    # No Python, no LLVM: libc (with the dynamic loader, whose __tls_get_addr finds the
    # thread-local error), libm and the OpenMP runtime at most.
    needed = subprocess.run([_tool("readelf"), "-d", str(written.library)],
                            capture_output=True, text=True, check=True).stdout
    libs = {line.split("[")[1].split("]")[0] for line in needed.splitlines()
            if "(NEEDED)" in line and "[ld-linux" not in line}
    assert libs <= {"libc.so.6", "libm.so.6", "libgomp.so.1", "libomp.so"}, libs
    # In Python: the same numbers as the predictor, without compiling.
    lib = silvanforge.load_library(written.library)
    for output in ("value", "margin"):
        for n in (1, 5, 300):
            np.testing.assert_array_equal(lib.predict(X[:n], output=output),
                                          predictor.predict(X[:n], output=output))
    assert lib.metadata["n_features"] == 6 and lib.n_outputs == 1
    with pytest.raises(InputError, match="output must be"):
        lib.predict(X, output="leaf")
    with pytest.raises(InputError, match="expects 6 features"):
        lib.predict(X[:, :3])
    assert lib.predict(X[:0]).shape == (0,)
    # The error string is per thread, also when the library is dlopen'ed.
    c = ctypes.CDLL(str(written.library))
    c.xgbc_predict.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p]
    c.xgbc_last_error.restype = ctypes.c_char_p
    seen = []

    def fail() -> None:
        seen.append((c.xgbc_predict(None, 3, None), c.xgbc_last_error()))

    thread = threading.Thread(target=fail)
    thread.start()
    thread.join()
    assert seen == [(1, b"rows or out is NULL")] and c.xgbc_last_error() == b""


def test_lightgbm_categorical_multiclass_from_the_cli(tmp_path, capsys):
    lgb = pytest.importorskip("lightgbm")
    rng = np.random.default_rng(2)
    X = rng.normal(size=(600, 5))
    X[:, 1] = rng.integers(0, 12, size=600)
    X[rng.random(X.shape) < 0.05] = np.nan
    y = (np.nan_to_num(X[:, 0]) > 0).astype(int) + (np.nan_to_num(X[:, 1]) % 3 == 0)
    booster = lgb.train({"objective": "multiclass", "num_class": 3, "verbose": -1,
                         "num_leaves": 8, "min_data_per_group": 5, "cat_smooth": 1,
                         "num_threads": 1},
                        lgb.Dataset(X, y, categorical_feature=[1]), num_boost_round=8)
    model = tmp_path / "multi.lgb.txt"
    booster.save_model(model)
    out = tmp_path / "lib"
    assert main(["export", str(model), "-o", str(out), "--n-jobs", "2", "--contribs"]) == 0
    assert f"wrote {out / 'libmulti.so'}" in capsys.readouterr().out
    forest = silvanforge.load(model)
    assert forest.has_categorical and forest.n_outputs == 3
    X_test = X[:200].copy()
    X_test[:20, 1] = [-1, 0.5, 11.5, 12, 40, np.nan, 3, 7, 2.99, 1e9] * 2
    results, (phi, phi32) = _run_c(out, "multi", X_test, threads=2, contribs=True)
    _check(forest, results, X_test)
    assert "until set: 2" in (out / "multi.h").read_text()
    # SHAP contributions, (rows, 3 classes, 5 features + 1), from float64 and float32 rows.
    for got, rows in ((phi, X_test), (phi32, X_test.astype(np.float32))):
        np.testing.assert_allclose(got, reference.contributions(forest, rows),
                                   rtol=1e-9, atol=1e-9)
    lib = silvanforge.load_library(out / "libmulti.so")
    assert lib.metadata["outputs"]["contribs"] == {
        "function": "multi_predict_contribs", "columns": 18, "shape": [3, 6]}
    np.testing.assert_array_equal(lib.predict(X_test[:30], output="contribs"), phi[:30])


@pytest.mark.parametrize("kind", ["forest_classifier", "gb_regressor"])
def test_sklearn_models(kind, tmp_path):
    ensemble = pytest.importorskip("sklearn.ensemble")
    X = np.nan_to_num(_rows(4, 300, seed=3))
    if kind == "forest_classifier":
        y = (X[:, 0] > 0).astype(int) + (X[:, 2] > 0.5)
        model = ensemble.RandomForestClassifier(n_estimators=8, max_depth=5,
                                                random_state=0).fit(X, y)
    else:
        model = ensemble.GradientBoostingRegressor(n_estimators=15, max_depth=3,
                                                   random_state=0).fit(X, X[:, 0] * 2)
    written = export(model, tmp_path, name="sk")
    forest = silvanforge.load(model)
    _check(forest, _run_c(tmp_path, "sk", X[:150]), X[:150])
    assert_parity(silvanforge.load_library(written.library).predict(X),
                  reference.predict(forest, X))


def test_privatized_buffers_and_small_calls(xgb_model, tmp_path):
    # tree_parallel sums into a per-thread buffer the library allocates each call.
    predictor = silvanforge.compile(xgb_model, schedule="tree_parallel", n_jobs=2)
    predictor.export(tmp_path, name="tp")
    X = _rows(6, 50, seed=4)
    _check(predictor.forest, _run_c(tmp_path, "tp", X, threads=3), X)


def test_a_plan_of_two_layouts(tmp_path):
    # Built for x86-64-v3 (this test's CPU must run AVX2 code), a LightGBM model walks
    # masks for blocks and code for up to 8 rows: the library's small calls take the
    # code kernel, its others the masks, both reading their own tables.
    lgb = pytest.importorskip("lightgbm")
    if not Target.named("x86-64-v3").runs_on(Target.host()):
        pytest.skip("needs a CPU that runs x86-64-v3 code (AVX2)")
    X = _rows(5, 600)
    y = np.nan_to_num(X[:, 0]) * 2 + np.nan_to_num(X[:, 1]) ** 2
    booster = lgb.train({"num_leaves": 31, "verbose": -1, "num_threads": 1},
                        lgb.Dataset(X, y), num_boost_round=20)
    predictor = silvanforge.compile(booster, cpu="x86-64-v3", n_jobs=2)
    assert (predictor.plan.representation, predictor.plan.small_representation) == \
        ("mask", "code")
    lib = silvanforge.load_library(predictor.export(tmp_path / "two", name="two").library)
    for n in (1, 8, 9, 300):
        np.testing.assert_array_equal(lib.predict(X[:n]), predictor.predict(X[:n]))
        assert_parity(lib.predict(X[:n]), booster.predict(X[:n]), "value")


def test_cross_compiled_object_for_aarch64(xgb_model, tmp_path, capsys):
    readelf = _tool("readelf")
    assert main(["export", str(xgb_model), "-o", str(tmp_path), "--name", "arm",
                 "--triple", "aarch64-linux-gnu", "--cpu", "neoverse-n1"]) == 0
    said = capsys.readouterr().out
    assert "link them with: aarch64-linux-gnu-gcc -shared" in said
    assert sorted(p.name for p in tmp_path.iterdir()) == ["arm.h", "arm.o"]
    head = subprocess.run([readelf, "-h", str(tmp_path / "arm.o")], capture_output=True,
                          text=True, check=True).stdout
    assert "AArch64" in head and "REL (Relocatable file)" in head
    symbols = subprocess.run([readelf, "-sW", str(tmp_path / "arm.o")],
                             capture_output=True, text=True, check=True).stdout
    defined = {line.split()[-1] for line in symbols.splitlines()
               if " GLOBAL " in line and " UND " not in line}
    assert {"arm_predict", "arm_predict_margin", "arm_predict_f32", "arm_last_error",
            "arm_set_num_threads", "arm_metadata"} <= defined
    assert not any(".kernel" in s for s in defined)  # the kernels stay internal
    with pytest.raises(BackendError, match="'native' is this machine's"):
        export(xgb_model, tmp_path, triple="aarch64-linux-gnu", cpu="native")
    # Model buffers are written in the target's byte order.
    assert library._big_endian("powerpc64-linux-gnu")
    assert not library._big_endian("aarch64-linux-gnu")


def test_without_a_compiler_the_object_and_the_link_command(xgb_model, tmp_path,
                                                            monkeypatch):
    monkeypatch.setattr(library, "compiler", lambda: None)
    written = export(xgb_model, tmp_path, name="noc")
    assert written.library is None and written.object == tmp_path / "noc.o"
    assert "link them with:" in str(written)
    # The command it gives links a working library.
    _tool("cc")
    subprocess.run(written.link_command, shell=True, check=True, cwd=tmp_path)
    X = _rows(6, 20, seed=5)
    _check(silvanforge.load(xgb_model), _run_c(tmp_path, "noc", X), X)


def test_refusals(xgb_model, tmp_path):
    ensemble = pytest.importorskip("sklearn.ensemble")
    X = np.nan_to_num(_rows(3, 100))
    binary = ensemble.GradientBoostingClassifier(n_estimators=3).fit(X, X[:, 0] > 0)
    with pytest.raises(UnsupportedModelError, match="sigmoid_pair"):
        export(binary, tmp_path)
    with pytest.raises(InputError, match="C identifier"):
        export(xgb_model, tmp_path, name="2-bad")
    # A library for a CPU this machine is not is refused, not run into SIGILL.
    _tool("cc")
    other = "bonnell" if silvanforge.backends.cpu.Target.host().cpu != "bonnell" else "atom"
    written = export(xgb_model, tmp_path, name="other", cpu=other)
    with pytest.raises(BackendError, match=f"built for CPU {other}"):
        silvanforge.load_library(written.library)
    with pytest.raises(InputError, match="libNAME.so"):
        silvanforge.load_library(tmp_path / "other.h")


def test_iteration_range(xgb_model, tmp_path):
    _tool("cc")
    written = export(xgb_model, tmp_path, name="half", iteration_range=(0, 10))
    X = _rows(6, 50, seed=6)
    assert_parity(silvanforge.load_library(written.library).predict(X),
                  reference.predict(silvanforge.load(xgb_model).slice(0, 10), X))


def test_leaf_output(xgb_model, tmp_path):
    X = _rows(6, 40, seed=7)
    expected = reference.leaf_output(silvanforge.load(xgb_model), X)
    assert main(["export", str(xgb_model), "-o", str(tmp_path), "--name", "lf",
                 "--leaf"]) == 0
    header = (tmp_path / "lf.h").read_text()
    assert "#define lf_N_TREES 20" in header and "int32_t *out" in header
    results, ids = _run_c(tmp_path, "lf", X, leaf=20)
    _check(silvanforge.load(xgb_model), results, X)
    assert np.array_equal(ids, expected)
    # float64 rows of more than a small call reach the leaf kernel as they are (it
    # rounds them in its row copy: lf.leaf_call64); fewer through a converted copy.
    symbols = subprocess.run([_tool("readelf"), "-s", str(tmp_path / "liblf.so")],
                             capture_output=True, text=True, check=True).stdout
    assert "lf.leaf_call64" in symbols
    # A predictor compiled with the leaf output exports it as it computes it.
    predictor = silvanforge.compile(xgb_model, outputs=("leaf",))
    got = silvanforge.load_library(predictor.export(tmp_path / "p", name="lf").library)
    for n in (1, 8, 9, 40):
        leaves = got.predict(X[:n], output="leaf")
        assert leaves.dtype == np.int32
        np.testing.assert_array_equal(leaves, predictor.predict(X[:n], output="leaf"))
        np.testing.assert_array_equal(leaves, expected[:n])


def test_contributions(xgb_model, tmp_path):
    # A predictor compiled with the contributions exports them as it computes them.
    predictor = silvanforge.compile(xgb_model, outputs=("contribs",))
    written = predictor.export(tmp_path, name="xc")
    header = written.header.read_text()
    assert "int xc_predict_contribs(const double *rows, int64_t n_rows, double *out);" \
        in header and "xc_predict_leaf" not in header
    X = _rows(6, 120, seed=8)
    results, (phi, phi32) = _run_c(tmp_path, "xc", X, threads=3, contribs=True)
    forest = silvanforge.load(xgb_model)
    _check(forest, results, X)
    expected = reference.contributions(forest, X)  # (rows, 6 features + 1): one output
    for got in (phi, phi32):  # XGBoost compares in float32: the same from either
        np.testing.assert_allclose(got[:, 0], expected, rtol=1e-9, atol=1e-9)
    lib = silvanforge.load_library(written.library)
    for n in (0, 1, 9, 120):
        got = lib.predict(X[:n], output="contribs")
        assert got.shape == (n, 7)
        np.testing.assert_array_equal(got, predictor.predict(X[:n], output="contribs"))


def test_contributions_refused_without_covers(xgb_model, tmp_path):
    bare = silvanforge.load(xgb_model).replace(cover=None, source="onnx")
    with pytest.raises(ContributionsError, match="covers"):
        export(bare, tmp_path, name="bare", outputs=("contribs",))
    with pytest.raises(ContributionsError, match="covers"):
        silvanforge.compile(bare, outputs=("contribs",))
    assert not (tmp_path / "bare.h").exists()
