"""Named schedules: the seed's well-known loop orders, written in the schedule language.

Each entry is a function of the forest's tree count (schedules whose sizes depend on the
forest) returning the text form, so every named schedule is also an example of it.
The measurements behind each choice are in docs/SCHEDULES.md ("Named schedules").

- ``default``: CPU default, rows in blocks of 12, all trees for a block, then the next
  block; blocks in parallel; the 12 walks of a block through one tree interleaved
  (``tile(batch, b0, b1, 12); reorder(b0, tree, b1); interleave(b1); parallel(b0)``). A
  tree's nodes stay in cache across the block, parallelism is over independent rows (no
  reduction to legalise), and interleaving hides the load latency of each walk step,
  which bounds a single walk. Twelve walks' nodes nearly fit the registers, and the
  kernel compiles in a third of the time of 32.
- ``vector``: ``tile(batch, b0, b1, 64); reorder(b0, tree, b1); cache(b0); vectorize(b1);
  parallel(b0)``: 16 rows walk a tree as the lanes of one vector walk, a block's four
  walks in turn, the block's rows first copied transposed (``cache=False`` leaves the
  copy out). ``compile`` uses it for array forests at float32 on AVX-512 CPUs
  (docs/ARCHITECTURE.md "Vector walks across rows").
- ``xgboost``: seed §4.2: ``tile(batch, b0, b1, 64); reorder(b0, tree, b1); parallel(b0)``;
  ``cache=True`` adds ``cache(b0)``: a representation whose walks read a prepared form of
  their row (``mask``) prepares each row of a block once, not once per tree.
  ``compile(representation="mask")`` uses it when no schedule is given.
- ``small_batch``: for a handful of rows: each row walks 10 trees at a time, interleaved
  (``tile(tree, t0, t1, 10); interleave(t1)``); a single row has no other walks to
  overlap (16 walks' nodes spill out of the registers). ``compile`` uses it for
  batches of up to 8 rows when no schedule is given.
- ``code_rows``: for the ``code`` representation, fastest with constant tree indices:
  rows in parallel blocks of 512; for a block, trees in chunks of 34, each chunk over
  every row of the block; both tree loops unrolled (``tile(batch, b0, b1, 512);
  tile(tree, t0, t1, 34); reorder(b0, t0, b1, t1); unroll(t0); unroll(t1);
  parallel(b0)``). A chunk's code stays in the instruction cache, and its branches'
  history in the predictor, across the rows.
  ``compile(representation="code")`` uses it when no schedule is given.
- ``one_tree_at_a_time``: ``reorder(tree, batch)``: one tree over the whole batch.
- ``tree_parallel``: the tree loop tiled into ``chunks`` parallel chunks (2 by default,
  at most T), the chunk loop outermost, each chunk summing its trees for every row into
  its own copy of the result (reduction legalisation), the copies added at the end. One
  parallel region per call, as with row blocks; it pays where rows are few and trees many.

GPU schedules (``GPU_SCHEDULES``; docs/GPU.md): Tahoe's four strategies
(``tahoe_direct``, the GPU default; ``tahoe_shared_data``, ``tahoe_shared_forest``,
``tahoe_shared_partial_forest``), ``gpu_tree_parallel`` (rows × tree threads per block,
``sharedReduce``), ``gpu_atomic`` (tree chunks on ``grid.y``, ``atomicReduce``) and
``gpu_interleaved``. On a CPU their GPU-mapped loops run serially.

>>> print(named("one_tree_at_a_time", n_trees=10))
reorder(tree, batch)
"""

from __future__ import annotations

from typing import Callable

from ..errors import ScheduleError
from .schedule import SHARE, Schedule


def _default(n_trees: int) -> str:
    return "tile(batch, b0, b1, 12)\nreorder(b0, tree, b1)\ninterleave(b1)\nparallel(b0)"


# Rows a block of the ``vector`` schedule: four vector walks of 16 rows through a tree
# in turn (eight of 8 rows on AVX2), 2 threads from 128 rows (docs/SCHEDULES.md,
# "Named schedules").
VECTOR_BLOCK = 64
# The array layout's block on AVX-512: eight walks of 16 rows in turn, not four (more
# loads in flight: 0.84-0.91x the time on higgs and year from 128 rows, Zen 5;
# docs/ARCHITECTURE.md "Eight groups on AVX-512"). AVX2 keeps 64: eight walks of 8 rows.
AVX512_VECTOR_BLOCK = 128


def _vector(n_trees: int, rows: int = VECTOR_BLOCK, cache: bool = True) -> str:
    copy = "cache(b0)\n" if cache else ""
    return f"tile(batch, b0, b1, {rows})\nreorder(b0, tree, b1)\n{copy}vectorize(b1)\nparallel(b0)"


# Rows a block of the ``xgboost`` schedule (seed 002 §4.2).
XGBOOST_BLOCK = 64


def _xgboost(n_trees: int, cache: bool = False) -> str:
    copy = "cache(b0)\n" if cache else ""
    return f"tile(batch, b0, b1, {XGBOOST_BLOCK})\nreorder(b0, tree, b1)\n{copy}parallel(b0)"


