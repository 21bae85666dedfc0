"""Lower a Schedule to MIR: the loop tree exactly as the schedule says, then the passes.

Loop bounds come from how each variable was made (see ``schedule.VarInfo``): ``batch`` runs
``[0, N)``, ``tree`` ``[0, T)``; a tile's outer loop runs its variable's range with a
bigger step, its inner loop ``[outer, min(outer + size*step, end))`` (the ``min`` is
dropped when the size divides a compile-time range); a split's parts run ``[start,
min(start + n*step, end))`` and ``[min(start + n*step, end), end)``; a split copy runs the
range of the loop it copies with the split's renaming. A loop reordered outside a loop its
range starts from (a tile's inner loop outside its outer) becomes an offset loop over
``[0, trip)``: the indices inside use ``start + var*step`` in its place, and a guard
``start + var*step < end`` (none where the trip count keeps it) wraps the body of the
innermost loop it uses. The innermost body is a walk of the finest tree loop's tree for
the finest batch loop's row (the loops no other loop of their kind starts from: the
innermost ones, unless an inner loop moved out), reduced into ``result``.
``unroll``/``specialize`` replace a loop by copies with the index substituted;
``interleave`` replaces the innermost loop by one interleaved walk group.

>>> from silvanforge.schedule import Schedule
>>> fn = lower(forest, Schedule.parse("reorder(tree, batch)"))   # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

from ..errors import ScheduleError
from ..model.forest import Forest
from ..schedule import BATCH, TREE, LoopNode, Schedule
from ..schedule.schedule import SHARE, VECTOR_LANES
from .ir import (N, S, Affine, Bound, BufferDecl, CacheRows, CacheTrees, Cond, Function, Guard,
                 InterleavedWalk, Loop, Op, Reduce, Walk, WalkMember)
from .legalize import check_peel, covered, legalize_reductions

RESULT = "result"


def lower(forest: Forest, schedule: Schedule, lanes: int = VECTOR_LANES) -> Function:
    """The legalised MIR function computing ``schedule`` over ``forest``'s trees; a
    vectorized loop's rows walk ``lanes`` at a time (the plan's ``vector_lanes``)."""
    schedule.check(forest.n_trees)
    builder = _Builder(schedule, forest.n_trees, lanes)
    body = tuple(op for root in schedule.roots for op in builder.node(root, {}, (), ()))
    fn = Function("predict", forest.n_trees, forest.n_outputs,
                  (BufferDecl(RESULT, (N, "n_outputs")),), body)
    check_peel(fn, forest)
    return legalize_reductions(fn)


class _Builder:
    def __init__(self, schedule: Schedule, n_trees: int, lanes: int) -> None:
        self.s, self.lanes = schedule, lanes
        self.range = lru_cache(maxsize=None)(self._range)
        self.n_trees = n_trees

    def _range(self, var: str) -> tuple[Bound, Bound, int | Affine]:
        """(lower, upper, step) of var over live loop variables and N."""
        info = self.s.vars[var]
        if info.rule == "root":
            return Bound.of(0), Bound.of(Affine.var(N) if var == BATCH else self.n_trees), 1
        lo, hi, step = self.range(info.parent)
        if info.rule in ("copy", "split_first", "split_second"):
            rename = {old: Affine.var(self.s.resolve(new)) for old, new in info.rename}
            lo, hi = lo.subs(rename), hi.subs(rename)
        # A share tile divides the root batch loop (Schedule._tile checks): step 1.
        span = Affine.var(S) if info.size == SHARE else info.size * step
        if info.rule == "copy":
            return lo, hi, step
        if info.rule == "tile_outer":
            return lo, hi, span
        if info.rule == "tile_inner":
            outer = Affine.var(self.s.resolve(info.partner))
            extent = _extent(lo, hi)
            exact = extent is not None and isinstance(span, int) and extent % span == 0
            return Bound.of(outer), Bound.of(outer + span, *(() if exact else hi.terms)), step
        cut = Bound.of(*(t + span for t in lo.terms), *hi.terms)
        return (lo, cut, step) if info.rule == "split_first" else (cut, hi, step)

    def node(self, node: LoopNode, env: dict[str, Affine], above: tuple[str, ...],
             guards: tuple[Cond, ...]) -> list[Op]:
        """Ops for one loop of the schedule. ``env`` maps loop variables to their absolute
        indices where those are not the variable itself (unrolled loops: a value; offset
        loops: an expression); ``guards`` wait for a loop their conditions use."""
        var = node.var
        attrs = self.s.attrs[var]
        lo, hi, step = self.range(var)
        kind = self.s.vars[var].kind
        loop = Loop(var, kind, lo.subs(env), hi.subs(env), step, (),
                    parallel=bool(attrs.get("parallel")),
                    gpu_dim=attrs.get("gpu_dim"), cache=bool(attrs.get("cache")),
                    atomic_reduce=bool(attrs.get("atomic_reduce")),
                    vector_reduce=attrs.get("vector_reduce", 0),
                    shared_reduce=bool(attrs.get("shared_reduce")))
        inside = (loop.lower.free() | loop.upper.free()) - set(above) - {N, S}
        if inside:
            offset = self.offset(loop, inside)
            if offset is None:
                return []
            loop, index, guard = offset
            env, guards = _bind(env, guards, var, index)
            guards += (guard,) if guard is not None else ()
        inner = above + (var,)
        if attrs.get("interleave"):
            return self.interleaved(loop, env, inner, guards)
        copies = self.copies(loop, attrs)
        if copies is not None:
            out = []
            for value in copies:
                e, gs = _bind(env, guards, var, value)
                ready, waiting = _ready(gs, above)
                out += _guarded(ready, self.body(node, e, inner, waiting))
            return out
        ready, waiting = _ready(guards, inner)
        body = _guarded(ready, self.body(node, env, inner, waiting))
        if loop.cache:
            body = self.cache_ops(loop, body) + body
        return [replace(loop, body=tuple(body))]

    def offset(self, loop: Loop, inside: set[str]) -> tuple[Loop, Affine, Cond | None] | None:
        """A loop whose bounds use loops nested in it, as an offset loop over ``[0, trip)``:
        (the loop, its iteration's absolute index, the guard keeping that index below the
        range's end, None where the trip count does), or None where it never runs.

        A term of the lower bound that also bounds the upper one is dropped: where it is
        the minimum, the range is empty, and stays empty from any larger start."""
        starts = [t for t in loop.lower.terms if t not in loop.upper.terms]
        if not starts:
            return None
        trip = replace(loop, lower=Bound.of(starts[0])).max_trip()
        if len(starts) > 1 or trip is None:
            raise ScheduleError(
                f"{loop.var} cannot run outside {', '.join(sorted(inside))}: its range "
                f"[{loop.lower}, {loop.upper}) " + ("has no single start" if len(starts) > 1
                                                    else "has no compile-time trip count"))
        index = starts[0] + Affine.var(loop.var).scale(loop.step)
        last = (trip - 1) * loop.step  # the index's greatest distance from the start
        ends = [t for t in loop.upper.terms if not (
            t.div == starts[0].div == 1 and (t - starts[0]).is_const
            and (t - starts[0]).const > last)]
        guard = Cond(index, Bound.of(*ends)) if ends else None
        return (replace(loop, lower=Bound.of(0), upper=Bound.of(trip), step=1, offset=True),
                index, guard)

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

    def body(self, node: LoopNode, env: dict[str, Affine], inner: tuple[str, ...],
             guards: tuple[Cond, ...]) -> list[Op]:
        if node.children:
            return [op for child in node.children
                    for op in self.node(child, env, inner, guards)]
        tree, row = self.indices(inner, env)
        attrs = self.s.attrs[node.var]
        return [Walk(tree, row, "leaf", attrs.get("unroll_walk", 0), attrs.get("peel_walk", 0)),
                Reduce(RESULT, (), row, tree, "leaf")]

    def indices(self, path: tuple[str, ...], env: dict[str, Affine]) -> tuple[Affine, Affine]:
        """(tree, row): the absolute indices of the path's finest tree and batch loops.

        The finest loop of a kind is the one whose index no other loop of that kind on
        the path starts from: a tile's inner loop, inside or outside its outer loop."""
        out = []
        for kind in (TREE, BATCH):
            loops = [v for v in path if self.s.vars[v].kind == kind]
            starts = {u for v in loops for u in self.uses(v)}
            finest = [v for v in loops if v not in starts][-1]
            out.append(env.get(finest, Affine.var(finest)))
        return out[0], out[1]

    def uses(self, var: str) -> set[str]:
        """The loop variables var's bounds use."""
        lo, hi, _ = self.range(var)
        return lo.free() | hi.free()

    def interleaved(self, loop: Loop, env: dict[str, Affine], inner: tuple[str, ...],
                    guards: tuple[Cond, ...]) -> list[Op]:
        lo, trip = loop.lower.single, loop.max_trip()
        if lo is None or trip is None:
            raise ScheduleError(f"interleave({loop.var}): the loop runs [{loop.lower}, "
                                f"{loop.upper}), not a compile-time trip count")
        exact = loop.exact_trip() is not None
        attrs = self.s.attrs[loop.var]
        members, reduces = [], []
        for i in range(trip):
            value = lo + i * loop.step
            e, gs = _bind(env, guards, loop.var, value)
            conds = (() if exact else (Cond(value, loop.upper),)) + gs
            if any(not c.free() and not c.evaluate({}) for c in conds):
                continue  # an unrolled guard keeps this member out
            conds = tuple(c for c in conds if c.free())
            tree, row = self.indices(inner, e)
            valid = _strongest(loop.var, conds)
            members.append(WalkMember(tree, row, f"leaf{i}", valid))
            reduces.append(Reduce(RESULT, (), row, tree, f"leaf{i}", valid=valid))
        if not members:
            return []
        if attrs.get("vectorize") and any(b.row - a.row != Affine.of(1)
                                          for a, b in zip(members, members[1:])):
            # A tile of a tile whose inner loop moved out: its rows are a stride apart.
            raise ScheduleError(f"vectorize({loop.var}): its rows are {loop.step} apart; a "
                                "vector walk takes consecutive rows")
        return [InterleavedWalk(tuple(members), attrs.get("unroll_walk", 0),
                                attrs.get("peel_walk", 0),
                                self.lanes if attrs.get("vectorize") else 0), *reduces]

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


def _bind(env: dict[str, Affine], guards: tuple[Cond, ...], var: str,
          value: Affine) -> tuple[dict[str, Affine], tuple[Cond, ...]]:
    """env and guards with var replaced by ``value``: where an index uses var (var's own,
    if it is an offset loop's, or one starting from var), it uses value instead."""
    sub = {var: value}
    return ({var: value, **{k: v.subs(sub) for k, v in env.items()}},
            tuple(g.subs(sub) for g in guards))


def _ready(guards: tuple[Cond, ...], bound: tuple[str, ...]) -> tuple[tuple[Cond, ...],
                                                                       tuple[Cond, ...]]:
    """(the guards using only the ``bound`` loops, the others)."""
    names = set(bound) | {N, S}
    return (tuple(g for g in guards if g.free() <= names),
            tuple(g for g in guards if not g.free() <= names))


def _guarded(guards: tuple[Cond, ...], body: list[Op]) -> list[Op]:
    """body inside the guards another does not imply; a constant one is decided here
    (unrolled loops)."""
    for g in reversed(_essential(guards)):
        if not g.free():
            body = body if g.evaluate({}) else []
        elif body:
            body = [Guard(g, tuple(body))]
    return body


def _strongest(var: str, conds: tuple[Cond, ...]) -> Cond | None:
    """The one condition of ``conds`` that implies all the others (an interleaved member
    has one), None for none."""
    kept = _essential(conds)
    if len(kept) > 1:
        raise ScheduleError(f"interleave({var}): its walks would need {len(kept)} guards "
                            f"({'; '.join(map(str, kept))}); an interleaved walk takes one")
    return kept[0] if kept else None


def _essential(conds: tuple[Cond, ...]) -> list[Cond]:
    """The conditions no other one implies (of equal ones, the first)."""
    kept: list[Cond] = []
    for c in conds:
        if not any(_implies(k, c) for k in kept):
            kept = [k for k in kept if not _implies(c, k)] + [c]
    return kept


def _implies(a: Cond, b: Cond) -> bool:
    """Whether ``a < min(A)`` implies ``b < min(B)``: ``a - b`` is a sum of indices (never
    negative), and each term of B is a constant past a term of A or past b (a tile's end:
    ``t0 + 8 < min(t0 + 16, T)``)."""
    def at_least(t: Affine, u: Affine, by: int) -> bool:
        return t.div == u.div == 1 and (t - u).is_const and (t - u).const >= by

    if a.value.div != 1 or b.value.div != 1:
        return False
    d = a.value - b.value
    if d.const < 0 or any(c < 0 for _, c in d.terms):
        return False
    return all(any(at_least(t, u, 0) for u in a.bound.terms) or at_least(t, b.value, 1)
               for t in b.bound.terms)


def _ops(body: list[Op]):
    """Every op of ``body``, nested ones included."""
    for op in body:
        yield op
        if isinstance(op, (Loop, Guard)):
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
