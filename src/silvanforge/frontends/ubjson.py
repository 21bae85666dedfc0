"""A small, strict UBJSON decoder for XGBoost's ``.ubj`` model files.

UBJSON (https://ubjson.org) is a binary JSON: every value starts with a one-byte type
marker, numbers are big-endian, and containers may be *optimised* with a declared
element type (``$``) and/or element count (``#``), as XGBoost writes its float and
integer arrays (``[$d#L<count><count float32s>``).

Model files are untrusted, so the decoder never trusts a declared length: every length
is checked against the bytes that remain before anything is allocated, nesting is
limited to :data:`MAX_DEPTH`, and any problem (truncation, an unknown marker, a negative
or oversized count, invalid UTF-8, bytes after the document) raises
:class:`~silvanforge.errors.ModelFormatError` with the byte offset.

Typed numeric arrays decode to read-only numpy arrays (fast for large models); every
other value decodes to the Python value ``json.loads`` would give.

>>> decode(b"{i\\x01aU\\x05}")
{'a': 5}
"""

from __future__ import annotations

import re
import struct
from typing import Any

import numpy as np

from ..errors import ModelFormatError

# Deeper nesting than any XGBoost model needs; the bound keeps hostile files from
# exhausting the Python stack.
MAX_DEPTH = 64

# Fixed-size numeric markers: (struct format, numpy big-endian dtype).
_NUMBERS = {
    b"i": (">b", ">i1"),
    b"U": (">B", ">u1"),
    b"I": (">h", ">i2"),
    b"l": (">i", ">i4"),
    b"L": (">q", ">i8"),
    b"d": (">f", ">f4"),
    b"D": (">d", ">f8"),
}
_INTEGER_MARKERS = (b"i", b"U", b"I", b"l", b"L")
_HIGH_PRECISION = re.compile(rb"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")


class _Reader:
    """A cursor over the document with bounds-checked reads."""

    def __init__(self, data: bytes) -> None:
        self.data = memoryview(data)
        self.pos = 0

    def fail(self, problem: str, at: int | None = None) -> ModelFormatError:
        where = self.pos if at is None else at
        return ModelFormatError(f"UBJSON at byte {where}: {problem}")

    def remaining(self) -> int:
        return len(self.data) - self.pos

    def take(self, n: int, what: str) -> memoryview:
        if n < 0 or n > self.remaining():
            raise self.fail(f"truncated: {what} needs {n} bytes but only "
                            f"{self.remaining()} remain")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def marker(self, what: str) -> bytes:
        return bytes(self.take(1, what))

    def peek(self) -> bytes:
        if self.pos >= len(self.data):
            raise self.fail("truncated: the document ends inside a container")
        return bytes(self.data[self.pos:self.pos + 1])

    def number(self, marker: bytes) -> Any:
        fmt, _ = _NUMBERS[marker]
        size = struct.calcsize(fmt)
        return struct.unpack(fmt, self.take(size, f"a {marker.decode()!r} number"))[0]

    def count(self, what: str) -> int:
        """A length: an integer-marked, non-negative number."""
        at = self.pos
        marker = self.marker(what)
        if marker not in _INTEGER_MARKERS:
            raise self.fail(f"{what} must be an integer, found marker {marker!r}", at)
        n = int(self.number(marker))
        if n < 0:
            raise self.fail(f"negative {what} {n}", at)
        return n

    def string(self) -> str:
        at = self.pos
        n = self.count("string length")
        raw = self.take(n, "a string")
        try:
            return str(raw, "utf-8")
        except UnicodeDecodeError:
            raise self.fail("string is not valid UTF-8", at) from None


def decode(data: bytes) -> Any:
    """Decode one UBJSON document; raise ModelFormatError on anything malformed.

    >>> decode(b"[$d#i\\x02?\\x80\\x00\\x00@\\x00\\x00\\x00").tolist()
    [1.0, 2.0]
    """
    reader = _Reader(bytes(data))
    value = _value(reader, reader.marker("a value"), 0)
    # No-op markers may pad a stream; anything else after the document is not ours.
    while reader.remaining() and reader.peek() == b"N":
        reader.pos += 1
    if reader.remaining():
        raise reader.fail(f"{reader.remaining()} unexpected bytes after the document")
    return value