def _tree_parallel(n_trees: int, chunks: int = 2) -> str:
    per_chunk = -(-max(n_trees, 1) // max(1, min(chunks, n_trees)))
    return f"tile(tree, t0, t1, {per_chunk})\nreorder(t0, batch, t1)\nparallel(t0)"


# ``code_rows``: blocks of rows and tiles of trees as code. A tile's ~1000 branches keep
# their history in the predictor across the block's rows, the more rows the better, so
# a block is a thread's share of the call (docs/ARCHITECTURE.md, "Row blocks").
CODE_TREE_TILE = 34


def _code_rows(n_trees: int, rows: int | str = SHARE, trees: int = CODE_TREE_TILE) -> str:
    chunk = max(1, min(trees, n_trees))
    return (f"tile(batch, b0, b1, {rows})\ntile(tree, t0, t1, {chunk})\n"
            "reorder(b0, t0, b1, t1)\nunroll(t0)\nunroll(t1)\nparallel(b0)")


# The trees of one row's interleaved walks in ``small_batch``.
SMALL_TREE_TILE = 10


def _small_batch(n_trees: int) -> str:
    return f"tile(tree, t0, t1, {max(1, min(SMALL_TREE_TILE, n_trees))})\ninterleave(t1)"


# ---- GPU schedules (docs/GPU.md): Tahoe's four strategies (seed 002 §4.3) and more ----

def _per(n_trees: int, parts: int) -> int:
    """Trees per chunk when ``n_trees`` trees are cut into at most ``parts`` chunks."""
    return -(-max(n_trees, 1) // max(1, min(parts, n_trees)))


def _tahoe_direct(n_trees: int, rows: int = 64) -> str:
    return (f"tile(batch, b0, b1, {rows})\nreorder(b0, b1, tree)\n"
            "gpuDimension(b0, grid.x)\ngpuDimension(b1, block.x)")


def _tahoe_shared_data(n_trees: int, threads: int = 32) -> str:
    return (f"tile(tree, t0, t1, {_per(n_trees, threads)})\nreorder(batch, t0, t1)\n"
            "gpuDimension(batch, grid.x)\ngpuDimension(t0, block.x)\ncache(batch)\n"
            "sharedReduce(t0)")


def _tahoe_shared_forest(n_trees: int, rows: int = 64) -> str:
    return (f"tile(batch, b0, b1, {rows})\ntile(tree, t0, t1, {max(n_trees, 1)})\n"
            "reorder(b0, b1, t0, t1)\ncache(t0)\n"
            "gpuDimension(b0, grid.x)\ngpuDimension(b1, block.x)")


def _tahoe_shared_partial_forest(n_trees: int, rows: int = 64, chunks: int = 4) -> str:
    per = _per(n_trees, chunks)
    return (f"tile(batch, b0, b1, {rows})\ntile(tree, t0, t0Inner, {per})\n"
            f"tile(t0Inner, t1, t2, {per})\ncache(t1)\nreorder(b0, t0, b1, t1, t2)\n"
            "gpuDimension(b0, grid.x)\ngpuDimension(t0, grid.y)\ngpuDimension(b1, block.x)")


def _gpu_tree_parallel(n_trees: int, rows: int = 8, threads: int = 8) -> str:
    return (f"tile(batch, b0, b1, {rows})\ntile(tree, t0, t1, {_per(n_trees, threads)})\n"
            "reorder(b0, b1, t0, t1)\ngpuDimension(b0, grid.x)\ngpuDimension(b1, block.x)\n"
            "gpuDimension(t0, block.y)\nsharedReduce(t0)")


def _gpu_atomic(n_trees: int, rows: int = 64, chunks: int = 4) -> str:
    return (f"tile(batch, b0, b1, {rows})\ntile(tree, t0, t1, {_per(n_trees, chunks)})\n"
            "reorder(b0, t0, b1, t1)\ngpuDimension(b0, grid.x)\ngpuDimension(t0, grid.y)\n"
            "gpuDimension(b1, block.x)\natomicReduce(t0)")


def _gpu_interleaved(n_trees: int, rows: int = 64, walks: int = 4) -> str:
    return (f"tile(batch, b0, b1, {rows})\ntile(tree, t0, t1, {max(1, min(walks, n_trees))})\n"
            "reorder(b0, b1, t0, t1)\ninterleave(t1)\n"
            "gpuDimension(b0, grid.x)\ngpuDimension(b1, block.x)")


LIBRARY: dict[str, Callable[..., str]] = {
    "default": _default,
    "vector": _vector,
    "xgboost": _xgboost,
    "small_batch": _small_batch,
    "code_rows": _code_rows,
    "one_tree_at_a_time": lambda n_trees: "reorder(tree, batch)",
    "tree_parallel": _tree_parallel,
    "tahoe_direct": _tahoe_direct,
    "tahoe_shared_data": _tahoe_shared_data,
    "tahoe_shared_forest": _tahoe_shared_forest,
    "tahoe_shared_partial_forest": _tahoe_shared_partial_forest,
    "gpu_tree_parallel": _gpu_tree_parallel,
    "gpu_atomic": _gpu_atomic,
    "gpu_interleaved": _gpu_interleaved,
}
# Schedules for GPU targets; compile(target="opencl"|"cuda") uses the first by default.
GPU_SCHEDULES = ("tahoe_direct", "tahoe_shared_data", "tahoe_shared_forest",
                 "tahoe_shared_partial_forest", "gpu_tree_parallel", "gpu_atomic",
                 "gpu_interleaved")


def named(name: str, n_trees: int, **options: int) -> Schedule:
    """The named schedule for a forest of ``n_trees`` trees.

    >>> named("tree_parallel", n_trees=10, chunks=3).loop_order()
    [['t0', 'batch', 't1']]
    """
    if name not in LIBRARY:
        raise ScheduleError(f"unknown schedule {name!r}; known: {', '.join(LIBRARY)}")
    return Schedule.parse(LIBRARY[name](n_trees, **options), n_trees)
