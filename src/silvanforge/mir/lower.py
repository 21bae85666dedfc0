"""Lower a Schedule to MIR: the loop tree exactly as the schedule says, then the passes.

Loop bounds come from how each variable was made (see ``schedule.VarInfo``): ``batch`` runs
``[0, N)``, ``tree`` ``[0, T)``; a tile's outer loop runs its variable's range with a
bigger step, its inner loop ``[outer, min(outer + size*step, end))`` (the ``min`` is
dropped when the size divides a compile-time range); a split's parts run ``[start,
min(start + n*step, end))`` and ``[min(start + n*step, end), end)``; a split copy runs the
range of the loop it copies with the split's renaming. The innermost body is a walk of
the innermost tree variable's tree for the innermost batch variable's row, reduced into
``result``. ``unroll``/``specialize`` replace a loop by copies with the index
substituted; ``interleave`` replaces the innermost loop by one interleaved walk group.

>>> from silvanforge.schedule import Schedule
>>> fn = lower(forest, Schedule.parse("reorder(tree, batch)"))   # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

from ..errors import ScheduleError
from ..model.forest import Forest
from ..schedule import BATCH, TREE, LoopNode, Schedule
from ..schedule.schedule import VECTOR_LANES
from .ir import (N, Affine, Bound, BufferDecl, CacheRows, CacheTrees, Cond, Function,
                 InterleavedWalk, Loop, Op, Reduce, Walk, WalkMember)
from .legalize import check_peel, covered, legalize_reductions

RESULT = "result"


def lower(forest: Forest, schedule: Schedule) -> Function:
    """The legalised MIR function computing ``schedule`` over ``forest``'s trees."""
    schedule.check(forest.n_trees)
    builder = _Builder(schedule, forest.n_trees)
    body = tuple(op for root in schedule.roots for op in builder.node(root, {}, ()))
    fn = Function("predict", forest.n_trees, forest.n_outputs,
                  (BufferDecl(RESULT, (N, "n_outputs")),), body)
    check_peel(fn, forest)
    return legalize_reductions(fn)


