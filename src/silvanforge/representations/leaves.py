"""Leaf values as buffers and the LIR that reads them, linear leaves included.

Every representation stores leaves as rows of a ``(slots, leaf_width)`` table indexed by
a leaf slot; they differ only in how a node handle maps to that slot. The table is
float32 when the precision is float32 and every leaf value is a float32 exactly (XGBoost's
are), halving its size without changing a result; float64 otherwise. Sums are float64. Linear
leaves (LightGBM) add per-slot ``lin_offset``/``lin_count``/``lin_const`` and the shared
``lin_feature``/``lin_coeff`` arrays, padded so that the unrolled sum may read past a
leaf's own coefficients without leaving the buffers.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..lir import ir
from ..model.forest import Forest
from .base import FeatureLoader

Loader = Callable[[str, ir.Expr], ir.Expr]


def max_linear_terms(forest: Forest) -> int:
    """The most coefficients of any linear leaf (0 without linear leaves)."""
    return int(forest.linear.count.max(initial=0)) if forest.linear is not None else 0


def leaf_fields(forest: Forest, precision: str = "float64") -> dict[str, np.dtype]:
    """The tables :func:`leaf_arrays` makes, and their types: known before any table is
    filled. Leaf values are float32 at that precision when every leaf's is a float32
    exactly."""
    value = forest.leaf_value[forest.is_leaf]
    narrow = False
    if precision == "float32":
        with np.errstate(over="ignore"):
            narrow = np.array_equal(value.astype(np.float32).astype(np.float64), value)
    fields = {"leaf_value": np.dtype(np.float32 if narrow else np.float64)}
    if forest.linear is not None:
        fields.update({"lin_offset": np.dtype(np.int32), "lin_count": np.dtype(np.int32),
                       "lin_const": np.dtype(np.float64), "lin_feature": np.dtype(np.int32),
                       "lin_coeff": np.dtype(np.float64)})
    return fields


def leaf_arrays(forest: Forest, nodes: np.ndarray, precision: str = "float64",
                fields: dict[str, np.dtype] | None = None) -> dict[str, np.ndarray]:
    """Leaf tables for slots holding global ``nodes`` (those of :func:`leaf_fields`,
    given as ``fields`` where the caller has them: a pass over every leaf value);
    non-leaf slots (internal nodes, padding -1) hold zeros."""
    fields = fields or leaf_fields(forest, precision)
    n = np.maximum(nodes, 0)
    leaf = (nodes >= 0) & forest.is_leaf[n]
    # Values put into zeros at the leaf slots alone (padded layouts: mostly not leaves).
    at = np.flatnonzero(leaf)
    values = np.zeros((len(nodes), forest.leaf_width), dtype=fields["leaf_value"])
    values[at] = forest.leaf_value[nodes[at]]
    arrays = {"leaf_value": values.reshape(-1)}
    lin = forest.linear
    if lin is not None:
        pad = max_linear_terms(forest)
        arrays["lin_offset"] = np.where(leaf, lin.offset[n], 0).astype(np.int32)
        arrays["lin_count"] = np.where(leaf, lin.count[n], 0).astype(np.int32)
        arrays["lin_const"] = np.where(leaf, lin.const[n], 0.0)
        arrays["lin_feature"] = np.concatenate([lin.feature, np.zeros(pad)]).astype(np.int32)
        arrays["lin_coeff"] = np.concatenate([lin.coeff, np.zeros(pad)])
    return arrays


def leaf_value(forest: Forest, load: Loader, slot: ir.Expr, k: int,
               feature_value: FeatureLoader) -> ir.Expr:
    """f64: component ``k`` of the leaf in ``slot``; ``load(field, index)`` reads a table.

    A linear leaf is ``const + sum(coeff * x)``, summed in coefficient order (as the
    reference does, so results agree to the bit), or the constant leaf value when one of
    its features is NaN. The sum is unrolled to the forest's longest linear leaf.

    >>> leaf_value(forest, rep._load, slot, 0, row_value)     # doctest: +SKIP
    """
    width = forest.leaf_width
    index = slot if width == 1 else ir.BinOp(
        "add", ir.BinOp("mul", slot, ir.i64(width)), ir.i64(k))
    constant = load("leaf_value", index)
    if constant.dtype != ir.F64:
        constant = ir.Cast(constant, ir.F64)
    if forest.linear is None:
        return constant
    count = load("lin_count", slot)
    offset = ir.Cast(load("lin_offset", slot), ir.I64)
    total: ir.Expr = load("lin_const", slot)
    nan_found: ir.Expr = ir.Const(False, ir.BOOL)
    for j in range(max_linear_terms(forest)):
        has = ir.Cmp("lt", ir.Const(j, ir.I32), count)
        at = ir.BinOp("add", offset, ir.i64(j))
        x = feature_value(ir.Cast(load("lin_feature", at), ir.I64))
        x = x if x.dtype == ir.F64 else ir.Cast(x, ir.F64)
        nan = ir.IsNaN(x)
        nan_found = ir.BinOp("or", nan_found, ir.BinOp("and", has, nan))
        term = ir.BinOp("mul", load("lin_coeff", at), x)
        total = ir.BinOp("add", total, ir.Select(ir.BinOp("and", has, ir.Not(nan)), term,
                                                 ir.Const(0.0, ir.F64)))
    return ir.Select(nan_found, constant, total)
