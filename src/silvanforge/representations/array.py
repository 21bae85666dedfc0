"""The array representation: each tree a complete binary tree in level order.

Tree ``t`` occupies ``2**(depth_t + 1) - 1`` consecutive slots from ``tree_start[t]``; the
children of local slot ``i`` are at ``2i + 1`` and ``2i + 2``, so moving down needs no
child pointer. A node handle is the global slot.

Every leaf is pushed down to the tree's deepest level: a leaf at depth ``k < depth_t``
leaves a dummy split in its own slot (feature 0, threshold 0) and its value in all
``2**(depth_t - k)`` slots of the bottom level below it, so whichever way the dummies
send a row it reaches that value. Every walk of tree ``t`` then takes exactly
``depth_t`` steps with no leaf test (:meth:`walk_depth`), which is what lets walks be
unrolled and interleaved without branches. The table size is the same as without the
push-down: the complete tree had those slots anyway.

Padding grows as ``2**depth``: a forest whose padded slots exceed :data:`MAX_SLOTS`
(2**24, about 16.8 million slots, some 350 MB of tables) is refused with
:class:`UnsupportedModelError`; deep, sparse trees belong in the ``sparse``
representation.

>>> rep = ArrayRepresentation(forest)                       # doctest: +SKIP
>>> rep.buffers["model_tree_start"]                          # doctest: +SKIP
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..errors import ScheduleError, UnsupportedModelError
from ..lir import ir
from ..lir.lower import MAX_IN_PLACE_FEATURES, MAX_ROW_COPY_BYTES
from ..model.forest import Forest
from ..schedule import Schedule, named
from ..schedule.library import AVX512_VECTOR_BLOCK, VECTOR_BLOCK
from ..schedule.schedule import AVX2_VECTOR_LANES, VECTOR_LANES
from .mask import MaskRepresentation, vector_ready
from . import decision, leaves
from .base import REGISTRY, FeatureLoader, register
from .tables import ConsecutiveTrees, TableRepresentation

MAX_SLOTS = 1 << 24
# Dummy slots after the last tree: a vector walk reads each level's nodes as windows of
# 16 slots (:class:`~silvanforge.lir.ir.Lookup`), past the end of a shallow last tree.
WINDOW_PAD = 16


# The planner picks this layout while padding trees to complete binary trees costs at
# most this many slots a node (docs/ARCHITECTURE.md, "Default choices")...
MAX_ARRAY_PADDING = 4
# ... or, where its walks are vector walks (`vectorizes`), while padding every tree to the
# deepest's depth costs at most this many: a vector walk's time follows the padded depth
# (a shallower tree skips the levels below its own), not the padded slots, and even
# sparse trees walk branch-free faster than as code (XGBoost forests of 4.3-11.7 slots
# a node: 0.18-0.50x code's time from 64 rows; docs/ARCHITECTURE.md "Sparse trees").
MAX_VECTOR_PADDING = 16
# ... with code for calls of at most this many rows (epsilon-like, 8 rows: vector walks
# 1.6-1.9x code's time; one row: the array walks' small-batch kernel 1.2-1.5x).
SPARSE_CODE_ROWS = 8
# ... in forests of at most this many splits (mask's bound on AVX-512, `mask.CODE_ROWS`):
# code compiles in ~0.1 s a 1000 splits, so past it sparse tables serve those calls.
SPARSE_CODE_SPLITS = 10_000
# Vector walks copy a block's rows while they have at most this many features for each
# level a row's walks take: the copy, 16 x 16 blocks transposed in registers, pays for
# itself from there down (bosch-like, 1.2 features a level: 0.60-1.05x the time of
# reading rows in place; 1.7: 0.73-1.05; 3.3: 0.99-1.14; docs/ARCHITECTURE.md "The row
# copy")...
COPIED_FEATURES_A_LEVEL = 1.5
# ... and, whatever their levels, rows of at least this many bytes (a page): walks in
# place would read each lane's values from lines of pages apart, fetched one lane at a
# time, which the copy streams in order (epsilon-like, 2000 float32 features, 2.5 a
# level: 0.37-0.44x the time of reading in place at 16-16384 rows).
COPIED_ROW_BYTES = 4096
# A default copy takes at most this much of a thread's stack, half the lowering's bound:
# the calling thread walks a block too (docs/DEPLOY.md "Threads"): 64 rows of 2048 float32
# features, fewer rows of wider ones (`copied_block`).
DEFAULT_COPY_BYTES = MAX_ROW_COPY_BYTES // 2


# A window of this many slots starts each level of a tree from level 4 on, in the
# tables of vector walks (see ArrayRepresentation).
WINDOW_ALIGN = 16


def vectorizes(forest: Forest, precision: str, cpu_features: frozenset[str]) -> bool:
    """Whether the planner gives ``forest`` the ``vector`` schedule (16 rows as the lanes
    of one walk; docs/ARCHITECTURE.md "Vector walks"): array tables at float32 on a CPU
    with AVX-512 or AVX2 (whose permutes read the levels' windows), while padding every
    tree to the deepest's depth keeps :data:`MAX_VECTOR_PADDING`, for rows the walks can
    read in place (:data:`~silvanforge.lir.lower.MAX_IN_PLACE_FEATURES`).

    >>> vectorizes(forest, "float32", frozenset({"avx2"}))      # doctest: +SKIP
    True
    """
    if precision != "float32" or not {"avx512f", "avx2"} & cpu_features \
            or forest.n_features > MAX_IN_PLACE_FEATURES:
        return False
    slots = forest.n_trees * (2 ** (int(forest.tree_depths.max()) + 1) - 1)
    return slots <= min(MAX_VECTOR_PADDING * forest.n_nodes, MAX_SLOTS)


def _sparse(forest: Forest) -> bool:
    """Whether padding each tree to a complete one of its depth passes
    :data:`MAX_ARRAY_PADDING` slots a node."""
    slots = sum(2 ** (int(d) + 1) - 1 for d in forest.tree_depths)
    return slots > MAX_ARRAY_PADDING * forest.n_nodes


def copies_rows(forest: Forest) -> bool:
    """Whether vector walks of ``forest`` copy a block's rows transposed first: when
    they have at most :data:`COPIED_FEATURES_A_LEVEL` features for each level a row's
    walks take or are at least :data:`COPIED_ROW_BYTES` wide (docs/ARCHITECTURE.md
    "Vector walks", "The row copy"), and a block of them fits
    :data:`DEFAULT_COPY_BYTES` (it is on the thread's stack)."""
    levels = forest.n_trees * int(forest.tree_depths.max())
    return copied_block(forest) > 0 and (
        forest.n_features <= COPIED_FEATURES_A_LEVEL * levels
        or forest.row_bytes >= COPIED_ROW_BYTES)


# The depth from which AVX2 vector walks take 8 lanes (ArrayRepresentation.vector_lanes).
EIGHT_LANES_DEPTH = 8
# The most a copy of AVX512_VECTOR_BLOCK rows may take for vector_block to choose it:
# year's 46 KB ran 0.83-0.85x the time of 64-row blocks, bosch-like's 495 KB 1.11-1.14x
# (Zen 5; docs/ARCHITECTURE.md "Eight groups on AVX-512").
AVX512_BLOCK_COPY_BYTES = 64 << 10


def copied_block(forest: Forest, rows: int = VECTOR_BLOCK) -> int:
    """The rows of a vector walks' block whose copy fits :data:`DEFAULT_COPY_BYTES`:
    ``rows``, else fewer for wide rows (whole vectors of 16), 0 where not even one
    vector's rows fit."""
    fit = DEFAULT_COPY_BYTES // max(forest.row_bytes, 1) // VECTOR_LANES * VECTOR_LANES
    return min(rows, fit)


def vector_block(forest: Forest, cpu_features: frozenset[str] = frozenset()) -> int:
    """The rows of a block of the vector walks' default schedule on a CPU of
    ``cpu_features``, where it copies them (:func:`copies_rows`):
    :data:`~silvanforge.schedule.library.AVX512_VECTOR_BLOCK` with AVX-512 where that
    block's copy takes at most :data:`AVX512_BLOCK_COPY_BYTES`, else
    :data:`~silvanforge.schedule.library.VECTOR_BLOCK`, fewer where a block's copy
    would not fit (:func:`copied_block`); rows read in place take
    :data:`~silvanforge.schedule.library.VECTOR_BLOCK`."""
    if not copies_rows(forest):
        return VECTOR_BLOCK
    wide = "avx512f" in cpu_features and \
        AVX512_VECTOR_BLOCK * forest.row_bytes <= AVX512_BLOCK_COPY_BYTES
    return copied_block(forest, AVX512_VECTOR_BLOCK if wide else VECTOR_BLOCK)


def level_positions(forest: Forest) -> np.ndarray:
    """Per node: its level-order position in its own tree (root 0, children 2p+1, 2p+2).

    Call only after checking the padded size: positions grow as 2**depth.
    """
    base = np.repeat(forest.tree_offsets[:-1], forest.tree_sizes)
    internal = ~forest.is_leaf
    position = np.zeros(forest.n_nodes, dtype=np.int64)
    frontier = forest.tree_offsets[:-1].copy()
    while len(frontier):
        parents = frontier[internal[frontier]]
        left = forest.left[parents] + base[parents]
        right = forest.right[parents] + base[parents]
        position[left] = 2 * position[parents] + 1
        position[right] = 2 * position[parents] + 2
        frontier = np.concatenate([left, right])
    return position


def pushed_down(forest: Forest, depths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(level-order position, global node) pairs of trees padded to ``depths`` (per tree,
    at least each tree's own depth): internal nodes at their positions, each leaf at every
    bottom-level position of its subtree. Positions not listed are dummy splits.

    >>> pushed_down(forest, forest.tree_depths)               # doctest: +SKIP
    """
    position = level_positions(forest)
    tree_of_node = np.repeat(np.arange(forest.n_trees), forest.tree_sizes)
    internal = np.flatnonzero(~forest.is_leaf)
    leaf = np.flatnonzero(forest.is_leaf)
    down = depths[tree_of_node[leaf]].astype(np.int64) - forest.node_depth[leaf]
    copies = np.left_shift(1, down)
    # The bottom-level descendants of position p, `down` levels below, are the run
    # starting at (p + 1) * 2**down - 1.
    first = (position[leaf] + 1) * copies - 1
    offsets = np.arange(int(copies.sum())) - np.repeat(np.cumsum(copies) - copies, copies)
    leaf_positions = np.repeat(first, copies) + offsets
    return (np.concatenate([position[internal], leaf_positions]),
            np.concatenate([internal, np.repeat(leaf, copies)]))


def check_padded_size(slots: int, layout: str) -> None:
    """Refuse a layout of more than :data:`MAX_SLOTS` slots."""
    if slots > MAX_SLOTS:
        # A tree d levels deep pads to 2^(d+1) - 1 slots: for a deep chain a number
        # Python refuses to print (over 4300 digits), so the message gives the power of
        # two below it.
        raise UnsupportedModelError(
            f"the {layout} representation would pad this forest to at least "
            f"2^{slots.bit_length() - 1} node slots (more than MAX_SLOTS = {MAX_SLOTS}); "
            "its trees are too deep for a complete level-order layout: use "
            "representation='sparse'")


class LevelOrderRepresentation(TableRepresentation):
    """Shared by ``array`` and ``reorg``: tables filled from a slot → node map."""

    def _fill_pushed_down(self, depths: np.ndarray,
                          slot_of: Callable[[np.ndarray, np.ndarray], np.ndarray],
                          n_slots: int, tree_starts: np.ndarray | None = None) -> None:
        """Tables of trees padded to ``depths``; ``slot_of(tree, position)`` places a
        tree's level-order position among ``n_slots`` slots (tree ``t``'s from
        ``tree_starts[t]`` on, when trees are stored apart)."""
        trees = None if tree_starts is None else (tree_starts, n_slots)
        leaf_types = leaves.leaf_fields(self.forest, self.precision)

        def fill() -> list[tuple[dict[str, np.ndarray], tuple[np.ndarray, int] | None]]:
            position, nodes = pushed_down(self.forest, depths)
            tree_of_node = np.repeat(np.arange(self.forest.n_trees), self.forest.tree_sizes)
            slot_nodes = np.full(n_slots, -1, dtype=np.int64)
            slot_nodes[slot_of(tree_of_node[nodes], position)] = nodes
            return [(decision.node_arrays(self.forest, self.spec, slot_nodes, leaf_bit=True),
                     trees),
                    (leaves.leaf_arrays(self.forest, slot_nodes, self.precision,
                                        leaf_types), trees)]

        self._add_later({**decision.node_fields(self.forest, self.spec, leaf_bit=True),
                         **leaf_types}, fill)

    def is_leaf(self, tree: ir.Expr, node: ir.Expr) -> ir.Expr:
        return decision.is_leaf_flag(self._load("flags", node))

    def _leaf_slot(self, tree: ir.Expr, node: ir.Expr) -> ir.Expr:
        return node


@register
class ArrayRepresentation(LevelOrderRepresentation, ConsecutiveTrees):
    """Trees one after another, each a padded level-order array."""

    name = "array"
    default_rank = 0
    vector_walks = vector_depth = True

    @classmethod
    def suits(cls, forest: Forest, precision: str, cpu_features: frozenset[str]) -> bool:
        # Walks of known depth are branch-free and fastest on near-complete trees, while
        # padding them stays within MAX_ARRAY_PADDING slots a node, vector walks within
        # MAX_VECTOR_PADDING; but past the first only where masks would not walk the
        # forest's rows as lanes, and where walks would go row by row (float64 compares,
        # LightGBM's) only then too: masks with rows as lanes are faster on the trees
        # they take (docs/ARCHITECTURE.md "Default choices").
        vector, sparse = vectorizes(forest, precision, cpu_features), _sparse(forest)
        if vector != sparse:
            return vector
        return not (MaskRepresentation.suits(forest, precision, cpu_features)
                    and vector_ready(forest, precision))

    @classmethod
    def small_batch_layout(cls, forest: Forest, precision: str,
                           cpu_features: frozenset[str]) -> tuple[str, int] | None:
        # A few rows of trees past MAX_ARRAY_PADDING walk only their own paths, as code
        # or in sparse tables: here a row walked alone pads every tree to its own
        # depth, and a vector walk of fewer than 16 rows leaves lanes idle.
        if not _sparse(forest):
            return None
        code = REGISTRY["code"].suits(forest, precision, cpu_features) \
            and forest.n_internal <= SPARSE_CODE_SPLITS
        return "code" if code else "sparse", SPARSE_CODE_ROWS

    @classmethod
    def vector_lanes(cls, forest: Forest, cpu_features: frozenset[str]) -> int:
        """16, but 8 (one AVX2 register) for trees of depth :data:`EIGHT_LANES_DEPTH` or
        more on a CPU with AVX2 and without AVX-512. There 16 lanes as two registers
        left a block's four walks spilling, and eight walks of one register took
        0.85-0.90x the time on higgs, year and their like; shallower trees ran as fast
        or faster with 16 (docs/ARCHITECTURE.md "Eight lanes on AVX2")."""
        avx2_only = "avx2" in cpu_features and "avx512f" not in cpu_features
        deep = forest.n_trees > 0 and int(forest.tree_depths.max()) >= EIGHT_LANES_DEPTH
        return AVX2_VECTOR_LANES if avx2_only and deep else VECTOR_LANES

    @classmethod
    def default_schedule(cls, forest: Forest, precision: str,
                         cpu_features: frozenset[str]) -> Schedule:
        if vectorizes(forest, precision, cpu_features):
            return named("vector", forest.n_trees, rows=vector_block(forest, cpu_features),
                         cache=copies_rows(forest))
        return super().default_schedule(forest, precision, cpu_features)

    def __init__(self, forest: Forest, precision: str = "float64",
                 depth: int = 0) -> None:
        """``depth``: pad every tree to at least this depth (vector walks need trees
        of one depth: pass the deepest tree's)."""
        super().__init__(forest, precision)
        depths = np.maximum(forest.tree_depths, depth)
        # Python ints: a deep tree's size must be checked before numpy could overflow.
        sizes = [2 ** (int(d) + 1) - 1 for d in depths]
        if depth:
            # Vector walks: each tree from slot 1 modulo WINDOW_ALIGN, so that every
            # level's window from level 4 on starts a cache line of the tables (host
            # higgs 0.96x the time; docs/ARCHITECTURE.md "Local arrays on a cache
            # line"); trees padded to one depth leave a slot or so a tree unused.
            stride = -(-max(sizes) // WINDOW_ALIGN) * WINDOW_ALIGN
            check_padded_size(1 + stride * len(sizes), self.name)
            tree_start = 1 + stride * np.arange(len(sizes) + 1, dtype=np.int64)
            tree_start[-1] = tree_start[-2] + sizes[-1]
        else:
            check_padded_size(sum(sizes), self.name)
            tree_start = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self._fill_pushed_down(depths, lambda tree, position: tree_start[tree] + position,
                               int(tree_start[-1]) + WINDOW_PAD,
                               np.append(tree_start[:-1], tree_start[-1] + WINDOW_PAD))
        self._add_trees(tree_start[:-1], depths)
        # Vector walks pad every tree to one depth; a shallower tree's walk skips the
        # levels below its own leaves (each leaf fills its bottom-level positions).
        if np.any(forest.tree_depths < depths):
            self._add({"tree_levels": forest.tree_depths.astype(np.int32)})

    def vector_walk(self, tree: ir.Expr, lanes: int, feature_value: FeatureLoader,
                    stem: str) -> tuple[list[ir.Stmt], ir.Expr]:
        """Walk tree ``tree`` (a scalar) for ``lanes`` rows at once, as vectors: (the
        statements, the i32 vector of the leaves' positions in the bottom level, for
        :meth:`vector_leaf_value`). ``feature_value`` loads the lanes' values of a vector
        of features; ``stem`` names the walk's variables.

        Each lane keeps its position within the current level; the level's nodes are
        consecutive slots, read by :class:`~silvanforge.lir.ir.Lookup` (a window the
        backend may load whole and permute, not one gather per field and level).
        Needs trees of one depth (a constant step count: build the representation
        with ``depth``)."""
        code, (position,) = self.vector_walk_groups(tree, lanes, [feature_value], stem)
        return code, position

    def vector_walk_groups(self, tree: ir.Expr, lanes: int, loaders: list[FeatureLoader],
                           stem: str) -> tuple[list[ir.Stmt], list[ir.Expr]]:
        """The walks of :meth:`vector_walk` for a block's groups of rows (one loader
        each) through tree ``tree``, a level of every group in turn: (the statements,
        each group's leaf positions). Where trees are shallower than the padded depth,
        the levels at and below a tree's own depth run only for deeper trees (a
        branch on the tree, taken alike by every lane); a shallower tree's positions
        go down its leaves' copies (each leaf fills its bottom-level positions), so the
        leaves are the full walk's."""
        walks = [self._vector_levels(tree, lanes, loader, f"{stem}_{g}")
                 for g, loader in enumerate(loaders)]
        depth = len(walks[0])
        steps = [[walk[level][0] for walk in walks] for level in range(depth)]
        zero = ir.Broadcast(ir.Const(0, ir.I32), lanes)

        def position(g: int, level: int) -> ir.Expr:  # after `level` levels
            return walks[g][level - 1][1] if level else zero

        if not self._has("tree_levels"):
            return ([s for level in steps for s in level],
                    [position(g, depth) for g in range(len(walks))])
        found = [ir.Var(f"{stem}_{g}_leaf", ir.I32) for g in range(len(walks))]

        # From the bottom up: level k's steps, then the deeper levels' branch.
        code: list[ir.Stmt] = [ir.Assign(x, position(g, depth)) for g, x in enumerate(found)]
        own = self._load("tree_levels", tree)
        stops = set(self.forest.tree_depths.tolist())
        for level in reversed(range(depth)):
            code = steps[level] + code
            if level in stops:
                shift = ir.Const(2 ** (depth - level), ir.I32)
                code = [ir.If(ir.Cmp("gt", own, ir.Const(level, ir.I32)), code, [
                    ir.Assign(x, ir.BinOp("mul", position(g, level), shift))
                    for g, x in enumerate(found)])]
        return [ir.Declare(x, zero) for x in found] + code, list(found)

    def _vector_levels(self, tree: ir.Expr, lanes: int, feature_value: FeatureLoader,
                       stem: str) -> list[tuple[ir.Stmt, ir.Var]]:
        """Per level of the padded trees: the step of :meth:`vector_walk` and the
        variable holding the lanes' positions after it."""
        if self.spec.compare.bits != 32:
            raise ScheduleError(f"vectorize walks the 'array' representation at precision "
                                f"'float32'; this kernel's is {self.precision!r}")
        depth = self.walk_depth(tree)
        if not isinstance(depth, ir.Const):
            raise UnsupportedModelError(
                "vector walks need trees of one depth; this forest's depths are "
                f"{sorted(set(self.forest.tree_depths.tolist()))}")
        root = self.root(tree)
        levels: list[tuple[ir.Stmt, ir.Var]] = []
        position: ir.Expr = ir.Broadcast(ir.Const(0, ir.I32), lanes)
        for level in range(int(depth.value)):
            first = ir.BinOp("add", root, ir.i64(2 ** level - 1))
            loads = self.node_loads(lambda name: ir.Lookup(
                self._buffer(name), first, position, 2 ** level))
            left = decision.go_left(self.spec, loads, feature_value)
            var = ir.Var(f"{stem}_{level + 1}", ir.I32)
            levels.append((ir.Declare(var, ir.BinOp("add", ir.BinOp(
                "mul", position, ir.Const(2, ir.I32)), ir.Select(
                    left, ir.Const(0, ir.I32), ir.Const(1, ir.I32)))), var))
            position = var
        return levels

    def vector_leaf_value(self, tree: ir.Expr, position: ir.Expr, k: int,
                          feature_value: FeatureLoader) -> ir.Expr:
        """f64 vector: component ``k`` of the leaves at ``position`` (from
        :meth:`vector_walk`) of tree ``tree``. Constant leaves of one component are a
        window of the bottom level (permuted, not gathered: faster, docs/ARCHITECTURE.md
        "Vector walks across rows"); the others read as :meth:`leaf_value` does,
        gathering."""
        levels = int(self.walk_depth(tree).value)
        last = ir.BinOp("add", self.root(tree), ir.i64(2 ** levels - 1))
        if self.forest.leaf_width != 1 or self.forest.linear is not None:
            return self.leaf_value(tree, ir.BinOp("add", ir.Cast(position, ir.I64), last),
                                   k, feature_value)
        value = ir.Lookup(self._buffer("leaf_value"), last, position, 2 ** levels)
        return value if value.dtype == ir.F64 else ir.Cast(value, ir.F64)

    def child(self, tree: ir.Expr, node: ir.Expr, left: ir.Expr) -> ir.Expr:
        # start + 2 * (node - start) + 1 (+1 for the right child)
        local = ir.BinOp("sub", ir.BinOp("mul", node, ir.i64(2)), self.root(tree))
        return ir.BinOp("add", local, ir.Select(left, ir.i64(1), ir.i64(2)))
