"""Pruning rules for the CPU template: a two-stage search in the manner of seed 002 §9.

Algorithm 1 of the seed picks thread-block shapes from the batch size and feature count,
evaluates those with every representation, then tries one more option (shared-memory
reduction) on the best three. The CPU search here has the same shape:

1. :func:`shortlist`: the loop order and block size the batch size calls for, with each
   representation the trees' shape calls for, walks interleaved and not unrolled, one
   thread per 128 rows; above ``SMALL_BATCH`` rows, also vector walks in the layouts
   that have them (array, mask) as ``compile``'s default schedule for them
   (``row_vectors``);
2. :func:`refinements`: on the ``KEEP`` fastest of the shortlist, one axis at a time:
   smaller row blocks (vector walks: the other block, the row copy toggled),
   interleaving toggled (small batches only), tiles of
   ``space.TILE_SIZES[-1]`` nodes (layouts with a tiled form), and the thread counts 1 and
   ``n_jobs`` (free: a thread count needs no compile).

The evidence for every rule (exhaustive searches of three 100-tree models at batch 16
and 1024, 2 threads) is in docs/TUNING.md; each constant below says which rule it is.
"""

from __future__ import annotations

from typing import Any, Sequence

from ..backends.cpu import Target
from ..model.forest import Forest
from ..plan.planner import MIN_ROWS_PER_THREAD, SMALL_BATCH
from ..representations.array import copies_rows, vector_block
from ..representations import REGISTRY
from ..schedule.library import CODE_TREE_TILE, SMALL_TREE_TILE, VECTOR_BLOCK, XGBOOST_BLOCK
from ..schedule.schedule import SHARE
from . import space

# The evidence for each rule below is in docs/TUNING.md ("The guided search").
# Leaders of the shortlist that the second stage refines (the seed keeps 3; on CPUs one
# keeps the search close to the exhaustive one's time).
KEEP = 1
# Batches of at most SMALL_BATCH rows interleave each row's walks through a tile of
# SMALL_TREE_TILE trees, as the predictor's small-batch kernel; larger ones take row
# blocks of at most this many rows (fewer for smaller batches); the second stage tries
# 8 rows and half the block. 128 rows cannot be interleaved (more than 64 walks).
MAX_BLOCK = 32
REFINE_BLOCK = 8
# Code-emitting representations take blocks of this many rows and no other (a code
# kernel is slow to compile).
CODE_BLOCK = 16
# From this many rows a call, code-emitting representations are also tried in tiles of
# CODE_TREE_TILE trees over blocks of a thread's share of the rows (the ``tiled_code``
# order in code_rows' shape): on the real LightGBM models (NYC-taxi, mtpl2) faster than
# fixed blocks at 256-16384 rows (docs/ARCHITECTURE.md, "Row blocks").
LARGE_CODE_BATCH = 512
# Layouts whose walks read rows prepared once a block (mask) take their default
# schedule's shape (`xgboost` with `cache`: blocks of XGBOOST_BLOCK rows, walks not
# interleaved): nyc_taxi at 1024 rows, 2 threads, the exhaustive best was that shape
# (with a peeled step, within noise) where interleaved blocks of 16 rows took 1.35x its
# time (docs/TUNING.md, "Prepared rows").
# From this many rows a call, walks are always interleaved; below, the second stage
# tries both.
ALWAYS_INTERLEAVE = 128
# The layouts that pad each tree to a complete binary tree.
PADDED = ("array", "reorg")
# Walk unrolling and peeling are not searched: they changed the best time by less than
# the timing noise.


