"""MIR passes: reduction legalisation (seed 002 §6) and the peelWalk check.

Reduction legalisation. A *conflicting loop* of a reduce is an enclosing tree loop whose
iterations run concurrently (``parallel`` or GPU-mapped): two of its iterations add into
the same ``result`` elements. Batch loops never conflict (each iteration owns its rows).
For each distinct tuple of conflicting loops (outermost first) the pass declares a
privatized buffer ``result_p<i>`` of shape ``(trip_0, ..., trip_m-1, N, n_outputs)``; the
reduce adds into slot ``(var - lower) floordiv step`` of each conflicting loop. Right
after conflicting loop ``j`` it inserts ``reduce_dimension_inplace(buf, j, ...)`` (``j >
0``) or ``reduce_dimension(result, buf, 0, ...)`` (``j == 0``) over the rows the loop's
body covered. ``atomicReduce(v)`` takes v out of the conflicting loops and marks the
reduces atomic instead.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..errors import ScheduleError
from ..model.forest import Forest
from .ir import (N, Affine, Bound, BufferDecl, Cond, Function, Guard, InterleavedWalk, Loop,
                 Op, Reduce, ReduceDimension, ReduceDimensionInplace, Walk)


def covered(body: tuple[Op, ...] | list[Op], kind: str,
            end: Affine) -> list[tuple[Bound, Bound]]:
    """Distinct index ranges (rows or trees, per ``kind``) that ops in body use.

    A ``kind`` loop covers its own range (loop variables are absolute indices, and loops
    derived from it cover parts of it); a walk outside such loops covers its one index
    (``min`` with ``end``: an interleave member past a remainder covers nothing). An
    offset loop's variable is no index: it covers what its body covers from its first
    iteration's start to its last's end (indices grow with it).
    """
    found: list[tuple[Bound, Bound]] = []

    def add(r: tuple[Bound, Bound]) -> None:
        if r not in found:
            found.append(r)

    for op in body:
        if isinstance(op, Loop) and op.kind == kind and not op.offset:
            add((op.lower, op.upper))
        elif isinstance(op, (Loop, Guard)):
            for lo, hi in covered(op.body, kind, end):
                if isinstance(op, Loop) and op.offset:
                    last = Affine.of(op.max_trip() - 1)
                    lo, hi = lo.subs({op.var: Affine.of(0)}), hi.subs({op.var: last})
                add((lo, hi))
        for walk in (op.members if isinstance(op, InterleavedWalk)
                     else [op] if isinstance(op, Walk) else []):
            index = walk.row if kind == "batch" else walk.tree
            add((Bound.of(index), Bound.of(index + 1, end)))
    return found


def _conflicting(loop: Loop) -> bool:
    return loop.kind == "tree" and loop.concurrent and not loop.atomic_reduce


def _slot(loop: Loop) -> Affine:
    lo = loop.lower.single
    if lo is None:
        raise ScheduleError(f"cannot privatize the reduction over {loop.var}: its lower "
                            f"bound {loop.lower} is not a single expression")
    index = Affine.var(loop.var) - lo
    return index.floordiv(loop.step) if loop.step > 1 else index


def legalize_reductions(fn: Function) -> Function:
    """Privatize reductions that parallel tree loops would race on (see module doc)."""
    buffers: dict[tuple[str, ...], BufferDecl] = {}

    def buffer_for(stack: tuple[Loop, ...]) -> tuple[str, tuple[Affine, ...]] | None:
        loops = [lp for lp in stack if _conflicting(lp)]
        if not loops:
            return None
        key = tuple(lp.var for lp in loops)
        if key not in buffers:
            trips = tuple(lp.max_trip() for lp in loops)
            buffers[key] = BufferDecl(f"{fn.result}_p{len(buffers)}", (*trips, N, "n_outputs"))
        return buffers[key].name, tuple(_slot(lp) for lp in loops)

    def rewrite(ops: tuple[Op, ...], stack: tuple[Loop, ...]) -> list[Op]:
        out: list[Op] = []
        for op in ops:
            if isinstance(op, Reduce):
                atomic = any(lp.kind == "tree" and lp.concurrent and lp.atomic_reduce
                             for lp in stack)
                target = buffer_for(stack)
                op = replace(op, atomic=atomic) if target is None else replace(
                    op, target=target[0], privatized=target[1], atomic=atomic)
                out.append(op)
            elif isinstance(op, Loop):
                inner = stack + (op,)
                body = tuple(rewrite(op.body, inner))
                out.append(replace(op, body=body))
                if _conflicting(op):
                    out += flushes(op, body, inner)
            elif isinstance(op, Guard):
                out.append(replace(op, body=tuple(rewrite(op.body, stack))))
            else:
                out.append(op)
        return out

    def flushes(loop: Loop, body: tuple[Op, ...], inner: tuple[Loop, ...]) -> list[Op]:
        rows = covered(body, "batch", Affine.var(N))
        used = _targets(body)
        ops: list[Op] = []
        for key, decl in buffers.items():
            if decl.name not in used or loop.var not in key:
                continue
            j = key.index(loop.var)
            outer = tuple(_slot(lp) for lp in inner if _conflicting(lp))[:j]
            for r in rows:
                ops.append(ReduceDimension(fn.result, decl.name, 0, (), r, loop.vector_reduce,
                                           loop.shared_reduce) if j == 0 else
                           ReduceDimensionInplace(decl.name, j, outer, r, loop.vector_reduce,
                                                  loop.shared_reduce))
        return ops

    _check_reduce_attrs(fn.body)
    body = tuple(rewrite(fn.body, ()))
    return replace(fn, buffers=fn.buffers + tuple(buffers.values()), body=body)


def _targets(ops: tuple[Op, ...]) -> set[str]:
    found: set[str] = set()
    for op in ops:
        if isinstance(op, Reduce):
            found.add(op.target)
        elif isinstance(op, (Loop, Guard)):
            found |= _targets(op.body)
    return found


def _check_reduce_attrs(ops: tuple[Op, ...]) -> None:
    """Reduction directives name loops that reductions conflict on."""
    for op in ops:
        if isinstance(op, Loop):
            asked = [name for name, on in (("atomicReduce", op.atomic_reduce),
                                           ("vectorReduce", op.vector_reduce),
                                           ("sharedReduce", op.shared_reduce)) if on]
            if asked and not (op.kind == "tree" and op.concurrent):
                raise ScheduleError(f"{asked[0]}({op.var}): {op.var} is not a parallel or "
                                    "GPU-mapped tree loop, so no reduction conflicts on it")
        if isinstance(op, (Loop, Guard)):
            _check_reduce_attrs(op.body)


def check_peel(fn: Function, forest: Forest, shortest: np.ndarray | None = None,
               layout: str = "") -> None:
    """peelWalk(v, n): every tree a peeled walk can visit has all leaves at depth >= n, or,
    given ``shortest`` (a layout's steps from each root to its nearest leaf; tiles make
    them fewer than node depths), at least n steps away."""
    shallowest = forest.shallowest_leaves if shortest is None else shortest

    def visit(ops: tuple[Op, ...], loops: tuple[Loop, ...], guards: tuple[Cond, ...]) -> None:
        for op in ops:
            if isinstance(op, Loop):
                visit(op.body, loops + ((op,) if op.kind == "tree" else ()), guards)
            elif isinstance(op, Guard):
                visit(op.body, loops, guards + (op.cond,))
            elif isinstance(op, (Walk, InterleavedWalk)) and op.peel_depth:
                walks = ([(m.tree, m.valid) for m in op.members]
                         if isinstance(op, InterleavedWalk) else [(op.tree, None)])
                for t in sorted(_tree_values(walks, loops, guards, forest.n_trees)):
                    if shallowest[t] < op.peel_depth:
                        raise ScheduleError(
                            f"peelWalk(..., {op.peel_depth}): tree {t} has a leaf "
                            f"{shallowest[t]} step(s) from its root{layout}; peel at most "
                            "that many steps")

    visit(fn.body, (), ())


def _tree_values(walks: list[tuple[Affine, Cond | None]], loops: tuple[Loop, ...],
                 guards: tuple[Cond, ...], n_trees: int) -> set[int]:
    """Every tree index the walks (tree index, condition) take over the enclosing tree
    loops where the guards hold (a condition on rows may hold: it is not evaluated)."""
    def may_hold(cond: Cond | None, env: dict[str, int]) -> bool:
        return cond is None or not cond.free() <= env.keys() or cond.evaluate(env)

    envs: list[dict[str, int]] = [{}]
    for lp in loops:
        envs = [{**env, lp.var: v} for env in envs
                for v in range(lp.lower.evaluate(env), lp.upper.evaluate(env), lp.step)]
    return {t for env in envs if all(may_hold(g, env) for g in guards)
            for e, cond in walks if may_hold(cond, env) and 0 <= (t := e.evaluate(env)) < n_trees}
