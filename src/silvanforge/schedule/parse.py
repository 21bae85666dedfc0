"""The schedule text form: one directive per line, ``#`` comments, blank lines ignored.

Arguments are names (``b0``, dotted copies like ``batch.t0``, GPU dimensions like
``grid.x``) or whole numbers::

    tile(batch, b0, b1, 64)   # rows in blocks of 64
    reorder(b0, tree, b1)
    parallel(b0)

Errors name the line: ``line 2: reorder(b1, b0): ...``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ..errors import ScheduleError

if TYPE_CHECKING:
    from .schedule import Schedule

_LINE = re.compile(r"\s*([A-Za-z_]\w*)\s*\((.*)\)\s*\Z")
_ARG = re.compile(r"[A-Za-z_][\w.]*\Z")


def parse_into(schedule: "Schedule", text: str) -> "Schedule":
    """Apply every directive of ``text`` to ``schedule`` and return it."""
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = _LINE.match(line)
        if match is None:
            raise ScheduleError(f"line {number}: {line}: expected name(arguments, ...)")
        args = [_argument(a.strip(), number, line) for a in match.group(2).split(",")]
        schedule.apply(match.group(1), *([] if args == [""] else args), line=number)
    return schedule


def _argument(text: str, number: int, line: str) -> str | int:
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    if text == "" or _ARG.match(text):
        return text
    raise ScheduleError(f"line {number}: {line}: bad argument {text!r}")
