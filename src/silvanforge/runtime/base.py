"""What the CPU and GPU predictors share: the representation a plan names, built with
its model buffers; the forest's shape; and the transforms a kernel leaves to numpy."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from ..errors import InputError
from ..hir import plan_tiling, uniform_tiling
from ..model import transforms
from ..model.forest import Forest
from ..plan import Plan
from ..reference import shaped
from ..representations import REGISTRY
from ..representations.pair import LayoutPair, renamed
from ..representations.tiled import TILED


def model_arrays(forest: Forest, representation: Any) -> list[np.ndarray]:
    """The kernel's model arguments after the row-dependent ones, in signature order:
    each tree's first output, then the representation's buffers (every target; each
    made on a cache line, :func:`~silvanforge.representations.tables.on_a_line`)."""
    return [np.ascontiguousarray(forest.tree_output, dtype=np.int32)] + [
        np.ascontiguousarray(a) for a in representation.buffers.values()]


def build_representation(plan: Plan) -> Any:
    """The representation ``plan`` names for its forest; with tiles of more than one
    node, its tiled form over the plan's tiling (default: uniform). Vector walks need
    trees of one depth: a layout with vector walks then pads every tree to the
    deepest's (other layouts are refused by the walks themselves). A plan of two
    layouts gets both, as a :class:`~silvanforge.representations.pair.LayoutPair`."""
    if plan.small_representation is not None:
        small = renamed(REGISTRY[plan.small_representation])(plan.forest, plan.precision)
        return LayoutPair(build_representation(replace(plan, small_representation=None)),
                          small)
    forest, name = plan.forest, plan.representation
    if plan.tile_size == 1 and plan.node_tile is None:
        cls = REGISTRY[name]
        if cls.vector_depth and any(s.vectorized for s in plan.schedules):
            return cls(forest, plan.precision, depth=int(forest.tree_depths.max()))
        return cls(forest, plan.precision)
    if name not in TILED:
        raise InputError(f"tile_size {plan.tile_size} needs representation 'array' or "
                         f"'sparse' (the {name!r} representation walks one node at a time)")
    labels = uniform_tiling(forest, plan.tile_size) if plan.node_tile is None \
        else plan.node_tile
    return TILED[name](forest, plan.precision, plan_tiling(forest, labels, plan.tile_size))


def transformed(forest: Forest, scores: np.ndarray) -> np.ndarray:
    """The value from a kernel's SCORE result (rows x outputs), for the transforms
    kernels leave to numpy, in the library's shape."""
    return shaped(forest, transforms.apply(forest.post_transform, forest.transform_params,
                                           scores))


class ForestShape:
    """What every compiled predictor tells about its forest and its plan."""

    forest: Forest
    plan: Plan

    @property
    def n_features(self) -> int:
        return self.forest.n_features

    @property
    def n_outputs(self) -> int:
        return self.forest.n_outputs
