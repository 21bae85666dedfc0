"""The mask representation: every split of a tree tested at once, the leaf found by bits.

A walk down a skewed tree (LightGBM's 31 leaves: depth 9-11, likely paths of 3-5 nodes)
is a chain of dependent steps, and as branches (the ``code`` representation) it is a
chain of hard-to-predict jumps: both engines that walk, ours and lleaves, spent 25-45
cycles a tree on such models. Here a tree of at most 63 internal nodes is evaluated
without a walk and without a branch (the idea of QuickScorer's bit vectors, Lucchese et
al., SIGIR 2015, done with vector compares):

1. the row's values at every node's feature are one permute of the row (a row of up to
   16 float32 or 8 float64 values is one register; wider ones are permuted from several,
   or gathered) and tested as a vector. Where the forest allows (:func:`_copy_plan`:
   LightGBM's and XGBoost's numeric splits, small category sets) the permute reads
   copies of the row prepared so that each lane's test is one compare, or one ``and``
   with a coded category mask; elsewhere the test is :func:`decision.go_left` itself,
   lane-wise (operators, missing rules, default directions and category sets per node);
2. the outcomes become the bits of an integer (bit ``i``: node ``i`` sends the row
   right: where a lane's compare fails and its category test too, one ``and``);
3. leaf ``j`` is reached when the bits of the nodes on its path (``path[j]``) are its
   turns there (``turn[j]``, the bit set where the path goes right): one vector ``and``
   and compare over the leaves, exactly one lane matches, and its index is a count of
   trailing zeros.

Each tree takes a fixed stride of ``W`` lanes (16, 32 or 64: the smallest that holds the
forest's largest tree, internal nodes and leaves) in every table: ``mask_threshold`` and
``mask_slot`` (where the lane's value sits in the row's copies) and ``mask_cat`` (coded
category masks) for tests on copies, or ``mask_feature``, ``mask_threshold``,
``mask_flags`` and category fields for the general test; ``mask_path`` and ``mask_turn``
(integers of ``W`` bits, 32 for ``W`` of 16), and ``mask_leaf``, the sparse layout's
handle of each leaf lane. Padding lanes test feature
0 and belong to no path; a padding leaf has path 0 and turn 1, so it never matches.
Tree indices need not be constants (the walk reads tables), so kernels stay small and
compile fast whatever the forest's size. The sparse layout underneath keeps the table
interface and the leaves (linear and vector leaves included).

>>> rep = MaskRepresentation(forest)                                   # doctest: +SKIP
>>> rep.lanes                                                           # doctest: +SKIP
32
"""

from __future__ import annotations

import itertools
from typing import Callable

import numpy as np

from ..errors import ScheduleError, UnsupportedModelError
from ..lir import ir
from ..model.forest import MISSING_NAN, MISSING_NONE, OP_CAT, OP_LE, OP_LT, Forest
from . import decision
from .base import FeatureLoader, register
from ..schedule import Schedule, named
from .sparse import SparseRepresentation

# The widest tree stride: 64 lanes hold 63 internal nodes and their 64 leaves.
MAX_LANES = 64
# A plan of masks gives code the calls of up to (rows) rows: by instruction set and
# stride (16 as 32), the first entry (most split nodes or None for any, rows) the
# forest fits; none: masks' own small-batch kernel (a row's splits as lanes). Rows as
# lanes walk groups of 16 rows, and a group costs the same whatever its rows, while
# code's cost a row and tree grows with the forest's code (past the caches): code
# wins up to fewer rows in bigger forests. AVX2 (splits as lanes pack their tests
# into bits with several instructions: 1.3-2.6x code's time): a group costs 50-90 ns
# a tree, code 2.7-3.3 ns a row-tree at ~3000 split nodes (wins up to 17-33 rows),
# 4.4 at 9000 (14), 8.6 in mtpl2's 30,000 (6). AVX-512, stride 32: code takes
# 0.45-0.91x the splits-as-lanes kernel's time at 1-8 rows up to 9000 split nodes,
# 0.53 / 0.86 / 1.06 / 1.15 at 1 / 2 / 4 / 8 rows at 18,000 and 1.01-1.41 in mtpl2;
# stride 64 (splits as lanes 1.2-1.5x code's time): 100 x 63 leaves (6200 splits)
# cross a group at ~32 rows, and a block's four groups (33-64 rows) at ~50; 300 x 63
# at ~14 (docs/ARCHITECTURE.md "Two layouts in one plan").
CODE_ROWS = {("avx2", 32): ((4000, 16), (None, 8)),
             ("avx512", 32): ((10_000, 8),),
             ("avx512", 64): ((8000, 48), (40_000, 16), (None, 8))}
