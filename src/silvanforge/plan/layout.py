"""How the planner turns ``compile``'s tiling options into a layout: tile size, tiling, profile.

Uniform tiling needs nothing but the tile size (the representation tiles the forest
itself). Probability-based tiling (seed 004) reads a :class:`Profile` (how many sample
rows reach each node), tiles skewed trees greedily along their likely paths, computes
per tree the walk depth in tiles that covers 90% of the profile's rows, reorders the
trees so that equal depths are neighbours, and writes the default schedule with the
tree loop split into those groups, each group's walks unrolled (with leaf tests) to its
depth — the seed's "peeled" walk, which returns early from the likely leaves.

>>> layout = plan_layout(forest, 4, "probability", X_sample)    # doctest: +SKIP
>>> print(layout.schedule)                                      # doctest: +SKIP
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InputError, ModelFormatError
from ..frontends import load
from ..hir import (MAX_TILE_SIZE, leaf_counts, peel_depths, peel_groups, permute_trees,
                   plan_tiling, probability_tiling)
from ..model.forest import Forest
from ..schedule.library import LIBRARY

TILINGS = ("uniform", "probability")
# seed 004: probability-based tiling with tiles of 4 unless the user says otherwise.
DEFAULT_PROBABILITY_TILE_SIZE = 4
# seed 004: walks are peeled to the depth that covers this share of the profile's rows.
PEEL_COVERAGE = 0.9


@dataclass(frozen=True)
class Profile:
    """How many rows of a sample reach each node of a forest (``counts``, per global
    node). Build it with :func:`profile`; keep it with :meth:`save` / :meth:`load`.

    >>> p = silvanforge.profile("model.json", X_sample)        # doctest: +SKIP
    >>> p.save("model.profile.npz")                             # doctest: +SKIP
    >>> silvanforge.compile("model.json", profile=Profile.load("model.profile.npz"))  # doctest: +SKIP
    """

    counts: np.ndarray

    def save(self, path: str | os.PathLike) -> None:
        with open(path, "wb") as fh:
            np.savez(fh, counts=self.counts)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Profile":
        try:
            with np.load(path, allow_pickle=False) as archive:
                return cls(np.asarray(archive["counts"]))
        except (OSError, ValueError, KeyError) as exc:
            raise ModelFormatError(f"{os.fspath(path)}: not a SilvanForge profile "
                                   f"({exc})") from None


def profile(model: Any, X: Any) -> Profile:
    """The :class:`Profile` of ``X`` (sample rows, e.g. training data) on ``model``.

    >>> silvanforge.profile("model.json", X_train[:10000])      # doctest: +SKIP
    """
    return Profile(leaf_counts(load(model), X))


@dataclass(frozen=True)
class Layout:
    """What the tiling options decide: the forest (trees possibly reordered), the tile
    size and tiling, a tiling's labels when not uniform, and the representation and
    schedule to use when the user names none (None: the usual defaults); ``tree_order``
    says which tree of the given forest each tree of ``forest`` is (None: the same)."""

    forest: Forest
    tile_size: int
    tiling: str
    node_tile: np.ndarray | None = None
    representation: str | None = None
    schedule: str | None = None
    tree_order: np.ndarray | None = None


def plan_layout(forest: Forest, tile_size: int | None, tiling: str | None,
                sample: Any) -> Layout:
    """The :class:`Layout` for ``compile``'s ``tile_size``, ``tiling`` and ``profile``."""
    if tiling is None:
        tiling = "probability" if sample is not None else "uniform"
    if tiling not in TILINGS:
        raise InputError(f"tiling must be one of {', '.join(TILINGS)}, not {tiling!r}")
    if tile_size is None:
        tile_size = DEFAULT_PROBABILITY_TILE_SIZE if tiling == "probability" else 1
    if isinstance(tile_size, bool) or not isinstance(tile_size, (int, np.integer)) \
            or not 1 <= tile_size <= MAX_TILE_SIZE:
        raise InputError(f"tile_size must be an integer in 1..{MAX_TILE_SIZE}, "
                         f"not {tile_size!r}")
    tile_size = int(tile_size)
    if tiling == "uniform":
        if sample is not None:
            raise InputError("a profile is for tiling='probability', not 'uniform'")
        return Layout(forest, tile_size, tiling,
                      representation="sparse" if tile_size > 1 else None)
    if sample is None:
        raise InputError("tiling='probability' needs profile= (sample rows or a Profile)")
    counts = sample.counts if isinstance(sample, Profile) else leaf_counts(forest, sample)
    labels = probability_tiling(forest, tile_size, counts)
    depths = peel_depths(plan_tiling(forest, labels, tile_size), counts, PEEL_COVERAGE)
    order, groups = peel_groups(depths)
    # The same tiles, relabelled into the reordered forest's node order (labels need only
    # be distinct per tile): the groups were computed for exactly these tiles.
    nodes = np.concatenate([np.arange(forest.tree_offsets[t], forest.tree_offsets[t + 1])
                            for t in order])
    return Layout(permute_trees(forest, order), tile_size, tiling, labels[nodes],
                  representation="sparse", schedule=grouped_schedule(groups),
                  tree_order=np.asarray(order, dtype=np.int64))


def grouped_schedule(groups: list[tuple[int, int]]) -> str:
    """The default schedule with the tree loop split into consecutive ``groups`` of
    (walk depth, trees), each group's interleaved walks unrolled to its depth.

    >>> print(grouped_schedule([(1, 10), (3, 90)]))
    tile(batch, b0, b1, 12)
    reorder(b0, tree, b1)
    interleave(b1)
    parallel(b0)
    split(tree, g0, r0, 10)
    unrollWalk(b1.g0, 1)
    unrollWalk(b1.r0, 3)
    """
    lines = [LIBRARY["default"](sum(n for _, n in groups))]
    rest, inner = "tree", "b1"
    for k, (depth, n) in enumerate(groups):
        if k < len(groups) - 1:
            lines.append(f"split({rest}, g{k}, r{k}, {n})")
            walk = f"{inner}.g{k}"
            rest, inner = f"r{k}", f"{inner}.r{k}"
        else:
            walk = inner
        if depth > 0:
            lines.append(f"unrollWalk({walk}, {depth})")
    return "\n".join(lines)

