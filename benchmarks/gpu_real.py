"""Real models on a CUDA GPU: every GPU schedule and table layout, rows already on the device.

    python benchmarks/gpu_real.py [MODEL ROWS.csv ...]

Needs only SilvanForge and CuPy (no training library: the models are read from their
files), so it runs on a GPU machine that has neither XGBoost nor LightGBM. Default: the
XGBoost models of ../shared/models with their rows. For each model and batch size it
prints, as CSV, the CPU predictor's time on every core of the machine and each GPU
schedule's (median of 15 calls, synchronised), in ns per row, with the largest
difference from the reference on the first 20,000 rows.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

import numpy as np

import silvanforge
from silvanforge import reference
from silvanforge.schedule.library import GPU_SCHEDULES

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.join(HERE, "..", "..", "shared", "models")
DEFAULT = [("higgs.json", "higgs.test.csv"),
           ("year_prediction_msd.json", "year_prediction_msd.random.csv")]
BATCHES = (4096, 65536, 1048576)
CHECKED_ROWS = 20_000


def median_ns(call, sync, batch: int, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        sync()
        start = time.perf_counter()
        call()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times) / batch * 1e9


def main(argv: list[str]) -> int:
    import cupy as cp

    pairs = list(zip(argv[::2], argv[1::2])) or [
        (os.path.join(SHARED, m), os.path.join(SHARED, r)) for m, r in DEFAULT]
    sync = cp.cuda.Device().synchronize
    print("model,batch,engine,ns_per_row,max_abs_diff")
    for model, rows_file in pairs:
        forest = silvanforge.load(model)
        rows = np.loadtxt(rows_file, delimiter=",", ndmin=2)[:, :forest.n_features]
        cpu = silvanforge.compile(forest)
        name = os.path.basename(model)
        for batch in BATCHES:
            X = np.ascontiguousarray(np.resize(rows, (batch, forest.n_features)),
                                     dtype=np.float32)
            device_rows = cp.asarray(X)
            expected = reference.predict(forest, X[:CHECKED_ROWS])
            ns = median_ns(lambda: cpu.predict(X), lambda: None, batch, 7)
            print(f"{name},{batch},cpu-{os.cpu_count()}-threads,{ns:.3f},", flush=True)
            for schedule in GPU_SCHEDULES:
                for layout in ("array", "sparse"):
                    p = silvanforge.compile(forest, target="cuda", schedule=schedule,
                                            representation=layout)
                    got = p.predict(device_rows).get()[:CHECKED_ROWS]
                    diff = float(np.max(np.abs(got - expected)))
                    ns = median_ns(lambda: p.predict(device_rows), sync, batch, 15)
                    print(f"{name},{batch},{schedule}/{layout},{ns:.3f},{diff:.2g}",
                          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
