"""What a tuning search produces and what it searches over, as plain values: a
:class:`Configuration` (every ``compile`` option the tuner sets), which the tuning cache
stores and the planner reads, and an :class:`Axis` of a search template.

>>> Configuration("reorder(tree, batch)", "sparse", 1).compile_kwargs()
{'schedule': 'reorder(tree, batch)', 'representation': 'sparse', 'n_jobs': 1}
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Axis:
    """One tunable choice: its name, the values the exhaustive space takes, and whether
    it is a ``compile()`` keyword (``option``) rather than part of the schedule text."""

    name: str
    values: tuple
    option: bool = False


@dataclass(frozen=True)
class Configuration:
    """A tuned configuration: every ``compile`` option the tuner sets, and how it was found.

    ``options`` holds compile keywords beyond schedule, representation and thread count
    (none today; a template axis for a new compile option lands there). ``point`` is the
    template point, ``seconds`` the median time of one ``predict`` of ``batch_size`` rows
    and ``search`` how it was found ("guided" or "exhaustive"). JSON-serialisable:

    >>> c = Configuration("reorder(tree, batch)", "sparse", 1)
    >>> Configuration.from_json(c.to_json()) == c
    True
    >>> c.compile_kwargs()
    {'schedule': 'reorder(tree, batch)', 'representation': 'sparse', 'n_jobs': 1}
    """

    schedule: str
    representation: str
    n_jobs: int
    options: dict[str, Any] = field(default_factory=dict)
    point: dict[str, Any] = field(default_factory=dict)
    batch_size: int | None = None
    seconds: float | None = None
    search: str | None = None

    def compile_kwargs(self) -> dict[str, Any]:
        """The keywords of ``silvanforge.compile`` this configuration sets."""
        return {"schedule": self.schedule, "representation": self.representation,
                "n_jobs": self.n_jobs, **self.options}

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Configuration":
        point = dict(data.get("point") or {})
        if "walk" in point:  # JSON has no tuples
            point["walk"] = tuple(point["walk"])
        return cls(**{**data, "point": point})

    @classmethod
    def of(cls, result: Any, batch_size: int, search: str) -> "Configuration":
        """The configuration of an ``explore.Result``."""
        options = dict(result.options)
        return cls(schedule=result.schedule, representation=options.pop("representation"),
                   n_jobs=result.threads, options=options, point=result.point,
                   batch_size=batch_size, seconds=result.seconds, search=search)
