"""The kernel's epilogue: per-output tree sums → the margin or the value, in LIR.

A one-row call spent more time finishing the kernel's sums in numpy (a base score, a
sigmoid: six small-array operations and an error-state switch) than walking the trees
(docs/ARCHITECTURE.md has the figures). The CPU kernel therefore finishes its rows itself, as told by
its ``finish`` argument:

- ``MARGIN``: the library's margin (sums, averaged when the margin is a mean, plus the
  base score);
- ``SCORE``: the value before the post-transform (sums, averaged when the forest
  averages, plus the base score), for the caller to transform;
- ``VALUE``: the value, for forests whose transform is in :data:`KERNEL_TRANSFORMS`
  (elementwise or row-wise ones that keep one column per output).

Each step is :func:`silvanforge.reference.finish`'s float64 operation in the same order;
on top of the sums' own rounding (trees are added in the schedule's order), values may
differ in the last bits: the C library's ``exp`` / ``log1p`` against numpy's, and softmax
sums left to right where numpy adds blocks of eight.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..model.forest import Forest
from . import ir

MARGIN, SCORE, VALUE = 0, 1, 2

F = ir.F64


def _c(value: float) -> ir.Const:
    return ir.Const(float(value), F)


def _sign(v: ir.Expr) -> ir.Expr:
    # np.sign: -1, 0 or 1, NaN for NaN.
    return ir.Select(ir.Cmp("gt", v, _c(0)), _c(1), ir.Select(
        ir.Cmp("lt", v, _c(0)), _c(-1), ir.Select(ir.IsNaN(v), v, _c(0))))


# Elementwise transforms as LIR of one margin value (see model/transforms.py).
_ELEMENTWISE: dict[str, Callable[[ir.Expr, dict], ir.Expr]] = {
    "sigmoid": lambda v, p: ir.BinOp("div", _c(1), ir.BinOp("add", _c(1), ir.Math(
        "exp", ir.BinOp("mul", _c(-float(p.get("alpha", 1.0))), v)))),
    "exp": lambda v, p: ir.Math("exp", v),
    "log1p_exp": lambda v, p: ir.Math("log1p", ir.Math("exp", v)),
    "signed_square": lambda v, p: ir.BinOp("mul", ir.BinOp("mul", _sign(v), v), v),
    "hinge": lambda v, p: ir.Select(ir.Cmp("gt", v, _c(0)), _c(1), _c(0)),
}
KERNEL_TRANSFORMS = frozenset(_ELEMENTWISE) | {"identity", "softmax"}


def epilogue(forest: Forest, result: ir.Buffer, n_rows: ir.Expr, finish: ir.Var,
             threads: ir.Expr | None, first: ir.Expr | None = None) -> list[ir.Stmt]:
    """Statements finishing rows ``first`` (default 0) to ``n_rows`` of ``result``
    (rows x ``n_outputs`` float64 sums) in place as ``finish`` says; the row loop is
    parallel over ``threads`` when given."""
    row = ir.Var("finish_row", ir.I64)
    return [ir.For(row, ir.i64(0) if first is None else first, n_rows, ir.i64(1),
                   finish_row(forest, result, row, finish),
                   parallel=threads is not None, threads=threads)]


def finish_row(forest: Forest, result: ir.Buffer, row: ir.Expr,
               finish: ir.Var) -> list[ir.Stmt]:
    """Statements finishing row ``row`` of ``result`` in place as ``finish`` says (the
    body of :func:`epilogue`'s loop, and of a GPU program's last launch)."""
    K = forest.n_outputs
    per_tree = np.maximum(forest.trees_per_output(), 1)
    base = np.asarray(forest.base_score, dtype=np.float64).reshape(-1)

    def at(k: int) -> ir.Expr:
        return ir.BinOp("add", ir.BinOp("mul", row, ir.i64(K)), ir.i64(k))

    def scores(average: bool) -> list[ir.Stmt]:
        out = []
        for k in range(K):
            v: ir.Expr = ir.Load(result, at(k))
            if average:
                v = ir.BinOp("div", v, _c(per_tree[k]))
            out.append(ir.Store(result, at(k), ir.BinOp("add", v, _c(base[k]))))
        return out

    def is_(mode: int) -> ir.Expr:
        return ir.Cmp("eq", finish, ir.i64(mode))

    if forest.average and not forest.average_in_margin:
        body: list[ir.Stmt] = [ir.If(is_(MARGIN), scores(False), scores(True))]
    else:
        body = scores(forest.average)
    transform = _transform(forest, result, at) \
        if forest.post_transform in KERNEL_TRANSFORMS else []
    if transform:  # identity has nothing to add
        body.append(ir.If(is_(VALUE), transform))
    return body


def modes(forest: Forest) -> dict[str, int]:
    """What a kernel finishes for each ``output``; SCORE leaves the transform to numpy."""
    return {"margin": MARGIN,
            "value": VALUE if forest.post_transform in KERNEL_TRANSFORMS else SCORE}


def _transform(forest: Forest, result: ir.Buffer,
               at: Callable[[int], ir.Expr]) -> list[ir.Stmt]:
    K, name, params = forest.n_outputs, forest.post_transform, forest.transform_params
    if name == "identity":
        return []
    if name in _ELEMENTWISE:
        return [ir.Store(result, at(k), _ELEMENTWISE[name](ir.Load(result, at(k)), params))
                for k in range(K)]
    # softmax: exp(v - max) / sum, as numpy computes it (max, then a left-to-right sum).
    top, total = ir.Var("softmax_max", F), ir.Var("softmax_sum", F)
    code: list[ir.Stmt] = [ir.Declare(top, ir.Load(result, at(0)))]
    code += [ir.Assign(top, ir.Select(ir.Cmp("gt", ir.Load(result, at(k)), top),
                                      ir.Load(result, at(k)), top)) for k in range(1, K)]
    code.append(ir.Declare(total, _c(0)))
    for k in range(K):
        e = ir.Math("exp", ir.BinOp("sub", ir.Load(result, at(k)), top))
        code += [ir.Store(result, at(k), e),
                 ir.Assign(total, ir.BinOp("add", total, ir.Load(result, at(k))))]
    code += [ir.Store(result, at(k), ir.BinOp("div", ir.Load(result, at(k)), total))
             for k in range(K)]
    return code
