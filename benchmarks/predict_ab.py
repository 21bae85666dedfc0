"""Run time of one model built several ways: saved predictors, shuffled rounds.

    python benchmarks/predict_ab.py MODEL VARIANT VARIANT... [--rows 1 16 64 1024]
        [--rounds 15] [--builds 1] [--options '{"representation": "code"}'] [--fresh]
        [--out F.json]

A VARIANT is a folder holding the ``silvanforge`` package (``src``, or a ``git
worktree`` of another commit's ``src``), optionally followed by ``@module.NAME=VALUE``
settings of module constants made before compiling (``src@silvanforge.representations.
code.SELECT_NODES=3``) and ``@option=VALUE`` options of ``compile`` over ``--options``
(``src@representation=mask``). Each variant compiles MODEL ``--builds`` times (each in a fresh
interpreter, saved to a temporary .sfp file: each build places the code anew, and two
builds of one commit differ by a few percent), all are loaded into this process and
``predict`` is timed on the same rows, 1 thread (``--threads``), in a shuffled order each round; it
prints each variant's median ns a row (over its builds' rounds) and its ratio to the
first variant's. All must give the same predictions.

Rows: the model's rows in ``../shared/models`` (``NAME.rows.csv``, ``higgs.test.csv``,
``NAME.random.csv``; the last column, the library's prediction, dropped), else
``silvanforge.bench.random_rows``. A call takes the next window of the rows in turn, so
that calls of a few rows do not repeat one window the branch predictor learns; a call
bigger than the rows takes shuffled copies of them. They are float64 (as CSV rows load)
unless ``--dtype float32``. With ``--fresh`` the calls take rows from a pool of shuffled
copies too big for the caches (``FRESH_POOL_BYTES``), so each call's rows come from
memory.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import subprocess
import sys
import tempfile
import time

import numpy as np

import silvanforge
from silvanforge import bench

SHARED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared",
                      "models")
# --fresh: the rows its calls take, all together (past the last level cache of the
# machines measured so far).
FRESH_POOL_BYTES = 64 << 20
_SAVE = """
import importlib, json, sys, silvanforge
options = json.loads(sys.argv[4])
for name, value in json.loads(sys.argv[3]).items():
    if "." not in name:
        options[name] = value
        continue
    module, attr = name.rsplit(".", 1)
    setattr(importlib.import_module(module), attr, value)
silvanforge.compile(sys.argv[1], **options).save(sys.argv[2])
"""


def parse_variant(text: str) -> tuple[str, dict]:
    """``src@a.b.C=3@d.E=x`` -> ("src", {"a.b.C": 3, "d.E": "x"}) (values as JSON where
    they parse as JSON)."""
    src, *settings = text.split("@")
    values = {}
    for setting in settings:
        name, value = setting.split("=", 1)
        try:
            values[name] = json.loads(value)
        except json.JSONDecodeError:
            values[name] = value
    return src, values


def model_rows(model: str, forest: silvanforge.Forest) -> np.ndarray:
    stem = os.path.basename(model).split(".")[0]
    for path in sorted(glob.glob(os.path.join(SHARED, stem + ".*.csv"))):
        return np.loadtxt(path, delimiter=",")[:, :-1]
    return bench.random_rows(forest, 20000).astype(np.float64)


def windows(X: np.ndarray, n: int, rng: np.random.Generator,
            fresh: bool = False) -> list[np.ndarray]:
    """Calls of ``n`` rows: ``bench.distinct_batches`` of ``X``, or of shuffled copies of
    it where ``n`` passes its length; ``fresh``: of enough shuffled copies for up to
    ``bench.MAX_BATCHES`` calls within :data:`FRESH_POOL_BYTES`, so that a call's rows
    are not in the caches when it starts (its rows come from memory, as a service's
    new requests do)."""
    calls = max(2, min(bench.MAX_BATCHES, FRESH_POOL_BYTES // (n * X.shape[1] * X.itemsize))) \
        if fresh else 1
    if n * calls > len(X):
        X = np.concatenate([X[rng.permutation(len(X))] for _ in range(-(-n * calls // len(X)))])
    return bench.distinct_batches(X, n)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("variants", nargs="+")
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 16, 64, 1024])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--builds", type=int, default=1)
    parser.add_argument("--options", default='{"representation": "code"}')
    parser.add_argument("--dtype", default="float64", choices=["float32", "float64"],
                        help="the rows' type (default float64, as CSV rows load)")
    parser.add_argument("--threads", type=int, default=1, help="n_jobs of each call")
    parser.add_argument("--fresh", action="store_true",
                        help="each call's rows out of the caches (FRESH_POOL_BYTES of rows)")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    predictors: dict[str, list] = {}
    with tempfile.TemporaryDirectory() as folder:
        for v, variant in enumerate(args.variants):
            src, settings = parse_variant(variant)
            predictors[variant] = []
            for b in range(args.builds):
                path = os.path.join(folder, f"{v}-{b}.sfp")
                subprocess.run([sys.executable, "-c", _SAVE, args.model, path,
                                json.dumps(settings), args.options], check=True,
                               env={**os.environ, "PYTHONPATH": os.path.abspath(src)})
                predictors[variant].append(silvanforge.load_predictor(path))
    for i, v in enumerate(args.variants):
        print(f"[{i}] {v}")
    first = predictors[args.variants[0]][0]
    X = model_rows(args.model, first.forest).astype(args.dtype)
    rng = np.random.default_rng(0)
    report = {"model": args.model, "variants": args.variants, "rows": {}}
    for n in args.rows:
        calls = windows(X, n, rng, args.fresh)
        expected = [first.predict(c, n_jobs=1) for c in calls]
        for built in predictors.values():
            for p in built:
                assert all(np.array_equal(p.predict(c, n_jobs=1), e)
                           for c, e in zip(calls, expected))
        times: dict[str, list[float]] = {v: [] for v in predictors}
        reps = max(1, 20000 // n)
        for _ in range(args.rounds):
            order = [(v, p) for v, built in predictors.items() for p in built]
            random.shuffle(order)
            for v, p in order:
                start = time.perf_counter()
                for r in range(reps):
                    p.predict(calls[r % len(calls)], n_jobs=args.threads)
                times[v].append((time.perf_counter() - start) / reps / n * 1e9)
        medians = {v: float(np.median(t)) for v, t in times.items()}
        base = medians[args.variants[0]]
        print(f"{os.path.basename(args.model)} {n} rows: " + ", ".join(
            f"[{i}] {m:.1f} ns ({m / base:.3f})" for i, m in enumerate(medians.values())),
              flush=True)
        report["rows"][n] = {"median_ns": medians, "rounds_ns": times}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