def _value(r: _Reader, marker: bytes, depth: int) -> Any:
    """The value whose type marker has just been read."""
    if marker in _NUMBERS:
        return r.number(marker)
    if marker == b"S":
        return r.string()
    if marker == b"{":
        return _object(r, depth + 1)
    if marker == b"[":
        return _array(r, depth + 1)
    if marker == b"T":
        return True
    if marker == b"F":
        return False
    if marker == b"Z":
        return None
    if marker == b"C":
        return chr(r.take(1, "a char")[0])
    if marker == b"H":
        at = r.pos
        text = bytes(r.take(r.count("high-precision number length"),
                            "a high-precision number"))
        if not _HIGH_PRECISION.fullmatch(text):
            raise r.fail(f"malformed high-precision number {text[:40]!r}", at)
        return float(text)
    raise r.fail(f"unknown type marker {marker!r}", r.pos - 1)


def _container_header(r: _Reader, depth: int) -> tuple[bytes | None, int | None]:
    """Read an optional ``$type`` and ``#count``; check the count fits the data."""
    if depth > MAX_DEPTH:
        raise r.fail(f"containers nested deeper than {MAX_DEPTH} levels")
    elem_type = None
    count = None
    if r.peek() == b"$":
        r.pos += 1
        at = r.pos
        elem_type = r.marker("a container element type")
        if elem_type not in _NUMBERS and elem_type not in (b"S", b"[", b"{", b"C", b"H"):
            # Markers without a payload (T, F, Z, N) would let a few bytes declare
            # billions of elements.
            raise r.fail(f"unsupported container element type {elem_type!r}", at)
        if r.peek() != b"#":
            raise r.fail("a typed container must declare its count with '#'")
    if r.peek() == b"#":
        r.pos += 1
        at = r.pos
        count = r.count("container count")
        # Every element takes at least one byte (its size, for typed numbers), so a count
        # larger than what remains is a lie, whatever it claims.
        per_item = 1
        if elem_type in _NUMBERS:
            per_item = struct.calcsize(_NUMBERS[elem_type][0])
        if count > r.remaining() // per_item:
            raise r.fail(f"declared count {count} exceeds the {r.remaining()} bytes that "
                         f"remain", at)
    return elem_type, count


def _array(r: _Reader, depth: int) -> Any:
    elem_type, count = _container_header(r, depth)
    if elem_type in _NUMBERS:
        assert count is not None
        dtype = np.dtype(_NUMBERS[elem_type][1])
        raw = r.take(count * dtype.itemsize, "a typed array")
        arr = np.frombuffer(raw, dtype=dtype).astype(dtype.newbyteorder("="))
        arr.flags.writeable = False
        return arr
    if elem_type is not None:
        assert count is not None
        return [_value(r, elem_type, depth) for _ in range(count)]
    if count is not None:
        return [_value(r, _next_marker(r), depth) for _ in range(count)]
    items = []
    while True:
        marker = _next_marker(r)
        if marker == b"]":
            return items
        items.append(_value(r, marker, depth))


def _object(r: _Reader, depth: int) -> dict:
    elem_type, count = _container_header(r, depth)
    out: dict[str, Any] = {}
    if count is not None:
        for _ in range(count):
            key = r.string()
            out[key] = _value(r, elem_type or _next_marker(r), depth)
        return out
    while True:
        while r.peek() == b"N":
            r.pos += 1
        if r.peek() == b"}":
            r.pos += 1
            return out
        key = r.string()
        out[key] = _value(r, _next_marker(r), depth)


def _next_marker(r: _Reader) -> bytes:
    """The next value's marker, skipping no-op padding."""
    while True:
        marker = r.marker("a value")
        if marker != b"N":
            return marker
