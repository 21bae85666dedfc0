"""Rows from CSV or .npy files, and predictions to CSV or Parquet, for the command line.

CSV files are read with pyarrow's reader when it is installed (fast, multi-threaded),
otherwise with the :mod:`csv` module. Either way the first line is a header when one of
its cells is not a number (or when asked), empty cells are missing values, and every
error names the file, the line when there is one, and what to do.

>>> import tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "rows.csv")
>>> with open(path, "w") as fh:
...     _ = fh.write("b,a,label\\n1,,0\\n3,4,1\\n")
>>> table = read_table(path)
>>> table.names
('b', 'a', 'label')
>>> table.features(2, ("a", "b")).tolist()  # by name: the model's order, no label
[[nan, 1.0], [4.0, 3.0]]
"""

from __future__ import annotations

import csv
import logging
import math
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from .errors import InputError, require

log = logging.getLogger(__name__)

# Cells that mean "missing" besides the empty one (what pandas and R write), compared in
# lower case; "nan" itself parses as a float.
_MISSING = frozenset({"", "na", "n/a", "null", "none"})


@dataclass(frozen=True)
class Table:
    """A file's rows as float64 ``values`` (NaN = missing), and its header's ``names``."""

    path: str
    values: np.ndarray
    names: tuple[str, ...] | None = None

    def features(self, n_features: int, feature_names: Sequence[str] | None = None,
                 columns: int | None = None, extra_ok: bool = False) -> np.ndarray:
        """The model's feature matrix: the first ``columns`` columns when given; else the
        columns the header names after the model's ``feature_names``, in the model's
        order; else the columns as they are. ``extra_ok`` drops trailing columns (a
        label) instead of refusing them."""
        X, names = self.values, self.names
        if X.ndim != 2:
            raise InputError(f"{self.path}: rows must be a 2-D array, not shape {X.shape}")
        width = X.shape[1]
        if columns is not None:
            if not 0 < columns <= width:
                raise InputError(f"{self.path}: --columns {columns} but the file has "
                                 f"{width} columns")
            X = X[:, :columns]
        elif names and feature_names:
            found = [n for n in feature_names if n in names]
            if len(found) == len(feature_names):
                log.info("%s: columns chosen by the model's feature names", self.path)
                return np.ascontiguousarray(X[:, [names.index(n) for n in feature_names]])
            if found:
                lacking = [n for n in feature_names if n not in names]
                raise InputError(
                    f"{self.path}: the header names {len(found)} of the model's "
                    f"{len(feature_names)} features but not {_some(lacking)}: rename "
                    f"those columns, or use --columns N to take the first N by position")
            # No name in common (e.g. a header of f0, f1, ...): the columns by position.
        if extra_ok:
            X = X[:, :n_features]
        if X.shape[1] > n_features:
            raise InputError(
                f"{self.path}: the model expects {n_features} features but the file has "
                f"{X.shape[1]} columns: use --columns {n_features} to take the first "
                f"{n_features} (e.g. to drop a trailing label column)")
        if X.shape[1] < n_features:
            raise InputError(f"{self.path}: the model expects {n_features} features but "
                             f"the file has {X.shape[1]} columns")
        return X


