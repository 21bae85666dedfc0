"""Load and compile time and memory against model size (issue 27's "compile at scale").

    python benchmarks/compile_scale.py [--trees 100 300 1000 3000 10000] [--out DIR]
                                       [--lightgbm-code] [--lightgbm-leaves 31 63 ...]
                                       [--rounds 1]

XGBoost JSON models of depth 8 and 100 .. 10,000 trees: 100 trees are trained on
synthetic data, larger models repeat them (the same per-tree work as trained trees; a
10,000-tree training would take longer than the benchmark). Each model is loaded and
compiled (SilvanForge's default plan) in a fresh process, which reports wall and CPU
seconds for ``load`` and ``compile`` and its peak RSS; XGBoost loads the same file in
another fresh process (``xgboost.Booster(model_file=...)``), as the yardstick; with
``--rounds R``, R times each, SilvanForge and XGBoost in turn, and the table holds the
medians and the median of the rounds' ratios (load + compile over XGBoost's load). With
``--lightgbm-code``, also a LightGBM model of 500 trees x 255 leaves compiled with the
default plan and with ``representation="code"``; with ``--lightgbm-leaves``, 100-tree
LightGBM models of those leaf counts, both ways (issue 27's second for 100 trees).
Writes compile_scale.json, compile_scale.md and, with matplotlib, compile_scale.png to
--out.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))

# Run in a fresh interpreter: one model, one measurement, nothing cached. Peak memory is
# VmHWM (ru_maxrss would carry the parent's peak across exec).
_PEAK = r"""
def peak_mb():
    with open("/proc/self/status") as fh:
        return next(int(l.split()[1]) for l in fh if l.startswith("VmHWM")) / 1024
"""
_SILVANFORGE = _PEAK + r"""
import json, resource, sys, time
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
import silvanforge
path, options = sys.argv[1], json.loads(sys.argv[2])
c0, w0 = cpu(), time.perf_counter()
forest = silvanforge.load(path)
c1, w1 = cpu(), time.perf_counter()
predictor = silvanforge.compile(forest, **options)
c2, w2 = cpu(), time.perf_counter()
print(json.dumps({"load_s": w1 - w0, "load_cpu_s": c1 - c0, "compile_s": w2 - w1,
                  "compile_cpu_s": c2 - c1, "peak_mb": peak_mb(),
                  "representation": predictor.plan.representation,
                  "nodes": int(forest.n_nodes)}))
