"""The autotuner: search the CPU schedule template for the fastest exact configuration.

``tune(model, X_sample, batch_size=..., n_jobs=...)`` times candidate configurations on
the user's rows at the batch size they will predict with and returns the fastest as a
:class:`Configuration`, which ``compile`` takes (``compile(model, schedule=config)`` or
``compile(model, **config.compile_kwargs())``). Results are kept in a persistent cache
(:mod:`.cache`), which ``compile(model, schedule="auto")`` reads.

The template and its axes are in :mod:`.space`, the pruning rules in :mod:`.heuristic`,
compiling, checking and timing in :mod:`.explore`; docs/TUNING.md has the evidence.

>>> import silvanforge
>>> config = silvanforge.tune("model.json", X, batch_size=1024, n_jobs=2)  # doctest: +SKIP
>>> predictor = silvanforge.compile("model.json", schedule=config)       # doctest: +SKIP
>>> predictor = silvanforge.compile("model.json", schedule="auto")       # doctest: +SKIP
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import numpy as np

from ..errors import InputError
from ..frontends import load
from ..model.forest import Forest
from ..model.inputs import as_rows
from . import cache

__all__ = ["Configuration", "tune", "resolve", "cached_search"]

DEFAULT_BUDGET_S = 60.0


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


def _sample(forest: Forest, X_sample: Any, batch_size: int | None) -> np.ndarray:
    """The sample as the model's rows, repeated or cut to ``batch_size`` rows."""
    rows = as_rows(X_sample, forest)
    if len(rows) == 0:
        raise InputError("X_sample has no rows to time predictions on")
    n = len(rows) if batch_size is None else int(batch_size)
    if n < 1:
        raise InputError(f"batch_size must be at least 1, not {n}")
    return np.ascontiguousarray(np.resize(rows, (n, rows.shape[1])))


def tune(model: Any, X_sample: Any, target: str = "cpu", batch_size: int | None = None,
         n_jobs: int | None = None, budget_s: float = DEFAULT_BUDGET_S,
         exhaustive: bool = False, use_cache: bool = True,
         progress: bool = True) -> Configuration:
    """The fastest exact configuration found for predicting ``batch_size`` rows at a time.

    ``X_sample``: representative rows (repeated or cut to ``batch_size``; default: their
    number). ``n_jobs``: the most threads to use (default: the CPUs this process may
    use); thread counts up to it are searched. ``budget_s``: the search stops compiling
    new candidates after this many seconds (those compiled are still timed).
    ``exhaustive``: search the whole template instead of the heuristic's shortlist.
    ``use_cache``: return a cached result for the same model, batch size, threads, CPU
    and SilvanForge version, and store the new one. ``progress``: show a progress bar.
    ``target`` "opencl" or "cuda": seed 002 §9's GPU template searched by Algorithm 1
    (or exhaustively) on that device, cached by target and device (:mod:`.gpu`;
    ``n_jobs`` does not apply).

    Every candidate is checked against ``silvanforge.reference.predict`` on the sample
    before it is timed; a wrong one is discarded (with a SilvanForgeWarning).

    >>> tune("model.json", X, batch_size=256, n_jobs=1, budget_s=10)  # doctest: +SKIP
    """
    from ..runtime.predictor import _default_jobs
    from . import explore  # only now: it imports bench (see its docstring)

    if target in ("cuda", "opencl"):  # the GPU template and Algorithm 1 (tune/gpu.py)
        from .gpu import tune_gpu

        forest = load(model)
        return tune_gpu(forest, _sample(forest, X_sample, batch_size), target, budget_s,
                        exhaustive, use_cache, progress)
    if target != "cpu":
        raise InputError(f"unknown target {target!r}; choose 'cpu', 'cuda' or 'opencl'")
    forest = load(model)
    jobs = _default_jobs() if n_jobs is None else int(n_jobs)
    if jobs < 1:
        raise InputError(f"n_jobs must be at least 1, not {jobs}")
    rows = _sample(forest, X_sample, batch_size)
    def search() -> list:
        evaluator = explore.Evaluator(forest, rows, progress=progress)
        deadline = time.perf_counter() + budget_s
        run = explore.exhaustive if exhaustive else explore.guided
        return run(evaluator, jobs, deadline)

    return cached_search(cache.cache_key(forest, len(rows), jobs), use_cache, search,
                         len(rows), "exhaustive" if exhaustive else "guided")


def cached_search(key: dict[str, Any], use_cache: bool, search: Callable[[], list],
                  n_rows: int, how: str, what: str = "") -> Configuration:
    """The cached configuration under ``key``, or the fastest of ``search()``'s timed
    results (stored under ``key``); the CPU and GPU tuners both end here."""
    if use_cache and (hit := cache.lookup(key)) is not None:
        return Configuration.from_json(hit)
    results = [r for r in search() if r.seconds is not None]
    if not results:
        raise InputError(f"no candidate {what}configuration compiled within the budget; "
                         "raise budget_s")
    config = Configuration.of(results[0], n_rows, how)
    if use_cache:
        cache.store(key, config.to_json())
    return config


def resolve(forest: Forest, schedule: Any, given: dict[str, Any]) -> dict[str, Any]:
    """``compile``'s keywords for ``schedule="auto"`` or a :class:`Configuration`.

    ``given`` holds the caller's other keywords; those not None win over the
    configuration's. "auto" takes the cached configuration for this model, thread count
    (``given["n_jobs"]`` or all CPUs), CPU and version (the most recent, whatever its
    batch size), with the thread count it was tuned to; without one, SilvanForge's
    default (``schedule=None``).
    """
    from ..runtime.predictor import _default_jobs

    explicit = {k: v for k, v in given.items() if v is not None}
    if not isinstance(schedule, str):  # a Configuration
        return {**schedule.compile_kwargs(), **explicit}
    jobs = explicit.get("n_jobs", _default_jobs())
    hit = cache.lookup_any_batch(cache.cache_key(forest, 0, jobs))
    if hit is None:
        return {**given, "schedule": None}
    # The thread count chose the entry; the tuned count (it may be fewer) is the one to use.
    explicit.pop("n_jobs", None)
    return {**Configuration.from_json(hit).compile_kwargs(), **explicit}
