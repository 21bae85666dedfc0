"""The ``silvanforge`` command line.

    silvanforge demo
    silvanforge inspect model.json --dump mir --schedule xgboost
    silvanforge -v compile model.json -o model.sfp
    silvanforge predict --predictor model.sfp rows.csv -o scores.parquet
    silvanforge tune model.json rows.csv --batch 1024 --n-jobs 2
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import zipfile
from typing import Iterator, Sequence

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
from .tabular import Table, prediction_writer, read_table
from .tune import tune

_MODEL_HELP = ("model file: XGBoost JSON/UBJSON, LightGBM text, ONNX, or with --predictor "
               "a predictor saved by 'silvanforge compile'")
_DATA_HELP = ("a CSV file (a header line is detected; empty cells, nan and NA are missing "
              "values; with a header and a model with feature names, columns are matched "
              "by name) or a .npy array")
_HEADER_HELP = "the first line is a header even if its cells are numbers (default: detected)"


def _read(path: str, args: argparse.Namespace) -> Table:
    # --header forces a header line; without it one is detected (tabular.read_table).
    return read_table(path, True if getattr(args, "header", False) else None)


def _features(table: Table, forest: Forest, args: argparse.Namespace,
              extra_ok: bool = False) -> np.ndarray:
    return table.features(forest.n_features, forest.feature_names,
                          getattr(args, "columns", None), extra_ok=extra_ok)


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
        if args.iteration_range:
            raise InputError("--iteration-range applies when compiling a model; a saved "
                             "predictor has the trees it was compiled with")
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
        # The model is not loaded yet: the profile's width is checked by compile().
        profile = _read(args.profile, args).values
        if getattr(args, "columns", None) is not None:
            profile = profile[:, :args.columns]
    return {"schedule": _schedule_arg(args.schedule), "representation": args.representation,
            "n_jobs": args.n_jobs, "tile_size": args.tile_size, "tiling": args.tiling,
            "profile": profile, "cpu": args.cpu,
            "iteration_range": tuple(args.iteration_range) if args.iteration_range else None}


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
    # A bad file or a missing pyarrow is reported before a long compile.
    table, write = _read(args.data, args), prediction_writer(args.out)
    predictor = None if args.reference else _predictor(args)
    forest = _forest(args) if predictor is None else predictor.forest
    rows = _features(table, forest, args)
    if predictor is None:
        if args.iteration_range:
            forest = forest.slice(*args.iteration_range)
        result = reference.leaf_output(forest, rows) if args.output == "leaf" else \
            reference.predict(forest, rows, output=args.output)
    else:
        result = predictor.predict(rows, output=args.output)
    write(result)


def _demo(args: argparse.Namespace) -> None:
    from . import demo  # its examples are read only here

    if not demo.main():
        raise SilvanForgeError("the compiled predictions differ from the reference: "
                               "please report it with the table above")


def _bench(args: argparse.Namespace) -> None:
    from . import bench  # before the engines load: it sets their OpenMP threads to sleep

    rows = (_features(_read(args.data, args), load(args.model), args, extra_ok=True)
            if args.data else None)
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
    rows = _features(_read(args.data, args), load(args.model), args)
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
    p.add_argument("--iteration-range", type=int, nargs=2, metavar=("BEGIN", "END"),
                   help="use the trees of boosting rounds BEGIN to END (excluded; END 0: "
                   "the last), XGBoost's iteration_range")


@contextlib.contextmanager
def _logging(verbose: int) -> Iterator[None]:
    """The ``silvanforge`` log on standard error while a command runs: INFO (compile
    phases and times) for -v, DEBUG (IR sizes too) for -vv; nothing without -v."""
    if not verbose:
        yield
        return
    logger = logging.getLogger("silvanforge")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("silvanforge: %(message)s"))
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO if verbose == 1 else logging.DEBUG)
    try:
        yield
    finally:  # main() may run again in this process (the tests): leave no handler
        logger.removeHandler(handler)
        logger.setLevel(level)


def build_parser() -> argparse.ArgumentParser:
    """The ``silvanforge`` command line (also read by the docs' CLI reference,
    tools/mkdocs_hooks.py)."""
    parser = argparse.ArgumentParser(
        prog="silvanforge", description="Decision-forest inference compiler.")
    parser.add_argument("--version", action="version", version=f"silvanforge {__version__}")
    verbose_help = "log compile phases and times on standard error (-vv: IR sizes too)"
    parser.add_argument("-v", "--verbose", action="count", default=0, help=verbose_help)
    commands = parser.add_subparsers(dest="command", required=True)

    p = commands.add_parser(
        "demo", help="compile, check and time the example models that come with "
                     "SilvanForge",
        description="Compile the shipped examples (an XGBoost classifier and a LightGBM "
                    "regressor), check their predictions against the reference evaluator "
                    "and, when installed, the training library, time predict against "
                    "that library on one thread, and print a table and the commands to "
                    "try next.")
    p.set_defaults(run=_demo)

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
    p.add_argument("data", help="rows: " + _DATA_HELP)
    p.add_argument("--output", choices=["value", "margin", "leaf", "contribs"],
                   default="value",
                   help="the library's predicted value (default), the raw margin, the leaf "
                   "each row reaches in each tree, numbered as the library numbers it "
                   "(docs/OUTPUTS.md), or SHAP contributions (one column a feature, then "
                   "the expected value; several outputs one after another)")
    p.add_argument("--header", action="store_true", help=_HEADER_HELP)
    p.add_argument("--columns", type=int, default=None,
                   help="use only the first N columns (e.g. to drop a label column)")
    p.add_argument("--reference", action="store_true",
                   help="use the plain-numpy reference evaluator instead of compiling")
    p.add_argument("-o", "--out", help="write to this file instead of standard output: "
                   "Parquet when it ends in .parquet (needs pyarrow: pip install "
                   "'silvanforge[parquet]'), else CSV")
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
    p.add_argument("data", nargs="?", help="rows: " + _DATA_HELP + " (extra trailing "
                   "columns, e.g. a label, are dropped); default: random rows around the "
                   "splits")
    p.add_argument("--batch", type=int, nargs="+", default=[1, 256, 4096],
                   help="batch sizes in rows (default: 1 256 4096)")
    p.add_argument("--threads", type=int, nargs="+", default=[1],
                   help="thread counts (default: 1)")
    p.add_argument("--rounds", type=int, default=7,
                   help="interleaved timing rounds; the median is reported (default: 7)")
    p.add_argument("--engines", nargs="+", help="only these engines (e.g. silvanforge "
                   "xgboost onnxruntime)")
    p.add_argument("--lleaves-venv", help="virtualenv with lleaves installed")
    p.add_argument("--header", action="store_true", help=_HEADER_HELP)
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
    p.add_argument("data", help="sample rows: " + _DATA_HELP)
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
    p.add_argument("--header", action="store_true", help=_HEADER_HELP)
    p.add_argument("--columns", type=int, default=None,
                   help="use only the first N columns (e.g. to drop a label column)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("-o", "--out", help="also write the configuration's JSON to this file")
    p.set_defaults(run=_tune)

    for command in commands.choices.values():
        # Also after the command (silvanforge compile -v ...); SUPPRESS keeps a -v given
        # before it.
        command.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS,
                             help=verbose_help)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        with _logging(args.verbose):
            args.run(args)
    except SilvanForgeError as exc:
        print(f"silvanforge: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
