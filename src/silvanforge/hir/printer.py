"""Text of tile shapes and tiling plans, for ``dump("hir")`` and for reading failing tests.

>>> print(print_shapes(2))
tile size 2: 2 shapes
  shape 0: 0[1 e2] 1[e0 e1]  lut 00:2 01:2 10:1 11:0
  shape 1: 0[e0 1] 1[e1 e2]  lut 00:2 01:1 10:0 11:0
"""

from __future__ import annotations

from .shapes import tile_shapes
from .tiling import TilingPlan


def print_shapes(tile_size: int) -> str:
    """Every shape of a tile size: per node (level order) its children as an in-tile node
    or ``e<exit>``, then its LUT row as ``bits:exit``."""
    shapes = tile_shapes(tile_size)
    lines = [f"tile size {tile_size}: {shapes.count} shapes"]
    for s in range(shapes.count):
        lines.append(f"  shape {s}: {describe_shape(tile_size, s)}  lut " + " ".join(
            f"{bits:0{tile_size}b}:{e}" for bits, e in enumerate(shapes.lut[s].tolist())))
    return "\n".join(lines)


def describe_shape(tile_size: int, shape: int) -> str:
    """One shape as ``node[left right]`` per node, exits written ``e<index>``.

    >>> describe_shape(3, 2)
    '0[1 2] 1[e0 e1] 2[e2 e3]'
    """
    shapes = tile_shapes(tile_size)
    return " ".join(
        f"{i}[" + " ".join(str(c) if c >= 0 else f"e{e}" for c, e in zip(
            shapes.children[shape, i].tolist(), shapes.exits[shape, i].tolist())) + "]"
        for i in range(tile_size))


def print_plan(plan: TilingPlan) -> str:
    """A plan, tree by tree: per tile its nodes (``-`` for dummies), shape and exits
    (``t<tile>`` or ``l<leaf node>``, global ids).

    >>> print(print_plan(plan))                                     # doctest: +SKIP
    tiling: tile size 2, 1 tree, 2 tiles
    tree 0: tiles 0..1
      tile 0: nodes [0 1] shape 0 0[1 e2] 1[e0 e1] exits [l3 l4 t1]
      tile 1: nodes [2 -] shape 0 0[1 e2] 1[e0 e1] exits [l5 l5 l6]
    """
    n_trees = plan.n_trees
    lines = [f"tiling: tile size {plan.tile_size}, {n_trees} tree{'s' * (n_trees != 1)},"
             f" {plan.n_tiles} tiles"]
    for t in range(n_trees):
        first, end = int(plan.tile_offsets[t]), int(plan.tile_offsets[t + 1])
        if first == end:
            lines.append(f"tree {t}: a single leaf")
            continue
        lines.append(f"tree {t}: tiles {first}..{end - 1}")
        for k in range(first, end):
            nodes = " ".join(str(v) if v >= 0 else "-" for v in plan.nodes[k].tolist())
            exits = " ".join(f"t{tile}" if tile >= 0 else f"l{leaf}" for tile, leaf in zip(
                plan.exit_tile[k].tolist(), plan.exit_leaf[k].tolist()))
            shape = int(plan.shape[k])
            lines.append(f"  tile {k}: nodes [{nodes}] shape {shape} "
                         f"{describe_shape(plan.tile_size, shape)} exits [{exits}]")
    return "\n".join(lines)
