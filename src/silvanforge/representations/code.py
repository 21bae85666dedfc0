"""The code representation: each tree as nested branches over the sparse layout.

A table walk is a chain of dependent loads (node → feature index → row value → compare →
next node). Emitted as code, a tree's structure and feature indices
are constants: the address of every row value is known before the walk starts, so the
CPU runs ahead along predicted branches with no load chain. This is what makes lleaves
fast on skewed LightGBM trees (mean paths of 3-5 nodes, depths near 10).

What a node costs (measured on LightGBM shapes and counted with callgrind; the figures are
in docs/ARCHITECTURE.md, "The code representation"):

- A row value is loaded by the node that tests it (a walk reads a few of a tree's
  features; LLVM merges repeated loads on a path). Loading every feature a tree tests
  up front measured no faster.
- The threshold is read from the sparse layout's threshold table at a constant offset:
  x86 float compares take no immediate, and a constant-pool entry under the JIT's large
  code model costs one more instruction per node than a table slot off a register.
- A NaN compared as 0 (missing rule "none") goes where 0 goes, known at compile time
  from the threshold: the node's test is the NaN rule with that direction, one compare.
- The split test is :func:`decision.go_left` itself, specialised per node: a node's
  operator, missing rule and default direction become the spec's only ones, so each node
  gets exactly its own test and missing values, categories and float32 threshold
  rounding are those of the table layouts by construction.
- Category sets are mask immediates when they fit (see :mod:`.decision`), tested against
  an operand computed once per row value: a test is an ``and`` and a branch, where
  recomputing the category at each node took a dozen instructions. The lowering declares a row's operands once for its
  walks in a block (:meth:`row_preamble`; every function the outliner cuts the trees
  into receives them as arguments): computed at each tree's entry, they were computed
  again by each of those functions. Larger sets
  stay in the ``cat_bitset`` buffer.
- A walk ends in its leaf's value, the float64 bits of an immediate, so the sum needs no
  load; linear and vector leaves end in the sparse layout's leaf handle.

The node tables serve whoever walks by the table interface (hand-built LIR kernels,
tests). :meth:`walk_code` emits one tree, whose index is a constant, as a
:class:`~silvanforge.lir.ir.BranchTree`: the nodes whose test ``go_left`` makes a compare
of the row value with the threshold (most of them; which ones is read from ``go_left``
itself, once a kind of node) are numbers, the others expressions; every schedule runs:
where the tree loop is unrolled or specialized (the named schedule ``code_rows``, the
fastest) indices are constants, elsewhere the lowering jumps on the index to the trees'
code (a :class:`~silvanforge.lir.ir.Switch`, once a tree loop's iteration or once a walk
group: ``tree_switch`` and ``dispatched_walks`` in :mod:`silvanforge.lir.lower`). Code
size grows with the forest; the CPU backend splits large blocks into separate functions,
a big switch's cases each into its own (:mod:`silvanforge.backends.cpu.outline`), which
keeps compile time linear in the number of nodes. Only a tree too deep to emit is
refused.

>>> rep = CodeRepresentation(forest)                              # doctest: +SKIP
>>> rep.walk_code(ir.i64(0), ir.Var("node", ir.I64), row_value)   # doctest: +SKIP
[If(cond=..., then=[Assign(...)], orelse=[...])]
"""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import Callable

import numpy as np

from ..errors import UnsupportedModelError
from ..lir import ir
from ..model.forest import MISSING_NAN, MISSING_NONE, OP_CAT, OP_LE, OP_LT, Forest
from . import decision
from .base import FeatureLoader, register
from ..schedule import Schedule, named
from .sparse import SparseRepresentation

# The planner emits forests as code up to this many nodes, about 2.5 s of compile on 2
# cores (docs/ARCHITECTURE.md, "Default choices"; mtpl2's 61,000 nodes 1.8 s, 255,000
# nodes 6.2 s, past issue 27's 5 s for a default).
MAX_CODE_NODES = 100_000
# The most of a thread's rows one block of the default schedule holds where rows are
# wide (fewer than WIDE_ROW_BLOCK of them fit): its tiles of trees each walk the block,
# which stays in the L2 cache between them (epsilon-like, rows of 8000 bytes, 16384
# rows: 0.74x the time of blocks of a thread's share; docs/ARCHITECTURE.md "Row blocks").
CODE_BLOCK_BYTES = 256 * 1024
WIDE_ROW_BLOCK = 256
# A subtree of at most this many split nodes is one expression of selects, not branches:
# all its tests run, and none of its (least predictable, bottom-level) branches can be
# mispredicted; fewer blocks also compile faster (docs/ARCHITECTURE.md, "The code
# representation": 7 against 1, 3 and 15 on LightGBM and XGBoost shapes).
SELECT_NODES = 7