# The planner picks masks for strides up to this many lanes (trees of up to 31 splits,
# LightGBM's default 31 leaves) on their own; wider strides are code's, or masks for
# blocks of rows with code for a few rows where rows walk as lanes on AVX-512
# (docs/ARCHITECTURE.md "Default choices": masks' splits as lanes a quarter to a half
# slower than code at one row).
MAX_DEFAULT_LANES = 32


@register
class MaskRepresentation(SparseRepresentation):
    """Trees as vectors of splits and leaf paths over the sparse layout's leaves."""

    name = "mask"
    prepares_rows = True
    # Blocks of rows walk as vector lanes (:meth:`vector_walk_groups`), where the forest
    # allows (:func:`vector_ready`).
    vector_walks = True
    # Its tests are packed as x86 vector instructions.
    devices = default_devices = ("cpu",)
    default_rank = 1

    @classmethod
    def suits(cls, forest: Forest, precision: str, cpu_features: frozenset[str]) -> bool:
        # Trees of up to MAX_DEFAULT_LANES - 1 splits, each tested with one vector
        # operation, beat their branches where the CPU has AVX-512; with AVX2 only,
        # blocks of rows as lanes do (a few rows are code's: small_batch_layout). Trees
        # of up to 63 splits: blocks of rows as lanes, on AVX-512 (0.65-0.92x code's
        # time from 64 rows; 1.2-1.6x on AVX2).
        lanes = stride(forest)
        if not (lanes and one_compare(forest, precision)):
            return False
        if lanes > MAX_DEFAULT_LANES:
            return "avx512f" in cpu_features and vector_ready(forest, precision)
        return "avx512f" in cpu_features or (
            "avx2" in cpu_features and vector_ready(forest, precision))

    @classmethod
    def small_batch_layout(cls, forest: Forest, precision: str,
                           cpu_features: frozenset[str]) -> tuple[str, int] | None:
        # Code for a few rows where blocks walk rows as lanes (CODE_ROWS).
        lanes = stride(forest)
        if not (lanes and vector_ready(forest, precision)):
            return None
        isa = "avx512" if "avx512f" in cpu_features else "avx2"
        splits = int(_splits(forest).sum())
        rows = next((rows for most, rows in CODE_ROWS[isa, max(lanes, 32)]
                     if most is None or splits <= most), None)
        return None if rows is None else ("code", rows)

    @classmethod
    def default_schedule(cls, forest: Forest, precision: str,
                         cpu_features: frozenset[str]) -> Schedule:
        # Blocks of rows as vector lanes where the forest allows; else a tree over a
        # block of rows, its tables in registers, the block's rows prepared once (cache).
        if vector_ready(forest, precision):
            return named("vector", forest.n_trees, cache=True)
        return named("xgboost", forest.n_trees, cache=True)

    @classmethod
    def small_batch_schedule(cls, forest: Forest, precision: str,
                             cpu_features: frozenset[str]) -> Schedule | None:
        # Under vector walks, a few rows take a row's splits as the lanes instead.
        if vector_ready(forest, precision):
            return named("xgboost", forest.n_trees, cache=True)
        return None

    def __init__(self, forest: Forest, precision: str = "float64") -> None:
        super().__init__(forest, precision)
        self.lanes = stride(forest)
        if not self.lanes:
            internal = _splits(forest)
            raise UnsupportedModelError(
                f"tree {int(np.argmax(internal))} has {int(internal.max())} internal nodes; "
                f"the 'mask' representation holds trees of up to {MAX_LANES - 1} (use "
                "'code' or 'sparse')")
        self.bits_type = ir.I64 if self.lanes == 64 else ir.I32
        nodes, path, turn, leaf = _tree_lanes(forest, self.lanes)
        handle = np.zeros(forest.n_nodes, dtype=np.int64)
        _, leaf_nodes = self.slot_nodes
        handle[leaf_nodes[::-1]] = self.n_internal_slots + np.arange(len(leaf_nodes))[::-1]
        # As the signed integers of the bits' type: LIR constants are two's complement.
        unsigned, signed = (np.uint64, np.int64) if self.lanes == 64 else (np.uint32, np.int32)
        # Numeric splits of one operator whose missing values go one way per node, and
        # categorical splits of small sets: each lane reads its value from a copy of the
        # row prepared for it (see _copy_plan), so a numeric test is one compare and a
        # categorical one an `and` (the general test spends a NaN test, a select and a
        # blend more, and a category's shift lane by lane).
        # A float64 forest's lanes compare in float32 where its sets fit (see
        # _narrow_test); float32 forests' lanes already do.
        plan = _copy_plan(forest, self.spec, nodes, ir.F32) \
            if self.spec.compare == ir.F64 else None
        self.narrow = plan is not None
        plan = plan or _copy_plan(forest, self.spec, nodes, self.spec.compare)
        self.copy_width, self.regions = (plan[0], plan[1]) if plan else (0, ())
        self._coded_first = plan[3] if plan else None
        if plan is None:
            fields = decision.node_arrays(forest, self.spec, nodes, leaf_bit=False)
            fields.pop("cat_bitset", None)  # the sparse layout's serves both
        else:
            fields = plan[2]
            if plan[3] is not None:
                self._add({"mask_categorical": plan[3]})
        fields.update(
            path=path.astype(unsigned).view(signed), turn=turn.astype(unsigned).view(signed),
            leaf=np.where(leaf >= 0, handle[np.maximum(leaf, 0)],
                          self.n_internal_slots).astype(np.int32))
        trees = (np.arange(forest.n_trees + 1, dtype=np.int64) * self.lanes,
                 forest.n_trees * self.lanes)
        self._add({"mask_" + name: array for name, array in fields.items()}, trees)
        self.ranks: list[tuple[list[int], int]] | None = None
        if vector_ready(forest, precision):
            self._add_vector_tables(nodes, path, turn, leaf)

    def walk_code(self, tree: ir.Expr, node: ir.Var, feature_value: FeatureLoader,
                  row: dict | None = None) -> list[ir.Stmt]:
        """Statements leaving in ``node`` the lane of tree ``tree``'s reached leaf
        (``tree * lanes + leaf lane``, what :meth:`code_leaf_value` reads). The lanes'
        values are one :class:`~silvanforge.lir.ir.Lookup` of the row's copies (those in
        ``feature_value.prepared`` when the kernel prepared the row, else the walk's
        own), or, without copies, of the row itself when ``feature_value`` offers
        ``window`` (a :class:`~.base.RowValues`), else a gather."""
        lanes, bits_type = self.lanes, self.bits_type
        at = ir.BinOp("mul", tree, ir.i64(lanes))

        def read(field: str) -> ir.Expr:
            return ir.VectorLoad(self._buffer("mask_" + field), at, lanes)

        code: list[ir.Stmt] = []
        x = None
        if self.copy_width:
            x = self._lane_values(code, node.name, feature_value, read)
            right = self._copies_test(x, read)
        else:
            loads = decision.NodeLoads(
                feature=read("feature"), threshold=read("threshold"),
                flags=read("flags") if self._has("mask_flags") else None,
                cat_offset=read("cat_offset") if self._has("mask_cat_offset") else None,
                cat_words=read("cat_words") if self._has("mask_cat_words") else None,
                cat_bitset=self._buffer("cat_bitset") if self._has("cat_bitset") else None)
            right = ir.Not(decision.go_left(self.spec, loads,
                                            getattr(feature_value, "window", feature_value)))
        bits = ir.Var(node.name + "_bits", bits_type)
        code.append(ir.Declare(bits, ir.LaneBits(right, bits_type)))
        if self.narrow:
            code += self._narrow_test(bits, x, node.name, feature_value, read)
        reached = ir.Cmp("eq", ir.BinOp("and", bits, read("path")), read("turn"))
        leaf = ir.Math("cttz", ir.LaneBits(reached, bits_type))
        return code + [ir.Assign(node, ir.BinOp("add", at, ir.Cast(leaf, ir.I64)))]

    @property
    def lane_type(self) -> ir.DType:
        """The type lanes compare in: float32 for narrow lanes, else the spec's."""
        return ir.F32 if self.narrow else self.spec.compare

    def prepared_row(self) -> tuple[int, ir.DType] | None:
        """The row's copies (see :func:`_copy_plan`), where lanes test one."""
        return (len(self.regions) * self.copy_width, self.lane_type) \
            if self.copy_width else None

    def prepare_row(self, feature_value: FeatureLoader, out: ir.Buffer,
                    at: ir.Expr) -> list[ir.Stmt]:
        return self._copies(feature_value, out, at, self.lane_type)

    def _copies(self, feature_value: FeatureLoader, out: ir.Buffer, at: ir.Expr,
                lane: ir.DType) -> list[ir.Stmt]:
        """Stores of the row's copies at ``out[at:]``, values of type ``lane`` (a
        narrow row is rounded to float32; its categories are coded from the row's own
        values). Wide copies of narrow lanes keep a coded copy's row values as they
        are: only numeric lanes read them (see :meth:`_narrow_test`)."""
        F, width = self.spec.compare, self.copy_width
        M = ir.I32 if lane == ir.F32 else ir.I64
        window = getattr(feature_value, "window", None)
        if window is None:
            raise ScheduleError(f"the {self.name!r} representation reads rows a vector "
                                "at a time: its walks need the kernel's row values")
        row = window(ir.Iota(width))
        if row.dtype != F:
            row = ir.Cast(row, F)
        wide_of_narrow = self.narrow and lane == F
        code: list[ir.Stmt] = []
        for k, region in enumerate(self.regions):
            value = _region_value(row, region)
            if value.dtype != lane:
                value = ir.Cast(value, lane)
            coded = region == "coded" or (k == 0 and self._has("mask_categorical"))
            if coded and not wide_of_narrow:
                operand = ir.Bitcast(decision.coded_category_operand(self.spec, row, M), lane)
                value = operand if region == "coded" else ir.Select(ir.Cmp(
                    "ne", ir.VectorLoad(self._buffer("mask_categorical"), ir.i64(0), width),
                    ir.Const(0, ir.I8)), operand, value)
            code.append(ir.Store(out, ir.BinOp("add", at, ir.i64(k * width)), value))
        return code

    def _lane_values(self, code: list[ir.Stmt], stem: str, feature_value: FeatureLoader,
                     read) -> ir.Expr:
        """Each lane's value from the row's copies: those the kernel prepared, else
        the walk's own."""
        prepared = getattr(feature_value, "prepared", None)
        if prepared is None:
            size, dtype = self.prepared_row()
            prepared = (ir.Buffer(stem + "_row", dtype, size=size), ir.i64(0))
            code.append(ir.LocalArray(prepared[0]))
            code += self.prepare_row(feature_value, *prepared)
        return ir.Lookup(prepared[0], prepared[1], read("slot"),
                         len(self.regions) * self.copy_width)

    def _copies_test(self, x: ir.Expr, read) -> ir.Expr:
        """Whether the row goes right at each node, its lanes' values ``x``."""
        # Right where the compare fails (a NaN threshold: every categorical lane) and the
        # category test too (a 0 mask: every numeric lane).
        right: ir.Expr = ir.Not(ir.Cmp(_COMPARE[_numeric_op(self.spec)], x, read("threshold")))
        if not self._has("mask_cat"):
            return right
        M = ir.I32 if x.dtype == ir.F32 else ir.I64
        return ir.BinOp("and", right, ir.Cmp(
            "eq", ir.BinOp("and", ir.Bitcast(x, M), read("cat")), ir.Const(0, M)))

    def _narrow_test(self, bits: ir.Var, x: ir.Expr, stem: str,
                     feature_value: FeatureLoader, read) -> list[ir.Stmt]:
        """Statements correcting ``bits`` (from float32 lanes of a float64 forest)
        where rounding left a compare undecided. Rounding to nearest keeps order:
        ``round(x) < round(t)`` implies ``x < t`` and ``round(x) > round(t)`` implies
        ``x > t``; only lanes where the two round alike are undecided, and those are
        compared again in float64, from wide copies of the row made then (a branch
        almost never taken: the row's value must lie within half a float32 step of
        the threshold)."""
        undecided = ir.Var(stem + "_undecided", bits.dtype)
        code: list[ir.Stmt] = [ir.Declare(undecided, ir.LaneBits(
            ir.Cmp("eq", x, read("threshold")), bits.dtype))]
        wide = ir.Buffer(stem + "_wide", ir.F64, size=len(self.regions) * self.copy_width)
        x64 = ir.Lookup(wide, ir.i64(0), read("slot"), len(self.regions) * self.copy_width)
        right = ir.LaneBits(ir.Not(ir.Cmp(_COMPARE[_numeric_op(self.spec)], x64,
                                          read("wide_threshold"))), bits.dtype)
        zero = ir.Const(0, bits.dtype)
        code.append(ir.If(ir.Cmp("ne", undecided, zero), [
            ir.LocalArray(wide), *self._copies(feature_value, wide, ir.i64(0), ir.F64),
            ir.Assign(bits, ir.BinOp("or", ir.BinOp("and", bits, ir.BinOp(
                "xor", undecided, ir.Const(-1, bits.dtype))), ir.BinOp("and", right,
                                                                    undecided)))]))
        return code

    def code_leaf_value(self, tree: ir.Expr, node: ir.Expr, k: int,
                        feature_value: FeatureLoader) -> ir.Expr:
        handle = ir.Cast(self._load("mask_leaf", node), ir.I64)
        return self.leaf_value(tree, handle, k, feature_value)

    # ---- blocks of rows as vector lanes ------------------------------------------------
    def _add_vector_tables(self, nodes: np.ndarray, path: np.ndarray, turn: np.ndarray,
                           leaf: np.ndarray) -> None:
        """The tables of :meth:`vector_walk_groups`: per internal lane, ``mask_low`` (the
        least rank of a value that goes right) and ``mask_keep`` (the leaf lanes still
        reachable when it does: all but its left subtree's); per leaf lane,
        ``mask_value``; per tree, ``mask_splits``; and ``mask_ranks``, the search tables
        of each feature's distinct thresholds (see :func:`_ranks`)."""
        forest, lanes = self.forest, self.lanes
        table, low, self.ranks = _ranks(forest, self.spec, nodes)
        unsigned, signed = (np.uint64, np.int64) if lanes == 64 else (np.uint32, np.int32)
        trees = (np.arange(forest.n_trees + 1, dtype=np.int64) * lanes,
                 forest.n_trees * lanes)
        self._add({"mask_low": low,
                   "mask_keep": _keep(path, turn, lanes).astype(unsigned).view(signed),
                   "mask_value": np.where(leaf >= 0, forest.leaf_value[np.maximum(leaf, 0), 0],
                                          0.0)}, trees)
        self._add({"mask_splits": _splits(forest).astype(np.int32), "mask_ranks": table})

    def lane_columns(self) -> tuple[int, ir.DType] | None:
        """The columns a block's transposed copy holds for vector walks: per copy of the
        row (see :func:`_copy_plan`) and feature, the rank of the value among the
        feature's thresholds (exact in any precision), or its coded category operand."""
        return (len(self.regions) * self.copy_width, ir.I32) if self.ranks else None

    def lane_column_stores(self, feature_value: FeatureLoader,
                           store: Callable[[int, ir.Expr], ir.Stmt],
                           stem: str) -> list[ir.Stmt]:
        """Statements storing one row's columns (:meth:`lane_columns`) through
        ``store(column, value)``. A rank is the count of the feature's thresholds below
        the value (a search of a few levels, each one vector compare of the value
        against a node's splitters and a popcount: a binary search's selects became
        branches, mispredicted on distinct rows; see :func:`_ranks`), doubled, plus one
        where the value equals one; a kept NaN ranks above every threshold."""
        F, table = self.spec.compare, self._buffer("mask_ranks")
        per = _per_register(F)
        code: list[ir.Stmt] = []
        for k, region in enumerate(self.regions):
            for f in range(self.forest.n_features):
                x = feature_value(ir.i64(f))
                if x.dtype != F:
                    x = ir.Cast(x, F)
                if region == "coded" or (k == 0 and self._coded_first is not None
                                         and self._coded_first[f]):
                    code.append(store(k * self.copy_width + f, decision.coded_category_operand(
                        self.spec, x, ir.I32)))
                    continue
                levels, count = self.ranks[f]
                if not count:  # split by no numeric node: never read
                    continue
                v = _region_value(x, region)
                below = ir.Var(f"{stem}_{k}_{f}", ir.I64)
                code.append(ir.Declare(below, ir.i64(0)))
                for depth, start in enumerate(levels):
                    node = below if depth == 0 else ir.BinOp("mul", below, ir.i64(per))
                    splitters = ir.VectorLoad(table, ir.BinOp("add", ir.i64(start), node), per)
                    lower = ir.Math("ctpop", ir.LaneBits(
                        ir.Cmp("lt", splitters, ir.Broadcast(v, per)), ir.I32))
                    code.append(ir.Assign(below, ir.BinOp("add", node, ir.Cast(lower, ir.I64))))
                equal = ir.Cmp("eq", ir.Load(table, ir.BinOp("add", ir.i64(levels[-1]), below)), v)
                rank: ir.Expr = ir.Cast(ir.BinOp("add", ir.BinOp("mul", below, ir.i64(2)),
                                                 ir.Cast(equal, ir.I64)), ir.I32)
                if region == "nan":
                    rank = ir.Select(ir.IsNaN(x), ir.Const(2 * count + 1, ir.I32), rank)
                code.append(store(k * self.copy_width + f, rank))
        return code

    def vector_walk_groups(self, tree: ir.Expr, lanes: int, loaders: list[FeatureLoader],
                           stem: str) -> tuple[list[ir.Stmt], list[ir.Expr]]:
        """Tree ``tree`` for groups of ``lanes`` rows (one loader each, reading the
        columns of :meth:`lane_columns` as vectors): (the statements, each group's
        vector of leaf lanes). Every leaf lane starts reachable; each split of the tree
        in turn clears the leaves of its left subtree in the lanes whose rows go right;
        the first leaf lane left is the row's (QuickScorer's bit vectors, Lucchese et
        al., SIGIR 2015, with rows as the lanes: one compare and one masked ``and`` a
        split for 16 rows, whatever the path). The groups share one loop over the
        splits, so its table reads serve them all."""
        if self.ranks is None:
            raise ScheduleError(
                f"vectorize with the {self.name!r} representation takes forests whose "
                "splits are each one compare on copies of the row, with category sets "
                "below 30 and leaves of one constant value (this one: leave out vectorize)")
        B, W = self.bits_type, self.lanes
        q = ir.Var(stem + "_split", ir.I64)
        column = ir.Var(stem + "_column", ir.I64)
        low, keep = ir.Var(stem + "_low", ir.I32), ir.Var(stem + "_keep", B)
        body: list[ir.Stmt] = [
            ir.Declare(column, ir.Cast(self._load("mask_slot", q), ir.I64)),
            ir.Declare(low, self._load("mask_low", q)),
            ir.Declare(keep, self._load("mask_keep", q))]
        cat = None
        if self._has("mask_cat"):
            cat = ir.Var(stem + "_cat", ir.I32)
            body.append(ir.Declare(cat, self._load("mask_cat", q)))
        bits = [ir.Var(f"{stem}_{g}", B) for g in range(len(loaders))]
        for b, loader in zip(bits, loaders):
            x = loader(ir.Broadcast(column, lanes))
            right: ir.Expr = ir.Cmp("ge", x, ir.Broadcast(low, lanes))
            if cat is not None:  # numeric lanes have a 0 mask, categorical ones the least low
                right = ir.BinOp("and", right, ir.Cmp("eq", ir.BinOp(
                    "and", x, ir.Broadcast(cat, lanes)), ir.Broadcast(ir.Const(0, ir.I32), lanes)))
            body.append(ir.Assign(b, ir.Select(right, ir.BinOp(
                "and", b, ir.Broadcast(keep, lanes)), b)))
        first = ir.BinOp("mul", tree, ir.i64(W))
        stop = ir.BinOp("add", first, ir.Cast(self._load("mask_splits", tree), ir.I64))
        return ([ir.Declare(b, ir.Broadcast(ir.Const(-1, B), lanes)) for b in bits]
                + [ir.For(q, first, stop, ir.i64(1), body)],
                [ir.Math("cttz", b) for b in bits])

    def vector_leaf_value(self, tree: ir.Expr, position: ir.Expr, k: int,
                          feature_value: FeatureLoader) -> ir.Expr:
        """f64 vector: the values of the leaf lanes ``position`` (from
        :meth:`vector_walk_groups`) of tree ``tree``, gathered."""
        return ir.Lookup(self._buffer("mask_value"), ir.BinOp("mul", tree, ir.i64(self.lanes)),
                         position, self.lanes)


