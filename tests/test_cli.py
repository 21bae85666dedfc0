"""The silvanforge command line, run in-process."""

from __future__ import annotations

import numpy as np
import pytest

from silvanforge import cli, load, reference

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


@pytest.mark.parametrize("output", ["value", "margin"])
def test_predict_matches_the_reference(model, tmp_path, output):
    path, X = model
    data = tmp_path / "rows.csv"
    np.savetxt(data, X[:20], delimiter=",")
    out = tmp_path / "out.csv"
    expected = reference.predict(load(path), X[:20], output=output)
    for how in ([], ["--reference"]):
        assert cli.main(["predict", str(path), str(data), "--output", output,
                         "--out", str(out), *how]) == 0
        np.testing.assert_allclose(np.loadtxt(out), expected, rtol=1e-8)


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
    for argv in (["--help"], ["inspect", "--help"], ["compile", "--help"],
                 ["predict", "--help"]):
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
