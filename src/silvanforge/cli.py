"""The ``silvanforge`` command line.

    silvanforge inspect model.json --dump mir --schedule xgboost
    silvanforge compile model.json -o model.sfp
    silvanforge predict --predictor model.sfp rows.csv -o scores.csv
    silvanforge tune model.json rows.csv --batch 1024 --n-jobs 2
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import zipfile
from typing import Sequence

import numpy as np

from . import reference
from .version import __version__
from .errors import InputError, ModelFormatError, SilvanForgeError
from .frontends import load
from .model.forest import Forest
from .representations import REGISTRY
from .plan import cache
from .runtime import Predictor, compile, load_predictor
from .runtime.predictor import DUMP_LEVELS
from .tune import tune

_MODEL_HELP = ("model file: XGBoost JSON/UBJSON, LightGBM text, ONNX, or with --predictor "
               "a predictor saved by 'silvanforge compile'")


def _read_rows(path: str, skip_header: bool) -> np.ndarray:
    try:
        if path.endswith(".npy"):
            return np.load(path, allow_pickle=False)
        return np.loadtxt(path, delimiter=",", ndmin=2, skiprows=int(skip_header),
                          dtype=np.float64)
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: cannot read rows: {exc}") from None


def _schedule_arg(value: str | None) -> str | None:
    """A schedule name, or the path of a file holding schedule text."""
    if value is not None and os.path.isfile(value):
        with open(value) as fh:
            return fh.read()
    return value


def _predictor(args: argparse.Namespace) -> Predictor:
    """The predictor of MODEL: loaded when the user said it is a saved one (its machine
    code runs unless --recompile), else compiled. A file is never taken for a predictor
    by its contents: loading one may run its code."""
    if args.predictor:
        return load_predictor(args.model, trust_code=not args.recompile)
    if args.recompile:
        raise InputError("--recompile applies to a saved predictor (--predictor)")
    try:
        return compile(args.model, **_compile_kwargs(args))
    except ModelFormatError as exc:
        if zipfile.is_zipfile(args.model):  # a hint only: nothing is loaded from it
            raise ModelFormatError(f"{exc} (a saved predictor needs --predictor)") from None
        raise


def _forest(args: argparse.Namespace) -> Forest:
    """MODEL's forest (from a saved predictor's model data, its code never loaded)."""
    return load_predictor(args.model, trust_code=False).forest if args.predictor else \
        load(args.model)


def _compile_kwargs(args: argparse.Namespace) -> dict:
    """compile()'s keywords from the options of :func:`_compile_options`."""
    profile = None
    if args.profile is not None:
        # Commands that read no DATA have no --header / --columns: then none apply.
        profile = _read_rows(args.profile, getattr(args, "header", False))
        if getattr(args, "columns", None) is not None:
            profile = profile[:, :args.columns]
    return {"schedule": _schedule_arg(args.schedule), "representation": args.representation,
            "n_jobs": args.n_jobs, "tile_size": args.tile_size, "tiling": args.tiling,
            "profile": profile, "cpu": args.cpu}


def _inspect(args: argparse.Namespace) -> None:
    if args.dump is None:
        print(_forest(args).summary())
        return
    print(_predictor(args).dump(args.dump))


def _compile(args: argparse.Namespace) -> None:
    predictor = compile(args.model, precision=args.precision, **_compile_kwargs(args))
    predictor.save(args.out)
    print(f"wrote {args.out}: {predictor!r}")


def _predict(args: argparse.Namespace) -> None:
    rows = _read_rows(args.data, args.header)
    if args.columns is not None:
        rows = rows[:, :args.columns]
    if args.reference:
        result = reference.predict(_forest(args), rows, output=args.output)
    else:
        result = _predictor(args).predict(rows, output=args.output)
    out = open(args.out, "w") if args.out else sys.stdout
    try:
        np.savetxt(out, result.reshape(len(result), -1), delimiter=",", fmt="%.9g")
    finally:
        if args.out:
            out.close()