def vector_ready(forest: Forest, precision: str) -> bool:
    """Whether blocks of rows of ``forest`` walk as vector lanes in the mask layout
    (:meth:`MaskRepresentation.vector_walk_groups`): each split one compare on copies
    of the row with category sets in 32-bit coded masks (float32 lanes, see
    :func:`_copy_plan`), leaves of one constant value."""
    if forest.n_trees == 0 or not stride(forest) or forest.leaf_width != 1 \
            or forest.linear is not None:
        return False
    spec = decision.DecisionSpec.of(forest, precision)
    return _copy_plan(forest, spec, np.flatnonzero(~forest.is_leaf), ir.F32) is not None


def _ranks(forest: Forest, spec: decision.DecisionSpec, nodes: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray, list[tuple[list[int], int]]]:
    """Ranks for lanes of global ``nodes`` (-1: padding): (the search tables; each
    lane's least rank going right; per feature, where each level of its search starts
    in the tables and how many thresholds it has).

    A value's rank among a feature's distinct thresholds t_0 < t_1 < ... (in the compare
    type) is twice the count below it, plus one where it equals one: then ``x <= t_i``
    holds exactly when rank(x) <= 2i + 1 and ``x < t_i`` when rank(x) <= 2i, in any
    precision. The count is a search of L levels of B = one register of thresholds
    (16 float32, 8 float64), B^L > count: the thresholds padded with NaN to B^L (a NaN
    is below nothing, and equals nothing), level l holding every B^(L-l)-th of them,
    the last of each block; a node's B splitters are consecutive, and the count of them
    below the value says which of its blocks to descend into. The last level is the
    padded thresholds themselves. Categorical lanes and padding get the least int32
    (every value compares above it: their test is the coded mask's)."""
    real = nodes >= 0
    n = np.maximum(nodes, 0)
    numeric = real & (forest.split_op[n] != OP_CAT)
    t = decision.thresholds(forest, spec, nodes).astype(np.float64)
    feature = forest.feature[n]
    le = int(_numeric_op(spec) == OP_LE)
    per = _per_register(spec.compare)
    low = np.full(len(nodes), np.iinfo(np.int32).min, dtype=np.int64)
    parts: list[np.ndarray] = []
    searches = []
    at = 0
    for f in range(forest.n_features):
        on = numeric & (feature == f)
        u = np.unique(t[on])
        low[on] = 2 * np.searchsorted(u, t[on]) + le + 1
        depth = 1
        while per ** depth <= len(u):
            depth += 1
        padded = np.concatenate([u, np.full(per ** depth - len(u), np.nan)])
        starts = []
        for level in range(1, depth + 1):
            step = per ** (depth - level)
            parts.append(padded[step - 1::step])
            starts.append(at)
            at += len(parts[-1])
        searches.append((starts, len(u)))
    dtype = np.float32 if spec.compare == ir.F32 else np.float64
    return (np.concatenate(parts).astype(dtype), low.astype(np.int32), searches)