def threads_for(batch: int, n_jobs: int) -> int:
    """One thread per ``MIN_ROWS_PER_THREAD`` rows, at most ``n_jobs`` (the predictor's
    own measurement: a thread with fewer rows costs more to wake than it saves).

    >>> threads_for(1024, 2), threads_for(64, 4), threads_for(4096, 4)
    (2, 1, 4)
    """
    return max(1, min(n_jobs, batch // MIN_ROWS_PER_THREAD))


def block_for(batch: int) -> int:
    """The first stage's row block: the largest power of two up to the batch, between 8
    and ``MAX_BLOCK`` (a block larger than the batch only adds remainder tests).

    >>> block_for(1), block_for(16), block_for(20), block_for(1024)
    (8, 16, 16, 32)
    """
    return max(8, min(MAX_BLOCK, 1 << (max(batch, 1).bit_length() - 1)))


def representations(forest: Forest) -> list[str]:
    """The representations the first stage tries, by the trees' shape.

    Near-complete trees (those ``compile`` gives the padded array layout by default)
    take the padded layouts that walk them in exactly their depth (array, reorg);
    skewed trees take the compact table and the code-emitting representations
    (docs/TUNING.md's exhaustive searches).
    """
    names = space.option_axes()[0].values
    compact = REGISTRY["array"].suits(forest, "float64", frozenset())
    chosen = [r for r in names
              if (r in PADDED) == compact and not (compact and space.emits_code(r))]
    return chosen or list(names)  # a registry without the layouts the rule names


def _values(order: str, axis: str) -> tuple:
    return next(a.values for a in space.ORDERS[order] if a.name == axis)


def _block(order: str, batch: int) -> int:
    """The block of ``order``'s space nearest to :func:`block_for` (smaller on ties)."""
    return min(_values(order, "block"), key=lambda b: (abs(b - block_for(batch)), b))


def shortlist(forest: Forest, batch: int, n_jobs: int) -> list[dict[str, Any]]:
    """The first stage's points for ``batch`` rows a call and up to ``n_jobs`` threads."""
    walks = {"interleave": True, "walk": space.WALKS[0]}
    out = []
    for rep in representations(forest):
        # Untiled walks first: tiles were slower than the default walks on every model
        # measured (docs/ARCHITECTURE.md, "Tiling"); the second stage tries them.
        if space.emits_code(rep):
            order, extra = "unrolled_trees", {"block": CODE_BLOCK}
            if batch >= LARGE_CODE_BATCH:
                threads = threads_for(batch, n_jobs)
                out.append({"order": "tiled_code", "block": SHARE,
                            "tree_tile": CODE_TREE_TILE, "threads": threads,
                            "representation": rep})
        elif batch <= SMALL_BATCH:
            order = "tree_tiles"
            extra = {"block": _block(order, batch), "tree_tile": SMALL_TREE_TILE, **walks,
                     "tile_size": 1}
        elif REGISTRY[rep].prepares_rows:
            # Its default's shape (mask: a walk tests a level's splits in one vector
            # operation, nothing to overlap): blocks of up to XGBOOST_BLOCK rows, walks
            # not interleaved.
            order = "row_blocks"
            extra = {"block": max(b for b in _values(order, "block")
                                  if b <= max(min(batch, XGBOOST_BLOCK), 8)),
                     "interleave": False, "walk": space.WALKS[0], "tile_size": 1}
        else:
            order = "row_blocks"
            extra = {"block": _block(order, batch), **walks, "tile_size": 1}
        out.append({"order": order, **extra, "threads": threads_for(batch, n_jobs),
                    "representation": rep})
    if batch > SMALL_BATCH:
        # Vector walks (compile's default on AVX-512 for such forests), last: the
        # leaders' refinements below are for the scalar orders' axes. Layouts whose
        # walks read prepared rows (mask) always cache the block; the others take
        # compile's block on this machine's CPU (candidates are built for it): 128
        # rows on AVX-512, fewer for copied rows too wide for the stack.
        features = frozenset(Target.host().enabled())
        out += [{"order": "row_vectors",
                 "block": VECTOR_BLOCK if REGISTRY[rep].prepares_rows
                 else vector_block(forest, features),
                 "cache": REGISTRY[rep].prepares_rows or copies_rows(forest),
                 "threads": threads_for(batch, n_jobs), "representation": rep}
                for rep in dict.fromkeys(p["representation"] for p in out)
                if REGISTRY[rep].vector_walks]
    return out


def refinements(leaders: Sequence[dict[str, Any]], forest: Forest, batch: int,
                n_jobs: int) -> list[dict[str, Any]]:
    """The second stage's points: each leader with one axis changed."""
    out: list[dict[str, Any]] = []
    for p in leaders:
        if p["order"] == "row_blocks":
            out += [{**p, "block": b} for b in sorted({REFINE_BLOCK, p["block"] // 2})
                    if b < p["block"] and b in _values(p["order"], "block")]
        if p["order"] == "tree_tiles":
            tiles = _values(p["order"], "tree_tile")
            at = tiles.index(p["tree_tile"])
            out += [{**p, "tree_tile": t} for t in tiles[max(0, at - 1):at + 2:2]]
        if p["order"] == "row_vectors":
            # Layouts whose walks read prepared rows (mask) need the block's copy.
            toggled = [] if REGISTRY[p["representation"]].prepares_rows \
                else [{**p, "cache": not p["cache"]}]
            out += [{**p, "block": b} for b in _values(p["order"], "block")
                    if b != p["block"]] + toggled
        if "interleave" in p and batch < ALWAYS_INTERLEAVE:
            out.append({**p, "interleave": not p["interleave"]})
        if p.get("tile_size") == 1 and space.has_tiles(p["representation"]):
            out.append({**p, "tile_size": space.TILE_SIZES[-1]})
        out += [{**p, "threads": t} for t in sorted({1, n_jobs}) if t != p["threads"]]
    return [p for i, p in enumerate(out) if p not in out[:i] and p not in leaders]
