"""float64 rows into a float32 model: read by the kernel against converted first.

    python benchmarks/row_dtype.py MODEL [MODEL ...] [--rows 1024 4096 16384]
        [--threads 1 2] [--rounds 15] [--cpu x86-64-v3] [--out F.json]

Each model's default plan; calls of distinct batches of its rows (``predict_ab.py``'s,
``--fresh``: from a 64 MB pool, so a call's rows come from memory). Three ways a call
gets its rows, timed in a shuffled order each round, per thread count: ``float64``, the
rows as numpy makes them (a kernel that copies its rows for vector walks rounds them
itself, docs/ARCHITECTURE.md "Float64 rows rounded in the copy"); ``converted``, the
same rows converted with ``astype(float32)`` in the call (what ``predict`` did before,
and still does for the other kernels); ``float32``, rows already in the model's dtype.
Prints the median ns a row of each and the ratios to ``converted``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

import numpy as np

import silvanforge

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from predict_ab import model_rows, windows  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--rows", type=int, nargs="+", default=[1024, 4096, 16384])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--cpu", default=None, help="compile for this CPU (x86-64-v3)")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    report = []
    for model in args.models:
        predictor = silvanforge.compile(model, **({"cpu": args.cpu} if args.cpu else {}))
        X = model_rows(model, predictor.forest)
        rng = np.random.default_rng(0)
        for n in args.rows:
            calls = windows(X, n, rng, fresh=True)
            float32 = [c.astype(np.float32) for c in calls]
            for c, c32 in zip(calls[:2], float32):
                assert np.array_equal(predictor.predict(c), predictor.predict(c32))
            # Each way: its rows, and what the call does to them before predict.
            ways = {"float64": (calls, None),
                    "converted": (calls, lambda c: c.astype(np.float32)),
                    "float32": (float32, None)}
            cases = [(way, t) for way in ways for t in args.threads]
            times: dict = {case: [] for case in cases}
            reps = max(4, 100000 // n)
            for _ in range(args.rounds):
                random.shuffle(cases)
                for way, t in cases:
                    rows, convert = ways[way]
                    start = time.perf_counter()
                    for r in range(reps):
                        c = rows[r % len(rows)]
                        predictor.predict(convert(c) if convert else c, n_jobs=t)
                    times[way, t].append((time.perf_counter() - start) / reps / n * 1e9)
            for t in args.threads:
                med = {way: float(np.median(times[way, t])) for way in ways}
                print(f"{os.path.basename(model)} {args.cpu or 'host'} {n} rows {t} "
                      f"thread(s): " + ", ".join(
                          f"{w} {m:.0f} ns ({m / med['converted']:.2f})"
                          for w, m in med.items()), flush=True)
                report.append({"model": model, "cpu": args.cpu, "rows": n, "threads": t,
                               "median_ns": med,
                               "rounds_ns": {w: times[w, t] for w in ways}})
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