def _keep(path: np.ndarray, turn: np.ndarray, lanes: int) -> np.ndarray:
    """Per tree and internal lane (``lanes`` each): the leaf lanes outside the lane's
    left subtree, as bits (from each leaf lane's ``path`` and ``turn`` bits: a leaf is
    in node i's left subtree when its path passes i and turns left there)."""
    P, U = path.reshape(-1, lanes), turn.reshape(-1, lanes)
    bit = np.uint64(1) << np.arange(lanes, dtype=np.uint64)
    keep = np.empty(P.shape, dtype=np.uint64)
    for i in range(lanes):
        left = (P >> np.uint64(i)) & ~(U >> np.uint64(i)) & np.uint64(1)
        keep[:, i] = ~np.bitwise_or.reduce(left * bit, axis=1)
    if lanes < 64:  # 32-bit bits
        keep &= np.uint64(0xFFFFFFFF)
    return keep.reshape(-1)


def one_compare(forest: Forest, precision: str) -> bool:
    """Whether ``forest`` fits the mask representation with every split test one vector
    operation on copies of the row (:func:`_copy_plan`): trees of at most 63 internal
    nodes, one numeric operator, missing values NaN-or-none, category sets below the
    mask's two top bits, copies of at most 64 values (what ``compile`` makes this
    representation's default for, on AVX-512 CPUs)."""
    if forest.n_trees == 0 or not stride(forest):
        return False
    spec = decision.DecisionSpec.of(forest, precision)
    return _copy_plan(forest, spec, np.flatnonzero(~forest.is_leaf),
                      spec.compare) is not None


