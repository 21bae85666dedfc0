"""Tiling (HIR): tile shapes and their LUT, tilings of a forest and the tree of tiles.

See docs/ARCHITECTURE.md "Tiling and tree transforms" and seed 000 §3.2-§3.7.

>>> from silvanforge.hir import tile_shapes
>>> tile_shapes(8).lut.shape
(1430, 256)
"""

from .printer import describe_shape, print_plan, print_shapes
from .probability import (leaf_counts, peel_depths, peel_groups, permute_trees,
                          probability_tiling, skewed_trees, tile_depths)
from .shapes import MAX_TILE_SIZE, TileShapes, tile_shapes
from .tiling import (TilingPlan, check_tiling, plan_tiling, tile_uniform, uniform_tiling,
                     walk_plan)

__all__ = ["MAX_TILE_SIZE", "TileShapes", "TilingPlan", "check_tiling", "describe_shape",
           "plan_tiling", "print_plan", "print_shapes", "tile_shapes", "tile_uniform",
           "uniform_tiling", "walk_plan", "leaf_counts", "peel_depths", "peel_groups",
           "permute_trees", "probability_tiling", "skewed_trees", "tile_depths"]
