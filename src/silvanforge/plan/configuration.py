"""What a tuning search produces and what it searches over, as plain values: a
:class:`Configuration` (every ``compile`` option the tuner sets), which the tuning cache
stores and the planner reads, and an :class:`Axis` of a search template.

>>> Configuration("reorder(tree, batch)", "sparse", 1).compile_kwargs()
{'schedule': 'reorder(tree, batch)', 'representation': 'sparse', 'n_jobs': 1}
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from ..errors import ModelFormatError
from .plan import checked_jobs

# The ``compile`` keywords a configuration may set beyond schedule, representation and
# thread count, and their types (what a template axis with ``option=True`` may name).
OPTIONS = {"tile_size": int, "tiling": str, "precision": str}
# The tuner's point for the default plan (tune/space.py).
DEFAULT_ORDER = "default"


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

    @property
    def is_default(self) -> bool:
        """Whether the search found SilvanForge's default plan fastest (its point is the
        tuner's ``default`` order): ``compile`` then plans as without a schedule
        (small-batch kernel and per-call threads included); ``schedule`` and
        ``representation`` say what that plan was when tuned."""
        return self.point.get("order") == DEFAULT_ORDER

    def compile_kwargs(self) -> dict[str, Any]:
        """The keywords of ``silvanforge.compile`` this configuration sets."""
        if self.is_default:
            return {"n_jobs": self.n_jobs}
        return {"schedule": self.schedule, "representation": self.representation,
                "n_jobs": self.n_jobs, **self.options}

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> "Configuration":
        """The configuration :meth:`to_json` wrote. It comes from a file (the tuning
        cache): anything of the wrong shape raises :class:`ModelFormatError`."""
        if not isinstance(data, dict):
            raise ModelFormatError(f"a configuration is a JSON object, not {data!r:.40}")
        unknown = set(data) - {f.name for f in fields(cls)}
        if unknown:
            raise ModelFormatError(f"unknown configuration fields {sorted(unknown)}")
        for name, kind in (("schedule", str), ("representation", str)):
            if not isinstance(data.get(name), kind):
                raise ModelFormatError(f"configuration {name} {data.get(name)!r:.40} is "
                                       f"not a {kind.__name__}")
        options, point = data.get("options") or {}, data.get("point") or {}
        if not isinstance(options, dict) or not isinstance(point, dict):
            raise ModelFormatError("configuration options and point must be JSON objects")
        for name, value in options.items():
            if not isinstance(value, OPTIONS.get(name, ())) or isinstance(value, bool):
                raise ModelFormatError(f"configuration option {name}={value!r:.40} is not "
                                       "a compile option")
        for name, kinds in (("batch_size", int), ("seconds", (int, float)),
                            ("search", str)):
            value = data.get(name)
            if value is not None and (not isinstance(value, kinds) or
                                      isinstance(value, bool)):
                raise ModelFormatError(f"configuration {name} {value!r:.40} is not valid")
        point = dict(point)
        if "walk" in point:  # JSON has no tuples
            if not isinstance(point["walk"], list):
                raise ModelFormatError(f"configuration walk {point['walk']!r:.40} is not a "
                                       "list")
            point["walk"] = tuple(point["walk"])
        jobs = checked_jobs(data.get("n_jobs"), "configuration n_jobs", ModelFormatError)
        return cls(**{**data, "options": dict(options), "point": point, "n_jobs": jobs})

    @classmethod
    def of(cls, result: Any, batch_size: int, search: str) -> "Configuration":
        """The configuration of an ``explore.Result``."""
        options = dict(result.options)
        return cls(schedule=result.schedule, representation=options.pop("representation", ""),
                   n_jobs=result.threads, options=options, point=result.point,
                   batch_size=batch_size, seconds=result.seconds, search=search)
