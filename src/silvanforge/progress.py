"""Progress bars for long work: shown on a terminal when the work is predicted to take
longer than :data:`PROGRESS_AFTER_S`, silent otherwise (short calls and logs stay quiet).

A bar that is not shown is not a tqdm at all: tqdm starts a monitor thread on its first
bar, disabled or not, and the thread lives as long as the process (a thread the caller
never asked for, still there when a host program exits from C).

>>> with bar("loading trees", seconds=0.1, total=3, unit="tree") as b:
...     b.update(3)
>>> list(each([1, 2], "tuning", show=False))
[1, 2]
"""

from __future__ import annotations

import sys
from typing import Iterable, TypeVar, Union

from tqdm import tqdm

PROGRESS_AFTER_S = 2.0

T = TypeVar("T")


class Quiet:
    """A bar that shows nothing (what :func:`bar` gives for short work)."""

    def __enter__(self) -> "Quiet":
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, n: float = 1) -> None:
        return None


Bar = Union[tqdm, Quiet]


def bar(desc: str, seconds: float, total: int, unit: str) -> Bar:
    """A bar over ``total`` ``unit`` s of work predicted to take ``seconds``, on stderr."""
    if not (seconds > PROGRESS_AFTER_S and sys.stderr.isatty()):
        return Quiet()
    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, leave=False)


def each(items: Iterable[T], desc: str, show: bool) -> Iterable[T]:
    """``items``, with a bar on stderr when ``show`` (the caller asked for one)."""
    return tqdm(items, desc=desc, leave=False, file=sys.stderr) if show else items