# (feature, NaN read as 0) → the category operand of that row value in a tree's code.
_Operands = Callable[[int, bool], decision.CategoryOperand]

@register
class CodeRepresentation(SparseRepresentation):
    """Trees as nested branches over the sparse layout's leaves."""

    name = "code"
    constant_trees = True
    # GPUs run it too, but their threads diverge on its branches: never their default.
    default_devices = ("cpu",)
    default_rank = 2
    # Trees as branches gain nothing from O2's later passes, nor from the full
    # instruction selector, which took a third of code generation (docs/ARCHITECTURE.md,
    # "Default choices").
    llvm_opt = 1
    llvm_fast_isel = True

    @classmethod
    def small_batch_schedule(cls, forest: Forest, precision: str,
                             cpu_features: frozenset[str]) -> Schedule | None:
        # Its one kernel serves every batch: a second would double its compile time.
        return None

    @classmethod
    def suits(cls, forest: Forest, precision: str, cpu_features: frozenset[str]) -> bool:
        # Beyond MAX_CODE_NODES a compile would pass ~2.5 s: sparse tables instead.
        return forest.n_nodes <= MAX_CODE_NODES

    @classmethod
    def default_schedule(cls, forest: Forest, precision: str,
                         cpu_features: frozenset[str]) -> Schedule:
        # A block is a thread's share of the call, unless rows are so wide that fewer
        # than WIDE_ROW_BLOCK of them fill CODE_BLOCK_BYTES: then that many, so the
        # block stays in the cache while each tile of trees walks it.
        rows = CODE_BLOCK_BYTES // max(1, forest.row_bytes)
        if rows < WIDE_ROW_BLOCK:
            return named("code_rows", forest.n_trees, rows=max(16, rows))
        return named("code_rows", forest.n_trees)

    def __init__(self, forest: Forest, precision: str = "float64") -> None:
        super().__init__(forest, precision)
        internal_nodes, leaf_nodes = self.slot_nodes
        # Global leaf node → its handle (a hop leaf has two rows; either will do).
        handle = np.full(forest.n_nodes, -1, dtype=np.int64)
        handle[leaf_nodes[::-1]] = self.n_internal_slots + np.arange(len(leaf_nodes))[::-1]
        slot = np.full(forest.n_nodes, -1, dtype=np.int64)  # a node's own slot: its first
        slot[internal_nodes[::-1]] = np.arange(len(internal_nodes))[::-1]
        threshold = decision.thresholds(forest, self.spec, np.arange(forest.n_nodes))
        # Plain lists: emission visits every node once, and numpy scalars cost more.
        self._depths = forest.tree_depths.tolist()
        self._nodes = {
            "left": forest.left.tolist(), "right": forest.right.tolist(),
            "feature": forest.feature.tolist(), "missing": forest.missing.tolist(),
            "cat_offset": forest.cat_offset.tolist(), "cat_words": forest.cat_words.tolist(),
            "handle": handle.tolist(), "slot": slot.tolist()}
        if self.spec.category_mask:
            masks = decision.category_masks(forest, np.arange(forest.n_nodes),
                                            self.spec.compare.bits)
            # As the signed integers of the mask type: LIR constants are two's complement.
            self._nodes["cat_mask"] = masks.view(
                np.int64 if masks.dtype == np.uint64 else np.int32).tolist()
        # A tree's code ends in its leaf's value, as the float64 bits of an immediate,
        # where a leaf is one constant: the walk's result needs no load. Linear and
        # vector leaves end in their handle.
        self._values_in_code = forest.linear is None and forest.leaf_width == 1
        if self._values_in_code:
            self._nodes["value_bits"] = forest.leaf_value[:, 0].astype(np.float64).view(
                np.int64).tolist()
        # Per (operator, missing rule, default direction): the spec of one node's test.
        self._specs: dict[tuple[int, int, bool], decision.DecisionSpec] = {}
        self._keys, kind = _node_keys(forest, threshold)
        self._kind = kind.tolist()
        # Per (kind, row value type): the compare its nodes' tests are, or None.
        self._compares: dict[tuple[int, ir.DType], tuple[str, bool] | None] = {}

    def walk_code(self, tree: ir.Expr, node: ir.Var, feature_value: FeatureLoader,
                  row: dict | None = None) -> list[ir.Stmt]:
        """A :class:`~.ir.BranchTree` (branches, selects at the bottom:
        :data:`SELECT_NODES`) leaving
        tree ``tree``'s reached leaf in ``node`` (the float64 bits of its value, or its
        handle for linear and vector leaves; see :meth:`code_leaf_value`); ``tree`` is a
        constant (an unrolled or specialized tree loop, or a case of the lowering's jump
        on a variable index). With a ``row``
        cache, the walk's category operands are the row's, declared by
        :meth:`row_preamble`; without one, the walk declares its own."""
        if not isinstance(tree, ir.Const):
            raise TypeError("a tree's code needs its index as a constant; the lowering "
                            "jumps on a variable one to the trees' code")
        t = int(tree.value)
        # Each level nests a block in every renderer: stay far from Python's limit.
        limit = sys.getrecursionlimit() // 8
        if self._depths[t] > limit:
            raise UnsupportedModelError(
                f"tree {t} is {self._depths[t]} levels deep; the {self.name!r} "
                f"representation emits trees of up to {limit} levels (use 'sparse')")
        # Category tests read an operand computed once per row value (a shift and a few
        # compares that every test of that value would repeat): at the row's walks
        # given a row cache, else at the tree's entry.
        own = row is None
        operands = {"stem": node.name} if row is None else row

        def operand(feature: int, zeroed: bool) -> decision.CategoryOperand:
            if (feature, zeroed) not in operands:
                stem = f"{operands['stem']}_{'z' if zeroed else 'c'}{feature}"
                operands[feature, zeroed] = decision.CategoryOperand(
                    ir.Var(stem + "_bit", self.spec.mask_type),
                    ir.Var(stem + "_negative", ir.BOOL))
            return operands[feature, zeroed]

        values: dict[ir.Expr, ir.Expr] = {}  # index → its row value: one expression a tree

        def shared(index: ir.Expr) -> ir.Expr:
            x = values.get(index)
            if x is None:
                x = values[index] = feature_value(index)
            return x

        body: list[ir.Stmt] = [self._tree(self.forest.tree(t), node, shared, operand)]
        return self.row_preamble(operands, feature_value) + body if own else body

    def row_preamble(self, row: dict, feature_value: FeatureLoader) -> list[ir.Stmt]:
        code: list[ir.Stmt] = []
        for (feature, zeroed), vars_ in sorted(
                (key, value) for key, value in row.items() if key != "stem"):
            x = feature_value(ir.i64(feature))
            x = x if x.dtype == self.spec.compare else ir.Cast(x, self.spec.compare)
            if zeroed:
                x = ir.Select(ir.IsNaN(x), ir.Const(0.0, x.dtype), x)
            value = decision.category_operand(self.spec, x)
            code.append(ir.Declare(vars_.bit, value.bit))
            if self.spec.negative_category == "missing":  # else no test reads it
                code.append(ir.Declare(vars_.negative, value.negative))
        return code

    def code_leaf_value(self, tree: ir.Expr, node: ir.Expr, k: int,
                        feature_value: FeatureLoader) -> ir.Expr:
        if self._values_in_code:
            return ir.Bitcast(node, ir.F64)
        return self.leaf_value(tree, node, k, feature_value)

    def _tree(self, nodes_: slice, node: ir.Var, feature_value: FeatureLoader,
              operand: _Operands) -> ir.BranchTree:
        """The tree of global nodes ``nodes_`` as a :class:`~.ir.BranchTree` leaving its
        leaf in ``node``: a node whose test is a compare of its row value with its
        threshold (:meth:`_compare`) as numbers, any other as its expression. A test
        that comes out negated swaps its branches."""
        nodes, kind = self._nodes, self._kind
        leaves = nodes["value_bits" if self._values_in_code else "handle"]
        left: list[int] = []
        right: list[int] = []
        leaf, op, value, slot, test = [], [], [], [], []
        values: list[ir.Expr] = []
        tests: list[ir.Expr] = []
        position: dict[int, int] = {}  # feature → its row value's index in values
        dtype = None  # the row values' type, read from the first one
        for n in range(nodes_.start, nodes_.stop):
            yes = nodes["left"][n]
            if yes < 0:
                left.append(-1)
                right.append(-1)
                leaf.append(leaves[n])
                op.append("")
                value.append(-1)
                slot.append(-1)
                test.append(-1)
                continue
            no, feature = nodes["right"][n], nodes["feature"][n]
            if dtype is None:
                dtype = feature_value(ir.i64(feature)).dtype
            how = self._compare(kind[n], dtype)
            if how is None:
                cond = self._go_left(n, feature_value, operand)
                swap = isinstance(cond, ir.Not)
                op.append("")
                value.append(-1)
                slot.append(-1)
                test.append(len(tests))
                tests.append(cond.a if swap else cond)  # type: ignore[attr-defined]
            else:
                if feature not in position:
                    position[feature] = len(values)
                    values.append(self._compared(feature_value(ir.i64(feature))))
                swap = how[1]
                op.append(how[0])
                value.append(position[feature])
                slot.append(nodes["slot"][n])
                test.append(-1)
            left.append(no if swap else yes)
            right.append(yes if swap else no)
            leaf.append(0)
        return ir.BranchTree(node, left, right, leaf, op, value, slot, test, values, tests,
                             self._buffer("threshold"), SELECT_NODES)

    def _compare(self, kind: int, dtype: ir.DType) -> tuple[str, bool] | None:
        """(the LIR compare, whether it is negated) where the tests of nodes of ``kind``
        on row values of ``dtype`` are ``decision.go_left``'s compare of the row value
        (cast to the compare type) with the threshold, or its negation; else None. Read
        from ``go_left`` itself, built once a kind over placeholders."""
        found = self._compares.get((kind, dtype), False)
        if found is not False:
            return found  # type: ignore[return-value]
        key = self._keys[kind]
        found = None
        if key[0] != OP_CAT:
            x = ir.Var("x", dtype)
            t = ir.Var("t", self._buffer("threshold").dtype)
            cond = decision.go_left(self._spec(key), decision.NodeLoads(ir.i64(0), t),
                                    lambda index: x)
            negated = isinstance(cond, ir.Not)
            cond = cond.a if negated else cond  # type: ignore[attr-defined]
            if isinstance(cond, ir.Cmp) and cond.b is t and cond.a == self._compared(x):
                found = (cond.op, negated)
        self._compares[kind, dtype] = found
        return found

    def _compared(self, x: ir.Expr) -> ir.Expr:
        """Row value ``x`` as the compares of :meth:`_compare` read it: in the compare
        type."""
        return x if x.dtype == self.spec.compare else ir.Cast(x, self.spec.compare)

    def _spec(self, key: tuple[int, int, bool]) -> decision.DecisionSpec:
        """The spec of a node's own test: the forest's, narrowed to its operator,
        missing rule and default direction."""
        spec = self._specs.get(key)
        if spec is None:
            spec = self._specs[key] = replace(self.spec, ops=(key[0],), missing=(key[1],),
                                              default_left=key[2])
        return spec

    def _go_left(self, n: int, feature_value: FeatureLoader,
                 operand: _Operands) -> ir.Expr:
        """i1: node ``n``'s own split test, its fields as constants."""
        nodes = self._nodes
        feature, rule = nodes["feature"][n], nodes["missing"][n]
        spec = self._spec(self._keys[self._kind[n]])
        cat = spec.ops == (OP_CAT,)

        def constant(field: str, dtype: ir.DType = ir.I32) -> ir.Expr | None:
            return ir.Const(nodes[field][n], dtype) if cat else None

        masked = self.spec.category_mask
        loads = decision.NodeLoads(
            feature=ir.i64(feature),
            threshold=self._load("threshold", ir.i64(nodes["slot"][n])),
            cat_offset=None if masked else constant("cat_offset"),
            cat_words=None if masked else constant("cat_words"),
            cat_bitset=self._buffer("cat_bitset") if cat and not masked else None,
            cat_mask=constant("cat_mask", spec.mask_type) if masked else None,
            cat_operand=operand(feature, rule == MISSING_NONE) if cat and masked else None)
        return decision.go_left(spec, loads, feature_value)


