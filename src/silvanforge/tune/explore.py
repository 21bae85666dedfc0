"""Evaluating template points: compile, check against the reference, time interleaved.

:class:`Evaluator` compiles each distinct (schedule, compile options) once — the thread
count is a ``predict`` argument, so one kernel serves every thread count — then runs
every candidate on the sample and compares with :func:`silvanforge.reference.predict`
before any timing: a wrong candidate is never timed, and is kept in ``rejected`` with the
reason (the gate should never close; if it does, that is a compiler bug to report). The
survivors are timed together with :func:`silvanforge.bench.interleaved_medians`, so a
noisy moment on a shared machine hits them alike.

:func:`exhaustive` evaluates the whole space of :mod:`.space`; :func:`guided` evaluates
the heuristic's shortlist, then its refinements of the best (see :mod:`.heuristic`).

Importing this module imports :mod:`silvanforge.bench`, which makes idle OpenMP threads
sleep in this process (``OMP_WAIT_POLICY``), as timing candidates in turns needs; so
``silvanforge.tune`` imports it only when a search runs.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from .. import bench, progress, reference
from ..errors import SilvanForgeError, SilvanForgeWarning
from ..model.forest import Forest
from ..runtime import compile as sf_compile
from . import heuristic, space

# Timing of a search: fewer rounds than a benchmark (many candidates, most far apart).
SEARCH_ROUNDS, SEARCH_REPEAT, SEARCH_MIN_S = 5, 2, 1e-3
# The guided search's last comparison (a handful of close candidates, the default
# among them) takes as many rounds as a benchmark: with 5, a 1-thread point beat the
# 2-thread one it was 1.26x slower than head to head (higgs, 1024 rows, threads that
# sleep between calls; docs/TUNING.md).
FINAL_ROUNDS = 15


@dataclass
class Result:
    """One evaluated point: its schedule text, compile options, thread count and either
    seconds per ``predict`` call on the sample or why it was skipped."""

    point: dict[str, Any]
    schedule: str
    options: dict[str, Any]
    threads: int
    seconds: float | None = None
    error: str | None = None


class Candidate(bench.Loaded):
    """A compiled candidate as a ``bench.Loaded``, whose ``timer`` the timing runs."""

    def __init__(self, predictor: Any) -> None:
        self.predictor = predictor

    def predict(self, X: np.ndarray, threads: int) -> np.ndarray:
        return self.predictor.predict(X, n_jobs=threads)


class Evaluator:
    """Compiles, checks and times template points on one sample of rows.

    >>> ev = Evaluator(forest, rows)                                # doctest: +SKIP
    >>> best = ev.run(space.points(forest.n_trees, n_jobs=2))[0]    # doctest: +SKIP
    """

    def __init__(self, forest: Forest, rows: np.ndarray, progress: bool = False,
                 rounds: int = SEARCH_ROUNDS, repeat: int = SEARCH_REPEAT,
                 min_s: float = SEARCH_MIN_S) -> None:
        self.forest, self.rows = forest, rows
        self.expected = reference.predict(forest, rows)
        self.progress = progress
        self.rounds, self.repeat, self.min_s = rounds, repeat, min_s
        self._compiled: dict[str, Any] = {}  # compile key -> Predictor or error text
        self.rejected: list[Result] = []
        self.compile_s = 0.0

    def predictor(self, result: Result) -> Any:
        """The compiled predictor of ``result``'s schedule and options (compiled once),
        or the reason it cannot be compiled."""
        key = _key(result.schedule, result.options)
        if key not in self._compiled:
            start = time.perf_counter()
            try:
                if result.point["order"] == space.DEFAULT_ORDER:
                    self._compiled[key] = sf_compile(self.forest, n_jobs=result.threads)
                else:
                    self._compiled[key] = sf_compile(self.forest, schedule=result.schedule,
                                                     n_jobs=result.threads, **result.options)
            except SilvanForgeError as exc:  # an illegal point (peel too deep, ...)
                self._compiled[key] = f"{type(exc).__name__}: {exc}"
            self.compile_s += time.perf_counter() - start
        return self._compiled[key]

    @property
    def compiles(self) -> int:
        """How many distinct kernels were compiled (or refused)."""
        return len(self._compiled)

    def run(self, points: Sequence[dict[str, Any]], deadline: float | None = None,
            desc: str = "tuning", rounds: int | None = None) -> list[Result]:
        """Evaluate ``points``: fastest first, then those skipped (with ``error``).

        After ``deadline`` (a ``time.perf_counter()`` value) points that would need
        compiling are left out; those already compiled are still checked and timed.
        ``rounds``: interleaved rounds of timing (default: the evaluator's).
        """
        results, timers = [], {}
        for point in progress.each(points, desc, self.progress):
            text, options = space.render(point, self.forest.n_trees)
            if (deadline is not None and time.perf_counter() > deadline
                    and _key(text, options) not in self._compiled):
                continue
            result = Result(point, text, options, point["threads"])
            results.append(result)
            predictor = self.predictor(result)
            if isinstance(predictor, str):
                result.error = predictor
                continue
            if point["order"] == space.DEFAULT_ORDER:  # what the planner chose, to show
                result.schedule = str(predictor.plan.schedule)
                result.options = {"representation": predictor.plan.representation}
            ok, err = bench.compare(predictor.predict(self.rows, n_jobs=result.threads),
                                    self.expected)
            if not ok:
                result.error = f"MISMATCH against the reference (max abs error {err:.3g})"
                self.rejected.append(result)
                warnings.warn(f"tuner discarded a wrong configuration: {text!r} "
                              f"{options} threads={result.threads}: {result.error}",
                              SilvanForgeWarning, stacklevel=2)
                continue
            timers[len(results) - 1] = Candidate(predictor).timer(self.rows, result.threads)
        if timers:
            medians = bench.interleaved_medians(timers, rounds or self.rounds,
                                                self.repeat, self.min_s)
            for index, seconds in medians.items():
                results[index].seconds = seconds
        return sorted(results, key=lambda r: (r.seconds is None, r.seconds or 0.0))


def _key(schedule: str, options: dict[str, Any]) -> str:
    return repr((schedule, sorted(options.items())))


def exhaustive(ev: Evaluator, n_jobs: int, deadline: float | None = None) -> list[Result]:
    """Every point of the template (see :mod:`.space`), fastest first."""
    return ev.run(space.points(ev.forest.n_trees, n_jobs), deadline, "exhaustive")


def guided(ev: Evaluator, n_jobs: int, deadline: float | None = None) -> list[Result]:
    """The heuristic's search: its shortlist, then refinements of the best few, which are
    timed again beside the refinements and the default plan (one interleaved
    comparison decides; the default is a candidate of both rounds)."""
    batch = len(ev.rows)
    default = [space.default_point(n_jobs)]
    first = [r for r in ev.run(default + heuristic.shortlist(ev.forest, batch, n_jobs),
                               deadline, "shortlist") if r.seconds is not None]
    leaders = [r for r in first if r.point["order"] != space.DEFAULT_ORDER][:heuristic.KEEP]
    second = heuristic.refinements([r.point for r in leaders], ev.forest, batch, n_jobs)
    if not second:
        return first
    final = ev.run(default + [r.point for r in leaders] + second, deadline, "refine",
                   max(ev.rounds, FINAL_ROUNDS))
    return final if final and final[0].seconds is not None else first
