"""The CPU schedule template: its axes as plain data, and the candidates they span.

A *point* is a dict from axis name to value. Each loop order uses only some axes
(``ORDERS``); the others are left out of its points, so no two points differ only in an
axis that changes nothing. :func:`render` turns a point into schedule text plus compile
keywords; axes marked ``option`` are compile keywords: ``representation``, and for table
walks ``tile_size`` (uniform tiles, with the layouts that have a tiled form; probability
tiling needs a profile and was slower than uniform tiles on every model measured, so it
is not searched).

The loop orders (T trees, B rows per block, k trees per tile, c = threads chunks):

- ``row_blocks``: ``tile(batch, b0, b1, B); reorder(b0, tree, b1); parallel(b0)``, the
  walks of a block's rows through one tree innermost (interleaved across rows); with
  ``cache(b0)`` for a representation that prepares rows (``mask``), here and in
  ``tree_chunks``;
- ``tree_tiles``: ``tile(batch, b0, b1, B); tile(tree, t0, t1, k); parallel(b0)``, each
  row's walks through k trees innermost (interleaved across trees: few rows, many trees);
- ``tree_chunks``: ``tile(tree, t0, t1, ceil(T/c)); tile(batch, b0, b1, B);
  reorder(t0, b0, t1, b1); parallel(t0)``: chunks of trees in parallel, each into a
  private copy of the result (only with two threads or more);
- ``unrolled_trees``: ``tile(batch, b0, b1, B); reorder(b0, b1, tree); unroll(tree);
  parallel(b0)``: each row through every tree, the tree loop unrolled (constant tree
  indices), for representations that emit each tree's own code (``constant_trees``):
  they run any order, a variable tree index jumping to its tree's code, but constant
  indices are their fastest (docs/ARCHITECTURE.md, "The code representation"), so the
  space keeps its size; table layouts take the other orders;
- ``tiled_code``: ``tile(batch, b0, b1, B); tile(tree, t0, t1, k); reorder(b0, t0, b1,
  t1); unroll(t0); unroll(t1); parallel(b0)``: the ``code_rows`` shape, trees as code
  in tiles of k over blocks of up to 2048 rows or of a thread's share (``share``): a
  tile's branches stay in the branch predictor over many rows (docs/ARCHITECTURE.md,
  "Row blocks");
- ``row_vectors``: ``tile(batch, b0, b1, B); reorder(b0, tree, b1); [cache(b0);]
  vectorize(b1); parallel(b0)``: 16 rows a vector walk (the ``vector`` schedule), in
  the layouts with vector walks (``array`` at float32, ``mask`` with the block cached:
  other points are refused and skipped).

>>> [p["order"] for p in points(n_trees=10, n_jobs=2)][:2]
['default', 'row_blocks']
>>> text, options = render({"order": "row_blocks", "block": 32, "interleave": True,
...                         "walk": ("", 0), "threads": 1, "representation": "sparse",
...                         "tile_size": 3}, n_trees=10)
>>> text.splitlines(), options
(['tile(batch, b0, b1, 32)', 'reorder(b0, tree, b1)', 'interleave(b1)', 'parallel(b0)'], {'representation': 'sparse', 'tile_size': 3})
"""

from __future__ import annotations

import itertools
from typing import Any

from ..plan.configuration import DEFAULT_ORDER, Axis
from ..representations import REGISTRY
from ..representations.tiled import TILED
from ..schedule.library import AVX512_VECTOR_BLOCK, SMALL_TREE_TILE
from ..schedule.schedule import SHARE


# Walk directives on the innermost loop: ("", 0) is none. Peeling deeper than the
# shallowest leaf is refused by the compiler (a ScheduleError: the point is skipped).
WALKS = (("", 0), ("unrollWalk", 2), ("unrollWalk", 4), ("peelWalk", 2))

# Which schedule axes each loop order uses, with the values its exhaustive space takes.
# Interleaving more than 64 walks is refused by the compiler (the point is skipped).
ORDERS: dict[str, tuple[Axis, ...]] = {
    "row_blocks": (Axis("block", (8, 16, 32, 64, 128)), Axis("interleave", (False, True)),
                   Axis("walk", WALKS)),
    "tree_tiles": (Axis("block", (32,)), Axis("tree_tile", (4, 8, SMALL_TREE_TILE, 16)),
                   Axis("interleave", (False, True)), Axis("walk", WALKS)),
    "tree_chunks": (Axis("block", (8, 32, 64)), Axis("interleave", (False, True)),
                    Axis("walk", WALKS)),
    "unrolled_trees": (Axis("block", (16, 32)),),
    "tiled_code": (Axis("block", (64, 1024, 2048, SHARE)), Axis("tree_tile", (25, 34))),
    "row_vectors": (Axis("block", (32, 64, AVX512_VECTOR_BLOCK)),
                    Axis("cache", (False, True))),
}
CODE_ORDERS = ("unrolled_trees", "tiled_code")
# Orders whose walks only the layouts with vector walks take, untiled.
VECTOR_ORDERS = ("row_vectors",)
# Uniform tile sizes searched: 1 (no tiles) and 3, the best tiled size measured
# (docs/TUNING.md).
TILE_SIZES = (1, 3)


