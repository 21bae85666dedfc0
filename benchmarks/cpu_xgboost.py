"""SilvanForge's compiled CPU predictor against XGBoost's inplace_predict, same rows.

    python benchmarks/cpu_xgboost.py [MODEL.json] [ROWS.csv]

Defaults to ../shared/models/higgs.json and its test rows. Reports the ratio of the
medians of interleaved runs (bench.interleaved_medians; the machine is shared and noisy:
never one absolute time),
ns per row and per internal node visited, 1- and 2-thread scaling, and compile time.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

import silvanforge
from silvanforge import bench, reference

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.join(HERE, "..", "..", "shared", "models")


def _rows(path: str, n_features: int, n: int) -> np.ndarray:
    data = np.loadtxt(path, delimiter=",", ndmin=2)[:, :n_features].astype(np.float32)
    reps = -(-n // len(data))
    return np.ascontiguousarray(np.tile(data, (reps, 1))[:n])


class _Call(bench.Loaded):
    """A call without arguments as a bench.Loaded, whose ``timer`` bench times."""

    def __init__(self, fn) -> None:
        self.fn = fn

    def predict(self, X, threads):
        return self.fn()


def _medians(a, b, rounds: int = 15) -> tuple[float, float, float]:
    """Time ratio a/b and the median seconds per call of each, over interleaved rounds."""
    t = bench.interleaved_medians({"a": _Call(a).timer(None, 1),
                                   "b": _Call(b).timer(None, 1)}, rounds=rounds)
    return t["a"] / t["b"], t["a"], t["b"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default=os.path.join(SHARED, "higgs.json"))
    parser.add_argument("rows", nargs="?", default=os.path.join(SHARED, "higgs.test.csv"))
    parser.add_argument("--batch", type=int, default=4096)
    parser.add_argument("--big-batch", type=int, default=65536)
    parser.add_argument("--schedule", default=None)
    parser.add_argument("--representation", default=None)
    args = parser.parse_args(argv)
    import xgboost as xgb

    forest = silvanforge.load(args.model)
    t = time.perf_counter()
    one = silvanforge.compile(forest, n_jobs=1, schedule=args.schedule,
                              representation=args.representation)
    compile_s = time.perf_counter() - t
    booster = xgb.Booster(model_file=args.model)
    booster.set_param({"nthread": 1})
    X = _rows(args.rows, forest.n_features, args.batch)
    expected = reference.predict(forest, X)
    got = one.predict(X)
    if not np.allclose(got, expected, rtol=1e-5, atol=1e-6):
        print("MISMATCH against the reference: not timing", file=sys.stderr)
        return 1
    visited = float(np.mean(forest.node_depth[
        (reference.leaves(forest, X[:512]) + forest.tree_offsets[:-1]).ravel()])) \
        * forest.n_trees
    ratio, t_sf, t_xgb = _medians(lambda: one.predict(X),
                                  lambda: booster.inplace_predict(X))
    print(f"model {os.path.basename(args.model)}: {forest.n_trees} trees, compile {compile_s:.2f} s")
    print(f"batch {len(X)}, 1 thread: silvanforge {t_sf / len(X) * 1e9:.0f} ns/row "
          f"({t_sf / len(X) / visited * 1e9:.2f} ns/node visited), xgboost "
          f"{t_xgb / len(X) * 1e9:.0f} ns/row; time ratio sf/xgb = {ratio:.3f} "
          f"(speed-up {1 / ratio:.2f}x)")
    big = _rows(args.rows, forest.n_features, args.big_batch)
    two = silvanforge.compile(forest, n_jobs=2, schedule=args.schedule,
                              representation=args.representation)
    r2, t1, t2 = _medians(lambda: one.predict(big), lambda: two.predict(big), rounds=9)
    booster2 = xgb.Booster(model_file=args.model)
    booster2.set_param({"nthread": 2})
    x2, _, _ = _medians(lambda: booster.inplace_predict(big),
                        lambda: booster2.inplace_predict(big), rounds=9)
    print(f"batch {len(big)}: 1 thread {t1 / len(big) * 1e9:.0f} ns/row, 2 threads "
          f"{t2 / len(big) * 1e9:.0f} ns/row; scaling {r2:.2f}x (xgboost's, same rows: "
          f"{x2:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
