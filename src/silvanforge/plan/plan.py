"""The :class:`Plan`: every choice that decides a predictor's code, as one printable value.

The planner (:mod:`.planner`) makes it from a forest, a target and the user's options;
the CPU and GPU predictors build exactly what it says. It prints as text
(``predictor.dump("plan")``) and saves as JSON beside a predictor's machine code.

>>> print(plan)                                                 # doctest: +SKIP
forest: 100 trees, 28 features, 1 output, float32 inputs
target: cpu (native)
representation: array, float32 thresholds
...
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np

from ..errors import InputError, ModelFormatError, SilvanForgeError
from ..model.forest import Forest
from ..model.leaf_ids import leaf_id_forest
from ..representations import REGISTRY
from ..schedule import Schedule
from ..schedule.schedule import AVX2_VECTOR_LANES, VECTOR_LANES

# The most threads a predictor runs. OpenMP starts every thread asked for, each with its
# own stack, and gives no error when it cannot: 100,000 crashed the process and 2**31
# aborted it inside libgomp. 1024 is well above the cores of any one machine today.
MAX_JOBS = 1024


def checked_jobs(value: Any, source: str = "n_jobs",
                 error: type[SilvanForgeError] = InputError) -> int:
    """``value`` as a thread count: an int (Python's or numpy's, not a bool) from 1 to
    :data:`MAX_JOBS`, else ``error`` naming ``source`` (where it came from) and the value.
    Every thread count goes through here, whether a caller, the tuning cache or a saved
    predictor gave it.

    >>> checked_jobs(4)
    4
    """
    if type(value) is int and 1 <= value <= MAX_JOBS:  # the common case, first
        return value
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)) \
            and 1 <= value <= MAX_JOBS:
        return int(value)
    raise error(f"{source} must be an int from 1 to {MAX_JOBS}, not {value!r}")


# The JSON types of a saved plan's fields (n_jobs and the representation are checked
# apart): a file's plan is checked before anything is built from it.
_SAVED_TYPES: dict[str, Any] = {
    "target": str, "precision": str, "schedule": str, "cpu": (str, type(None)),
    "small_schedule": (str, type(None)), "small_representation": (str, type(None)),
    "small_batch": int, "sized_threads": bool,
    "rows_per_thread": int, "tile_size": int, "tiling": str, "outputs": list,
    "vector_lanes": int}
# The rows a vector walk may take at once: one AVX2 register of float32, or one of
# AVX-512 (a saved plan's other counts are refused: the lowering sizes buffers by them).
VECTOR_LANE_COUNTS = (AVX2_VECTOR_LANES, VECTOR_LANES)

# Outputs beyond value and margin whose kernels a plan may ask to build at once (they
# are built on first use otherwise), and an exported library to have: "leaf"
# (runtime/predictor.py, docs/OUTPUTS.md) and "contribs" (docs/CONTRIBS.md).
EAGER_OUTPUTS = ("leaf", "contribs")


def checked_outputs(outputs: Any, error: type[SilvanForgeError] = InputError
                    ) -> tuple[str, ...]:
    """``outputs`` (a sequence of :data:`EAGER_OUTPUTS` names) as a sorted tuple.

    >>> checked_outputs(["leaf"])
    ('leaf',)
    """
    if isinstance(outputs, str) or not all(isinstance(o, str) and o in EAGER_OUTPUTS
                                           for o in outputs):
        raise error(f"outputs must be a sequence of {', '.join(map(repr, EAGER_OUTPUTS))}, "
                    f"not {outputs!r:.60}")
    return tuple(sorted(set(outputs)))


@dataclass(frozen=True, eq=False)
class Plan:
    """What to build for ``forest``.

    ``target``: a registered target ("cpu", "opencl", "cuda"); ``cpu``: for the CPU
    target, the LLVM CPU name code is built for ("native": this machine's).
    ``representation`` and ``precision``: the layout of the trees and the type their
    thresholds compare in. ``schedule``: the loop nest; ``small_schedule`` (when set)
    is built too and serves batches of up to ``small_batch`` rows, walking the layout
    ``small_representation`` when set (two layouts in one plan), else
    ``representation``. ``n_jobs``: threads
    for parallel loops; with ``sized_threads`` a call uses at most one thread per
    ``rows_per_thread`` rows (the schedule is SilvanForge's: its row blocks run in
    parallel). ``tile_size`` > 1 walks tiles of that many nodes, tiled ``tiling``
    ("uniform", or "probability" from a profile: ``node_tile`` then holds the tiling's
    per-node labels, and ``forest`` may have its trees reordered: tree ``i`` is the
    model's tree ``tree_order[i]``). ``outputs``: kernels for other outputs to build at
    once (:data:`EAGER_OUTPUTS`; others are built on first use). ``vector_lanes``: the
    rows a vectorized schedule's walk takes at once (:data:`VECTOR_LANE_COUNTS`, as the
    layout chooses for the CPU: ``vector_lanes`` of its class).
    """

    forest: Forest
    target: str
    representation: str
    precision: str
    schedule: Schedule
    n_jobs: int = 1
    cpu: str | None = None
    small_schedule: Schedule | None = None
    small_batch: int = 0
    small_representation: str | None = None
    sized_threads: bool = False
    rows_per_thread: int = 1
    tile_size: int = 1
    tiling: str = "uniform"
    node_tile: np.ndarray | None = field(default=None, repr=False)
    tree_order: np.ndarray | None = field(default=None, repr=False)
    outputs: tuple[str, ...] = ()
    vector_lanes: int = VECTOR_LANES

    @property
    def schedules(self) -> list[Schedule]:
        """The kernels' schedules: the main one, then the small-batch one if any."""
        return [self.schedule] + ([self.small_schedule] if self.small_schedule else [])

    # ---- the saved form ------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """The plan as JSON values, without the forest and the tiling's labels (saved
        beside it as arrays)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)
               if f.name not in ("forest", "node_tile", "tree_order")}
        out["outputs"] = list(self.outputs)
        out["schedule"] = str(self.schedule)
        out["small_schedule"] = str(self.small_schedule) if self.small_schedule else None
        return out

    @classmethod
    def from_json(cls, forest: Forest, data: dict[str, Any],
                  node_tile: np.ndarray | None = None,
                  tree_order: np.ndarray | None = None) -> "Plan":
        """The plan :meth:`to_json` wrote, for ``forest`` (its schedules read again)."""
        if not isinstance(data, dict):
            raise ModelFormatError(f"the plan is a JSON object, not {data!r:.40}")
        known = {f.name for f in fields(cls)} - {"forest", "node_tile", "tree_order"}
        values = {k: v for k, v in data.items() if k in known}
        for name, kinds in _SAVED_TYPES.items():
            if name in values and not (isinstance(values[name], kinds) and (
                    isinstance(values[name], bool) == (kinds is bool))):
                raise ModelFormatError(f"the plan's {name} {values[name]!r:.40} is not "
                                       "valid")
        if values.get("representation") not in REGISTRY:
            raise ModelFormatError(f"the plan's representation "
                                   f"{values.get('representation')!r:.40} is not one of "
                                   f"{', '.join(sorted(REGISTRY))}")
        # A saved plan is a file's word: its thread count reaches OpenMP as it is.
        values["n_jobs"] = checked_jobs(values.get("n_jobs", 1), "the plan's n_jobs",
                                        ModelFormatError)
        second = values.get("small_representation")
        if second is not None and (second not in REGISTRY
                                   or not values.get("small_schedule")):
            raise ModelFormatError(f"the plan's small_representation {second!r:.40} is not "
                                   "a representation with a small_schedule")
        small = values.get("small_schedule")
        # Batches of up to small_batch rows run the small-batch kernel, which only a
        # small schedule gives (fuzz/: predict raised a raw AttributeError without one).
        if values.get("small_batch", 0) > 0 and not small:
            raise ModelFormatError(f"the plan's small_batch {values['small_batch']} has no "
                                   "small_schedule")
        values["outputs"] = checked_outputs(values.get("outputs", ()), ModelFormatError)
        if values.get("vector_lanes", VECTOR_LANES) not in VECTOR_LANE_COUNTS:
            raise ModelFormatError(f"the plan's vector_lanes {values['vector_lanes']} is not "
                                   f"one of {', '.join(map(str, VECTOR_LANE_COUNTS))}")
        if tree_order is not None and not np.array_equal(np.sort(tree_order),
                                                         np.arange(forest.n_trees)):
            raise ModelFormatError("the plan's tree order is not a permutation of the trees")
        values["schedule"] = Schedule.parse(values["schedule"], forest.n_trees)
        values["small_schedule"] = Schedule.parse(small, forest.n_trees) if small else None
        return cls(forest=forest, node_tile=node_tile, tree_order=tree_order, **values)

    def leaf_plan(self) -> "Plan":
        """The plan of this one's leaf output: the same choices for the forest whose
        prediction is the leaf ids (:func:`silvanforge.model.leaf_ids.leaf_id_forest`),
        each tree writing the column of its place in the model.

        >>> plan.leaf_plan().forest.n_outputs == plan.forest.n_trees  # doctest: +SKIP
        True
        """
        return replace(self, forest=leaf_id_forest(self.forest, self.tree_order),
                       outputs=())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Plan) and self.to_json() == other.to_json()

    # ---- the printer ---------------------------------------------------------------------
    def __str__(self) -> str:
        f = self.forest
        lines = [f"forest: {f.n_trees} trees, {f.n_features} features, {f.n_outputs} "
                 f"output{'s' if f.n_outputs != 1 else ''}, {np.dtype(f.input_dtype).name} "
                 "inputs",
                 f"target: {self.target}" + (f", built for CPU {self.cpu}" if self.cpu
                                             else ""),
                 f"representation: {self.representation}, {self.precision} thresholds",
                 "tiling: " + (f"{self.tiling} tiles of {self.tile_size} nodes"
                               if self.tile_size > 1 else "single nodes")]
        if self.target == "cpu":
            lines.append(f"threads: {self.n_jobs}" + (
                f", at most one per {self.rows_per_thread} rows a call"
                if self.sized_threads else " (as the schedule says)"))
        lines += ["schedule:"] + [f"  {line}" for line in str(self.schedule).splitlines()]
        if self.target == "cpu" and any(s.vectorized for s in self.schedules):
            lines.append(f"vector walks: {self.vector_lanes} rows a vector")
        if self.outputs:
            lines.append(f"kernels built at once for outputs: {', '.join(self.outputs)}")
        if self.small_schedule:
            layout = f", as {self.small_representation}" if self.small_representation else ""
            rows = "one row" if self.small_batch == 1 else \
                f"batches of up to {self.small_batch} rows"
            lines += [f"{rows}{layout}:"] + [
                f"  {line}" for line in str(self.small_schedule).splitlines()]
        return "\n".join(lines)
