"""Progress bars for long work: shown on a terminal when the work is predicted to take
longer than :data:`PROGRESS_AFTER_S`, silent otherwise (short calls and logs stay quiet).

>>> with bar("loading trees", seconds=0.1, total=3, unit="tree") as b:
...     b.update(3)
"""

from __future__ import annotations

import sys

from tqdm import tqdm

PROGRESS_AFTER_S = 2.0


def bar(desc: str, seconds: float, total: int, unit: str) -> tqdm:
    """A bar over ``total`` ``unit`` s of work predicted to take ``seconds``, on stderr."""
    show = seconds > PROGRESS_AFTER_S and sys.stderr.isatty()
    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, leave=False,
                disable=not show)
