"""Leaf output: SilvanForge's compiled ``predict(X, output="leaf")`` against XGBoost's
``predict(pred_leaf=True)``, same rows, one thread.

    python benchmarks/leaf.py [MODEL.json] [ROWS.csv] [--batch 1024]

Defaults to ../shared/models/higgs.json and its test rows (feature columns, then the
label). Both results are checked equal first; the times are medians of interleaved
rounds (bench.interleaved_medians), printed as a Markdown table with the CPU's name.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import numpy as np

import silvanforge
from cpu_xgboost import SHARED, _medians, _rows


def cpu_name() -> str:
    """The CPU as ``lscpu`` names it."""
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    return next((line.split(":", 1)[1].strip() for line in out.splitlines()
                 if line.startswith("Model name")), "unknown CPU")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default=os.path.join(SHARED, "higgs.json"))
    parser.add_argument("rows", nargs="?", default=os.path.join(SHARED, "higgs.test.csv"))
    parser.add_argument("--batch", type=int, default=1024)
    args = parser.parse_args(argv)
    import xgboost as xgb

    forest = silvanforge.load(args.model)
    predictor = silvanforge.compile(forest, n_jobs=1)
    X = _rows(args.rows, forest.n_features, args.batch)
    t = time.perf_counter()
    ids = predictor.predict(X, output="leaf")  # builds the leaf kernels
    build_s = time.perf_counter() - t
    booster = xgb.Booster(model_file=args.model)
    booster.set_param({"nthread": 1})
    matrix = xgb.DMatrix(X)
    if not np.array_equal(ids, booster.predict(matrix, pred_leaf=True,
                                               validate_features=False)):
        print("MISMATCH against XGBoost's pred_leaf: not timing", file=sys.stderr)
        return 1
    ratio, t_sf, t_xgb = _medians(
        lambda: predictor.predict(X, output="leaf"),
        lambda: booster.predict(matrix, pred_leaf=True, validate_features=False))
    print(f"{os.path.basename(args.model)}: {forest.n_trees} trees, {len(X)} rows, 1 thread, "
          f"CPU {cpu_name()}; leaf kernels built in {build_s:.2f} s\n")
    print("| engine | median ms per call | ns per row |\n|---|---:|---:|")
    for name, seconds in (("silvanforge predict(output='leaf')", t_sf),
                          ("xgboost predict(pred_leaf=True)", t_xgb)):
        print(f"| {name} | {seconds * 1e3:.3f} | {seconds / len(X) * 1e9:.0f} |")
    print(f"\nspeed-up {1 / ratio:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
