"""The GPU auto-scheduler's search: Algorithm 1 (seed 002 §9) or the exhaustive template
timed on the device. The template, its rules and Algorithm 1's choices are data and pure
functions in :mod:`silvanforge.plan.gpu_template`; here :class:`Evaluator` compiles each
candidate, checks it against :mod:`silvanforge.reference` and times it with
:func:`silvanforge.bench.interleaved_medians`.

>>> tune_gpu(forest, rows, "opencl", budget_s=30)                 # doctest: +SKIP
"""

from __future__ import annotations

import time
import warnings
from typing import Any, Sequence

import numpy as np

from .. import bench, progress, reference
from ..errors import SilvanForgeError, SilvanForgeWarning
from ..model.forest import Forest
from ..plan.gpu_template import (KEEP, DeviceFacts, algorithm1, cache_key, device_facts,
                                 points, render, with_shared_reduction)
from ..runtime import compile as sf_compile
from .cached import cached_search
from .explore import SEARCH_MIN_S, SEARCH_REPEAT, SEARCH_ROUNDS, Candidate, Result


class Evaluator:
    """Compiles, checks and times template points on one sample of rows for one target.

    A candidate whose predictions differ from the reference is never timed: it is kept
    in ``rejected`` and reported with a :class:`SilvanForgeWarning`. One the compiler
    refuses (shared memory exceeded, a representation the model cannot use) is skipped
    with the reason in its ``Result.error``.

    >>> ev = Evaluator(forest, rows, "opencl")                       # doctest: +SKIP
    >>> ev.run(algorithm1(forest, len(rows), device_facts("opencl")))[0]  # doctest: +SKIP
    """

    def __init__(self, forest: Forest, rows: np.ndarray, target: str,
                 progress: bool = False) -> None:
        self.forest, self.rows, self.target = forest, rows, target
        self.expected = reference.predict(forest, rows)
        self.progress = progress
        self.rejected: list[Result] = []
        self._done: dict[tuple[str, str], Result] = {}
        self._timers: dict[tuple[str, str], Any] = {}

    def run(self, candidates: Sequence[dict[str, Any]], deadline: float | None = None,
            desc: str = "tuning") -> list[Result]:
        """Evaluate ``candidates`` (points already evaluated are timed again beside the
        new ones): fastest first, then those skipped. After ``deadline`` (a
        ``time.perf_counter()`` value) no new candidate is compiled."""
        results: list[Result] = []
        for point in progress.each(candidates, desc, self.progress):
            key = render(point, self.forest)
            if key not in self._done:
                if deadline is not None and time.perf_counter() > deadline:
                    continue
                self._done[key] = self._check(point, *key)
            if self._done[key] not in results:
                results.append(self._done[key])
        timers = {i: self._timers[(r.schedule, r.options["representation"])]
                  for i, r in enumerate(results) if r.error is None}
        if timers:
            medians = bench.interleaved_medians(timers, SEARCH_ROUNDS, SEARCH_REPEAT,
                                                SEARCH_MIN_S)
            for index, seconds in medians.items():
                results[index].seconds = seconds
        return sorted(results, key=lambda r: (r.seconds is None, r.seconds or 0.0))

    def _check(self, point: dict[str, Any], text: str, representation: str) -> Result:
        result = Result(point, text, {"representation": representation}, 1)
        try:
            predictor = sf_compile(self.forest, self.target, text, representation)
        except SilvanForgeError as exc:
            result.error = f"{type(exc).__name__}: {exc}"
            return result
        ok, err = bench.compare(predictor.predict(self.rows), self.expected)
        if not ok:
            result.error = f"MISMATCH against the reference (max abs error {err:.3g})"
            self.rejected.append(result)
            warnings.warn(f"GPU tuner discarded a wrong configuration: {text!r} "
                          f"{representation}: {result.error}", SilvanForgeWarning,
                          stacklevel=3)
            return result
        self._timers[(text, representation)] = Candidate(predictor).timer(self.rows, 1)
        return result


def guided(ev: Evaluator, device: DeviceFacts, deadline: float | None = None) -> list[Result]:
    """Algorithm 1: its first stage, then shared reduction on the best ``KEEP``, the
    stages' leaders timed again together; fastest first."""
    first = [r for r in ev.run(algorithm1(ev.forest, len(ev.rows), device), deadline,
                               "algorithm 1") if r.seconds is not None]
    leaders = [r.point for r in first[:KEEP]]
    second = with_shared_reduction(leaders)
    return ev.run(leaders + second, deadline, "shared reduction") if second else first


def exhaustive(ev: Evaluator, device: DeviceFacts, deadline: float | None = None,
               space: dict[str, Sequence[Any]] | None = None) -> list[Result]:
    """Every point of the template (or of ``space``), fastest first."""
    return ev.run(points(ev.forest, device, space), deadline, "exhaustive")


def tune_gpu(forest: Forest, rows: np.ndarray, target: str, budget_s: float,
             exhaustive_search: bool = False, use_cache: bool = True, progress: bool = True,
             space: dict[str, Sequence[Any]] | None = None) -> Any:
    """What ``silvanforge.tune(model, X, target="opencl"|"cuda")`` does: the fastest
    exact :class:`~silvanforge.tune.Configuration` found by Algorithm 1 (or the
    exhaustive search of ``space``, default the whole template) on ``rows``.

    >>> tune_gpu(forest, rows, "opencl", budget_s=30)                 # doctest: +SKIP
    """
    device = device_facts(target)

    def search() -> list[Result]:
        ev = Evaluator(forest, rows, target, progress)
        deadline = time.perf_counter() + budget_s
        return exhaustive(ev, device, deadline, space) if exhaustive_search else \
            guided(ev, device, deadline)

    return cached_search(cache_key(forest, len(rows), target, device), use_cache, search,
                         len(rows), "exhaustive" if exhaustive_search else "algorithm1",
                         "GPU ")
