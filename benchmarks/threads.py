"""2 threads against 1 on the same rows (issue 27's "2 threads >= 1.9x one thread at batch
>= 4096"), SilvanForge alone in the process.

    python benchmarks/threads.py MODEL [MODEL ...] [--rows 4096 16384 65536]
        [--rounds 15] [--out FILE.json]

Each model is compiled once with its default plan (``n_jobs=2``) and called with
``n_jobs=1`` and ``n_jobs=2`` in a shuffled order every round, on the same rows (drawn
with replacement from the model's rows in ``../shared/models``, else
``bench.random_rows``), each case timed over calls of at least ~50 ms. Prints, per
model and batch, the medians of each thread count's ns a row and the median (and
range) of the rounds' ratios. The OpenMP wait policy is the environment's
(``OMP_WAIT_POLICY``; libgomp's default spins a while, then sleeps):
``benchmarks/run.py`` sets PASSIVE so that other engines' idle pools sleep, and a
sleeping thread is woken at every call (docs/ARCHITECTURE.md "Where the speed targets
stop").

With ``--ceiling``, also the machine's own two-core scaling at the largest batch: the
model's 1-thread calls timed in two processes at once against one process alone (the
median over ``--ceiling-rounds`` such pairs of 2 x alone / together). On a VM whose
vCPUs share a host this is what any two threads can reach; on the 2-vCPU development
machine two such processes got ~1.9x (benchmarks/results-2026-11-27-threads-ceiling).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import time

import numpy as np

_POLICY = os.environ.get("OMP_WAIT_POLICY")
import silvanforge  # noqa: E402
from predict_ab import model_rows  # noqa: E402

# silvanforge.bench (which predict_ab imports) sets PASSIVE where nothing is set, for
# its engines side by side; here the policy is the environment's (OpenMP reads it when
# its runtime loads, at the first compile).
if _POLICY is None:
    os.environ.pop("OMP_WAIT_POLICY", None)


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            return next(line.split(":", 1)[1].strip() for line in fh
                        if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or "unknown"


def call_rows(model: str, predictor: silvanforge.Predictor,
              sizes: list[int]) -> dict[int, np.ndarray]:
    """Rows of each size in ``sizes``, of the model's input type, drawn with replacement
    from its rows (``predict_ab.model_rows``; one generator of seed 0, sizes in turn)."""
    X = model_rows(model, predictor.forest).astype(predictor.forest.input_dtype)
    rng = np.random.default_rng(0)
    return {n: np.ascontiguousarray(X[rng.integers(0, len(X), n)]) for n in sizes}


def measure(model: str, batches: list[int], rounds: int) -> list[dict]:
    predictor = silvanforge.compile(model, n_jobs=2)
    rows = call_rows(model, predictor, batches)
    cases = [(n, t) for n in batches for t in (1, 2)]
    times: dict = {case: [] for case in cases}
    for n, t in cases:  # warm: the thread pool, the pages of the result
        predictor.predict(rows[n], n_jobs=t)
    for _ in range(rounds):
        random.shuffle(cases)
        for n, t in cases:
            calls = max(1, int(0.05 / (n * 300e-9)))
            start = time.perf_counter()
            for _ in range(calls):
                predictor.predict(rows[n], n_jobs=t)
            times[n, t].append((time.perf_counter() - start) / calls / n * 1e9)
    out = []
    for n in batches:
        one, two = np.array(times[n, 1]), np.array(times[n, 2])
        ratios = np.sort(one / two)
        out.append({"model": os.path.basename(model), "rows": n,
                    "plan": predictor.plan.representation,
                    "one_ns": float(np.median(one)), "two_ns": float(np.median(two)),
                    "speedup": float(np.median(ratios)),
                    "speedup_range": [float(ratios[0]), float(ratios[-1])]})
    return out


# One process of the ceiling: 1-thread calls of ROWS rows, timed from START for SECONDS
# (every process of a pair starts its calls at the same moment); prints ns a row.
_SOLO = r"""
import json, sys, time
import numpy as np, silvanforge
from threads import call_rows
model, n = sys.argv[1], int(sys.argv[2])
start, seconds = float(sys.argv[3]), float(sys.argv[4])
predictor = silvanforge.compile(model, n_jobs=1)
rows = call_rows(model, predictor, [n])[n]
predictor.predict(rows)
while time.time() < start:
    time.sleep(0.001)
times = []
while time.time() < start + seconds:
    begin = time.perf_counter()
    predictor.predict(rows)
    times.append(time.perf_counter() - begin)
print(json.dumps(float(np.median(times)) / n * 1e9))
"""
# Seconds from launching a ceiling's processes to their first timed call: time to
# import and compile in both at once.
_SOLO_LEAD = 8.0


def ceiling(model: str, n: int, rounds: int, seconds: float = 3.0) -> dict:
    """The model's 1-thread calls of ``n`` rows in one process alone, then in two at
    once, ``rounds`` times: the median (and range) of 2 x alone / together."""
    here = os.path.dirname(os.path.abspath(__file__))

    def together(k: int) -> list[float]:
        start = f"{time.time() + _SOLO_LEAD:.3f}"
        procs = [subprocess.Popen([sys.executable, "-c", _SOLO, model, str(n), start,
                                   str(seconds)], cwd=here, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True) for _ in range(k)]
        return [json.loads(p.communicate()[0]) for p in procs]

    ratios, alone_ns, pair_ns = [], [], []
    for _ in range(rounds):
        (alone,), pair = together(1), together(2)
        ratios.append(2 * alone / float(np.mean(pair)))
        alone_ns.append(alone)
        pair_ns.append(float(np.mean(pair)))
    return {"model": os.path.basename(model), "rows": n,
            "alone_ns": float(np.median(alone_ns)),
            "together_ns": float(np.median(pair_ns)), "scaling": float(np.median(ratios)),
            "scaling_range": [min(ratios), max(ratios)]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--rows", type=int, nargs="+", default=[4096, 16384, 65536])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--out")
    parser.add_argument("--ceiling", action="store_true",
                        help="also two 1-thread processes at once against one alone")
    parser.add_argument("--ceiling-rounds", type=int, default=3)
    args = parser.parse_args(argv)
    policy = os.environ.get("OMP_WAIT_POLICY", "(libgomp's default)")
    print(f"CPU {cpu_name()}, {os.cpu_count()} CPUs, OMP_WAIT_POLICY={policy}, "
          f"{args.rounds} rounds")
    results = []
    for model in args.models:
        for r in measure(model, args.rows, args.rounds):
            results.append(r)
            low, high = r["speedup_range"]
            print(f"{r['model']} ({r['plan']}) {r['rows']} rows: 1 thread "
                  f"{r['one_ns']:.0f} ns a row, 2 threads {r['two_ns']:.0f}: "
                  f"{r['speedup']:.2f}x ({low:.2f}-{high:.2f})", flush=True)
    ceilings = []
    for model in args.models if args.ceiling else []:
        c = ceiling(model, max(args.rows), args.ceiling_rounds)
        ceilings.append(c)
        low, high = c["scaling_range"]
        print(f"{c['model']} {c['rows']} rows, two 1-thread processes at once: "
              f"{c['together_ns']:.0f} ns a row each, {c['alone_ns']:.0f} alone: "
              f"{c['scaling']:.2f}x ({low:.2f}-{high:.2f})", flush=True)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"cpu": cpu_name(), "omp_wait_policy": policy,
                       "rounds": args.rounds, "results": results,
                       "ceilings": ceilings}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
