"""The silvanforge command line, run in-process."""

from __future__ import annotations

import logging
import sys

import numpy as np
import pytest

import silvanforge
from silvanforge import cli, load, progress, reference
from silvanforge.backends.cpu import build

xgb = pytest.importorskip("xgboost", reason="xgboost is part of the dev extra")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3)).astype(np.float32)
    y = (X[:, 0] > 0).astype(int)
    booster = xgb.train({"objective": "binary:logistic", "max_depth": 3},
                        xgb.DMatrix(X, label=y), num_boost_round=5)
    path = tmp_path_factory.mktemp("cli") / "model.json"
    booster.save_model(path)
    return path, X


def test_inspect(model, capsys):
    assert cli.main(["inspect", str(model[0])]) == 0
    assert "trees 5, features 3" in capsys.readouterr().out


@pytest.mark.parametrize("output", ["value", "margin", "contribs"])
def test_predict_matches_the_reference(model, tmp_path, output):
    path, X = model
    data = tmp_path / "rows.csv"
    np.savetxt(data, X[:20], delimiter=",")
    out = tmp_path / "out.csv"
    expected = reference.predict(load(path), X[:20], output=output)
    for how in ([], ["--reference"]):
        assert cli.main(["predict", str(path), str(data), "--output", output,
                         "--out", str(out), *how]) == 0
        np.testing.assert_allclose(np.loadtxt(out, delimiter=","), expected, rtol=1e-8)


@pytest.mark.parametrize("level", ["plan", "hir", "mir", "lir", "llvm"])
def test_inspect_dumps_each_level(model, capsys, level, tmp_path):
    schedule = tmp_path / "schedule.txt"
    schedule.write_text("reorder(tree, batch)\n")
    assert cli.main(["inspect", str(model[0]), "--dump", level,
                     "--schedule", str(schedule)]) == 0
    text = capsys.readouterr().out
    marker = {"plan": "schedule:\n  reorder(tree, batch)", "hir": "reorder(tree, batch)",
              "mir": "func @predict", "lir": "kernel predict", "llvm": "define"}[level]
    assert marker in text


def test_compile_then_predict_from_the_saved_predictor(model, tmp_path, capsys):
    path, X = model
    saved = tmp_path / "model.sfp"
    assert cli.main(["compile", str(path), "-o", str(saved), "--schedule", "xgboost",
                     "--representation", "reorg", "--n-jobs", "1"]) == 0
    assert "wrote" in capsys.readouterr().out
    data = tmp_path / "rows.npy"
    np.save(data, X[:30])
    out = tmp_path / "out.csv"
    assert cli.main(["predict", "--predictor", str(saved), str(data), "-o", str(out)]) == 0
    np.testing.assert_allclose(np.loadtxt(out), reference.predict(load(path), X[:30]),
                               rtol=1e-8)
    assert cli.main(["inspect", "--predictor", str(saved), "--dump", "mir"]) == 0
    assert "parallel for" in capsys.readouterr().out
    # --recompile: the same predictions from kernels compiled here (the saved code unread).
    assert cli.main(["predict", "--predictor", "--recompile", str(saved), str(data), "-o",
                     str(out)]) == 0
    np.testing.assert_allclose(np.loadtxt(out), reference.predict(load(path), X[:30]),
                               rtol=1e-8)
    assert cli.main(["inspect", "--predictor", str(saved)]) == 0
    assert "trees" in capsys.readouterr().out


def test_a_saved_predictor_loads_only_when_the_user_says_so(model, tmp_path, capsys):
    """A file is not taken for a predictor by its contents: loading one may run its code."""
    path, X = model
    saved, data = tmp_path / "model.sfp", tmp_path / "rows.npy"
    assert cli.main(["compile", str(path), "-o", str(saved), "--n-jobs", "1"]) == 0
    np.save(data, X[:5])
    capsys.readouterr()
    assert cli.main(["predict", str(saved), str(data)]) == 2
    assert "a saved predictor needs --predictor" in capsys.readouterr().err
    assert cli.main(["inspect", str(saved), "--dump", "plan"]) == 2
    assert "needs --predictor" in capsys.readouterr().err
    assert cli.main(["predict", "--recompile", str(path), str(data)]) == 2
    assert "--recompile applies to a saved predictor" in capsys.readouterr().err


