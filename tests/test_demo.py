"""`silvanforge demo`: the shipped examples compile, match, and are timed."""

from __future__ import annotations

import sys
from importlib import resources

import pytest

from silvanforge import cli, demo


def test_demo_checks_and_times_every_example(capsys):
    assert cli.main(["demo"]) == 0
    out = capsys.readouterr().out
    for file, _, _ in demo.EXAMPLES:
        row = next(line for line in out.splitlines() if line.startswith(f"| {file}"))
        assert "| ok (reference" in row and "ns/row" in row
    assert "Next, with a model of your own" in out


def test_demo_against_the_training_libraries(capsys):
    pytest.importorskip("xgboost", reason="xgboost is part of the dev extra")
    pytest.importorskip("lightgbm", reason="lightgbm is part of the dev extra")
    assert demo.main(out=print)
    out = capsys.readouterr().out
    assert ", xgboost " in out and ", lightgbm " in out  # parity with each library
    assert out.count("x |") == 2  # a speed-up for each
    assert "not installed" not in out


def test_demo_on_the_base_install_says_what_to_install(monkeypatch, capsys):
    for library in ("xgboost", "lightgbm"):
        monkeypatch.setitem(sys.modules, library, None)  # ``import`` raises ImportError
    assert cli.main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "pip install 'silvanforge[xgboost]'" in out
    assert "pip install 'silvanforge[lightgbm]'" in out


def test_a_mismatch_fails_the_demo(monkeypatch, capsys):
    monkeypatch.setattr(demo, "REFERENCE_RTOL", -1.0)  # no difference is small enough
    assert cli.main(["demo"]) == 2
    captured = capsys.readouterr()
    assert "MISMATCH" in captured.out and "differ from the reference" in captured.err


def test_the_examples_are_package_data_under_a_megabyte():
    examples = resources.files("silvanforge") / "examples"
    files = [p for p in examples.iterdir() if p.is_file()]
    names = {p.name for p in files}
    for file, _, _ in demo.EXAMPLES:
        assert file in names and file.split(".")[0] + ".rows.npy" in names
    assert sum(len(p.read_bytes()) for p in files) < 1 << 20
