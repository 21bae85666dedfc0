"""Run time of one model's code built two ways: saved predictors, shuffled A/B.

    python predict_ab.py MODEL BEFORE_SRC AFTER_SRC [--rows 16 64 1024] [--rounds 31]

Compiles MODEL with ``representation="code"`` once with each source tree (each in a
fresh interpreter, saved to a temporary .sfp file), loads both predictors into this
process and times ``predict`` on the same rows (the model's ``../shared/models`` rows
for nyc_taxi and mtpl2, else standard normal rows), 1 thread, in a shuffled order each
round; prints the medians in ns a row. Both must give the same predictions.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time

import numpy as np

import silvanforge

SHARED = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "models")
_SAVE = ("import sys, silvanforge; "
         "silvanforge.compile(sys.argv[1], representation='code').save(sys.argv[2])")


def rows_for(model: str, n_features: int) -> np.ndarray:
    name = os.path.basename(model).split(".")[0]
    path = os.path.join(SHARED, f"{name}.rows.csv")
    if os.path.exists(path):  # the CSVs' last column is the library's prediction
        return np.loadtxt(path, delimiter=",")[:, :-1]
    return np.random.default_rng(1).normal(size=(20000, n_features))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--rows", type=int, nargs="+", default=[16, 64, 1024])
    parser.add_argument("--rounds", type=int, default=31)
    args = parser.parse_args(argv)
    predictors = {}
    with tempfile.TemporaryDirectory() as folder:
        for name in ("before", "after"):
            path = os.path.join(folder, name + ".sfp")
            subprocess.run([sys.executable, "-c", _SAVE, args.model, path], check=True,
                           env={**os.environ, "PYTHONPATH": os.path.abspath(
                               getattr(args, name))})
            predictors[name] = silvanforge.load_predictor(path)
    X = rows_for(args.model, predictors["before"].forest.n_features)
    for n in args.rows:
        # The CSVs hold 2000 rows: repeated to fill a bigger call.
        rows = np.ascontiguousarray(np.resize(X, (n, X.shape[1]))[:n], dtype=np.float64)
        assert np.array_equal(predictors["before"].predict(rows, n_jobs=1),
                              predictors["after"].predict(rows, n_jobs=1))
        times: dict[str, list[float]] = {name: [] for name in predictors}
        reps = max(1, 20000 // n)
        for _ in range(args.rounds):
            order = list(predictors)
            random.shuffle(order)
            for name in order:
                predictor = predictors[name]
                start = time.perf_counter()
                for _ in range(reps):
                    predictor.predict(rows, n_jobs=1)
                times[name].append((time.perf_counter() - start) / reps / n * 1e9)
        before, after = (float(np.median(times[k])) for k in ("before", "after"))
        print(f"{os.path.basename(args.model)} {n} rows: before {before:.1f}, after "
              f"{after:.1f} ns a row, after/before {after / before:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