def stride(forest: Forest) -> int:
    """The lanes each tree takes (16, 32 or 64: the fewest holding the forest's largest
    tree, internal nodes and leaves), or 0 when a tree has 64 splits or more."""
    largest = int(_splits(forest).max(initial=0))
    return next((w for w in (16, 32, MAX_LANES) if largest < w), 0)


def _splits(forest: Forest) -> np.ndarray:
    """The number of internal nodes of each tree."""
    return np.add.reduceat((~forest.is_leaf).astype(np.int64), forest.tree_offsets[:-1])


_COMPARE = {OP_LT: "lt", OP_LE: "le"}
# The most values the copies of a row may hold (more would permute from too many
# registers): 8 of float64, 4 of float32.
MAX_COPIES = 64
# What a copy of the row holds: NaNs as -inf (a NaN then passes every compare), kept
# (fails every compare), as 0 (where a NaN is 0, missing rule "none"); or the coded
# category operand of every value. Their order settles ties between equally small plans.
_REGIONS = ("zero", "low", "nan")


def _per_register(dtype: ir.DType) -> int:
    """The values of ``dtype`` one 512-bit register holds: a copy of the row is a whole
    number of registers, and a rank search compares one register of thresholds."""
    return 512 // dtype.bits


def _region_value(x: ir.Expr, region: str) -> ir.Expr:
    """Row value ``x`` as copy ``region`` holds it (before coding or ranking): a NaN as
    -inf (``low``), as 0 (``zero``), else kept."""
    if region not in ("low", "zero"):
        return x
    return ir.Select(ir.IsNaN(x), ir.Const(-np.inf if region == "low" else 0.0, x.dtype), x)


