"""The columns of a named input: a pandas, polars or pyarrow frame, or a dict of arrays.

A reader gives the input's column names and each column's values as segments of
consecutive rows: numbers (a numpy array, a view of the input's own buffer where its
layout allows) or a :class:`Categorical` (category values and integer codes). polars
frames are read through Arrow (``DataFrame.to_arrow`` shares numeric buffers), so
neither polars nor Arrow input imports pandas.

>>> cols = reader({"a": [1.0, 2.0], "b": [3, 4]})
>>> cols.names, cols.n_rows
(['a', 'b'], 2)
>>> list(cols.segments(1))
[array([3, 4])]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence, Union

import numpy as np

from ..errors import InputError, require


@dataclass(frozen=True)
class Categorical:
    """A categorical segment: ``codes[i]`` indexes ``categories``; -1 is a null."""

    categories: Sequence[Any]
    codes: np.ndarray


Segment = Union[np.ndarray, Categorical]


def _module(X: Any) -> str:
    return type(X).__module__.split(".")[0]


def _numbers(values: np.ndarray, name: Any) -> np.ndarray:
    if values.dtype.kind not in "fiub" or values.ndim != 1:
        raise InputError(f"column {name!r} has dtype {values.dtype} and shape "
                         f"{values.shape}; expected one number a row, or a categorical "
                         f"column")
    return values


class _Pandas:
    def __init__(self, X: Any) -> None:
        self.X, self.names, self.n_rows = X, X.columns.tolist(), len(X)
        # Once: a frame's dtypes are a new Series at each ask (~15 µs for 28 columns).
        self.dtypes = X.dtypes.tolist()

    def is_categorical(self, i: int) -> bool:
        import pandas as pd

        return isinstance(self.dtypes[i], pd.CategoricalDtype)

    def block(self) -> np.ndarray | None:
        """All the columns as one array (``to_numpy``, one call instead of one a column:
        ~30 µs each) when they are numpy numbers of one dtype, or floats and integers of
        up to 32 bits, which the common type holds exactly; else None (64-bit integers
        beside others would be rounded twice, booleans beside numbers become objects)."""
        kinds = set(self.dtypes)
        if not all(isinstance(d, np.dtype) and d.kind in "fiub" for d in kinds):
            return None
        if len(kinds) > 1 and not all(
                d.kind == "f" or d.kind in "iu" and d.itemsize <= 4 for d in kinds):
            return None
        whole = self.X.to_numpy()
        return whole if whole.dtype.kind in "fiub" else None  # pandas' own common type

    def segments(self, i: int) -> Iterator[Segment]:
        col = self.X.iloc[:, i]
        if self.is_categorical(i):
            yield Categorical(col.cat.categories.tolist(), col.cat.codes.to_numpy())
        elif isinstance(col.dtype, np.dtype) and col.dtype.kind in "fiub":
            yield col.to_numpy()  # a view for numpy-backed numbers
        else:
            # Nullable and Arrow-backed numbers: pd.NA is a missing value (NaN).
            try:
                yield col.to_numpy(dtype=np.float64, na_value=np.nan)
            except (TypeError, ValueError):
                raise InputError(f"column {self.names[i]!r} has non-numeric dtype "
                                 f"{col.dtype}; expected numbers or a categorical the model "
                                 f"knows") from None


class _Arrow:
    """A pyarrow Table or RecordBatch (polars frames arrive here through ``to_arrow``)."""

    def __init__(self, X: Any) -> None:
        self.X, self.names, self.n_rows = X, list(X.column_names), X.num_rows

    def is_categorical(self, i: int) -> bool:
        import pyarrow as pa

        return pa.types.is_dictionary(self.X.schema.field(i).type)

    def block(self) -> None:
        return None  # column by column: Arrow keeps each column's buffers apart

    def segments(self, i: int) -> Iterator[Segment]:
        col = self.X.column(i)
        for chunk in getattr(col, "chunks", [col]):
            yield _arrow_segment(chunk, self.names[i])


def _arrow_segment(chunk: Any, name: str) -> Segment:
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = chunk.type
    if pa.types.is_dictionary(kind):
        codes = pc.fill_null(chunk.indices.cast(pa.int64()), -1)  # a null is code -1
        return Categorical(chunk.dictionary.to_pylist(), codes.to_numpy(zero_copy_only=False))
    if (pa.types.is_integer(kind) or pa.types.is_floating(kind)) and chunk.null_count == 0:
        return chunk.to_numpy(zero_copy_only=True)  # the Arrow buffer itself
    if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind) \
            or pa.types.is_decimal(kind) or pa.types.is_null(kind):
        # Nulls are missing values; booleans are bits in Arrow: both need a copy.
        floats = pc.cast(chunk, pa.float64())
        return pc.fill_null(floats, float("nan")).to_numpy(zero_copy_only=False)
    raise InputError(f"column {name!r} has Arrow type {kind}; expected numbers or a "
                     f"dictionary (categorical) column")


class _Dict:
    """A mapping of column names to 1-D arrays of numbers."""

    def __init__(self, X: Mapping[Any, Any]) -> None:
        self.names = list(X)
        self.columns = [_numbers(np.asarray(v), k) for k, v in X.items()]
        lengths = {len(c) for c in self.columns}
        if len(lengths) > 1:
            raise InputError(f"the input's columns differ in length: {sorted(lengths)}")
        self.n_rows = lengths.pop() if lengths else 0

    def is_categorical(self, i: int) -> bool:
        return False

    def block(self) -> None:
        return None

    def segments(self, i: int) -> Iterator[Segment]:
        yield self.columns[i]


def reader(X: Any) -> _Pandas | _Arrow | _Dict | None:
    """The column reader for ``X``, or None when ``X`` is not a named input."""
    module = _module(X)
    if module == "pandas" and hasattr(X, "columns"):
        return _Pandas(X)
    if module == "pyarrow" and type(X).__name__ in ("Table", "RecordBatch"):
        return _Arrow(X)
    if module == "polars":
        if type(X).__name__ == "LazyFrame":
            raise InputError("a polars LazyFrame has no rows yet: pass frame.collect()")
        if hasattr(X, "to_arrow") and hasattr(X, "columns"):
            require("pyarrow", "polars")  # polars' to_arrow needs it
            return _Arrow(X.to_arrow())
    if isinstance(X, Mapping):
        return _Dict(X)
    return None
