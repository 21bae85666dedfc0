"""Runs of numbers in a model's text, parsed by numpy: no Python object per number.

A 10,000-tree XGBoost JSON model holds some 36 million numbers; ``json.loads`` makes a
Python float or int of each (about 1.1 GB and most of the load time), and splitting a
LightGBM field makes a string of each. Here a field whose text is nothing but numbers in
the format's own syntax is read whole, by :mod:`.number_scan` where every number can be
read exactly its fast way, else by ``numpy.fromstring``, and the count of numbers it
read is checked against the separators in the text; text it does not take (other
syntax, other tokens) returns None, and the caller parses it the exact slow way, which
also raises the format's errors. So the fast path changes speed and memory, never what
a file means.

>>> parse_numbers("1, -2.5e3,0", ",").tolist()
[1.0, -2500.0, 0.0]
>>> parse_numbers("1,,2", ",") is None
True
"""

from __future__ import annotations

import json
import re
import secrets
import warnings
from typing import Any, Iterable

import numpy as np

from .. import progress
from . import number_scan

# Seconds a byte of JSON text takes to load here, the whole load (~17 ns on the 2-core
# development machine: a 185 MB, 10,000-tree XGBoost model in ~3.2 s in a fresh process,
# benchmarks/results-2026-11-26-compile-scale), the prediction that shows a progress bar
# (over the pass for the lists, most of it) for big files (silvanforge.progress).
S_PER_BYTE = 1.7e-8

# What numbers in these lists are made of (no nan, inf or hex, which numpy would read).
_NUMBER_CHARS = re.compile(r"[-+0-9eE.,\s]*")


def parse_numbers(text: str, sep: str, syntax: "re.Pattern[str] | None" = None,
                  integers: bool = False) -> np.ndarray | None:
    """float64 values of ``text``, numbers separated by ``sep`` ("," with optional
    whitespace around it, or " " exactly once between numbers), or None when ``text``
    is not such a list (the caller parses it exactly). ``syntax``, when given, must
    match the whole text (the format's grammar for the list) where the native scanner
    does not read it: the scanner's grammar is within every format's grammar for real
    numbers, and the format's check cost a LightGBM load a third of its time. With
    ``integers`` (the grammar's numbers are integers of at most 15 digits, exact in
    float64), a list the scanner reads must have no ``.``, no exponent and no value of
    16 digits too.

    >>> parse_numbers("3 -4", " ", integers=True).tolist(), parse_numbers("3 4.0", " ",
    ...                                                                    integers=True)
    ([3.0, -4.0], None)
    """
    body = text.strip()
    fast = number_scan.scan(body, sep)
    if fast is not None:
        if integers and (any(c in body for c in ".eE")
                         or len(fast) and np.abs(fast).max() >= 1e15):
            return None
        return fast
    if syntax is not None and not syntax.fullmatch(text):
        return None
    if not _NUMBER_CHARS.fullmatch(body):
        return None
    if not body:
        return np.zeros(0)
    if sep == " ":
        if any(c in body for c in "\t\n\r\v\f") or "  " in body:
            return None
    elif sep != ",":
        raise ValueError(f"separator must be ',' or ' ', not {sep!r}")
    with warnings.catch_warnings():
        # numpy warns (and in newer versions raises) where the text stops parsing.
        warnings.simplefilter("error")
        try:
            values = np.fromstring(body, dtype=np.float64, sep=sep)
        except (ValueError, DeprecationWarning):
            return None
    return values if len(values) == body.count(sep) + 1 else None


class Unread:
    """A list of numbers that :func:`loads_json` did not read (its member was named in
    ``skip``): :meth:`read` parses it, exactly, when it is wanted after all.

    >>> loads_json(b'{"a": [1, 2.5]}', skip=["a"])["a"].read().tolist()
    [1.0, 2.5]
    """

    __slots__ = ("_data", "_start", "_stop")

    def __init__(self, data: bytes, start: int, stop: int) -> None:
        self._data, self._start, self._stop = data, start, stop

    def read(self) -> np.ndarray | None:
        """The list's float64 values, or None where it is not JSON numbers."""
        return parse_numbers(self._data[self._start:self._stop].decode("ascii"), ",")

    def __repr__(self) -> str:
        return f"Unread({self._stop - self._start} bytes)"


def loads_json(data: bytes, skip: Iterable[str] = ()) -> Any:
    """``json.loads(data)`` with every object member that is a list of JSON numbers
    read as a float64 numpy array; where the member's name is in ``skip``, the list's
    numbers are not read, and the member's value is an :class:`Unread` list (a caller's
    way to pass over fields it seldom uses).

    The lists are found and read in one native pass (:func:`.number_scan.json_lists`)
    and cut out of the text, each replaced by a placeholder: an integer of 40 digits, a
    nonce drawn per call (which no file can know) then the list's index; the rest, a
    small document of objects, strings and short lists, goes to ``json.loads``, whose
    integer hook puts the arrays in place (placeholder strings and an object hook over
    every member took twice as long: 0.13 s of a 185 MB model's load).

    >>> loads_json(b'{"a": [1, 2.5], "b": "[3]", "c": [[1]]}')
    {'a': array([1. , 2.5]), 'b': '[3]', 'c': [[1]]}
    >>> loads_json(b'{"a": [1, 2.5], "b": [3]}', skip=["a"])
    {'a': Unread(6 bytes), 'b': array([3.])}
    """
    arrays: list[np.ndarray | Unread] = []
    nonce = str(secrets.randbelow(9 * 10**29) + 10**29)  # 30 digits, the first not 0
    marker = f":{nonce}".encode()
    with progress.bar("reading numbers", len(data) * S_PER_BYTE, len(data), "B") as shown:
        parts = number_scan.json_list_parts(data, shown.update, skip)
    pieces = []
    done = 0
    for values, spans in parts:
        for colon, end, first, count, inside, stop in spans.tolist():
            if count >= 0:
                arrays.append(values[first:first + count])
            elif count == number_scan.SKIPPED:
                arrays.append(Unread(data, inside, stop))
            else:
                exact = parse_numbers(data[inside:stop].decode("ascii"), ",")
                if exact is None:
                    continue  # not JSON numbers: json.loads reads (or refuses) them
                arrays.append(exact)
            pieces += (data[done:colon], marker, b"%010d" % (len(arrays) - 1))
            done = end
    if not arrays:
        return json.loads(data.decode("utf-8"))
    pieces.append(data[done:])
    width = len(nonce) + 10

    def integer(text: str) -> Any:
        if len(text) == width and text.startswith(nonce):
            return arrays[int(text[len(nonce):])]
        return int(text)

    # The lists cut out are ASCII: the rest is UTF-8 exactly when the whole is.
    return json.loads(b"".join(pieces).decode("utf-8"), parse_int=integer)