def _numeric_op(spec: decision.DecisionSpec) -> int:
    """The one numeric operator of a forest tested by copies (``<`` when all its splits
    are categorical)."""
    numeric = [op for op in spec.ops if op != OP_CAT]
    return numeric[0] if numeric else OP_LT


def _copy_plan(forest: Forest, spec: decision.DecisionSpec, nodes: np.ndarray,
               lane: ir.DType) -> tuple[int, tuple[str, ...], dict[str, np.ndarray],
                                        np.ndarray | None] | None:
    """How lanes of type ``lane`` for global ``nodes`` (-1: padding) test the row with
    one operation (float32 lanes of a float64 forest: see ``_narrow_test``; their
    thresholds are rounded to nearest, with ``wide_threshold`` the exact ones):
    (the lanes of a copy, a whole number of 512-bit registers holding every feature;
    the copies, in order; the lane tables; which features the first copy holds coded,
    or None). The tables: ``threshold`` (NaN on categorical lanes, which fails every
    compare); ``slot``, where in the copies a lane's value sits: a numeric lane reads
    one whose NaN goes where the node sends it; with categorical splits, ``cat``, the
    coded masks (0 on numeric lanes, which then fail the ``and``). A categorical lane
    reads the coded operands from a copy of their own where some feature is also split
    numerically, else from the first copy, which holds them at categorical features.
    The fewest copies serving every node are made (LightGBM's models without missing
    values in training: one, NaNs as 0). None when the forest's tests are not of that
    kind: more than one numeric operator or one other than ``<`` and ``<=``, missing
    rule "zero", a node sending NaN left but -inf right (``x < -inf``), category sets
    that are not coded masks, or copies beyond :data:`MAX_COPIES` values."""
    numeric_ops = [op for op in spec.ops if op != OP_CAT]
    if len(numeric_ops) > 1 or not set(numeric_ops) <= set(_COMPARE) \
            or not set(spec.missing) <= {MISSING_NAN, MISSING_NONE}:
        return None
    real = nodes >= 0
    n = np.maximum(nodes, 0)
    cat = real & (forest.split_op[n] == OP_CAT)
    numeric = real & ~cat
    t = decision.thresholds(forest, spec, nodes).astype(np.float64)
    op = _numeric_op(spec)
    zero_left = (0.0 < t) if op == OP_LT else (0.0 <= t)
    none = forest.missing[n] == MISSING_NONE
    nan_left = np.where(none, zero_left, forest.default_left[n])
    if op == OP_LT and np.any(numeric & nan_left & (t == -np.inf)):
        return None
    # Which copies serve each numeric node; the first smallest set serving all.
    serves = {"zero": none, "low": nan_left, "nan": ~nan_left}
    plans = [c for k in (1, 2, 3) for c in itertools.combinations(_REGIONS, k)]
    regions = next(list(c) for c in plans
                   if np.all(np.logical_or.reduce([serves[r] for r in c]) | ~numeric))
    if not numeric.any():
        regions = []
    features = np.zeros(forest.n_features, dtype=bool)
    features[forest.feature[n[cat]]] = True
    both = np.isin(forest.feature[n[numeric]], np.flatnonzero(features)).any()
    if not regions or both:
        regions.append("coded")
    per = _per_register(lane)
    width = max(per, -(-forest.n_features // per) * per)
    if len(regions) * width > MAX_COPIES:
        return None
    region = np.zeros(len(nodes), dtype=np.int64)
    for k in reversed(range(len(regions))):  # a node's first serving copy
        if regions[k] != "coded":
            region[serves[regions[k]]] = k
    region[cat] = regions.index("coded") if "coded" in regions else 0
    exact = np.where(numeric, t, np.where(cat, np.nan, 0.0))
    with np.errstate(over="ignore"):  # beyond float32's range: infinities, in order
        fields = {"threshold": exact.astype(np.float32 if lane == ir.F32 else np.float64),
                  "slot": np.where(real, forest.feature[n] + region * width,
                                   0).astype(np.int32)}
    if lane != spec.compare:
        fields["wide_threshold"] = exact
    coded_first = None
    if spec.has_categorical:
        masks = decision.coded_category_masks(forest, spec, nodes,
                                              ir.I32 if lane == ir.F32 else ir.I64)
        if masks is None:
            return None
        fields["cat"] = masks.view(np.int32 if masks.dtype == np.uint32 else np.int64)
        if "coded" not in regions:
            coded_first = np.zeros(width, dtype=np.int8)
            coded_first[:forest.n_features] = features
    return width, tuple(regions), fields, coded_first


def _tree_lanes(forest: Forest, lanes: int
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per tree, ``lanes`` entries each: (global node of each internal lane, -1 for
    padding; each leaf lane's path bits; its turn bits; its global leaf node, -1 for
    padding). Internal nodes take lanes in the order of their global index, leaves in
    depth-first order, left subtrees first."""
    n = forest.n_trees * lanes
    nodes = np.full(n, -1, dtype=np.int64)
    leaf = np.full(n, -1, dtype=np.int64)
    path = np.zeros(n, dtype=np.uint64)
    turn = np.ones(n, dtype=np.uint64)  # padding leaves never match
    left, right, is_leaf = forest.left.tolist(), forest.right.tolist(), forest.is_leaf.tolist()
    for t in range(forest.n_trees):
        base, stop = int(forest.tree_offsets[t]), int(forest.tree_offsets[t + 1])
        lane_of: dict[int, int] = {}
        leaf_lane = 0
        for g in range(base, stop):
            if not is_leaf[g]:
                lane_of[g] = len(lane_of)
                nodes[t * lanes + lane_of[g]] = g
        # (node, its path's bits, its turns) from the root down.
        stack = [(base, 0, 0)]
        while stack:
            g, bits, turns = stack.pop()
            if is_leaf[g]:
                at = t * lanes + leaf_lane
                leaf[at], path[at], turn[at] = g, bits, turns
                leaf_lane += 1
                continue
            bit = 1 << lane_of[g]
            stack.append((base + right[g], bits | bit, turns | bit))
            stack.append((base + left[g], bits | bit, turns))
    return nodes, path, turn, leaf
