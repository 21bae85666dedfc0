"""The ``silvanforge`` command line.

    silvanforge inspect model.json
    silvanforge predict model.json rows.csv --output margin > scores.csv
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

import numpy as np

from . import __version__, reference
from .errors import InputError, SilvanForgeError
from .frontends import load


def _read_rows(path: str, skip_header: bool) -> np.ndarray:
    try:
        if path.endswith(".npy"):
            return np.load(path, allow_pickle=False)
        return np.loadtxt(path, delimiter=",", ndmin=2, skiprows=int(skip_header),
                          dtype=np.float64)
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: cannot read rows: {exc}") from None


def _inspect(args: argparse.Namespace) -> None:
    print(load(args.model).summary())


def _predict(args: argparse.Namespace) -> None:
    forest = load(args.model)
    rows = _read_rows(args.data, args.header)
    if args.columns is not None:
        rows = rows[:, :args.columns]
    result = reference.predict(forest, rows, output=args.output)
    out = open(args.out, "w") if args.out else sys.stdout
    try:
        np.savetxt(out, result.reshape(len(result), -1), delimiter=",", fmt="%.9g")
    finally:
        if args.out:
            out.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="silvanforge", description="Decision-forest inference compiler.")
    parser.add_argument("--version", action="version", version=f"silvanforge {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    p = commands.add_parser("inspect", help="describe a model",
                            description="Load a model and print a summary of its forest.")
    p.add_argument("model", help="model file: XGBoost JSON/UBJSON, LightGBM text, ONNX")
    p.set_defaults(run=_inspect)

    p = commands.add_parser(
        "predict", help="predict rows with the reference evaluator",
        description="Predict the rows of a CSV (or .npy) file and print one line per row.")
    p.add_argument("model", help="model file: XGBoost JSON/UBJSON, LightGBM text, ONNX")
    p.add_argument("data", help="rows: a CSV file of numbers (nan = missing) or a .npy "
                                "array")
    p.add_argument("--output", choices=["value", "margin"], default="value",
                   help="the library's predicted value (default) or the raw margin")
    p.add_argument("--header", action="store_true", help="the CSV has a header line")
    p.add_argument("--columns", type=int, default=None,
                   help="use only the first N columns (e.g. to drop a label column)")
    p.add_argument("--out", help="write to this file instead of standard output")
    p.set_defaults(run=_predict)

    args = parser.parse_args(argv)
    try:
        args.run(args)
    except SilvanForgeError as exc:
        print(f"silvanforge: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
