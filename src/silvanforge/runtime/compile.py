"""``silvanforge.compile``: load the model, let the planner decide, build what it planned.

>>> predictor = silvanforge.compile("model.json", schedule="xgboost")   # doctest: +SKIP
>>> print(predictor.dump("plan"))                                       # doctest: +SKIP
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from ..backends import target_info
from ..backends.cpu import Target
from ..export import Exported, Kernels, contribution_kernels, write_library
from ..export.library import name_of
from ..errors import InputError
from ..frontends import load
from ..plan import make_plan
from ..plan.planner import cpu_target
from . import gc_pause, guard
from .base import build_representation, model_arrays
from .gpu import GPUPredictor
from .predictor import Predictor

# The predictor that runs a plan, by the kind of device its target is.
PREDICTORS = {"cpu": Predictor, "gpu": GPUPredictor}
log = logging.getLogger(__name__)


@gc_pause.paused()
def compile(model: Any, target: str = "cpu", schedule: Any = None,
            representation: str | None = None, precision: str | None = None,
            n_jobs: int | None = None, tile_size: int | None = None,
            tiling: str | None = None, profile: Any = None,
            cpu: str | None = None, iteration_range: tuple[int, int] | None = None,
            outputs: Any = ()) -> Predictor | GPUPredictor:
    """Compile a model (anything :func:`silvanforge.load` takes) into a :class:`Predictor`
    (``target`` "cpu") or a GPU predictor (``target`` "opencl" or "cuda"; docs/GPU.md).

    Every option is independent: what is given is honoured, what is left open the
    planner chooses to fit it (:mod:`silvanforge.plan`; ``predictor.dump("plan")``
    prints every choice).

    ``schedule``: None (SilvanForge's, chosen for the representation), a named schedule
    ("default", "xgboost", "one_tree_at_a_time", "tree_parallel", ...), schedule text,
    or a Schedule; any valid schedule runs with any representation.
    ``representation``: "array", "sparse", "reorg", "code" (trees as code) or "mask" (a
    tree's splits tested at once as vectors); "code" and "mask" are CPU-only.
    ``precision``: "float32" or "float64" thresholds (default: the model's input
    precision, which keeps parity). ``n_jobs``: threads for parallel loops, an int from
    1 to 1024 (``silvanforge.plan.plan.MAX_JOBS``; default: the CPUs this process may
    use). ``cpu``: the LLVM CPU to build for, "native" (the
    default: this machine) or a name such as "x86-64-v3" or "znver4"; a predictor
    built for a CPU loads without recompiling on any machine with its features.
    With ``SILVANFORGE_COMPILE=forbid`` in the environment it raises
    :class:`~silvanforge.errors.CompileForbiddenError` (:mod:`.guard`).
    ``schedule`` may also be a tuned ``silvanforge.tune.Configuration`` (keywords given
    here win over its own) or "auto": the tuning cache's configuration for this model,
    thread count and CPU when there is one, else the default.

    Tiling (docs/ARCHITECTURE.md "Tiling"): ``tile_size`` 1-8 nodes evaluated per walk
    step (default 1: single nodes; above 1 with the "sparse" or "array" representation,
    "sparse" by default). ``tiling``: "uniform" (default) or "probability" (seed 004:
    needs ``profile``, sample rows or a :class:`~silvanforge.Profile`; skewed trees are
    tiled along their likely paths, trees are grouped by the walk depth that covers 90%
    of the profile, and each group's walks are unrolled to that depth; default tile
    size 4). A ``profile`` alone implies ``tiling="probability"``.

    >>> import silvanforge
    >>> predictor = silvanforge.compile("model.json", schedule="xgboost", n_jobs=1)  # doctest: +SKIP
    >>> silvanforge.compile("model.json", cpu="x86-64-v3").save("model.sfp")  # doctest: +SKIP
    >>> silvanforge.compile("model.json", tile_size=4, profile=X_sample)  # doctest: +SKIP
    """
    guard.check(f"compile({type(model).__name__})")
    device = target_info(target).device
    start = time.perf_counter()
    forest = _rounds(model, iteration_range)
    loaded = time.perf_counter()
    log.info("load: %d trees, %d features (%.2f s)", forest.n_trees, forest.n_features,
             loaded - start)
    plan = make_plan(forest, target, schedule=schedule, representation=representation,
                     precision=precision, n_jobs=n_jobs, tile_size=tile_size,
                     tiling=tiling, profile=profile, cpu=cpu, outputs=outputs)
    log.info("plan: %s representation, %d kernel(s) (%.2f s)", plan.representation,
             len(plan.schedules), time.perf_counter() - loaded)
    predictor = PREDICTORS[device](plan)
    log.info("compiled in %.2f s", time.perf_counter() - start)
    return predictor


def _rounds(model: Any, iteration_range: Any) -> Any:
    """The model's Forest, cut to ``iteration_range`` when one is given."""
    forest = load(model)
    return forest if iteration_range is None else forest.slice(*_pair(iteration_range))


def _pair(value: Any) -> tuple[Any, Any]:
    """``iteration_range`` as (begin, end), or InputError."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or len(value) != 2:
        raise InputError(f"iteration_range must be a pair (begin, end), not {value!r:.60}")
    return value[0], value[1]


@gc_pause.paused()
def export(model: Any, directory: str | os.PathLike, name: str | None = None,
           triple: str | None = None, **options: Any) -> Exported:
    """Export a model (anything :func:`silvanforge.load` takes) as
    ``directory/libNAME.so`` and ``directory/NAME.h`` (docs/DEPLOY.md) without compiling
    it in this process. ``options`` are :func:`compile`'s for the CPU target (``cpu``:
    the CPU the library is for, default "native"; ``n_jobs``: the library's default
    thread count, else the OpenMP runtime's); ``triple`` an LLVM triple for another
    machine (then ``NAME.o`` and the header are written, with the command that links
    them; ``cpu`` defaults to "generic"). ``name`` defaults to the model file's name.
    ``iteration_range`` exports those rounds only, as :func:`compile` compiles them;
    ``outputs=("leaf",)`` adds ``NAME_predict_leaf``, ``outputs=("contribs",)``
    ``NAME_predict_contribs`` (ContributionsError for a model without them).

    >>> silvanforge.runtime.export("higgs.json", "out")                     # doctest: +SKIP
    >>> silvanforge.runtime.export("m.json", "arm", triple="aarch64-linux-gnu",
    ...                            cpu="neoverse-n1")                      # doctest: +SKIP
    """
    if name is None:
        name = name_of(model) if isinstance(model, (str, os.PathLike)) else "model"
    if triple is not None and options.get("cpu") is None and \
            triple.split("-")[0] != Target.host().triple.split("-")[0]:
        options["cpu"] = "generic"  # "native" is this machine's
    forest = _rounds(model, options.pop("iteration_range", None))
    plan = make_plan(forest, "cpu", triple=triple, **options)
    leaf = _kernels(plan.leaf_plan()) if "leaf" in plan.outputs else None
    contribs = contribution_kernels(plan) if "contribs" in plan.outputs else None
    return write_library(_kernels(plan), directory, name, cpu_target(plan.cpu, triple),
                         threads=options.get("n_jobs") or 0, leaf=leaf, contribs=contribs)


def _kernels(plan: Any) -> Kernels:
    """What an exported library holds of ``plan``'s kernels."""
    representation = build_representation(plan)
    return Kernels(plan, representation, model_arrays(plan.forest, representation))
