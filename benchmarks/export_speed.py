"""An exported library called from C against the in-process predictor, same rows.

    python benchmarks/export_speed.py [MODEL ROWS.csv ...] [--batches 1 64 2000]
                                      [--threads 1 2] [--rounds 9]

Defaults to ../shared/models/higgs.json with higgs.test.csv and nyc_taxi.lgb.txt with
nyc_taxi.rows.csv (the CSVs' last column, the library's prediction, is dropped). Each model
is compiled once; the predictor is exported (``Predictor.export``: the same kernels for the
same CPU) and a C program built against its header times ``NAME_predict`` (or
``NAME_predict_f32`` for a model with float32 inputs, so that neither side converts the
rows) over consecutive batches of the rows, with clock_gettime inside the process (its
start is not timed). Both sides are timed in interleaved rounds (bench.interleaved_medians:
the machine is shared and noisy), the medians are reported in ns per row, with the ratio
C / Python (below 1: the library is faster). Both are checked to agree first.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

import silvanforge
from silvanforge import bench
from silvanforge.export.library import compiler

HERE = Path(__file__).resolve().parent
# ../shared beside the checkout (a worktree under wt/ has it one level further up).
SHARED = next((p / "shared" / "models" for p in HERE.parents
               if (p / "shared" / "models").is_dir()), HERE.parent.parent / "shared" / "models")
DEFAULTS = [SHARED / "higgs.json", SHARED / "higgs.test.csv",
            SHARED / "nyc_taxi.lgb.txt", SHARED / "nyc_taxi.rows.csv"]

HARNESS = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include HEADER
#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
/* bench ROWS.bin N_ROWS BATCH LOOPS THREADS OUT.bin: seconds for LOOPS calls. */
int main(int argc, char **argv) {
    int64_t n = atoll(argv[2]), batch = atoll(argv[3]), loops = atoll(argv[4]);
    int64_t f = CAT(NAME, _N_FEATURES), k = CAT(NAME, _N_OUTPUTS);
    ROW_T *rows = malloc(sizeof(ROW_T) * n * f);
    double *out = malloc(sizeof(double) * n * k);
    FILE *in = fopen(argv[1], "rb");
    if (fread(rows, sizeof(ROW_T), n * f, in) != (size_t)(n * f)) return 2;
    fclose(in);
    CAT(NAME, _set_num_threads)(atoi(argv[5]));
    struct timespec t0, t1;
    int64_t at = 0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int64_t i = 0; i < loops; i++) {
        if (at + batch > n) at = 0;
        if (PREDICT(rows + at * f, batch, out + at * k)) return 1;
        at += batch;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("%.9f\n", (t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec));
    if (loops == 0) { /* the check: every row once, written out */
        for (at = 0; at < n; at += batch) {
            int64_t m = at + batch > n ? n - at : batch;
            if (PREDICT(rows + at * f, m, out + at * k)) return 1;
        }
        FILE *o = fopen(argv[6], "wb");
        fwrite(out, sizeof(double), n * k, o);
        fclose(o);
    }
    return 0;
}
"""


def cpu_name() -> str:
    """lscpu's model name (the machine the table was measured on)."""
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _rows(path: Path, n_features: int, dtype: np.dtype) -> np.ndarray:
    data = np.loadtxt(path, delimiter=",", ndmin=2)[:, :n_features]
    return np.ascontiguousarray(data, dtype=dtype)


class _Harness:
    """The C program timing one library."""

    def __init__(self, directory: Path, name: str, rows: np.ndarray) -> None:
        f32 = rows.dtype == np.float32
        self.exe = directory / "bench"
        self.rows, self.n = directory / "rows.bin", len(rows)
        rows.tofile(self.rows)
        source = directory / "bench.c"
        source.write_text(HARNESS)
        subprocess.run([compiler() or "cc", "-O2", f"-DNAME={name}", f'-DHEADER="{name}.h"',
                        f"-DROW_T={'float' if f32 else 'double'}",
                        f"-DPREDICT={name}_predict{'_f32' if f32 else ''}",
                        "-I", str(directory), str(source), "-o", str(self.exe),
                        "-L", str(directory), f"-l{name}",
                        f"-Wl,-rpath,{directory}"], check=True)
        self.directory = directory

    def run(self, batch: int, loops: int, threads: int) -> float:
        out = subprocess.run([str(self.exe), str(self.rows), str(self.n), str(batch),
                              str(loops), str(threads), str(self.directory / "out.bin")],
                             capture_output=True, text=True, check=True)
        return float(out.stdout)

    def predictions(self, batch: int) -> np.ndarray:
        self.run(batch, 0, 1)
        return np.fromfile(self.directory / "out.bin")


def _python_timer(predictor, rows: np.ndarray, batch: int, threads: int):
    def timer(loops: int) -> float:
        import time
        at, n = 0, len(rows)
        start = time.perf_counter()
        for _ in range(loops):
            if at + batch > n:
                at = 0
            predictor.predict(rows[at:at + batch], n_jobs=threads)
            at += batch
        return time.perf_counter() - start
    return timer


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pairs", nargs="*", default=[str(p) for p in DEFAULTS],
                        help="MODEL ROWS.csv pairs")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 64, 2000])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--min-sample", type=float, default=0.02,
                        help="seconds a timed sample lasts at least (default 0.02)")
    args = parser.parse_args(argv)
    if len(args.pairs) % 2:
        parser.error("give MODEL ROWS.csv pairs")
    print(f"CPU: {cpu_name()} ({os.cpu_count()} CPUs), median of {args.rounds} "
          f"interleaved rounds of samples of at least {args.min_sample} s\n")
    print("| model | rows a call | threads | predictor (Python) ns/row | library (C) ns/row "
          "| C / Python |")
    print("|---|---:|---:|---:|---:|---:|")
    for model, data in zip(args.pairs[::2], args.pairs[1::2]):
        predictor = silvanforge.compile(model)
        rows = _rows(Path(data), predictor.n_features, predictor.forest.input_dtype)
        with tempfile.TemporaryDirectory() as tmp:
            name = "m"
            predictor.export(tmp, name=name)
            harness = _Harness(Path(tmp), name, rows)
            for batch in args.batches:
                batch = min(batch, len(rows))
                expected = np.concatenate([np.asarray(predictor.predict(
                    rows[at:at + batch])).reshape(-1) for at in range(0, len(rows), batch)])
                got = harness.predictions(batch)
                if not np.array_equal(got, expected):
                    print(f"{model}: the library and the predictor differ "
                          f"(max {np.max(np.abs(got - expected))})", file=sys.stderr)
                    return 1
                for threads in args.threads:
                    if threads > 1 and batch < 256:
                        continue  # such calls run on one thread either way
                    t = bench.interleaved_medians({
                        "py": _python_timer(predictor, rows, batch, threads),
                        "c": lambda loops, b=batch, th=threads: harness.run(b, loops, th)},
                        rounds=args.rounds, min_s=args.min_sample)
                    py, c = t["py"] / batch * 1e9, t["c"] / batch * 1e9
                    print(f"| {Path(model).name} | {batch} | {threads} | {py:.1f} | "
                          f"{c:.1f} | {c / py:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
