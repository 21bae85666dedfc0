"""The benchmark harness: correctness gate, interleaved medians, reports, CLI, skips."""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest

import silvanforge
from silvanforge import bench, reference
from silvanforge.cli import main

xgb = pytest.importorskip("xgboost")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def case(tmp_path_factory) -> bench.Case:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 4)).astype(np.float32)
    booster = xgb.train({"max_depth": 3, "objective": "binary:logistic", "nthread": 1},
                        xgb.DMatrix(X, label=X[:, 0] + X[:, 1] > 0), num_boost_round=4)
    path = str(tmp_path_factory.mktemp("bench") / "tiny.json")
    booster.save_model(path)
    return bench.case_from_file(path, X, n_rows=64)


class _Offset(bench.Engine):
    """An engine whose predictions are the reference's plus ``offset``."""

    module = "numpy"

    def __init__(self, name: str, offset: float):
        self.name, self.offset = name, offset

    def prepare(self, case, threads):
        return bench._Calls(lambda X, t: reference.predict(case.forest, X) + self.offset)


class _Absent(bench.Engine):
    name, module = "absent", "no_such_module_for_silvanforge_tests"


def _run(case, engines, **kw):
    return bench.run([case], engines, batches=[1, 16], threads=[1], rounds=2, repeat=1,
                     min_s=1e-4, log=lambda line: None, **kw)


def test_wrong_engine_is_reported_as_mismatch_not_timed(case):
    result = _run(case, [_Offset("exact", 0.0), _Offset("wrong", 1e-3)])
    rows = {(r["engine"], r["batch"]): r for r in result["rows"]}
    for batch in (1, 16):
        assert rows["exact", batch]["status"] == "ok"
        assert rows["exact", batch]["ns_per_row"] > 0
        wrong = rows["wrong", batch]
        assert wrong["status"] == "mismatch" and "ns_per_row" not in wrong
        assert wrong["max_abs_error"] == pytest.approx(1e-3)
    assert "MISMATCH" in bench.markdown(result)


def test_small_batches_are_timed_over_distinct_rows(case):
    # Repeating one small batch lets branch predictors learn its paths: timing loops take
    # distinct batches in turn (the correctness check takes the first).
    seen = []

    class Recording(bench.Engine):
        name, module = "recording", "numpy"

        def prepare(self, case_, threads):
            return bench._Calls(lambda X, t: (seen.append(X[:, 0].tobytes()),
                                              reference.predict(case_.forest, X))[1])

    rows = _run(case, [Recording()])["rows"]
    assert [r["status"] for r in rows] == ["ok", "ok"]
    for size in (1, 16):
        calls = [b for b in seen if len(b) == 4 * size]
        batches = [b[:, 0].tobytes() for b in bench.distinct_batches(case.rows, size)]
        # The check takes batch 0, then every timed prediction the next batch.
        assert calls == batches[:1] + batches[:len(calls) - 1] and len(calls) >= 3
        assert len(set(batches)) == len(batches) == 64 // size
    assert bench.distinct_batches(case.rows, 16)[1].flags.c_contiguous
    assert len(bench.distinct_batches(case.rows, 65)) == 1


def test_compare_tolerance_and_shapes():
    expected = np.linspace(0.1, 0.9, 9)
    assert bench.compare(expected * (1 + 1e-6), expected)[0]
    assert not bench.compare(expected + 1e-3, expected)[0]
    two = np.column_stack([1 - expected, expected])
    assert bench.compare(two, expected)[0]
    assert bench.compare(np.ones((9, 3)), expected) == (False, float("inf"))


def test_interleaved_medians_alternate_and_take_medians():
    calls = []
    samples = {"a": iter([5.0, 1.0, 3.0, 9.0, 2.0]), "b": iter([4.0, 4.0, 8.0, 6.0, 7.0])}

    def timer(name):
        def run(loops):
            calls.append(name)
            return next(samples[name]) * loops if len(calls) > 2 else 1.0  # 2 calibrations
        return run

    times = bench.interleaved_medians({"a": timer("a"), "b": timer("b")}, rounds=4,
                                      repeat=1, min_s=0.5)
    # a: samples 5, 1, 3, 9 -> median 4; b: 4, 4, 8, 6 -> median 5.
    assert times == {"a": 4.0, "b": 5.0}
    assert calls[2:] == ["a", "b", "b", "a", "a", "b", "b", "a"]  # starting engine rotates


def test_report_writes_json_and_markdown(case, tmp_path):
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    try:
        import report
    finally:
        sys.path.pop(0)
    result = _run(case, [bench.SilvanForgeEngine(), bench.XGBoostEngine()])
    paths = report.write(result, str(tmp_path), log=lambda line: None)
    with open(paths[0]) as fh:
        data = json.load(fh)
    assert {r["engine"] for r in data["rows"]} == {"silvanforge", "xgboost"}
    assert all(r["status"] == "ok" and r["ratio_to_best_peer"] > 0 for r in data["rows"])
    assert data["rows"][0]["ns_per_node"] > 0
    text = open(paths[1]).read()
    assert "| batch | threads | silvanforge | xgboost |" in text
    assert text.count("| 16 | 1 |") == 1


