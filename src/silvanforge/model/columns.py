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
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence, Union

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


def _exact_block(dtypes: Iterable[Any], whole: Callable[[], Any]) -> np.ndarray | None:
    """``whole()``, the input's columns as one array, where it holds each column's
    values exactly (a call to ``to_numpy`` or ``to_tensor`` instead of one a column:
    ~30 µs each for pandas); else None, and the columns are read one by one. Exact: the
    columns are numpy numbers of one dtype, or floats and integers of up to 32 bits (a
    64-bit integer beside others would be rounded twice, once to the common type), and
    the array's dtype holds each of them exactly (booleans beside numbers become
    objects; Arrow turns integers into floats where nulls become NaN)."""
    kinds = set(dtypes)
    if not kinds or not all(isinstance(d, np.dtype) and d.kind in "fiub" for d in kinds):
        return None
    if len(kinds) > 1 and not all(
            d.kind == "f" or d.kind in "iu" and d.itemsize <= 4 for d in kinds):
        return None
    array = whole()
    if array is None or array.dtype.kind not in "fiub" or not all(
            _holds(array.dtype, d) for d in kinds):
        return None
    return array


def _holds(dtype: np.dtype, column: np.dtype) -> bool:
    """Whether ``dtype`` holds every value of ``column`` exactly: a float holds integers
    of at most half its width (numpy calls int64 to float64 safe; it rounds).

    >>> [_holds(np.dtype(a), np.dtype(c)) for a, c in [("float64", "int32"),
    ...     ("float64", "int64"), ("float32", "int16"), ("float32", "int32"),
    ...     ("int64", "int64"), ("float32", "float64")]]
    [True, False, True, False, True, False]
    """
    return np.can_cast(column, dtype, "safe") and not (
        column.kind in "iu" and dtype.kind == "f" and 2 * column.itemsize > dtype.itemsize)


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
        """All the columns as one array where it is exact (:func:`_exact_block`)."""
        return _exact_block(self.dtypes, self.X.to_numpy)

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
    """A pyarrow Table or RecordBatch (polars frames' categoricals and other columns
    arrive here through ``to_arrow``)."""

    def __init__(self, X: Any) -> None:
        self.X, self.names, self.n_rows = X, X.schema.names, X.num_rows

    def is_categorical(self, i: int) -> bool:
        import pyarrow as pa

        return pa.types.is_dictionary(self.X.schema.field(i).type)

    def block(self) -> np.ndarray | None:
        """All the columns as one array where it is exact (:func:`_exact_block`): each
        record batch's ``to_tensor`` (row-major, nulls as NaN), ~5 µs for a row of 28
        columns where one column at a time took ~7 µs each."""
        import pyarrow as pa

        types = set(self.X.schema.types)
        if not all(pa.types.is_integer(t) or pa.types.is_floating(t) for t in types):
            return None

        def whole() -> np.ndarray | None:
            batches = self.X.to_batches() if hasattr(self.X, "to_batches") else [self.X]
            parts = []
            try:
                for batch in batches:
                    try:  # integers stay integers where there is no null
                        tensor = batch.to_tensor(row_major=True)
                    except pa.ArrowTypeError:
                        tensor = batch.to_tensor(null_to_nan=True, row_major=True)
                    parts.append(np.asarray(tensor))
            except pa.ArrowException:  # half floats, say: the columns one by one
                return None
            return None if not parts else parts[0] if len(parts) == 1 else \
                np.concatenate(parts)

        # Each type's numpy dtype by its width (to_pandas_dtype would import pandas).
        return _exact_block([np.dtype(("float" if pa.types.is_floating(t) else "uint"
                                       if pa.types.is_unsigned_integer(t) else "int")
                                      + str(t.bit_width)) for t in types], whole)

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


class _Polars:
    """A polars DataFrame: numbers that one array holds exactly are read with one
    ``to_numpy`` (~3 µs for a row of 28 columns; ``to_arrow`` alone took ~130 µs), the
    other frames through Arrow (``to_arrow`` shares numeric buffers)."""

    def __init__(self, X: Any) -> None:
        self.X, self.names, self.n_rows = X, X.columns, X.height
        self._arrow: _Arrow | None = None

    @property
    def arrow(self) -> _Arrow:
        if self._arrow is None:
            require("pyarrow", "polars")  # polars' to_arrow needs it
            self._arrow = _Arrow(self.X.to_arrow())
        return self._arrow

    def is_categorical(self, i: int) -> bool:
        return self.arrow.is_categorical(i)

    def block(self) -> np.ndarray | None:
        try:  # polars names its number types as numpy does, capitalised
            kinds = set(self.X.dtypes)
            dtypes = [np.dtype(str(d).lower()) for d in kinds
                      if d.is_float() or d.is_integer()]
        except TypeError:  # Int128 and the like: read by columns
            return None
        if len(dtypes) != len(kinds):
            return None
        return _exact_block(dtypes, self.X.to_numpy)

    def segments(self, i: int) -> Iterator[Segment]:
        return self.arrow.segments(i)


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

    def block(self) -> np.ndarray | None:
        """All the columns as one array where it is exact (:func:`_exact_block`)."""
        return _exact_block([c.dtype for c in self.columns],
                            lambda: np.stack(self.columns, axis=1))

    def segments(self, i: int) -> Iterator[Segment]:
        yield self.columns[i]


def reader(X: Any) -> _Pandas | _Arrow | _Polars | _Dict | None:
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
            return _Polars(X)
    if isinstance(X, Mapping):
        return _Dict(X)
    return None
