"""Medians over runs: benchmarks/run.py several times, each a fresh process.

    python benchmarks/runs.py --runs 7 [--peer xgboost] --out DIR -- [run.py options]

Within a run, run.py interleaves the engines round by round. Between runs each engine
is loaded anew in a new process, whose tables land elsewhere in the caches: on the
development machine XGBoost's own time at 1024 rows ranged over 10-17% in seven runs
(1487-1878 ns a row on higgs and year; 1513-1929 in three runs the same day) while
SilvanForge's ranged over 5-8% (benchmarks/results-2026-11-27-xgboost-runs), so one
run's ratio decides little near a target. This runs run.py ``--runs`` times (DIR/run1, ...)
and reports, for each model, batch, thread count and engine, the median of the runs'
ratios of the peer's time to the engine's (above 1: the engine is faster), with their
range and the medians of both times: DIR/runs.md and DIR/runs.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def summary(results: list[dict], peer: str) -> list[dict]:
    """Per (model, batch, threads, engine other than ``peer``): the median over
    ``results`` (run.py's results.json, one per run) of the peer's ns a row over the
    engine's, the lowest and highest, and the median ns a row of each. Runs where
    either failed are left out of that row."""
    runs: dict[tuple, list[tuple[float, float]]] = {}
    for result in results:
        times = {(r["model"], r["batch"], r["threads"], r["engine"]): r.get("ns_per_row")
                 for r in result["rows"] if r.get("status") == "ok"}
        for (model, batch, threads, engine), ns in times.items():
            theirs = times.get((model, batch, threads, peer))
            if engine != peer and ns and theirs:
                runs.setdefault((model, batch, threads, engine), []).append((ns, theirs))
    out = []
    for (model, batch, threads, engine), pairs in sorted(runs.items()):
        ratios = [theirs / ns for ns, theirs in pairs]
        out.append({"model": model, "batch": batch, "threads": threads, "engine": engine,
                    "runs": len(pairs), "ratio": statistics.median(ratios),
                    "low": min(ratios), "high": max(ratios),
                    "ns": statistics.median(ns for ns, _ in pairs),
                    "peer_ns": statistics.median(theirs for _, theirs in pairs)})
    return out


def markdown(rows: list[dict], peer: str) -> str:
    lines = [f"Time of {peer} over each engine's (above 1: faster than {peer}): the median "
             "of the runs' ratios, (lowest-highest); ns a row, medians over the runs.", "",
             f"| model | batch | threads | engine | runs | ratio | ns a row | {peer} ns |",
             "|---|---:|---:|---|---:|---|---:|---:|"]
    lines += [f"| {r['model']} | {r['batch']} | {r['threads']} | {r['engine']} | "
              f"{r['runs']} | {r['ratio']:.2f} ({r['low']:.2f}-{r['high']:.2f}) | "
              f"{r['ns']:.0f} | {r['peer_ns']:.0f} |" for r in rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="fresh processes (default 7)")
    parser.add_argument("--peer", default="xgboost",
                        help="the engine the others are compared with (default xgboost)")
    parser.add_argument("--out", required=True, help="folder for run1 .. runN and runs.md")
    parser.add_argument("options", nargs=argparse.REMAINDER,
                        help="run.py's options, after --")
    args = parser.parse_args(argv)
    options = args.options[1:] if args.options[:1] == ["--"] else args.options
    results = []
    for k in range(1, args.runs + 1):
        folder = os.path.join(args.out, f"run{k}")
        print(f"run {k} of {args.runs}", flush=True)
        subprocess.run([sys.executable, os.path.join(HERE, "run.py"), *options,
                        "--out", folder], check=True, stdout=subprocess.DEVNULL)
        with open(os.path.join(folder, "results.json")) as fh:
            results.append(json.load(fh))
    rows = summary(results, args.peer)
    with open(os.path.join(args.out, "runs.json"), "w") as fh:
        json.dump({"peer": args.peer, "runs": args.runs, "options": options,
                   "rows": rows}, fh, indent=1)
    text = markdown(rows, args.peer)
    with open(os.path.join(args.out, "runs.md"), "w") as fh:
        fh.write(f"# {args.runs} runs of benchmarks/run.py {' '.join(options)}\n\n{text}")
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
