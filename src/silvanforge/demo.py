"""``silvanforge demo``: the shipped example models, compiled, checked and timed.

The examples (``silvanforge/examples/``, made by ``tools/make_examples.py``) are an
XGBoost classifier and a LightGBM regressor with sample rows. Each is compiled, its
predictions checked against the reference evaluator (and against the training library
when it is installed), and its predict timed against that library's on one thread.
"""

from __future__ import annotations

import importlib
import time
from dataclasses import dataclass
from importlib import resources
from typing import Any, Callable

import numpy as np

from . import reference
from .frontends import load
from .runtime import compile

# (model file, training library, what it is). The rows are <model stem>.rows.npy.
EXAMPLES = (("xgboost_classifier.json", "xgboost", "binary classifier"),
            ("lightgbm_regressor.txt", "lightgbm", "regressor"))
# Float32 inputs and float32 leaf sums in the libraries: agreement to this relative
# tolerance is parity; the reference is matched to float64 rounding (the order of the
# trees' sum may differ).
LIBRARY_RTOL = 1e-5
REFERENCE_RTOL = 1e-8
REPEATS = 7  # timings are the best of this many runs: the least disturbed one


@dataclass
class Result:
    name: str
    library: str
    what: str
    trees: int
    rows: int
    compile_s: float
    reference_error: float
    library_error: float | None
    silvanforge_s: float
    library_s: float | None
    note: str

    @property
    def ok(self) -> bool:
        return self.reference_error <= REFERENCE_RTOL and (
            self.library_error is None or self.library_error <= LIBRARY_RTOL)


def _best_time(fn: Callable[[], Any]) -> float:
    fn()  # warm: first-call costs are not the steady state
    best = float("inf")
    for _ in range(REPEATS):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _library_predict(library: str, path: str) -> Callable[[np.ndarray], np.ndarray] | None:
    """The training library's own predict on one thread, or None when not installed."""
    try:
        module = importlib.import_module(library)
    except ImportError:
        return None
    if library == "xgboost":
        booster = module.Booster(model_file=path)
        booster.set_param({"nthread": 1})
        return booster.inplace_predict
    booster = module.Booster(model_file=path)
    return lambda X: booster.predict(X, num_threads=1)


def run_example(file: str, library: str, what: str) -> Result:
    examples = resources.files("silvanforge") / "examples"
    with resources.as_file(examples / file) as path, \
            resources.as_file(examples / (file.split(".")[0] + ".rows.npy")) as rows_path:
        rows = np.load(rows_path)
        forest = load(str(path))
        start = time.perf_counter()
        predictor = compile(forest, n_jobs=1)
        compile_s = time.perf_counter() - start
        got = predictor.predict(rows)
        expected = reference.predict(forest, rows)
        theirs = _library_predict(library, str(path))
    scale = np.maximum(np.abs(expected), 1.0)
    result = Result(file, library, what, forest.n_trees, len(rows), compile_s,
                    float(np.max(np.abs(got - expected) / scale)), None,
                    _best_time(lambda: predictor.predict(rows)), None, "")
    if theirs is None:
        result.note = (f"{library} is not installed: pip install "
                       f"'silvanforge[{library}]' to time against it")
    else:
        result.library_error = float(np.max(np.abs(got - theirs(rows)) / scale))
        result.library_s = _best_time(lambda: theirs(rows))
    return result


def _parity(result: Result) -> str:
    text = f"reference {result.reference_error:.0e}"
    if result.library_error is not None:
        text += f", {result.library} {result.library_error:.0e}"
    return ("ok (" if result.ok else "MISMATCH (") + text + ")"


def table(results: list[Result]) -> str:
    lines = ["| model | trees | compile | parity (max rel. diff) | SilvanForge | "
             "training library | speed-up |", "|---|---:|---:|---|---:|---:|---:|"]
    for r in results:
        per_row = 1e9 / r.rows
        ours = f"{r.silvanforge_s * per_row:.0f} ns/row"
        theirs = (f"{r.library_s * per_row:.0f} ns/row" if r.library_s is not None
                  else "not installed")
        ratio = f"{r.library_s / r.silvanforge_s:.1f}x" if r.library_s is not None else "-"
        lines.append(f"| {r.name} ({r.library} {r.what}) | {r.trees} | "
                     f"{r.compile_s:.2f} s | {_parity(r)} | {ours} | {theirs} | {ratio} |")
    return "\n".join(lines)


NEXT = """\
Next, with a model of your own:
  silvanforge inspect model.json                  # what the model is
  silvanforge compile model.json -o model.sfp -v  # compile (phases and times with -v)
  silvanforge predict --predictor model.sfp rows.csv -o scores.csv
  silvanforge bench model.json rows.csv           # against every installed engine
  silvanforge tune model.json rows.csv            # search for the fastest schedule
In Python: predictor = silvanforge.compile("model.json"); predictor.predict(X)
Docs: README.md and docs/ in the repository."""


def main(out: Callable[[str], None] = print) -> bool:
    """Run every example and print the table and where to go next; True when every
    example's predictions match."""
    results = []
    for file, library, what in EXAMPLES:
        results.append(run_example(file, library, what))
    out(f"SilvanForge demo: {len(results)} example models compiled for this CPU, "
        f"predicting {results[0].rows} rows on one thread\n")
    out(table(results))
    for r in results:
        if r.note:
            out(f"  {r.note}")
    out("")
    out(NEXT)
    return all(r.ok for r in results)
