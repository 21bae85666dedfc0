"""The GPU schedule template of seed 002 §9 and Algorithm 1's rules, as plain data and
pure functions (the search that times them is :mod:`silvanforge.tune.gpu`).

The template (:data:`AXES`) is data: a *point* is a dict from axis name to value, and
:func:`render` turns it into schedule text (rows per block ``R``, rows per thread ``r``,
tree threads ``K``, interleave factor ``I``; ``T`` trees)::

    tile(batch, b0, b1, R)              # a block's rows; b0 on grid.x
    tile(b1, b2, b3, r)                 # r > 1: each thread's r rows (b3), b2 on block.x
    tile(tree, t0, t1, ceil(T/K))       # K > 1: t0 on block.y, t1 a thread's trees
    tile(t1, w0, w1, I)                 # I > 1: I walks interleaved (w1)
    reorder(b0, b2, t0, b3, w0, w1)
    cache(b0)  cache(t0)  unrollWalk(w1, depth)  sharedReduce(t0)

:func:`algorithm1` is the seed's heuristic as a pure function of the forest, the batch
size and :class:`DeviceFacts`: the first stage's points (its ``TBConfigs`` rule × the
interleave factors × the representations, rows cached where they fit, trees never);
:func:`with_shared_reduction` makes the second stage's points from the best three.
The planner reads :func:`resolve` for ``compile(model, target=..., schedule="auto")``.

>>> facts = DeviceFacts("example", max_block_threads=1024, shared_bytes=48 * 1024)
>>> render(algorithm1(_ExampleForest(), 100_000, facts)[0], _ExampleForest())[0].splitlines()[:2]
['tile(batch, b0, b1, 32)', 'tile(tree, t0, t1, 50)']
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from ..errors import InputError
from ..lir.gpu import MAX_BLOCK_THREADS, SHARED_BUDGET
from ..model.forest import Forest
from ..version import __version__
from . import cache
from .configuration import Axis, Configuration

# The template's axes and the values the exhaustive space takes (seed 002 §9; the row
# and tree-thread values are those Algorithm 1 draws from, plus one tree thread).
AXES: tuple[Axis, ...] = (
    Axis("rows_per_block", (8, 32, 64)),
    Axis("rows_per_thread", (1, 2)),
    Axis("tree_threads", (1, 2, 10, 20, 50)),
    Axis("cache_rows", (False, True)),
    Axis("cache_trees", (False, True)),
    Axis("unroll_walks", (False, True)),
    Axis("interleave", (1, 2, 4)),
    Axis("shared_reduce", (False, True)),
    Axis("representation", ("array", "sparse", "reorg"), option=True),
)
# Algorithm 1's constants: batches up to T_BATCH rows are "small"; models with more than
# T_FEATURES features partition trees over more threads at any batch size.
T_BATCH, T_FEATURES = 2048, 128
SMALL_ROWS, SMALL_TREE_THREADS = (8, 32), (20, 50)
LARGE_ROWS, LARGE_TREE_THREADS = (32, 64), (2, 10)
INTERLEAVE_FACTORS = (1, 2, 4)
REPRESENTATIONS = ("array", "sparse", "reorg")
KEEP = 3  # the best first-stage schedules that get a shared-reduction variant
# Walks are unrolled this many levels at most (deeper unrolling only grows the kernel).
MAX_UNROLL_DEPTH = 8
# compile(schedule="auto") without a cache entry does not know the batch size; GPUs are
# for large batches, so Algorithm 1 is asked about one above T_BATCH.
AUTO_BATCH = 4 * T_BATCH


@dataclass(frozen=True)
class DeviceFacts:
    """What the template's feasibility depends on: the device's name (part of the cache
    key), the most threads one block may have and its shared memory, both capped at what
    the GPU lowering builds (:data:`~silvanforge.lir.gpu.MAX_BLOCK_THREADS`,
    :data:`~silvanforge.lir.gpu.SHARED_BUDGET`)."""

    name: str
    max_block_threads: int = MAX_BLOCK_THREADS
    shared_bytes: int = SHARED_BUDGET


def device_facts(target: str) -> DeviceFacts:
    """The facts of the device ``target`` ("opencl" or "cuda") runs on.

    >>> device_facts("opencl").name                                   # doctest: +SKIP
    'Portable Computing Language: pthread-skylake-avx512-...'
    """
    if target == "opencl":
        from ..backends.gpu.runtime import _opencl_context

        device = _opencl_context().devices[0]
        name = f"{device.platform.name}: {device.name}"
        threads, shared = device.max_work_group_size, device.local_mem_size
    elif target == "cuda":
        from ..errors import require

        cp = require("cupy", "cuda")
        props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
        name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
        threads, shared = props["maxThreadsPerBlock"], props["sharedMemPerBlock"]
    else:
        raise InputError(f"unknown GPU target {target!r}; choose 'cuda' or 'opencl'")
    return DeviceFacts(name, min(int(threads), MAX_BLOCK_THREADS),
                       min(int(shared), SHARED_BUDGET))


# ---- the template ----

def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def canonical(point: dict[str, Any], forest: Forest,
              device: DeviceFacts) -> dict[str, Any] | None:
    """``point`` with the values that change nothing normalised, or None when the device
    cannot run it (more threads per block than it has).

    Tree threads become the count the tiling gives (``ceil(T / ceil(T/K))``, at most T);
    one tree thread has nothing to reduce in shared memory; the interleave factor is at
    most a thread's trees, rows per thread at most the block's rows; rows are cached only
    when the block's rows fit in shared memory (the lowering would drop the cache).
    """
    T = max(forest.n_trees, 1)
    rows, per_thread = point["rows_per_block"], min(point["rows_per_thread"],
                                                    point["rows_per_block"])
    threads = _ceil(T, _ceil(T, min(point["tree_threads"], T)))
    if _ceil(rows, per_thread) * threads > device.max_block_threads:
        return None
    row_bytes = rows * forest.row_bytes
    return {**point, "rows_per_thread": per_thread, "tree_threads": threads,
            "interleave": min(point["interleave"], _ceil(T, threads)),
            "shared_reduce": point["shared_reduce"] and threads > 1,
            "cache_rows": point["cache_rows"] and row_bytes <= device.shared_bytes}


def render(point: dict[str, Any], forest: Forest) -> tuple[str, str]:
    """The schedule text of a (canonical) point and its representation.

    >>> text, rep = render({"rows_per_block": 32, "rows_per_thread": 1, "tree_threads": 1,
    ...     "cache_rows": True, "cache_trees": False, "unroll_walks": False,
    ...     "interleave": 1, "shared_reduce": False, "representation": "sparse"},
    ...     _ExampleForest())
    >>> text.splitlines()
    ['tile(batch, b0, b1, 32)', 'reorder(b0, b1, tree)', 'gpuDimension(b0, grid.x)', \
'gpuDimension(b1, block.x)', 'cache(b0)']
    """
    T = max(forest.n_trees, 1)
    lines = [f"tile(batch, b0, b1, {point['rows_per_block']})"]
    row_thread, row_loops = "b1", []
    if point["rows_per_thread"] > 1:
        lines.append(f"tile(b1, b2, b3, {point['rows_per_thread']})")
        row_thread, row_loops = "b2", ["b3"]
    threads = point["tree_threads"]
    tree_thread, walk = ("t0", "t1") if threads > 1 else (None, "tree")
    if tree_thread:
        lines.append(f"tile(tree, t0, t1, {_ceil(T, threads)})")
    walk_loops = [walk]
    if point["interleave"] > 1:
        lines.append(f"tile({walk}, w0, w1, {point['interleave']})")
        walk_loops = ["w0", "w1"]
    order = ["b0", row_thread, *([tree_thread] if tree_thread else []), *row_loops,
             *walk_loops]
    lines += [f"reorder({', '.join(order)})", "gpuDimension(b0, grid.x)",
              f"gpuDimension({row_thread}, block.x)"]
    if tree_thread:
        lines.append(f"gpuDimension({tree_thread}, block.y)")
    if point["interleave"] > 1:
        lines.append("interleave(w1)")
    if point["unroll_walks"]:
        depth = max(1, min(forest.max_depth, MAX_UNROLL_DEPTH))
        lines.append(f"unrollWalk({walk_loops[-1]}, {depth})")
    if point["cache_rows"]:
        lines.append("cache(b0)")
    if point["cache_trees"]:
        lines.append(f"cache({tree_thread or walk_loops[0]})")
    if point["shared_reduce"]:
        lines.append(f"sharedReduce({tree_thread})")
    return "\n".join(lines), point["representation"]


def _unique(points: Iterable[dict[str, Any] | None]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for p in points:
        if p is not None and p not in out:
            out.append(p)
    return out


def points(forest: Forest, device: DeviceFacts,
           space: dict[str, Sequence[Any]] | None = None) -> list[dict[str, Any]]:
    """Every distinct runnable point of the template: the product of :data:`AXES`'
    values, or of ``space``'s where it names an axis (a smaller space for tests).

    >>> len(points(_ExampleForest(), DeviceFacts("x"), {"rows_per_block": (8,),
    ...     "rows_per_thread": (1,), "tree_threads": (1, 2), "cache_rows": (False,),
    ...     "cache_trees": (False,), "unroll_walks": (False,), "interleave": (1,),
    ...     "shared_reduce": (False, True), "representation": ("sparse",)}))
    3
    """
    values = [tuple((space or {}).get(a.name, a.values)) for a in AXES]
    names = [a.name for a in AXES]
    return _unique(canonical(dict(zip(names, combo)), forest, device)
                   for combo in itertools.product(*values))


# ---- Algorithm 1 (seed 002 §9) ----

def tb_configs(batch_size: int, n_features: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Algorithm 1's ``TBConfigs``: rows per thread block and tree threads to try.

    >>> tb_configs(512, 28), tb_configs(100_000, 28), tb_configs(100_000, 2000)
    (((8, 32), (20, 50)), ((32, 64), (2, 10)), ((8, 32), (20, 50)))
    """
    if batch_size <= T_BATCH or n_features > T_FEATURES:
        return SMALL_ROWS, SMALL_TREE_THREADS
    return LARGE_ROWS, LARGE_TREE_THREADS