"""
_XGBOOST = _PEAK + r"""
import json, sys, time
import xgboost
w0 = time.perf_counter()
xgboost.Booster(model_file=sys.argv[1])
print(json.dumps({"load_s": time.perf_counter() - w0, "peak_mb": peak_mb()}))
"""


def _run(code: str, *args: str, env: dict | None = None) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *args], check=True,
                         capture_output=True, text=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _medians(runs: list[dict]) -> dict:
    """Each number's median over ``runs`` (other fields: the first run's)."""
    return {k: float(np.median([r[k] for r in runs])) if isinstance(v, float) else v
            for k, v in runs[0].items()}


def xgboost_model(n_trees: int, folder: str) -> str:
    """A depth-8 binary:logistic model of ``n_trees`` trees (100 trained, repeated)."""
    import xgboost as xgb

    base = os.path.join(folder, "base.json")
    if not os.path.exists(base):
        rng = np.random.default_rng(0)
        X = rng.normal(size=(20000, 28))
        y = (X[:, 0] + X[:, 1] * X[:, 2] > 0).astype(int)
        xgb.train({"max_depth": 8, "objective": "binary:logistic", "eta": 0.05,
                   "nthread": 2}, xgb.DMatrix(X, y), 100).save_model(base)
    with open(base) as fh:
        doc = json.load(fh)
    model = doc["learner"]["gradient_booster"]["model"]
    trees = model["trees"]
    model["trees"] = [{**trees[i % len(trees)], "id": i} for i in range(n_trees)]
    model["tree_info"] = [0] * n_trees
    model["gbtree_model_param"]["num_trees"] = str(n_trees)
    if "iteration_indptr" in model:
        model["iteration_indptr"] = list(range(n_trees + 1))
    path = os.path.join(folder, f"xgboost-{n_trees}.json")
    with open(path, "w") as fh:
        json.dump(doc, fh)
    return path


def lightgbm_model(folder: str, trees: int = 500, leaves: int = 255) -> str:
    """``trees`` trees of ``leaves`` leaves (500 x 255: the issue's code-layout compile
    case)."""
    import lightgbm as lgb

    rng = np.random.default_rng(0)
    X = rng.normal(size=(50000, 20))
    y = X[:, 0] * X[:, 1] + np.sin(X[:, 2]) + rng.normal(scale=0.1, size=len(X))
    path = os.path.join(folder, f"lightgbm-{trees}x{leaves}.txt")
    lgb.train({"num_leaves": leaves, "min_data_in_leaf": 5, "verbose": -1,
               "num_threads": 2}, lgb.Dataset(X, y), trees).save_model(path)
    return path


def markdown(rows: list[dict]) -> str:
    out = ["| model | nodes | file MB | representation | load s (CPU) | compile s (CPU, "
           "main process) | load + compile s | peak RSS MB | XGBoost load s | "
           "XGBoost peak MB | ratio |", "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        xgb = (f"{r['xgboost']['load_s']:.2f} | {r['xgboost']['peak_mb']:.0f} | "
               f"{r['ratio']:.2f}" if r.get("xgboost") else "- | - | -")
        out.append(f"| {r['model']} | {r['nodes']} | {r['file_mb']:.1f} | "
                   f"{r['representation']} | {r['load_s']:.2f} ({r['load_cpu_s']:.2f}) | "
                   f"{r['compile_s']:.2f} ({r['compile_cpu_s']:.2f}) | "
                   f"{r['load_s'] + r['compile_s']:.2f} | {r['peak_mb']:.0f} | {xgb} |")
    return "\n".join(out) + "\n"


def plot(rows: list[dict], path: str) -> bool:
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [r for r in rows if r["model"].startswith("xgboost")]
    trees = [r["trees"] for r in xs]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    a.plot(trees, [r["load_s"] + r["compile_s"] for r in xs], "o-", label="SilvanForge "
           "load + compile")
    a.plot(trees, [r["xgboost"]["load_s"] for r in xs], "s--", label="XGBoost load")
    b.plot(trees, [r["peak_mb"] for r in xs], "o-", label="SilvanForge")
    b.plot(trees, [r["xgboost"]["peak_mb"] for r in xs], "s--", label="XGBoost load")
    for ax, what in ((a, "seconds"), (b, "peak RSS, MB")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("trees (depth 8)")
        ax.set_ylabel(what)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return True


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", type=int, nargs="+", default=[100, 300, 1000, 3000, 10000])
    parser.add_argument("--lightgbm-code", action="store_true")
    parser.add_argument("--lightgbm-leaves", type=int, nargs="*", default=[])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    args = parser.parse_args(argv)
    # The models (~280 MB for the default sizes) are removed when the run ends.
    with tempfile.TemporaryDirectory(prefix="sf-compile-scale-") as folder:
        rows = measure(args.trees, args.lightgbm_code, args.lightgbm_leaves, folder,
                       args.rounds)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "compile_scale.json"), "w") as fh:
        json.dump({"cpu": platform.processor() or platform.machine(),
                   "cpus": os.cpu_count(), "rows": rows}, fh, indent=1)
    table = markdown(rows)
    with open(os.path.join(args.out, "compile_scale.md"), "w") as fh:
        fh.write(table)
    if plot(rows, os.path.join(args.out, "compile_scale.png")):
        print("wrote compile_scale.png")
    print(table)
    return 0


def measure(trees: list[int], lightgbm_code: bool, leaves: list[int],
            folder: str, rounds: int = 1) -> list[dict]:
    """A row of measurements for each model, the models written to ``folder``; the
    XGBoost models' rows are medians of ``rounds`` runs, ours and XGBoost's in turn."""
    rows = []
    for n in trees:
        path = xgboost_model(n, folder)
        ours, theirs = [], []
        for _ in range(rounds):
            ours.append(_run(_SILVANFORGE, path, "{}"))
            theirs.append(_run(_XGBOOST, path))
        ratios = [(o["load_s"] + o["compile_s"]) / t["load_s"] for o, t in zip(ours, theirs)]
        row = {"model": f"xgboost {n} trees", "trees": n,
               "file_mb": os.path.getsize(path) / 2**20, **_medians(ours),
               "xgboost": _medians(theirs), "ratio": float(np.median(ratios)),
               "rounds": {"silvanforge": ours, "xgboost": theirs, "ratios": ratios}}
        rows.append(row)
        print(markdown([row]).splitlines()[-1], flush=True)
    shapes = [(100, n) for n in leaves] + ([(500, 255)] if lightgbm_code else [])
    for n, width in shapes:
        path = lightgbm_model(folder, n, width)
        for options in ({}, {"representation": "code"}):
            row = {"model": f"lightgbm {n} x {width} leaves", "trees": n,
                   "file_mb": os.path.getsize(path) / 2**20,
                   **_run(_SILVANFORGE, path, json.dumps(options))}
            rows.append(row)
            print(markdown([row]).splitlines()[-1], flush=True)
    return rows


if __name__ == "__main__":
    sys.exit(main())