def _node_keys(forest: Forest, threshold: np.ndarray
               ) -> tuple[list[tuple[int, int, bool]], np.ndarray]:
    """(the distinct (operator, missing rule, default direction) of the forest's split
    nodes' own tests, each node's index among them). A numeric node whose NaN compares
    as 0 (rule "none") sends a NaN where 0 goes, known from its threshold (of the
    compare type, so the comparison here is exact): it is the NaN rule with that
    direction. Leaves share one key of their own."""
    op, rule = forest.split_op.astype(np.int64), forest.missing.astype(np.int64)
    as_zero = (rule == MISSING_NONE) & (op != OP_CAT)
    with np.errstate(invalid="ignore"):
        zero_left = np.where(op == OP_LT, 0.0 < threshold,
                             np.where(op == OP_LE, 0.0 <= threshold, 0.0 == threshold))
    # One integer a key, in the order of (operator, rule, direction): np.unique over
    # rows sorts them as structured values, 0.05 s for 25,000 nodes.
    keys = (op * 6 + np.where(as_zero, MISSING_NAN, rule) * 2
            + np.where(as_zero, zero_left, forest.default_left).astype(np.int64))
    keys[forest.left < 0] = -1
    unique, kind = np.unique(keys, return_inverse=True)
    return [(-1, -1, True) if k < 0 else (k // 6, k % 6 // 2, bool(k % 2))
            for k in unique.tolist()], kind.reshape(-1)
