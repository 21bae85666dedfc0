"""The code representation: each tree as nested branches, thresholds as immediates.

A table walk is a chain of dependent loads (node → feature index → row value → compare →
next node), about 4-5 ns a step. Emitted as code, a tree's feature indices and
thresholds are constants: the address of every row value is known before the walk
starts, so the CPU runs ahead along predicted branches with no load chain. This is what
makes lleaves fast on skewed LightGBM trees (mean paths of 3-5 nodes, depths near 10).

The split test is :func:`decision.go_left` itself, specialised per node: a node's
operator, missing rule and default direction become the spec's only ones, so each node
gets exactly its own test (``!(x >= t)`` for ``<`` with NaN going left) and missing
values, categories and float32 threshold rounding are those of the table layouts by
construction. Category sets are mask constants when they fit (see :mod:`.decision`),
else they stay in the ``cat_bitset`` buffer.

The layout underneath is :class:`SparseRepresentation`: walks reach its leaf handles, so
leaf values (linear leaves included) and reductions are the table layouts', and the
node tables serve whoever walks by the table interface (hand-built LIR kernels, tests).
A schedule must make tree indices compile-time constants (``unroll``/``specialize`` of
the tree loop; the named schedule ``code_rows`` does); others are refused with a
:class:`ScheduleError`. Code size grows with the forest; the CPU backend splits large
blocks into separate functions (:mod:`silvanforge.backends.cpu.outline`), which keeps
compile time linear in the number of nodes.

>>> rep = CodeRepresentation(forest)                              # doctest: +SKIP
>>> rep.walk_code(ir.i64(0), ir.Var("node", ir.I64), row_value)   # doctest: +SKIP
[If(cond=..., then=[Assign(...)], orelse=[...])]
"""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import Callable

import numpy as np

from ..errors import ScheduleError, UnsupportedModelError
from ..lir import ir
from ..model.forest import MISSING_NAN, MISSING_NONE, OP_CAT, Forest
from . import decision
from .base import FeatureLoader, register
from .sparse import SparseRepresentation, _layout

# (feature, NaN replaced by 0) → the local holding that row value in a walk's code.
_Values = Callable[[int, bool], ir.Var]


