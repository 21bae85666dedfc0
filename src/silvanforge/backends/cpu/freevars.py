"""Walks over LIR driven by tables of the attributes that hold sub-expressions and
sub-blocks (a new LIR node needs one table entry here), and :class:`FreeValues`, what a
block uses from outside itself: the parameters of an outlined function and the data a
parallel body receives through its struct (:mod:`.outline` computes them).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Iterator

from ...lir import ir

# Attributes of each node that hold expressions (None allowed) and blocks of statements.
EXPR_CHILDREN = {
    ir.Const: (), ir.Var: (), ir.Load: ("index",), ir.BinOp: ("a", "b"),
    ir.Cmp: ("a", "b"), ir.Not: ("a",), ir.IsNaN: ("a",), ir.Select: ("cond", "a", "b"),
    ir.Cast: ("a",), ir.Bitcast: ("a",), ir.Math: ("a",), ir.Broadcast: ("a",),
    ir.Iota: (), ir.VectorLoad: ("index",), ir.Lookup: ("base", "offset"),
    ir.Extract: ("a",), ir.Shuffle: ("a", "b"),
}
STMT_EXPRS = {
    ir.Declare: ("init",), ir.Assign: ("value",), ir.Store: ("index", "value"),
    ir.AtomicAdd: ("index", "value"), ir.Prefetch: ("index",), ir.LocalArray: (),
    ir.For: ("start", "stop", "step", "threads"), ir.While: ("cond",), ir.If: ("cond",),
    ir.Switch: ("value",), ir.Cold: (),
}
STMT_BLOCKS = {ir.For: ("body",), ir.While: ("body",), ir.If: ("then", "orelse"),
               ir.Cold: ("body",)}
# Attributes that hold a list of blocks.
STMT_BLOCK_LISTS = {ir.Switch: ("cases",)}


def blocks(s: ir.Stmt) -> Iterator[list[ir.Stmt]]:
    """The blocks of statements nested in ``s`` (a known statement), in program order."""
    for attr in STMT_BLOCKS.get(type(s), ()):
        yield getattr(s, attr)
    for attr in STMT_BLOCK_LISTS.get(type(s), ()):
        yield from getattr(s, attr)


def walk_stmts(stmts: list[ir.Stmt]) -> Iterator[ir.Stmt]:
    """Every statement of ``stmts``, nested ones included, in program order.

    >>> i = ir.Var("i", ir.I64)
    >>> [type(s).__name__ for s in walk_stmts([ir.For(i, ir.i64(0), ir.i64(4), ir.i64(1),
    ...                                               [ir.Assign(i, i)])])]
    ['For', 'Assign']
    """
    # One stack of iterators, not a generator per level: nested generators pass every
    # statement up through each enclosing one, and trees as code nest 30 levels deep.
    stack = [iter(stmts)]
    while stack:
        for s in stack[-1]:
            yield s
            nested = list(blocks(s))
            if nested:
                stack.append(itertools.chain.from_iterable(nested))
                break
        else:
            stack.pop()


@dataclass(frozen=True)
class FreeValues:
    """What a loop body reads from outside and what it illegally writes there."""

    vars: tuple[ir.Var, ...]
    buffers: tuple[ir.Buffer, ...]
    assigned_outside: tuple[str, ...]