def algorithm1(forest: Forest, batch_size: int, device: DeviceFacts) -> list[dict[str, Any]]:
    """The first stage of Algorithm 1: ``TBConfigs`` × interleave factors 1, 2, 4 × the
    representations array, sparse, reorg; one row per thread, rows cached (where they
    fit), trees never, walks not unrolled, no shared reduction. Points the device cannot
    run are left out; those the forest makes equal (fewer trees than tree threads) once.
    The first point is the one ``compile(schedule="auto")`` uses untimed.
    """
    rows, tree_threads = tb_configs(batch_size, forest.n_features)
    return _unique(
        canonical({"rows_per_block": r, "rows_per_thread": 1, "tree_threads": k,
                   "cache_rows": True, "cache_trees": False, "unroll_walks": False,
                   "interleave": i, "shared_reduce": False, "representation": rep},
                  forest, device)
        for r, k, i, rep in itertools.product(rows, tree_threads, INTERLEAVE_FACTORS,
                                              REPRESENTATIONS))


def with_shared_reduction(best: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Algorithm 1's second stage: the given points with shared reduction on (those with
    one tree thread have nothing to reduce and are left out)."""
    return [{**p, "shared_reduce": True} for p in best if p["tree_threads"] > 1]


def cache_key(forest: Forest, batch_size: int, target: str, device: DeviceFacts) -> dict:
    """The tuning cache key of a GPU result: model, batch size, target, device, version."""
    return {"model": cache.model_hash(forest), "batch_size": int(batch_size),
            "target": target, "device": device.name, "version": __version__}


def resolve(forest: Forest, target: str, schedule: Any) -> tuple[str, str]:
    """The planner's schedule text and representation for ``schedule="auto"`` (the
    most recent cache entry for this model, target and device, whatever its batch size;
    else Algorithm 1's first point for :data:`AUTO_BATCH` rows) or a Configuration."""
    if not isinstance(schedule, str):
        return schedule.schedule, schedule.representation
    device = device_facts(target)
    hit = cache.lookup_any_batch(cache_key(forest, 0, target, device))
    if hit is not None:
        config = Configuration.from_json(hit)
        return config.schedule, config.representation
    return render(algorithm1(forest, AUTO_BATCH, device)[0], forest)


@dataclass(frozen=True)
class _ExampleForest:
    """Just the facts the template reads, for the examples above."""

    n_trees: int = 100
    n_features: int = 28
    row_bytes: int = 28 * 4  # float32 inputs
    max_depth: int = 6