def default_point(n_jobs: int) -> dict[str, Any]:
    """The point that stands for SilvanForge's default plan (``compile`` without a
    schedule: its representation, schedule, small-batch kernel and per-call thread
    sizing), with up to ``n_jobs`` threads. Every search times it beside its own
    candidates, so a tuned configuration is never slower than the default on the rows
    it was given.

    >>> render(default_point(2), n_trees=10)
    ('', {})
    """
    return {"order": DEFAULT_ORDER, "threads": n_jobs}


def thread_counts(n_jobs: int) -> tuple[int, ...]:
    """1, the powers of two below ``n_jobs``, and ``n_jobs``.

    >>> thread_counts(6)
    (1, 2, 4, 6)
    """
    counts = {1, n_jobs} | {1 << i for i in range(n_jobs.bit_length()) if 1 << i < n_jobs}
    return tuple(sorted(counts))


def emits_code(representation: str) -> bool:
    """Whether a representation emits each tree's own code, fastest with constant tree
    indices (``mask`` emits its walks too, but reads its tables at any tree index).

    >>> emits_code("sparse"), emits_code("code"), emits_code("mask")
    (False, True, False)
    """
    return REGISTRY[representation].constant_trees


def option_axes(order: str | None = None) -> tuple[Axis, ...]:
    """The compile-keyword axes (of one loop order: code-emitting representations go with
    the orders in ``CODE_ORDERS`` only, tile sizes with the others). Representations are
    read from the registry when asked, so plug-ins registered later are searched too."""
    if order in VECTOR_ORDERS:
        return (Axis("representation", tuple(r for r in sorted(REGISTRY)
                                             if REGISTRY[r].vector_walks), option=True),)
    names = sorted(REGISTRY)
    if order is not None:
        names = [r for r in names if emits_code(r) == (order in CODE_ORDERS)]
    axes = (Axis("representation", tuple(names), option=True),)
    if order in CODE_ORDERS:
        return axes
    return axes + (Axis("tile_size", TILE_SIZES, option=True),)


def has_tiles(representation: str) -> bool:
    """Whether a representation has a tiled form (takes a tile size above 1)."""
    return representation in TILED


def tiles_fit(point: dict[str, Any]) -> bool:
    """Whether the point's tile size is one its representation can take."""
    return point.get("tile_size", 1) == 1 or has_tiles(point["representation"])


def points(n_trees: int, n_jobs: int) -> list[dict[str, Any]]:
    """Every point of the exhaustive space for a forest of ``n_trees`` trees, the
    default plan's first."""
    out = [default_point(n_jobs)]
    for order, axes in ORDERS.items():
        options = option_axes(order)
        threads = [t for t in thread_counts(n_jobs) if order != "tree_chunks" or
                   1 < t <= n_trees]
        for values in itertools.product(*(a.values for a in axes), threads,
                                        *(a.values for a in options)):
            names = [a.name for a in axes] + ["threads"] + [a.name for a in options]
            point = {"order": order, **dict(zip(names, values))}
            if tiles_fit(point):
                out.append(point)
    return out


def _walk_lines(point: dict[str, Any], loop: str) -> list[str]:
    lines = [f"interleave({loop})"] if point.get("interleave") else []
    directive, depth = point.get("walk", WALKS[0])
    return lines + ([f"{directive}({loop}, {depth})"] if directive else [])


def render(point: dict[str, Any], n_trees: int) -> tuple[str, dict[str, Any]]:
    """The schedule text of ``point`` and its compile keywords (the option axes).

    The point's thread count is not among the keywords: one compiled kernel serves every
    thread count (it is a ``predict`` argument); the tuner sets ``n_jobs`` from it.
    """
    if point["order"] == DEFAULT_ORDER:
        return "", {}
    order, block = point["order"], point["block"]
    # A block's rows prepared once for all its trees' walks where the representation
    # reads them prepared (mask).
    rep = REGISTRY.get(point.get("representation", ""))
    cache = ["cache(b0)"] if rep is not None and rep.prepares_rows else []
    if order == "row_blocks":
        lines = [f"tile(batch, b0, b1, {block})", "reorder(b0, tree, b1)", *cache,
                 *_walk_lines(point, "b1"), "parallel(b0)"]
    elif order == "tree_tiles":
        lines = [f"tile(batch, b0, b1, {block})",
                 f"tile(tree, t0, t1, {min(point['tree_tile'], n_trees)})",
                 *_walk_lines(point, "t1"), "parallel(b0)"]
    elif order == "row_vectors":
        lines = [f"tile(batch, b0, b1, {block})", "reorder(b0, tree, b1)",
                 *(["cache(b0)"] if point["cache"] else []), "vectorize(b1)", "parallel(b0)"]
    elif order == "unrolled_trees":
        lines = [f"tile(batch, b0, b1, {block})", "reorder(b0, b1, tree)", "unroll(tree)",
                 "parallel(b0)"]
    elif order == "tiled_code":
        lines = [f"tile(batch, b0, b1, {block})",
                 f"tile(tree, t0, t1, {min(point['tree_tile'], n_trees)})",
                 "reorder(b0, t0, b1, t1)", "unroll(t0)", "unroll(t1)", "parallel(b0)"]
    else:
        chunk = -(-n_trees // point["threads"])
        lines = [f"tile(tree, t0, t1, {chunk})", f"tile(batch, b0, b1, {block})",
                 "reorder(t0, b0, t1, b1)", *cache,
                 *_walk_lines(point, "b1"), "parallel(t0)"]
    return "\n".join(lines), {a.name: point[a.name] for a in option_axes() if a.name in point}