@register
class CodeRepresentation(SparseRepresentation):
    """Trees as nested branches over the sparse layout's leaves."""

    name = "code"

    def __init__(self, forest: Forest, precision: str = "float64") -> None:
        super().__init__(forest, precision)
        leaf_nodes = _layout(forest)[2]  # the leaf rows the parent built its tables from
        # Global leaf node → its handle (a hop leaf has two rows; either will do).
        handle = np.full(forest.n_nodes, -1, dtype=np.int64)
        handle[leaf_nodes[::-1]] = self.n_internal_slots + np.arange(len(leaf_nodes))[::-1]
        threshold = decision.thresholds(forest, self.spec, np.arange(forest.n_nodes))
        # Plain lists: emission visits every node once, and numpy scalars cost more.
        self._depths = forest.tree_depths.tolist()
        self._nodes = {
            "left": forest.left.tolist(), "right": forest.right.tolist(),
            "feature": forest.feature.tolist(), "op": forest.split_op.tolist(),
            "missing": forest.missing.tolist(), "default_left": forest.default_left.tolist(),
            "cat_offset": forest.cat_offset.tolist(), "cat_words": forest.cat_words.tolist(),
            "threshold": threshold.tolist(), "handle": handle.tolist()}
        if self.spec.category_mask:
            masks = decision.category_masks(forest, np.arange(forest.n_nodes),
                                            self.spec.compare.bits)
            # As the signed integers of the mask type: LIR constants are two's complement.
            self._nodes["cat_mask"] = masks.view(
                np.int64 if masks.dtype == np.uint64 else np.int32).tolist()
        # Per (operator, missing rule, default direction): the spec of one node's test.
        self._specs: dict[tuple[int, int, bool], decision.DecisionSpec] = {}

    def walk_code(self, tree: ir.Expr, node: ir.Var,
                  feature_value: FeatureLoader) -> list[ir.Stmt]:
        """Nested ``If`` statements leaving tree ``tree``'s reached leaf handle in
        ``node``; ``tree`` must be a constant (an unrolled or specialized tree loop)."""
        if not isinstance(tree, ir.Const):
            raise ScheduleError(
                f"representation {self.name!r} needs constant tree indices: unroll or "
                "specialize the tree loop (e.g. add 'unroll(tree)'; on a CPU, compile() "
                "without a schedule uses 'code_rows', which does)")
        t = int(tree.value)
        # Each level nests a block in every renderer: stay far from Python's limit.
        limit = sys.getrecursionlimit() // 8
        if self._depths[t] > limit:
            raise UnsupportedModelError(
                f"tree {t} is {self._depths[t]} levels deep; the {self.name!r} "
                f"representation emits trees of up to {limit} levels (use 'sparse')")
        # The row values the tree tests are loaded once, up front, in the compare type
        # (and with NaN replaced by 0 for nodes that compare NaN as 0): the branches
        # test registers, and the code is a fraction of the size.
        values: dict[tuple[int, bool], ir.Var] = {}

        def value(feature: int, zeroed: bool) -> ir.Var:
            if (feature, zeroed) not in values:
                values[feature, zeroed] = ir.Var(
                    f"{node.name}_{'z' if zeroed else 'x'}{feature}", self.spec.compare)
            return values[feature, zeroed]

        base = int(self.forest.tree_offsets[t])
        body = self._subtree(base, base, node, value)
        code: list[ir.Stmt] = []
        for (feature, zeroed), var in sorted(values.items()):
            x = feature_value(ir.i64(feature))
            x = x if x.dtype == var.dtype else ir.Cast(x, var.dtype)
            if zeroed:
                x = ir.Select(ir.IsNaN(x), ir.Const(0.0, var.dtype), x)
            code.append(ir.Declare(var, x))
        return code + body

    def _subtree(self, base: int, n: int, node: ir.Var, value: _Values) -> list[ir.Stmt]:
        """The code of the subtree at global node ``n`` of the tree starting at ``base``."""
        nodes = self._nodes
        if nodes["left"][n] < 0:
            return [ir.Assign(node, ir.i64(nodes["handle"][n]))]
        left = self._subtree(base, base + nodes["left"][n], node, value)
        right = self._subtree(base, base + nodes["right"][n], node, value)
        cond = self._go_left(n, value)
        if isinstance(cond, ir.Not):  # a branch needs no negation: swap its arms
            cond, left, right = cond.a, right, left
        return [ir.If(cond, left, right)]

    def _go_left(self, n: int, value: _Values) -> ir.Expr:
        """i1: node ``n``'s own split test, its fields as constants."""
        nodes = self._nodes
        op, rule, feature = nodes["op"][n], nodes["missing"][n], nodes["feature"][n]
        cat = op == OP_CAT
        if rule == MISSING_NONE and not cat:
            # A NaN compares as 0 here: on the value with NaN replaced by 0, which is
            # never missing, the NaN rule (either direction) gives the same test.
            x, key = value(feature, True), (op, MISSING_NAN, False)
        else:
            x, key = value(feature, False), (op, rule, bool(nodes["default_left"][n]))
        spec = self._specs.get(key)
        if spec is None:
            spec = self._specs[key] = replace(self.spec, ops=(key[0],), missing=(key[1],),
                                              default_left=key[2])

        def constant(field: str, dtype: ir.DType = ir.I32) -> ir.Expr | None:
            return ir.Const(nodes[field][n], dtype) if cat else None

        masked = self.spec.category_mask
        loads = decision.NodeLoads(
            feature=ir.i64(feature),
            threshold=ir.Const(nodes["threshold"][n], spec.compare),
            cat_offset=None if masked else constant("cat_offset"),
            cat_words=None if masked else constant("cat_words"),
            cat_bitset=self._buffer("cat_bitset") if cat and not masked else None,
            cat_mask=constant("cat_mask", spec.mask_type) if masked else None)
        return decision.go_left(spec, loads, lambda _: x)
