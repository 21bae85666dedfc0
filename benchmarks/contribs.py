"""SHAP contributions: SilvanForge's compiled TreeSHAP against XGBoost's ``pred_contribs``
(higgs) and ``shap.TreeExplainer`` (a scikit-learn random forest trained here), on the
same rows.

    python benchmarks/contribs.py [--rows 1024] [--rounds 5] [--models DIR]

``--models`` is the folder of higgs.json and higgs.test.csv (default ../shared/models).

Engines take turns within each round (the first rotates) and the medians are reported,
both wall time and this process's CPU time: the development machine is shared, and with
other work on its two cores the wall times of single-threaded engines swing by 2x, their
CPU times much less. Every engine's result is checked against the others first.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import time
from typing import Callable

import numpy as np

import silvanforge

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.join(HERE, "..", "..", "shared", "models")


def medians(engines: dict[str, Callable[[], object]], rounds: int) -> dict[str, tuple]:
    """(median wall s, median CPU s, every round's wall s) of one call of each engine,
    interleaved."""
    names = list(engines)
    wall: dict[str, list[float]] = {n: [] for n in names}
    cpu: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            w, c = time.perf_counter(), time.process_time()
            engines[name]()
            wall[name].append(time.perf_counter() - w)
            cpu[name].append(time.process_time() - c)
    return {n: (statistics.median(wall[n]), statistics.median(cpu[n]), wall[n])
            for n in names}


def table(title: str, times: dict[str, tuple], base: str) -> str:
    lines = [f"\n{title}", "| engine | median wall s | median CPU s | wall speedup | CPU speedup |",
             "|---|---:|---:|---:|---:|"]
    bw, bc, _ = times[base]
    for name, (w, c, _) in times.items():
        lines.append(f"| {name} | {w:.4f} | {c:.4f} | {bw / w:.1f}x | {bc / c:.1f}x |")
    one, two = (times[f"silvanforge contribs, {t}"][2] for t in ("1 thread", "2 threads"))
    # The ratio within each round, where both ran moments apart, then its median: the
    # machine's load swings between rounds more than between neighbouring calls.
    lines.append(f"\n2 threads against 1, median of the rounds' wall-time ratios: "
                 f"{statistics.median(a / b for a, b in zip(one, two)):.2f}x")
    return "\n".join(lines)


def cpu_name() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        return next(line.split(":", 1)[1].strip() for line in out.splitlines()
                    if line.startswith("Model name"))
    except (OSError, StopIteration):
        return platform.processor() or "unknown CPU"


def higgs(shared: str, n_rows: int, rounds: int) -> str:
    import xgboost as xgb

    booster = xgb.Booster(model_file=os.path.join(shared, "higgs.json"))
    booster.set_param({"nthread": 1})
    X = np.loadtxt(os.path.join(shared, "higgs.test.csv"), delimiter=",")[:n_rows, :-1]
    X = np.ascontiguousarray(X.astype(np.float32))
    dm = xgb.DMatrix(X, feature_names=booster.feature_names)
    predictor = silvanforge.compile(os.path.join(shared, "higgs.json"), n_jobs=2)
    start = time.perf_counter()
    ours = predictor.predict(X, output="contribs", n_jobs=1)
    build = time.perf_counter() - start
    theirs = booster.predict(dm, pred_contribs=True)
    err = np.abs(ours - theirs).max() / np.abs(theirs).max()
    times = medians({
        "xgboost pred_contribs, 1 thread": lambda: booster.predict(dm, pred_contribs=True),
        "silvanforge contribs, 1 thread": lambda: predictor.predict(X, "contribs", 1),
        "silvanforge contribs, 2 threads": lambda: predictor.predict(X, "contribs", 2),
    }, rounds)
    return (table(f"higgs (100 trees, depth 8), {n_rows} rows; first call (compiles) "
                  f"{build:.2f} s; max relative difference {err:.1e}", times,
                  "xgboost pred_contribs, 1 thread"))


def forest(shared: str, n_rows: int, rounds: int, max_depth: int | None) -> str:
    import shap
    from sklearn.ensemble import RandomForestRegressor

    data = np.loadtxt(os.path.join(shared, "higgs.test.csv"), delimiter=",")
    X, y = data[:, :-1].astype(np.float32), data[:, -1]
    model = RandomForestRegressor(n_estimators=100, max_depth=max_depth, n_jobs=1,
                                  random_state=0).fit(X, y)
    rows = np.ascontiguousarray(X[:n_rows])
    explainer = shap.TreeExplainer(model)
    predictor = silvanforge.compile(model, n_jobs=2)
    start = time.perf_counter()
    ours = predictor.predict(rows, output="contribs", n_jobs=1)
    build = time.perf_counter() - start
    theirs = explainer.shap_values(rows, check_additivity=False)
    err = np.abs(ours[:, :-1] - theirs).max() / np.abs(theirs).max()
    f = silvanforge.load(model)
    times = medians({
        "shap.TreeExplainer": lambda: explainer.shap_values(rows, check_additivity=False),
        "silvanforge contribs, 1 thread": lambda: predictor.predict(rows, "contribs", 1),
        "silvanforge contribs, 2 threads": lambda: predictor.predict(rows, "contribs", 2),
    }, rounds)
    return table(f"RandomForestRegressor (100 trees, max_depth={max_depth}, depth "
                 f"{f.max_depth}, {f.n_nodes} nodes), {n_rows} rows; first call "
                 f"(compiles) {build:.2f} s; max relative difference {err:.1e}",
                 times, "shap.TreeExplainer")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--models", default=SHARED)
    args = parser.parse_args(argv)
    print(f"CPU: {cpu_name()}, {os.cpu_count()} logical CPUs; load average "
          f"{os.getloadavg()[0]:.1f} at the start")
    print(higgs(args.models, args.rows, args.rounds))
    print(forest(args.models, args.rows, args.rounds, 8))
    print(forest(args.models, args.rows, args.rounds, None))
    print(f"\nload average {os.getloadavg()[0]:.1f} at the end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