def _bench(args: argparse.Namespace) -> None:
    from . import bench  # before the engines load: it sets their OpenMP threads to sleep

    rows = _read_rows(args.data, args.header) if args.data else None
    case = bench.case_from_file(args.model, rows, n_rows=max(args.batch))
    engines = [e for e in bench.default_engines(args.lleaves_venv)
               if not args.engines or e.name in args.engines]
    result = bench.run([case], engines, args.batch, args.threads, rounds=args.rounds,
                       log=lambda line: print(line, file=sys.stderr))
    print(bench.markdown(result))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1)


def _tune(args: argparse.Namespace) -> None:
    rows = _read_rows(args.data, args.header)
    if args.columns is not None:
        rows = rows[:, :args.columns]
    config = tune(args.model, rows, batch_size=args.batch, n_jobs=args.n_jobs,
                       budget_s=args.budget, exhaustive=args.exhaustive,
                       use_cache=not args.no_cache, progress=not args.quiet)
    text = json.dumps(config.to_json(), indent=1)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text + "\n")
    print(text)
    if not args.no_cache:
        print(f"cached in {cache.cache_dir()}; compile with --schedule auto",
              file=sys.stderr)


def _predictor_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--predictor", action="store_true",
                   help="MODEL is a predictor saved by 'silvanforge compile'. It holds "
                   "machine code, which is loaded and run: a saved predictor is a "
                   "program, use this only with files you trust (or add --recompile)")
    p.add_argument("--recompile", action="store_true",
                   help="with --predictor: ignore the saved machine code and compile the "
                   "kernels again from the file's model data and plan (for a file from "
                   "elsewhere)")


