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
from typing import Any

import numpy as np

from ..backends import target_info
from ..errors import InputError
from ..frontends import load
from ..model.forest import Forest
from ..model.inputs import as_rows
from ..plan import cache
from ..plan.configuration import Configuration
from ..plan.plan import checked_jobs
from ..plan.planner import default_jobs
from .cached import cached_search

__all__ = ["Configuration", "tune", "cached_search"]

DEFAULT_BUDGET_S = 60.0


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
    # Only now: the searches import bench, which makes idle OpenMP threads sleep.
    from . import explore

    if target_info(target).device == "gpu":  # the GPU template and Algorithm 1
        from .gpu import tune_gpu

        forest = load(model)
        return tune_gpu(forest, _sample(forest, X_sample, batch_size), target, budget_s,
                        exhaustive, use_cache, progress)
    forest = load(model)
    jobs = default_jobs() if n_jobs is None else checked_jobs(n_jobs)
    rows = _sample(forest, X_sample, batch_size)
    def search() -> list:
        evaluator = explore.Evaluator(forest, rows, progress=progress)
        deadline = time.perf_counter() + budget_s
        run = explore.exhaustive if exhaustive else explore.guided
        return run(evaluator, jobs, deadline)

    return cached_search(cache.cache_key(forest, len(rows), jobs), use_cache, search,
                         len(rows), "exhaustive" if exhaustive else "guided")
