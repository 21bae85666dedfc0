"""The autotuner's evidence: guided search against the exhaustive best of the same space.

    python benchmarks/tune_eval.py [--models higgs-like nyc-taxi-like random-forest]
                                   [--batch 16 1024] [--n-jobs 2] [--out DIR]

For each model (see models.py) and batch size: the exhaustive search of the template
(silvanforge/tune/space.py) and the guided search (tune/heuristic.py), each with its own
compiles, timed end to end; then the two winners and SilvanForge's default (``compile``
without a schedule) timed head to head in more interleaved rounds than a search uses,
so that the ratio is not the search's own noise. Goal: the guided result within 10% of
the exhaustive best, found in at most 5% of its time. Writes tune_eval.json and
tune_eval.md to --out.
"""

from __future__ import annotations

import os

# Before any OpenMP runtime loads: idle pools must sleep while other candidates run.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import models  # noqa: E402

import silvanforge  # noqa: E402
from silvanforge import bench  # noqa: E402
from silvanforge.tune import explore  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
# The head-to-head comparison: more rounds than a search takes.
ROUNDS, REPEAT = 15, 3


def _search(search, forest, rows: np.ndarray, n_jobs: int):
    ev = explore.Evaluator(forest, rows)
    start = time.perf_counter()
    results = search(ev, n_jobs)
    return ev, [r for r in results if r.seconds is not None], time.perf_counter() - start, \
        len(results)


def _short(result: explore.Result) -> str:
    p = result.point
    if p["order"] == "default":
        return f"the default plan ({result.options['representation']}), {p['threads']}t"
    shape = {"tree_tiles": f"tiles of {p.get('tree_tile')} trees",
             "unrolled_trees": f"unrolled trees, blocks of {p['block']} rows"}.get(
        p["order"], f"{p['order'].replace('_', ' ')} of {p['block']} rows")
    directive, depth = p.get("walk", ("", 0))
    walk = f", {directive} {depth}" if directive else ""
    interleave = ", interleaved" if p.get("interleave") else ""
    return f"{shape}{interleave}{walk}, {p['representation']}, {p['threads']}t"


def evaluate(case, batch: int, n_jobs: int, log=print) -> dict:
    rows = np.ascontiguousarray(case.rows[:batch])
    ex_ev, ex, ex_s, ex_n = _search(explore.exhaustive, case.forest, rows, n_jobs)
    log(f"  exhaustive: {ex_n} points, {ex_ev.compiles} kernels, {ex_s:.1f} s")
    g_ev, guided, g_s, g_n = _search(explore.guided, case.forest, rows, n_jobs)
    log(f"  guided: {g_n} points, {g_ev.compiles} kernels, {g_s:.1f} s")
    best, tuned = ex[0], guided[0]
    default = silvanforge.compile(case.forest, n_jobs=n_jobs)
    timers = {"best": explore.Candidate(ex_ev.predictor(best)).timer(rows, best.threads),
              "tuned": explore.Candidate(g_ev.predictor(tuned)).timer(rows, tuned.threads),
              "default": explore.Candidate(default).timer(rows, n_jobs)}
    t = bench.interleaved_medians(timers, ROUNDS, REPEAT)
    rank = next((i for i, r in enumerate(ex) if (r.schedule, r.options, r.threads) ==
                 (tuned.schedule, tuned.options, tuned.threads)), None)
    return {"model": case.name, "batch": batch, "n_jobs": n_jobs,
            "space": ex_n, "timed": len(ex), "exhaustive_s": ex_s,
            "exhaustive_kernels": ex_ev.compiles, "guided_points": g_n, "guided_s": g_s,
            "guided_kernels": g_ev.compiles, "best": _short(best), "tuned": _short(tuned),
            "tuned_rank_in_exhaustive": None if rank is None else rank + 1,
            "best_us": t["best"] * 1e6, "tuned_over_best": t["tuned"] / t["best"],
            "default_over_best": t["default"] / t["best"],
            "best_schedule": best.schedule, "tuned_schedule": tuned.schedule}


def markdown(rows: list[dict]) -> str:
    out = ["| model | batch | space (timed) | exhaustive s | guided s (% of exh.) | "
           "kernels exh./guided | exhaustive best | tuned | tuned's rank in exh. | "
           "tuned / best | default / best |",
           "|---|---:|---:|---:|---:|---:|---|---|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r['model']} | {r['batch']} | {r['space']} ({r['timed']}) | "
                   f"{r['exhaustive_s']:.0f} | {r['guided_s']:.1f} "
                   f"({100 * r['guided_s'] / r['exhaustive_s']:.1f}%) | "
                   f"{r['exhaustive_kernels']}/{r['guided_kernels']} | {r['best']} | "
                   f"{r['tuned']} | {r['tuned_rank_in_exhaustive']} | "
                   f"{r['tuned_over_best']:.2f} | "
                   f"{r['default_over_best']:.2f} |")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+",
                        default=["higgs-like", "nyc-taxi-like", "random-forest"])
    parser.add_argument("--batch", type=int, nargs="+", default=[16, 1024])
    parser.add_argument("--n-jobs", type=int, default=2)
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    args = parser.parse_args(argv)
    cases = models.cases(False, max(args.batch), args.models,
                         folder=tempfile.mkdtemp(prefix="sf-tune-eval-"))
    rows = []
    for case in cases:
        for batch in args.batch:
            print(f"{case.name}, batch {batch}:", flush=True)
            rows.append(evaluate(case, batch, args.n_jobs))
            print("  " + markdown(rows[-1:]).splitlines()[-1], flush=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "tune_eval.json"), "w") as fh:
        json.dump({"rounds": ROUNDS, "repeat": REPEAT, "cpus": os.cpu_count(),
                   "rows": rows}, fh, indent=1)
    table = markdown(rows)
    with open(os.path.join(args.out, "tune_eval.md"), "w") as fh:
        fh.write(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