def test_compile_with_probability_tiling_from_a_profile_file(model, tmp_path, capsys):
    path, X = model
    sample, saved = tmp_path / "sample.npy", tmp_path / "tiled.sfp"
    np.save(sample, X[:100])
    assert cli.main(["compile", str(path), "-o", str(saved), "--profile", str(sample),
                     "--tile-size", "3", "--n-jobs", "1"]) == 0
    assert "probability tiles of 3" in capsys.readouterr().out
    data, out = tmp_path / "rows.npy", tmp_path / "out.csv"
    np.save(data, X[:30])
    assert cli.main(["predict", "--predictor", str(saved), str(data), "-o", str(out)]) == 0
    np.testing.assert_allclose(np.loadtxt(out), reference.predict(load(path), X[:30]),
                               rtol=1e-8)
    assert cli.main(["inspect", "--predictor", str(saved), "--dump", "hir"]) == 0
    assert "tiling (probability)" in capsys.readouterr().out


def test_errors_are_messages_not_tracebacks(model, tmp_path, capsys):
    bad = tmp_path / "rows.csv"
    np.savetxt(bad, np.zeros((2, 5)), delimiter=",")
    assert cli.main(["predict", str(model[0]), str(bad)]) == 2
    assert "expects 3 features" in capsys.readouterr().err
    assert cli.main(["inspect", str(tmp_path / "missing.json")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_every_command_has_help(capsys):
    for argv in (["--help"], *([command, "--help"] for command in
                              ("demo", "inspect", "compile", "predict", "tune",
                               "bench"))):
        with pytest.raises(SystemExit) as exit_:
            cli.main(argv)
        assert exit_.value.code == 0
        assert "usage: silvanforge" in capsys.readouterr().out


def test_compile_for_a_named_cpu(model, tmp_path, capsys):
    path, X = model
    saved = tmp_path / "v2.sfp"
    assert cli.main(["compile", str(path), "-o", str(saved), "--cpu", "x86-64-v2"]) == 0
    assert "cpu=x86-64-v2" in capsys.readouterr().out
    assert cli.main(["inspect", "--predictor", str(saved), "--dump", "plan"]) == 0
    assert "built for CPU x86-64-v2" in capsys.readouterr().out


def test_bench_without_the_training_library_benchmarks_silvanforge_alone(
        model, monkeypatch, capsys):
    # A None entry in sys.modules makes ``import xgboost`` raise ImportError, as on the
    # base install (the fixture has already trained the model with the real one).
    monkeypatch.setitem(sys.modules, "xgboost", None)
    assert cli.main(["bench", str(model[0]), "--engines", "silvanforge", "xgboost",
                     "--batch", "8", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert "| 8 | 1 |" in out  # SilvanForge's timing row
    assert "pip install 'silvanforge[xgboost]'" in out


def test_an_onnx_model_without_onnx_says_which_extra(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "onnx", None)
    path = tmp_path / "model.onnx"
    path.write_bytes(b"\x08\x07")  # an ONNX ModelProto's first field: enough to detect
    for command in ("inspect", "compile", "bench"):
        argv = [command, str(path)] + (["-o", str(tmp_path / "m.sfp")]
                                        if command == "compile" else [])
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "pip install 'silvanforge[onnx]'" in err


@pytest.fixture(params=["csv-module", "pyarrow"])
def csv_reader(request, monkeypatch):
    """Each CSV test runs with both readers: pyarrow's, and the csv module's fallback."""
    if request.param == "pyarrow":
        pytest.importorskip("pyarrow.csv", reason="pyarrow is part of the dev extra")
    else:
        monkeypatch.setitem(sys.modules, "pyarrow", None)
        monkeypatch.setitem(sys.modules, "pyarrow.csv", None)
    return request.param


@pytest.fixture(scope="module")
def named_model(tmp_path_factory):
    """A model with feature names, trained on rows with missing values."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, 3))
    X[rng.random(X.shape) < 0.2] = np.nan
    y = (np.nan_to_num(X[:, 0]) + np.nan_to_num(X[:, 2]) > 0).astype(int)
    booster = xgb.train({"objective": "binary:logistic", "max_depth": 3},
                        xgb.DMatrix(X, label=y, feature_names=["a", "b", "c"]),
                        num_boost_round=5)
    path = tmp_path_factory.mktemp("named") / "model.json"
    booster.save_model(path)
    return path, X


def _cell(value: float, missing: str = "") -> str:
    return missing if np.isnan(value) else repr(float(value))


def _predict_csv(path, text, tmp_path, *extra):
    data, out = tmp_path / "rows.csv", tmp_path / "out.csv"
    data.write_text(text)
    code = cli.main(["predict", str(path), str(data), "--reference", "-o", str(out),
                     *extra])
    return code, (np.loadtxt(out, ndmin=1) if code == 0 else None)


def test_csv_header_detected_empty_cells_missing_columns_by_name(
        named_model, csv_reader, tmp_path, capsys):
    path, X = named_model
    rows = X[:4]
    # Columns in another order than the model's, a label among them, pandas' empty cells.
    lines = ["label,c,a,b"] + [",".join(["1"] + [_cell(v) for v in (r[2], r[0], r[1])])
                               for r in rows]
    assert np.isnan(rows).any()  # the test covers missing values
    code, got = _predict_csv(path, "\n".join(lines) + "\n", tmp_path, "-v")
    assert code == 0
    np.testing.assert_allclose(got, reference.predict(load(path), rows), rtol=1e-8)
    err = capsys.readouterr().err  # -v explains how the file was read
    assert "the first line is a header" in err and "by the model's feature names" in err


def test_csv_without_header_by_position_and_a_label_column(named_model, csv_reader,
                                                           tmp_path, capsys):
    path, X = named_model
    text = "\n".join(",".join([_cell(v, "NA") for v in r] + ["0"]) for r in X[:5]) + "\n"
    assert _predict_csv(path, text, tmp_path)[0] == 2
    assert ("the model expects 3 features but the file has 4 columns: use --columns 3"
            in capsys.readouterr().err)
    code, got = _predict_csv(path, text, tmp_path, "--columns", "3")
    assert code == 0
    np.testing.assert_allclose(got, reference.predict(load(path), X[:5]), rtol=1e-8)


@pytest.mark.parametrize("text, message", [
    ("", "the file is empty"),
    ("a,b,c\n", "no rows after the header line"),
    ("1,2,3\n4,5\n", "line 2: 2 cells where line 1 has 3"),
    ("1,2,3\n\n4,x,6\n", "line 3, column 2: 'x' is not a number"),
    ("a,b,zz\n1,2,3\n", "the header names 2 of the model's 3 features but not 'c'"),
])
def test_csv_errors_say_what_to_do(named_model, csv_reader, tmp_path, capsys, text,
                                   message):
    assert _predict_csv(named_model[0], text, tmp_path)[0] == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_forced_header_of_numbers(model, csv_reader, tmp_path):
    path, X = model
    text = "1,2,3\n" + "\n".join(",".join(_cell(v) for v in r) for r in X[:3])
    code, got = _predict_csv(path, text + "\n", tmp_path, "--header")
    assert code == 0
    np.testing.assert_allclose(got, reference.predict(load(path), X[:3]), rtol=1e-8)


def test_tune_and_bench_read_csv_by_name(named_model, tmp_path, capsys):
    path, X = named_model
    data = tmp_path / "rows.csv"
    data.write_text("b,a,c,label\n" + "\n".join(
        ",".join(_cell(v) for v in (r[1], r[0], r[2])) + ",1"
        for r in X[:50]) + "\n")
    assert cli.main(["tune", str(path), str(data), "--budget", "1", "--no-cache",
                     "--quiet", "--n-jobs", "1"]) == 0
    assert '"batch_size": 50' in capsys.readouterr().out
    assert cli.main(["bench", str(path), str(data), "--engines", "silvanforge",
                     "--batch", "8", "--rounds", "1"]) == 0
    assert "| 8 | 1 |" in capsys.readouterr().out


def test_predict_writes_parquet(model, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet", reason="pyarrow is part of the dev extra")
    path, X = model
    data, out = tmp_path / "rows.npy", tmp_path / "out.parquet"
    np.save(data, X[:7])
    assert cli.main(["predict", str(path), str(data), "-o", str(out)]) == 0
    np.testing.assert_allclose(pq.read_table(out).column("prediction").to_numpy(),
                               reference.predict(load(path), X[:7]), rtol=1e-8)


def test_parquet_without_pyarrow_says_which_extra(model, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    data = tmp_path / "rows.npy"
    np.save(data, model[1][:2])
    assert cli.main(["predict", str(model[0]), str(data), "--reference",
                     "-o", str(tmp_path / "out.parquet")]) == 2
    assert "pip install 'silvanforge[parquet]'" in capsys.readouterr().err


def test_verbose_logs_the_compile_phases(model, tmp_path, capsys):
    saved = str(tmp_path / "m.sfp")
    assert cli.main(["compile", str(model[0]), "-o", saved]) == 0
    assert capsys.readouterr().err == ""  # silent by default
    assert cli.main(["-v", "compile", str(model[0]), "-o", saved]) == 0
    err = capsys.readouterr().err
    for phase in ("load: 5 trees", "plan:", "lower to MIR and LIR", "LLVM build:",
                  "compiled in"):
        assert f"silvanforge: {phase}" in err
    assert "LLVM instructions" not in err  # sizes are DEBUG: -vv
    assert cli.main(["compile", str(model[0]), "-o", saved, "-vv"]) == 0
    err = capsys.readouterr().err
    assert "MIR" in err and "LLVM instructions" in err and "bytes of object code" in err
    assert cli.main(["compile", str(model[0]), "-o", saved]) == 0
    assert capsys.readouterr().err == ""  # -v's handler is gone after its command


def test_the_library_logger_is_silent_until_configured(model, caplog):
    assert any(isinstance(h, logging.NullHandler)
               for h in logging.getLogger("silvanforge").handlers)
    with caplog.at_level(logging.INFO, logger="silvanforge"):
        silvanforge.compile(str(model[0]), n_jobs=1)
    assert any(r.name == "silvanforge.runtime.compile" and "compiled in" in r.message
               for r in caplog.records)


@pytest.mark.parametrize("tty", [True, False])
@pytest.mark.skipif(build.cores() < 2, reason="one core: kernels build serially, "
                    "as one module each, with no bar")
def test_progress_bar_on_long_builds_on_a_terminal_only(model, monkeypatch, capsys, tty):
    # Every build counts as long here; the bar shows only where stderr is a terminal.
    monkeypatch.setattr(progress, "PROGRESS_AFTER_S", -1.0)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: tty)
    silvanforge.compile(str(model[0]), n_jobs=1)
    assert ("LLVM build of" in capsys.readouterr().err) == tty


@pytest.mark.parametrize("tty", [True, False])
def test_progress_bars_on_long_loads_on_a_terminal_only(model, monkeypatch, capsys, tty):
    # Every load counts as long here (a 10,000-tree model reads for ~3 s).
    monkeypatch.setattr(progress, "PROGRESS_AFTER_S", -1.0)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: tty)
    load(str(model[0]))
    err = capsys.readouterr().err
    assert ("reading numbers" in err and "reading trees" in err) == tty


def test_csv_cells_and_names_may_have_spaces(named_model, csv_reader, tmp_path):
    path, _ = named_model
    code, got = _predict_csv(path, "c, a, b\n 0.5 , -1.25, NA\n", tmp_path)
    assert code == 0
    rows = np.array([[-1.25, np.nan, 0.5]])
    np.testing.assert_allclose(got, reference.predict(load(path), rows), rtol=1e-8)


def test_predict_leaf_output_and_iteration_range(model, tmp_path):
    path, X = model
    data = tmp_path / "rows.csv"
    np.savetxt(data, X[:20], delimiter=",")
    out = tmp_path / "out.csv"
    booster = xgb.Booster(model_file=str(path))
    expected = booster[1:4].predict(xgb.DMatrix(X[:20]), pred_leaf=True)
    for how in ([], ["--reference"]):
        assert cli.main(["predict", str(path), str(data), "--output", "leaf",
                         "--iteration-range", "1", "4", "--out", str(out), *how]) == 0
        np.testing.assert_array_equal(np.loadtxt(out, delimiter=","), expected)
    saved = tmp_path / "model.sfp"
    assert cli.main(["compile", str(path), "-o", str(saved), "--iteration-range", "0",
                     "2"]) == 0
    assert silvanforge.load_predictor(saved).forest.n_trees == 2
    assert cli.main(["predict", "--predictor", str(saved), str(data),
                     "--iteration-range", "0", "1"]) == 2