class _Builder:
    def __init__(self, schedule: Schedule, n_trees: int) -> None:
        self.s = schedule
        self.range = lru_cache(maxsize=None)(self._range)
        self.n_trees = n_trees

    def _range(self, var: str) -> tuple[Bound, Bound, int]:
        """(lower, upper, step) of var over live loop variables and N."""
        info = self.s.vars[var]
        if info.rule == "root":
            return Bound.of(0), Bound.of(Affine.var(N) if var == BATCH else self.n_trees), 1
        if info.rule == "copy":
            rename = {old: Affine.var(self.s.resolve(new)) for old, new in info.rename}
            lo, hi, step = self.range(info.parent)
            return lo.subs(rename), hi.subs(rename), step
        lo, hi, step = self.range(info.parent)
        span = info.size * step
        if info.rule == "tile_outer":
            return lo, hi, span
        if info.rule == "tile_inner":
            outer = Affine.var(self.s.resolve(info.partner))
            extent = _extent(lo, hi)
            exact = extent is not None and extent % span == 0
            return Bound.of(outer), Bound.of(outer + span, *(() if exact else hi.terms)), step
        cut = Bound.of(*(t + span for t in lo.terms), *hi.terms)
        return (lo, cut, step) if info.rule == "split_first" else (cut, hi, step)

    def node(self, node: LoopNode, env: dict[str, Affine],
             above: tuple[str, ...]) -> list[Op]:
        """Ops for one loop of the schedule; env substitutes unrolled indices."""
        var = node.var
        attrs = self.s.attrs[var]
        lo, hi, step = (b.subs(env) if isinstance(b, Bound) else b for b in self.range(var))
        kind = self.s.vars[var].kind
        loop = Loop(var, kind, lo, hi, step, (), parallel=bool(attrs.get("parallel")),
                    gpu_dim=attrs.get("gpu_dim"), cache=bool(attrs.get("cache")),
                    atomic_reduce=bool(attrs.get("atomic_reduce")),
                    vector_reduce=attrs.get("vector_reduce", 0),
                    shared_reduce=bool(attrs.get("shared_reduce")))
        inner = above + (var,)
        if attrs.get("interleave"):
            return self.interleaved(loop, env, inner)
        copies = self.copies(loop, attrs)
        if copies is not None:
            return [op for value in copies
                    for op in self.body(node, {**env, var: value}, inner)]
        body = self.body(node, env, inner)
        if loop.cache:
            body = self.cache_ops(loop, body) + body
        return [replace(loop, body=tuple(body))]

    def copies(self, loop: Loop, attrs: dict) -> list[Affine] | None:
        """Index values of an unrolled or specialized loop, or None to keep the loop."""
        op = "specialize" if attrs.get("specialize") else "unroll" if attrs.get("unroll") else None
        if op is None:
            return None
        trip, lo = loop.exact_trip(), loop.lower.single
        if trip is None or lo is None or (op == "specialize" and not lo.is_const):
            raise ScheduleError(f"{op}({loop.var}): the loop runs [{loop.lower}, {loop.upper});"
                                f" {op} needs " + ("constant bounds" if op == "specialize"
                                                   else "a compile-time trip count"))
        return [lo + i * loop.step for i in range(trip)]

    def body(self, node: LoopNode, env: dict[str, Affine], inner: tuple[str, ...]) -> list[Op]:
        if node.children:
            return [op for child in node.children for op in self.node(child, env, inner)]
        tree, row = self.indices(inner, env)
        attrs = self.s.attrs[node.var]
        return [Walk(tree, row, "leaf", attrs.get("unroll_walk", 0), attrs.get("peel_walk", 0)),
                Reduce(RESULT, (), row, tree, "leaf")]

    def indices(self, path: tuple[str, ...], env: dict[str, Affine]) -> tuple[Affine, Affine]:
        """(tree, row): the innermost tree and batch variables of the path."""
        last = {self.s.vars[v].kind: v for v in path}
        return tuple(env.get(last[k], Affine.var(last[k])) for k in (TREE, BATCH))

    def interleaved(self, loop: Loop, env: dict[str, Affine], inner: tuple[str, ...]) -> list[Op]:
        lo, trip = loop.lower.single, loop.max_trip()
        if lo is None or trip is None:
            raise ScheduleError(f"interleave({loop.var}): the loop runs [{loop.lower}, "
                                f"{loop.upper}), not a compile-time trip count")
        exact = loop.exact_trip() is not None
        attrs = self.s.attrs[loop.var]
        members, reduces = [], []
        for i in range(trip):
            value = lo + i * loop.step
            tree, row = self.indices(inner, {**env, loop.var: value})
            valid = None if exact else Cond(value, loop.upper)
            members.append(WalkMember(tree, row, f"leaf{i}", valid))
            reduces.append(Reduce(RESULT, (), row, tree, f"leaf{i}", valid=valid))
        return [InterleavedWalk(tuple(members), attrs.get("unroll_walk", 0),
                                attrs.get("peel_walk", 0),
                                VECTOR_LANES if attrs.get("vectorize") else 0), *reduces]

    def cache_ops(self, loop: Loop, body: list[Op]) -> list[Op]:
        """One cache op per distinct range one iteration of loop reads."""
        ranges = covered(body, loop.kind, self.end(loop.kind))
        if loop.kind == TREE:
            return [CacheTrees(lo, hi) for lo, hi in ranges]
        lanes = max((op.lanes for op in _ops(body) if isinstance(op, InterleavedWalk)),
                    default=0)
        if lanes:  # one copy of the block's consecutive rows
            return [CacheRows(ranges[0][0], ranges[-1][1], lanes, len(ranges))]
        return [CacheRows(lo, hi, rows=_most_rows(lo, hi)) for lo, hi in ranges]

    def end(self, kind: str) -> Affine:
        return Affine.var(N) if kind == BATCH else Affine.of(self.n_trees)


def _ops(body: list[Op]):
    """Every op of ``body``, nested ones included."""
    for op in body:
        yield op
        if isinstance(op, Loop):
            yield from _ops(list(op.body))


def _most_rows(lo: Bound, hi: Bound) -> int:
    """The most indices ``[lo, hi)`` holds when a bound of ``hi`` lies a constant past
    ``lo`` (a block of a tiled loop: ``[b0, min(b0 + 64, N))``), else 0 (unknown)."""
    a = lo.single
    spans = [(t - a).const for t in hi.terms if a is not None and (t - a).is_const]
    return max(0, min(spans)) if spans else 0


def _extent(lo: Bound, hi: Bound) -> int | None:
    a, b = lo.single, hi.single
    return (b - a).const if a is not None and b is not None and (b - a).is_const else None