def _compile_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--schedule", help="a named schedule (default, vector, xgboost, "
                   "one_tree_at_a_time, tree_parallel, code_rows, ...), 'auto' (the tuning "
                   "cache) or a file of schedule text")
    p.add_argument("--representation", choices=sorted(REGISTRY),
                   help="how the trees are laid out: tables (array, sparse, reorg), code, "
                   "or mask (a tree's splits tested at once as vectors; CPU only) "
                   "(default: chosen from the tree shapes, docs/ARCHITECTURE.md)")
    p.add_argument("--n-jobs", type=int, default=None,
                   help="threads for parallel loops (default: all CPUs)")
    p.add_argument("--cpu", default=None,
                   help="the CPU to build for: 'native' (default: this machine) or an "
                   "LLVM CPU name such as x86-64-v3 or znver4")
    p.add_argument("--tile-size", type=int, default=None,
                   help="nodes evaluated per walk step, 1-8 (default 1; 4 with --profile)")
    p.add_argument("--tiling", choices=["uniform", "probability"], default=None,
                   help="how nodes are grouped into tiles (probability: needs --profile)")
    p.add_argument("--profile", help="sample rows (CSV or .npy, like DATA) for "
                   "probability-based tiling")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="silvanforge", description="Decision-forest inference compiler.")
    parser.add_argument("--version", action="version", version=f"silvanforge {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    p = commands.add_parser(
        "inspect", help="describe a model, or dump a compiler level",
        description="Print a summary of a model's forest, or with --dump the text of one "
                    "compiler level for the given schedule ('plan': every choice the "
                    "planner made).")
    p.add_argument("model", help=_MODEL_HELP)
    p.add_argument("--dump", choices=DUMP_LEVELS, help="print this level of the compiler")
    _predictor_options(p)
    _compile_options(p)
    p.set_defaults(run=_inspect)

    p = commands.add_parser(
        "compile", help="compile a model and save the predictor",
        description="Compile a model to machine code for this CPU (or --cpu) and save "
                    "it; 'predict' and silvanforge.load_predictor reload it without "
                    "compiling on any machine with that CPU's features.")
    p.add_argument("model", help=_MODEL_HELP)
    p.add_argument("-o", "--out", required=True, help="file to write (e.g. model.sfp)")
    p.add_argument("--precision", choices=["float32", "float64"],
                   help="threshold precision (default: the model's own)")
    _compile_options(p)
    p.set_defaults(run=_compile)

    p = commands.add_parser(
        "predict", help="predict the rows of a CSV or .npy file",
        description="Predict the rows of a CSV (or .npy) file and print one line per row.")
    p.add_argument("model", help=_MODEL_HELP)
    p.add_argument("data", help="rows: a CSV file of numbers (nan = missing) or a .npy "
                                "array")
    p.add_argument("--output", choices=["value", "margin"], default="value",
                   help="the library's predicted value (default) or the raw margin")
    p.add_argument("--header", action="store_true", help="the CSV has a header line")
    p.add_argument("--columns", type=int, default=None,
                   help="use only the first N columns (e.g. to drop a label column)")
    p.add_argument("--reference", action="store_true",
                   help="use the plain-numpy reference evaluator instead of compiling")
    p.add_argument("-o", "--out", help="write to this file instead of standard output")
    _predictor_options(p)
    _compile_options(p)
    p.set_defaults(run=_predict)

    p = commands.add_parser(
        "bench", help="time SilvanForge against the other engines on a model",
        description="Check every installed engine that can load the model (XGBoost, "
                    "LightGBM, ONNX Runtime, TL2cgen, Hummingbird, lleaves) against the "
                    "reference on the same rows, then time them in interleaved rounds and "
                    "print a Markdown table; engines that cannot run are listed with why.")
    p.add_argument("model", help="model file: XGBoost JSON/UBJSON, LightGBM text or ONNX")
    p.add_argument("data", nargs="?", help="rows: CSV or .npy (extra trailing columns, "
                   "e.g. a label, are dropped); default: random rows around the splits")
    p.add_argument("--batch", type=int, nargs="+", default=[1, 256, 4096],
                   help="batch sizes in rows (default: 1 256 4096)")
    p.add_argument("--threads", type=int, nargs="+", default=[1],
                   help="thread counts (default: 1)")
    p.add_argument("--rounds", type=int, default=7,
                   help="interleaved timing rounds; the median is reported (default: 7)")
    p.add_argument("--engines", nargs="+", help="only these engines (e.g. silvanforge "
                   "xgboost onnxruntime)")
    p.add_argument("--lleaves-venv", help="virtualenv with lleaves installed")
    p.add_argument("--header", action="store_true", help="the CSV has a header line")
    p.add_argument("--json", help="also write the full results to this JSON file")
    p.set_defaults(run=_bench)

    p = commands.add_parser(
        "tune", help="search for the fastest schedule for a model and batch size",
        description="Time candidate schedules, representations and thread counts on the "
                    "rows of DATA at the given batch size (each checked against the "
                    "reference first), print the fastest configuration as JSON and keep "
                    "it in the tuning cache, where 'compile --schedule auto' and "
                    "silvanforge.compile(model, schedule=\"auto\") find it.")
    p.add_argument("model", help="model file: XGBoost JSON/UBJSON, LightGBM text or ONNX")
    p.add_argument("data", help="sample rows: a CSV file of numbers (nan = missing) or a "
                   ".npy array")
    p.add_argument("--batch", type=int, default=None,
                   help="rows per predict call to tune for (default: the rows in DATA)")
    p.add_argument("--n-jobs", type=int, default=None,
                   help="most threads to use (default: all CPUs)")
    p.add_argument("--budget", type=float, default=60.0,
                   help="seconds after which no new candidate is compiled (default: 60)")
    p.add_argument("--exhaustive", action="store_true",
                   help="search the whole template, not the heuristic's shortlist")
    p.add_argument("--no-cache", action="store_true",
                   help="neither read nor write the tuning cache")
    p.add_argument("--header", action="store_true", help="the CSV has a header line")
    p.add_argument("--columns", type=int, default=None,
                   help="use only the first N columns (e.g. to drop a label column)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("-o", "--out", help="also write the configuration's JSON to this file")
    p.set_defaults(run=_tune)

    args = parser.parse_args(argv)
    try:
        args.run(args)
    except SilvanForgeError as exc:
        print(f"silvanforge: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
