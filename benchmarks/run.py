"""SilvanForge against XGBoost, LightGBM, ONNX Runtime, TL2cgen, Hummingbird and lleaves.

    python benchmarks/run.py [--quick] [--out DIR] [--lleaves-venv DIR]

Trains models with the shapes of the Treebeard and lleaves benchmarks on synthetic data
(see models.py), checks every engine against silvanforge.reference on the same rows, then
times them in interleaved rounds. Writes results.json, results.md and plots to --out.
"""

from __future__ import annotations

import os

# Before any OpenMP runtime loads: idle pools must sleep while other engines run.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import models  # noqa: E402
import report  # noqa: E402

from silvanforge import bench  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
# (batches, threads, rounds, repeat) for the full and the --quick run.
FULL = ([1, 16, 256, 4096, 65536], [1, 2], 9, 3)
QUICK = ([1, 256, 4096], [1, 2], 3, 2)
# Rows per model at least: small batches are timed over distinct rows (bench.MAX_BATCHES).
MIN_ROWS = 16384


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="fewer models, batch sizes and rounds (minutes on 2 cores)")
    parser.add_argument("--out", default=os.path.join(HERE, "results"),
                        help="folder for results.json, results.md and plots")
    parser.add_argument("--lleaves-venv", help="virtualenv with lleaves installed "
                        "(it pins an older llvmlite than SilvanForge's)")
    parser.add_argument("--batch", type=int, nargs="+", help="batch sizes")
    parser.add_argument("--threads", type=int, nargs="+", help="thread counts")
    parser.add_argument("--models", nargs="+", help="only these models (names in models.py)")
    parser.add_argument("--engines", nargs="+", help="only these engines")
    parser.add_argument("--cpu", action="append", default=[], metavar="CPU",
                        help="also time SilvanForge built for this CPU (an LLVM CPU name or "
                        "x86-64 level, e.g. x86-64-v3 for AVX2 without AVX-512) as engine "
                        "silvanforge@CPU; repeatable")
    parser.add_argument("--representation", action="append", default=[], metavar="NAME",
                        help="also time SilvanForge with this representation (e.g. code) as "
                        "engine silvanforge@NAME; repeatable")
    parser.add_argument("--rounds", type=int,
                        help="interleaved rounds (medians over them; default 9, --quick 3)")
    parser.add_argument("--drawn-rows", action="store_true",
                        help="shared models: distinct rows drawn around their split points "
                        "instead of their CSV rows repeated (2000 rows repeat 8 times in "
                        "a batch of 16384)")
    parser.add_argument("--against", nargs=2, action="append", default=[],
                        metavar=("LABEL", "SRC"),
                        help="also time the SilvanForge of another checkout's src folder "
                        "(e.g. a worktree of an earlier commit) as engine "
                        "silvanforge@LABEL, in its own process; repeatable")
    args = parser.parse_args(argv)
    batches, threads, rounds, repeat = QUICK if args.quick else FULL
    batches, threads, rounds = args.batch or batches, args.threads or threads, \
        args.rounds or rounds
    engines = [e for e in bench.default_engines(args.lleaves_venv)
               if not args.engines or e.name in args.engines]
    engines += [bench.SilvanForgeEngine(cpu=cpu) for cpu in args.cpu]
    engines += [bench.SilvanForgeEngine(representation=r) for r in args.representation]
    engines += [bench.CheckoutEngine(src, label) for label, src in args.against]
    start = time.perf_counter()
    cases = models.cases(args.quick, max(*batches, MIN_ROWS), args.models,
                         drawn=args.drawn_rows)
    result = bench.run(cases, engines, batches, threads, rounds, repeat)
    for path in report.write(result, args.out):
        print("wrote", path)
    print(f"done in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