def _some(names: Sequence[str], most: int = 5) -> str:
    shown = ", ".join(repr(n) for n in names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def read_table(path: str, header: bool | None = None) -> Table:
    """The rows of a .npy or CSV file. ``header``: True, the first line is one; None,
    it is one when a cell of it is not a number (the message says so)."""
    if path.endswith(".npy"):
        try:
            return Table(path, np.load(path, allow_pickle=False))
        except (OSError, ValueError) as exc:
            raise InputError(f"{path}: cannot read rows: {exc}") from None
    try:
        with open(path, newline="") as fh:
            first = next(csv.reader(fh), None)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise InputError(f"{path}: cannot read rows: {exc}") from None
    if first is None:
        raise InputError(f"{path}: the file is empty: expected rows of comma-separated "
                         "numbers")
    if header is None:
        header = any(not _is_number(cell) for cell in first)
        if header:
            log.info("%s: the first line is a header (it has non-numeric cells)", path)
    names = tuple(cell.strip() for cell in first) if header else None
    try:
        pa_csv = require("pyarrow.csv", "parquet")
    except ImportError:
        values = _read_csv(path, int(header), len(first))
    else:
        values = _read_arrow(pa_csv, path, int(header), len(first))
    if len(values) == 0:
        raise InputError(f"{path}: no rows after the header line")
    return Table(path, values, names)


def _is_number(cell: str) -> bool:
    try:
        _to_float(cell)
    except ValueError:
        return False
    return True


def _read_csv(path: str, skip: int, width: int) -> np.ndarray:
    """The csv module's reading: exact line numbers in every message."""
    cells: list[str] = []
    n = 0
    with open(path, newline="") as fh:
        reader = csv.reader(fh)
        try:
            for row in reader:
                if reader.line_num <= skip or not row:
                    continue  # the header; blank lines are no rows
                if len(row) != width:
                    raise InputError(
                        f"{path}, line {reader.line_num}: {len(row)} cells where line 1 "
                        f"has {width}: every row needs the same number of "
                        "comma-separated cells (empty ones are missing values)")
                cells += row
                n += 1
        except csv.Error as exc:
            raise InputError(f"{path}, line {reader.line_num}: {exc}") from None
    try:
        # float() cell by cell: 3x faster than numpy's conversion of a string array.
        return np.fromiter(map(_to_float, cells), np.float64, len(cells)).reshape(n, width)
    except ValueError:
        bad = next(i for i, cell in enumerate(cells) if not _is_number(cell))
        line = _line_of(path, skip + bad // width)
        raise InputError(f"{path}, line {line}, column {bad % width + 1}: "
                         f"{cells[bad]!r} is not a number (empty cells, nan and NA are "
                         "missing values)") from None


def _to_float(cell: str) -> float:
    try:
        return float(cell)
    except ValueError:
        if cell.strip().lower() in _MISSING:
            return math.nan
        raise


def _line_of(path: str, row: int) -> int:
    """The line number of the ``row``-th (0-based, header counted) non-blank record."""
    with open(path, newline="") as fh:
        reader = csv.reader(fh)
        seen = -1
        for record in reader:
            seen += bool(record)
            if seen == row:
                return reader.line_num
    return row + 1


def _read_arrow(pa_csv: Any, path: str, skip: int, width: int) -> np.ndarray:
    """pyarrow's reading. Its errors carry no line numbers, and it refuses some files
    the csv module reads (spaces around numbers): on an error the csv module reads the
    file, or says which line is wrong."""
    import pyarrow as pa

    names = [f"c{j}" for j in range(width)]
    try:
        table = pa_csv.read_csv(
            path, read_options=pa_csv.ReadOptions(skip_rows=skip, column_names=names),
            convert_options=pa_csv.ConvertOptions(
                column_types={n: pa.float64() for n in names},
                null_values=sorted(_MISSING | {m.upper() for m in _MISSING}),
                strings_can_be_null=True))
    except pa.ArrowInvalid:
        return _read_csv(path, skip, width)
    if table.num_rows == 0:
        return np.empty((0, width))
    return np.column_stack([table.column(n).to_numpy(zero_copy_only=False)
                            for n in names]).astype(np.float64)


def prediction_writer(path: str | None) -> Callable[[np.ndarray], None]:
    """What writes predictions, one row each: CSV without a header (to standard output
    when ``path`` is None), or Parquet when ``path`` ends in .parquet (a column
    ``prediction``, or ``prediction_0``, ... for several outputs). Asked for before
    predicting, so that a missing pyarrow is reported before a long compile."""
    if path is not None and os.path.splitext(path)[1].lower() == ".parquet":
        pa = require("pyarrow", "parquet")
        pq = require("pyarrow.parquet", "parquet")

        def parquet(result: np.ndarray) -> None:
            result = result.reshape(len(result), -1)
            names = (["prediction"] if result.shape[1] == 1 else
                     [f"prediction_{j}" for j in range(result.shape[1])])
            pq.write_table(pa.table({n: result[:, j] for j, n in enumerate(names)}), path)
        return parquet

    def text(result: np.ndarray) -> None:
        out = open(path, "w") if path else sys.stdout
        try:
            # Leaf ids are integers, written whole.
            np.savetxt(out, result.reshape(len(result), -1), delimiter=",",
                       fmt="%d" if result.dtype.kind in "iu" else "%.9g")
        finally:
            if path:
                out.close()
    return text
