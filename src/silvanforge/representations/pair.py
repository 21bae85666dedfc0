"""Two layouts in one plan: the main kernel walks one, the small-batch kernel the other.

A layout that wins for blocks of rows may lose for a few (masks on AVX2: rows as the
lanes of vectors beat code for blocks, a row's splits as lanes lose to it for up to 8
rows; docs/ARCHITECTURE.md "Two layouts in one plan"). The plan then names both
(``representation``, ``small_representation``), and :class:`LayoutPair` holds both
layouts of the forest. The second's buffers are renamed (:data:`SECOND_PREFIX`), and
every kernel takes the buffers of both, the main layout's first: each kernel binds the
same model arguments, so a predictor, its saved form and its exported library treat a
pair as one layout whose kernels walk different tables.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..lir import ir, lower as lir_lower
from ..mir import lower as mir_lower
from ..model.forest import Forest

# The small-batch layout's buffers are "model_small_<field>" (the main one's "model_").
SECOND_PREFIX = "model_small_"


def renamed(cls: type) -> type:
    """``cls`` with its buffers named after :data:`SECOND_PREFIX` (a table layout)."""
    return type(cls.__name__, (cls,), {"prefix": SECOND_PREFIX})


class LayoutPair:
    """The main kernel's layout and the small-batch kernel's, as one set of buffers."""

    def __init__(self, main: Any, small: Any) -> None:
        self.main, self.small = main, small
        self.name = main.name

    @property
    def buffers(self) -> dict[str, np.ndarray]:
        return {**self.main.buffers, **self.small.buffers}

    @property
    def params(self) -> list[ir.Buffer]:
        return self.main.params + self.small.params


def lower_schedules(forest: Forest, schedules: Sequence[Any], representation: Any,
                    lanes: int) -> list[tuple[Any, ir.Kernel]]:
    """The (MIR, LIR) kernel of each schedule (main, then small-batch), each walking
    its own layout (a pair's main and small ones, else ``representation``) and taking
    the buffers of all of them; vector walks take ``lanes`` rows at once."""
    walks = ([representation.main, representation.small]
             if isinstance(representation, LayoutPair) else [representation] * 2)
    out = []
    for layout, schedule in zip(walks, schedules):
        fn = mir_lower(forest, schedule, lanes)
        out.append((fn, lir_lower.lower(fn, forest, layout, representation.params)))
    return out
