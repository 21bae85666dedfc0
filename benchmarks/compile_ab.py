"""Compile time of two source trees, alternated in fresh processes (a change's effect).

    python benchmarks/compile_ab.py BEFORE_SRC AFTER_SRC MODEL [MODEL ...]
        [--options '{"representation": "code"}'] [--rounds 3] [--out FILE.json]

BEFORE_SRC and AFTER_SRC are folders that hold the ``silvanforge`` package (a
``git worktree`` of the commit before, and ``src``). Each round compiles each model once
with each tree, in turn, every time in a fresh interpreter (nothing cached, the build
workers started anew: ``compile_scale.py``'s), and reads its wall seconds for
``compile`` (the model loaded first, not timed) and the CPU seconds of the process and
its children (the LLVM workers, which ``compile`` starts and which end with the
process). Prints and writes the medians and each round.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys

import numpy as np

from compile_scale import _SILVANFORGE, _run


def _timed(src: str, model: str, options: str) -> dict:
    """compile_scale's fresh-interpreter load and compile, silvanforge imported from
    ``src`` (PYTHONPATH comes before any installed copy), with the CPU seconds of that
    process and its children."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    run = _run(_SILVANFORGE, model, options, env={**os.environ, "PYTHONPATH": src})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {**run, "cpu_s": cpu}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("models", nargs="+")
    parser.add_argument("--options", default="{}")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    srcs = {"before": os.path.abspath(args.before), "after": os.path.abspath(args.after)}
    rows = []
    for model in args.models:
        runs: dict[str, list[dict]] = {"before": [], "after": []}
        for _ in range(args.rounds):
            for name, src in srcs.items():
                runs[name].append(_timed(src, model, args.options))
        row = {"model": os.path.basename(model), "options": json.loads(args.options),
               "rounds": runs}
        for name in srcs:
            for key in ("compile_s", "cpu_s"):
                row[f"{name}_{key}"] = float(np.median([r[key] for r in runs[name]]))
        rows.append(row)
        print(f"{row['model']} {args.options}: compile {row['before_compile_s']:.2f} -> "
              f"{row['after_compile_s']:.2f} s, CPU (with the LLVM workers) "
              f"{row['before_cpu_s']:.2f} -> {row['after_cpu_s']:.2f} s "
              f"(medians of {args.rounds})", flush=True)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"cpu": platform.processor() or platform.machine(),
                       "cpus": os.cpu_count(), "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
