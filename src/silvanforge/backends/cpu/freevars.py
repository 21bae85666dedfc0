"""What a block of LIR uses from outside itself: the data an outlined parallel body needs.

A parallel loop body becomes its own function that receives, through one struct, every
scalar and buffer it reads from the enclosing code. The walk is driven by tables of the
attributes that hold sub-expressions and sub-blocks, so a new LIR node needs one table
entry here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from ...lir import ir

# Attributes of each node that hold expressions (None allowed) and blocks of statements.
_EXPR_CHILDREN = {
    ir.Const: (), ir.Var: (), ir.Load: ("index",), ir.BinOp: ("a", "b"),
    ir.Cmp: ("a", "b"), ir.Not: ("a",), ir.IsNaN: ("a",), ir.Select: ("cond", "a", "b"),
    ir.Cast: ("a",), ir.Bitcast: ("a",), ir.Math: ("a",),
}
_STMT_EXPRS = {
    ir.Declare: ("init",), ir.Assign: ("value",), ir.Store: ("index", "value"),
    ir.AtomicAdd: ("index", "value"), ir.Prefetch: ("index",), ir.LocalArray: (),
    ir.For: ("start", "stop", "step", "threads"), ir.While: ("cond",), ir.If: ("cond",),
}
_STMT_BLOCKS = {ir.For: ("body",), ir.While: ("body",), ir.If: ("then", "orelse")}


def walk_stmts(stmts: list[ir.Stmt]) -> Iterator[ir.Stmt]:
    """Every statement of ``stmts``, nested ones included, in program order.

    >>> i = ir.Var("i", ir.I64)
    >>> [type(s).__name__ for s in walk_stmts([ir.For(i, ir.i64(0), ir.i64(4), ir.i64(1),
    ...                                               [ir.Assign(i, i)])])]
    ['For', 'Assign']
    """
    for s in stmts:
        yield s
        for attr in _STMT_BLOCKS.get(type(s), ()):
            yield from walk_stmts(getattr(s, attr))


def walk_exprs(e: ir.Expr) -> Iterator[ir.Expr]:
    """``e`` and every sub-expression of it."""
    yield e
    for attr in _EXPR_CHILDREN[type(e)]:
        yield from walk_exprs(getattr(e, attr))


def stmt_exprs(s: ir.Stmt) -> Iterator[ir.Expr]:
    """Every expression directly or indirectly inside statement ``s`` (not its blocks)."""
    for attr in _STMT_EXPRS[type(s)]:
        e = getattr(s, attr)
        if e is not None:
            yield from walk_exprs(e)


@dataclass(frozen=True)
class FreeValues:
    """What a loop body reads from outside and what it illegally writes there."""

    vars: tuple[ir.Var, ...]
    buffers: tuple[ir.Buffer, ...]
    assigned_outside: tuple[str, ...]


def free_values(loop: ir.For) -> FreeValues:
    """Scalars and buffers ``loop``'s body uses from outside it, in first-use order.

    The loop's own variable, variables declared in the body (``Declare`` or a nested
    loop's variable) and local arrays declared in the body are not free.
    ``assigned_outside`` names variables the body assigns but does not declare (the
    loop's own variable included: each thread steps its own copy).

    >>> i, n = ir.Var("i", ir.I64), ir.Var("n", ir.I64)
    >>> out = ir.Buffer("out", ir.I64)
    >>> fv = free_values(ir.For(i, ir.i64(0), n, ir.i64(1), [ir.Store(out, i, n)]))
    >>> [v.name for v in fv.vars], [b.name for b in fv.buffers], fv.assigned_outside
    (['n'], ['out'], ())
    """
    declared: set[str] = set()
    local_buffers: set[str] = set()
    used_vars: dict[str, ir.Var] = {}
    used_buffers: dict[str, ir.Buffer] = {}
    assigned: list[str] = []
    for s in walk_stmts(loop.body):
        if isinstance(s, ir.Declare):
            declared.add(s.var.name)
        elif isinstance(s, ir.For):
            declared.add(s.var.name)
        elif isinstance(s, ir.LocalArray):
            local_buffers.add(s.buffer.name)
        elif isinstance(s, ir.Assign):
            assigned.append(s.var.name)
            used_vars.setdefault(s.var.name, s.var)
        if isinstance(s, (ir.Store, ir.AtomicAdd, ir.Prefetch)):
            used_buffers.setdefault(s.buffer.name, s.buffer)
        for e in stmt_exprs(s):
            if isinstance(e, ir.Var):
                used_vars.setdefault(e.name, e)
            elif isinstance(e, ir.Load):
                used_buffers.setdefault(e.buffer.name, e.buffer)
    return FreeValues(
        vars=tuple(v for name, v in used_vars.items()
                   if name not in declared and name != loop.var.name),
        buffers=tuple(b for name, b in used_buffers.items() if name not in local_buffers),
        assigned_outside=tuple(dict.fromkeys(a for a in assigned if a not in declared)),
    )
