"""The compile planner: (forest, target, the user's options) -> one :class:`Plan`.

It is the only place that decides. What the user states is honoured; what the user
leaves open is chosen to fit it:

- the representation: the one named, else the first of the registered layouts, by
  their ``default_rank``, that runs on the target's device, :meth:`suits
  <silvanforge.lir.representation.Representation.suits>` the forest and can walk the
  schedule given (a vectorized schedule takes a layout with vector walks); a layout
  that does not run on the target is refused, naming those that do;
- the schedule: the one given, else the tiling's (probability-based tiles), else the
  representation's :meth:`default_schedule`, plus a small-batch kernel where the layout
  gains from one (its ``small_batch_schedule``);
- the precision: the model's input precision (exact parity);
- threads: ``n_jobs``, else every CPU this process may use; a schedule of SilvanForge's
  sizes each call's threads to its rows (:func:`rows_per_thread`);
- the CPU: ``cpu`` ("native" by default: this machine), whose features decide the
  defaults that need AVX-512.

``schedule="auto"`` or a tuned :class:`~silvanforge.plan.configuration.Configuration`
reads the tuning cache (:mod:`.cache`) here; the search that fills it is
:mod:`silvanforge.tune`, above the runtime. Measured evidence for each rule is in
docs/ARCHITECTURE.md ("Default choices").

>>> plan = make_plan(forest, schedule="xgboost")                # doctest: +SKIP
>>> print(plan)                                                 # doctest: +SKIP
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from .. import cores
from ..backends import target_info
from ..backends.cpu import Target
from ..errors import InputError, ScheduleError
from ..model.forest import Forest
from ..representations import REGISTRY
from ..schedule import Schedule, named
from ..schedule.library import GPU_SCHEDULES, LIBRARY
from . import cache, gpu_template
from .configuration import Configuration
from .layout import plan_layout
from .plan import MAX_JOBS, Plan, checked_jobs, checked_outputs

PRECISIONS = ("float32", "float64")
# Batches of at most this many rows take the small-batch kernel when there is one
# (docs/ARCHITECTURE.md "Default choices": small batches).
SMALL_BATCH = 8
# A thread pays for waking up only with enough rows of its own: a call of a schedule
# of SilvanForge's uses at most one thread per this many rows (threads that spin
# between calls, OpenMP's default, wake at once).
MIN_ROWS_PER_THREAD = 128
# Threads that sleep between calls (OMP_WAIT_POLICY=passive) are slow to wake, so each
# must get this many walks (rows x trees) too (docs/ARCHITECTURE.md "Default choices":
# threads).
MIN_WALKS_PER_SLEEPING_THREAD = 120_000


def default_jobs() -> int:
    """The CPUs this process may use (at most :data:`MAX_JOBS`)."""
    return min(cores.usable(), MAX_JOBS)


def rows_per_thread(forest: Forest) -> int:
    """The fewest rows a thread of a sized call gets: ``MIN_ROWS_PER_THREAD``, or with
    sleeping OpenMP threads enough for ``MIN_WALKS_PER_SLEEPING_THREAD`` walks.

    >>> rows_per_thread(forest)                              # doctest: +SKIP
    128
    """
    if os.environ.get("OMP_WAIT_POLICY", "").strip().lower() != "passive":
        return MIN_ROWS_PER_THREAD
    walks = MIN_WALKS_PER_SLEEPING_THREAD
    return max(MIN_ROWS_PER_THREAD, -(-walks // max(1, forest.n_trees)))


def cpu_target(cpu: str = "native", triple: str | None = None) -> Target:
    """The CPU code is built for: "native" (this machine) or an LLVM CPU name, of
    ``triple`` (default: this machine's; another one is for an exported library)."""
    if not isinstance(cpu, str):
        raise InputError(f"cpu must be an LLVM CPU name or 'native', not {cpu!r}")
    return Target.named(cpu, triple)


def choose_precision(forest: Forest, precision: str | None) -> str:
    """The precision named, else the model's input precision (which keeps parity)."""
    if precision is None:
        return "float32" if forest.input_dtype == np.float32 else "float64"
    if precision not in PRECISIONS:
        raise InputError(f"precision must be 'float32' or 'float64', not {precision!r}")
    return precision


def parse_schedule(forest: Forest, schedule: Any) -> Schedule:
    """A schedule given as a library name, schedule text or a Schedule, as a Schedule
    checked against ``forest``."""
    if isinstance(schedule, Schedule):
        return Schedule.parse(str(schedule), forest.n_trees)
    if isinstance(schedule, str):
        if schedule.strip() in LIBRARY:
            return named(schedule.strip(), forest.n_trees)
        return Schedule.parse(schedule, forest.n_trees)
    raise InputError(f"schedule must be None, a name, schedule text or a Schedule, not "
                     f"{type(schedule).__name__}")


def choose_representation(forest: Forest, name: str | None, precision: str, device: str,
                          cpu_features: frozenset[str],
                          schedule: Schedule | None = None) -> str:
    """The representation named (if it runs on ``device``), else the default for this
    forest and ``schedule`` (see the module docstring)."""
    if name is not None:
        cls = REGISTRY.get(name)
        if cls is None:
            raise InputError(f"unknown representation {name!r}; choose from "
                             f"{', '.join(sorted(REGISTRY))}")
        if device not in cls.devices:
            runs = sorted(n for n, c in REGISTRY.items() if device in c.devices)
            raise InputError(f"representation {name!r} runs on {' and '.join(cls.devices)}"
                             f" targets only; on a {device} use "
                             f"{', '.join(repr(n) for n in runs)}")
        return name
    ranked = sorted((c for c in REGISTRY.values()
                     if c.default_rank is not None and device in c.default_devices),
                    key=lambda c: c.default_rank)
    if schedule is not None and schedule.vectorized:
        lanes = [c for c in ranked if c.vector_walks]
        suiting = [c.name for c in lanes if c.suits(forest, precision, cpu_features)]
        if suiting:
            return suiting[0]
        if lanes:
            names = ", ".join(repr(c.name) for c in lanes)
            raise ScheduleError(
                f"vectorize walks rows as the lanes of a layout ({names}), and none suits "
                f"this forest by default; name one with representation= (e.g. "
                f"representation={lanes[0].name!r})")
    return next(c.name for c in ranked if c.suits(forest, precision, cpu_features))


def tuned_options(forest: Forest, schedule: Any, given: dict[str, Any],
                  cpu: str) -> dict[str, Any]:
    """``compile``'s keywords for ``schedule="auto"`` or a :class:`Configuration`.

    ``given`` holds the caller's other keywords; those not None win over the
    configuration's. "auto" takes the cached configuration for this model, thread count
    (``given["n_jobs"]`` or all CPUs), CPU and version (the most recent, whatever its
    batch size), with the thread count it was tuned to; without one, SilvanForge's
    default (``schedule=None``).
    """
    explicit = {k: v for k, v in given.items() if v is not None}
    if not isinstance(schedule, str):  # a Configuration
        return {**schedule.compile_kwargs(), **explicit}
    jobs = checked_jobs(explicit["n_jobs"]) if "n_jobs" in explicit else default_jobs()
    hit = cache.lookup_any_batch(cache.cache_key(forest, 0, jobs, cpu))
    if hit is None:
        return {**given, "schedule": None}
    # The thread count chose the entry; the tuned count (it may be fewer) is the one to use.
    explicit.pop("n_jobs", None)
    return {**Configuration.from_json(hit).compile_kwargs(), **explicit}


def _tuned(schedule: Any) -> bool:
    return (isinstance(schedule, str) and schedule.strip() == "auto") or \
        isinstance(schedule, Configuration)


def make_plan(forest: Forest, target: str = "cpu", schedule: Any = None,
              representation: str | None = None, precision: str | None = None,
              n_jobs: int | None = None, tile_size: int | None = None,
              tiling: str | None = None, profile: Any = None,
              cpu: str | None = None, outputs: Any = (),
              triple: str | None = None) -> Plan:
    """The :class:`Plan` for ``forest`` on ``target`` with ``compile``'s options (see
    :func:`silvanforge.compile` for each; the module docstring says how what is left
    open is chosen). ``triple``: the LLVM triple ``cpu`` is one of (default: this
    machine's; another one plans an exported library for another machine, whose
    defaults then need none of this machine's CPU features).

    >>> print(make_plan(forest, schedule="one_tree_at_a_time").schedule)  # doctest: +SKIP
    reorder(tree, batch)
    """
    device = target_info(target).device
    outputs = checked_outputs(outputs)
    if device == "gpu":
        if outputs:
            raise InputError(f"outputs={list(outputs)} are CPU outputs for now; target "
                             f"{target!r} predicts values and margins")
        return _gpu_plan(forest, target, schedule, representation, precision, tile_size,
                         tiling, profile, cpu)
    cpu = "native" if cpu is None else cpu
    if _tuned(schedule):
        given = {"representation": representation, "precision": precision,
                 "n_jobs": n_jobs, "tile_size": tile_size, "tiling": tiling,
                 "profile": profile}
        return make_plan(forest, target, cpu=cpu, outputs=outputs, triple=triple,
                         **tuned_options(forest, schedule, given, cpu))
    features = frozenset(cpu_target(cpu, triple).enabled())
    jobs = default_jobs() if n_jobs is None else checked_jobs(n_jobs)
    layout = plan_layout(forest, tile_size, tiling, profile)
    forest = layout.forest
    chosen_precision = choose_precision(forest, precision)
    given = parse_schedule(forest, schedule) if schedule is not None else \
        Schedule.parse(layout.schedule, forest.n_trees) if layout.schedule else None
    rep = choose_representation(forest, representation or layout.representation,
                                chosen_precision, device, features, given)
    if given is not None:
        chosen = given
    elif layout.tile_size > 1:  # tiled walks: the layouts with a tiled form, unvectorized
        chosen = named("default", forest.n_trees)
    else:
        chosen = REGISTRY[rep].default_schedule(forest, chosen_precision, features)
    small = REGISTRY[rep].small_batch_schedule(forest, chosen_precision, features) \
        if schedule is None else None
    # A layout chosen here may leave a few rows to another (two layouts in one plan).
    pair = REGISTRY[rep].small_batch_layout(forest, chosen_precision, features) \
        if given is None and representation is None and layout.representation is None \
        and layout.tile_size == 1 else None
    second, rows = pair or (None, None)
    if second is not None:
        small = REGISTRY[second].small_batch_schedule(forest, chosen_precision, features) \
            or REGISTRY[second].default_schedule(forest, chosen_precision, features)
    return Plan(forest=forest, target=target, cpu=cpu, representation=rep,
                precision=chosen_precision, schedule=chosen, n_jobs=jobs,
                small_schedule=small, small_batch=rows or (SMALL_BATCH if small else 0),
                small_representation=second,
                sized_threads=schedule is None, rows_per_thread=rows_per_thread(forest),
                tile_size=layout.tile_size, tiling=layout.tiling,
                node_tile=layout.node_tile, tree_order=layout.tree_order, outputs=outputs,
                vector_lanes=REGISTRY[rep].vector_lanes(forest, features))


def _gpu_plan(forest: Forest, target: str, schedule: Any, representation: str | None,
              precision: str | None, tile_size: int | None, tiling: str | None,
              profile: Any, cpu: str | None) -> Plan:
    """A GPU target's plan: ``schedule`` None is ``tahoe_direct`` (64 rows per block, one
    row per thread, every tree); "auto" reads the tuning cache, else Algorithm 1."""
    if cpu is not None:
        raise InputError(f"cpu= names the CPU of target 'cpu'; target {target!r} builds "
                         "for the GPU it finds")
    if tiling == "probability" or profile is not None:
        raise InputError("probability-based tiling is a CPU option (GPU walks take "
                         "tile_size with uniform tiling)")
    if _tuned(schedule):
        schedule, tuned = gpu_template.resolve(forest, target, schedule)
        representation = representation or tuned
    chosen = named(GPU_SCHEDULES[0], forest.n_trees) if schedule is None else \
        parse_schedule(forest, schedule)
    layout = plan_layout(forest, tile_size, tiling, None)
    chosen_precision = choose_precision(forest, precision)
    rep = choose_representation(forest, representation or layout.representation,
                                chosen_precision, "gpu", frozenset(), chosen)
    return Plan(forest=forest, target=target, representation=rep,
                precision=chosen_precision, schedule=chosen, tile_size=layout.tile_size,
                tiling=layout.tiling)