def test_runs_summary_takes_the_median_of_the_runs_ratios():
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    try:
        import runs
    finally:
        sys.path.pop(0)

    def run(ours, theirs, status="ok"):
        rows = [{"model": "m", "batch": 1024, "threads": 1, "engine": "silvanforge",
                 "status": status, "ns_per_row": ours},
                {"model": "m", "batch": 1024, "threads": 1, "engine": "xgboost",
                 "status": "ok", "ns_per_row": theirs}]
        return {"rows": rows}

    # Ratios 6, 5, 8 (the failed run left out): median 6, not the ratio of the medians
    # of the times (1500 / 250).
    results = [run(250, 1500), run(300, 1500), run(250, 2000), run(None, 1800, "failed")]
    (row,) = runs.summary(results, "xgboost")
    assert (row["engine"], row["runs"], row["ratio"], row["low"], row["high"]) == \
        ("silvanforge", 3, 6.0, 5.0, 8.0)
    assert (row["ns"], row["peer_ns"]) == (250, 1500)
    assert "| m | 1024 | 1 | silvanforge | 3 | 6.00 (5.00-8.00) | 250 | 1500 |" in \
        runs.markdown([row], "xgboost")


def test_missing_engines_are_listed_with_reasons(case):
    engines = [_Offset("exact", 0.0), _Absent(), bench.LleavesEngine(None),
               bench.LightGBMEngine()]
    result = _run(case, engines)
    reasons = {s["engine"]: s["reason"] for s in result["skipped"]}
    assert "not importable" in reasons["absent"]
    assert "--lleaves-venv" in reasons["lleaves"]
    if "lightgbm" in reasons:  # lightgbm installed: skipped for this XGBoost model
        assert "LightGBM" in reasons["lightgbm"]
    assert "Skipped" in bench.markdown(result)
    assert {r["engine"] for r in result["rows"]} == {"exact"}


def test_cli_bench_help(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "--help"])
    assert exit_.value.code == 0
    assert "--lleaves-venv" in capsys.readouterr().out


def test_cli_bench_runs_on_a_model_file(case, capsys, tmp_path):
    out = tmp_path / "r.json"
    assert main(["bench", case.path, "--engines", "silvanforge", "xgboost", "--batch",
                 "8", "--rounds", "1", "--json", str(out)]) == 0
    assert "| 8 | 1 |" in capsys.readouterr().out
    assert json.loads(out.read_text())["rows"]


def test_random_rows_cross_the_model_thresholds(case):
    rows = bench.random_rows(case.forest, 200)
    leaves = reference.leaves(case.forest, rows)
    assert len(np.unique(leaves[:, 0])) > 1
    assert silvanforge.compile(case.forest, n_jobs=1).predict(rows).shape == (200,)


class _Traced(_Offset):
    """A correct engine that records whether tracemalloc traced each of its prepares."""

    def __init__(self):
        super().__init__("traced", 0.0)
        self.tracing: list[bool] = []

    def prepare(self, case, threads):
        import tracemalloc
        self.tracing.append(tracemalloc.is_tracing())
        return super().prepare(case, threads)


def test_prepare_is_timed_untraced_and_its_memory_traced_apart(case):
    # tracemalloc slows Python-heavy compiles several-fold: the timed prepare runs
    # without it, a second one measures the peak.
    engine = _Traced()
    result = _run(case, [engine, bench.CheckoutEngine(os.path.join(ROOT, "src"), "here")])
    assert engine.tracing == [False, True]
    rows = {r["engine"]: r for r in result["rows"]}
    assert rows["traced"]["prepare_peak_mib"] >= 0
    assert rows["silvanforge@here"]["prepare_peak_mib"] is None  # its own process
    assert rows["silvanforge@here"]["compile_s"] > 0
    assert "| silvanforge@here |" in bench.markdown(result)


def test_another_checkout_runs_in_its_own_process(case):
    # This checkout's own src as the "other" one: a real worker process, checked
    # against the reference and timed like any engine.
    src = os.path.join(ROOT, "src")
    result = _run(case, [bench.CheckoutEngine(src, "here"),
                         bench.CheckoutEngine(os.path.join(ROOT, "docs"), "nowhere")])
    rows = {(r["engine"], r["batch"]): r for r in result["rows"]}
    assert rows["silvanforge@here", 16]["status"] == "ok"
    assert rows["silvanforge@here", 16]["ns_per_row"] > 0
    reasons = {s["engine"]: s["reason"] for s in result["skipped"]}
    assert "holds no silvanforge package" in reasons["silvanforge@nowhere"]
