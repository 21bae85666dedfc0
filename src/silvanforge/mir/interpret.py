"""Execute MIR with plain Python and numpy: the semantics of each op, checked.

Walks take their leaves from :mod:`silvanforge.reference` (computed once for all rows and
trees), so the interpreter tests the loop structure, not the tree walk. Concurrent loops
(parallel or GPU-mapped) run their iterations in order but every non-atomic write is
recorded per iteration: two iterations writing one element is a race, reported as an
``AssertionError``; so is a walk outside an active ``cache_rows``/``cache_trees`` range or a
peeled walk reaching a leaf shallower than its peel depth.

>>> interpret(lower(forest, schedule), forest, X)               # doctest: +SKIP
array([[...]])
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import reference
from ..model.forest import Forest
from ..model.inputs import as_matrix
from .ir import (N, S, CacheRows, CacheTrees, Cond, Function, Guard, InterleavedWalk, Loop, Op,
                 Reduce, ReduceDimension, ReduceDimensionInplace, Walk, share)


def interpret(fn: Function, forest: Forest, X: Any, threads: int = 1) -> np.ndarray:
    """Run ``fn`` on rows ``X``; returns the (rows, n_outputs) per-output tree sums.
    ``threads`` sizes a thread's share of the rows (the symbol ``S``); iterations still
    run one after another."""
    rows = as_matrix(X, forest)
    return _Machine(fn, forest, rows, threads).run()


class _Machine:
    def __init__(self, fn: Function, forest: Forest, rows: np.ndarray, threads: int) -> None:
        self.fn, self.forest = fn, forest
        leaves = reference.global_leaves(forest, rows)  # global node ids, (rows, trees)
        self.values = reference.leaf_values(forest, rows, leaves)
        self.depth = forest.node_depth[leaves]
        self.n = len(rows)
        sizes = {N: self.n, "n_outputs": forest.n_outputs}
        self.buffers = {b.name: np.zeros([sizes.get(d, d) for d in b.dims])
                        for b in fn.buffers}
        self.frames: list[dict] = []   # concurrent loops: current iteration, writes seen
        self.caches: list[tuple[str, int, int]] = []
        self.share = share(self.n, threads)

    def run(self) -> np.ndarray:
        self.block(self.fn.body, {N: self.n, S: self.share})
        for name, buf in self.buffers.items():
            assert name == self.fn.result or not buf.any(), f"{name} was not reduced"
        return self.buffers[self.fn.result]

    def block(self, ops: tuple[Op, ...], env: dict[str, int]) -> None:
        saved = len(self.caches)
        results: dict[str, np.ndarray] = {}
        for op in ops:
            self.op(op, env, results)
        del self.caches[saved:]

    def op(self, op: Op, env: dict[str, int], results: dict[str, np.ndarray]) -> None:
        if isinstance(op, Loop):
            frame = {"writes": {}} if op.concurrent else None
            if frame is not None:
                self.frames.append(frame)
            step = op.step if isinstance(op.step, int) else op.step.evaluate(env)
            for i in range(op.lower.evaluate(env), op.upper.evaluate(env), step):
                if frame is not None:
                    frame["iter"] = i
                self.block(op.body, {**env, op.var: i})
            if frame is not None:
                self.frames.pop()
        elif isinstance(op, Guard):
            if _holds(op.cond, env):
                self.block(op.body, env)
        elif isinstance(op, Walk):
            results[op.result] = self.walk(op.tree.evaluate(env), op.row.evaluate(env),
                                           op.peel_depth)
        elif isinstance(op, InterleavedWalk):
            for m in op.members:
                if _holds(m.valid, env):
                    results[m.result] = self.walk(m.tree.evaluate(env), m.row.evaluate(env),
                                                  op.peel_depth)
        elif isinstance(op, Reduce):
            if _holds(op.valid, env):
                self.reduce(op, env, results[op.value])
        elif isinstance(op, (ReduceDimension, ReduceDimensionInplace)):
            self.reduce_dimension(op, env)
        elif isinstance(op, (CacheRows, CacheTrees)):
            kind = "rows" if isinstance(op, CacheRows) else "trees"
            self.caches.append((kind, op.lower.evaluate(env), op.upper.evaluate(env)))
        else:
            raise TypeError(f"not a MIR op: {op!r}")

    def walk(self, tree: int, row: int, peel: int) -> np.ndarray:
        assert 0 <= tree < self.forest.n_trees and 0 <= row < self.n, (tree, row)
        for kind, lo, hi in self.caches:
            index = row if kind == "rows" else tree
            assert lo <= index < hi, f"walk of {kind[:-1]} {index} outside cache [{lo}, {hi})"
        assert self.depth[row, tree] >= peel, f"tree {tree}: leaf shallower than peel {peel}"
        return self.values[row, tree]

    def reduce(self, op: Reduce, env: dict[str, int], value: np.ndarray) -> None:
        row, tree = op.row.evaluate(env), op.tree.evaluate(env)
        first = int(self.forest.tree_output[tree])
        index = tuple(p.evaluate(env) for p in op.privatized) + (row,)
        for k in range(len(value)):
            self.write(op.target, index + (first + k,), op.atomic)
        self.buffers[op.target][index + (slice(first, first + len(value)),)] += value

    def reduce_dimension(self, op: ReduceDimension | ReduceDimensionInplace,
                         env: dict[str, int]) -> None:
        name = op.source if isinstance(op, ReduceDimension) else op.buffer
        buf = self.buffers[name]
        fixed = tuple(i.evaluate(env) for i in op.indices)
        collapsed = (0,) * (buf.ndim - 2 - op.dim - 1)
        lo, hi = (b.evaluate(env) for b in op.rows)
        rows = slice(lo, max(lo, hi))
        first = 0 if isinstance(op, ReduceDimension) else 1
        parts = buf[fixed + (slice(first, None),) + collapsed + (rows,)]
        total = parts.sum(axis=0)
        for slot in range(first, buf.shape[op.dim]):
            for r in range(lo, hi):
                self.write(name, fixed + (slot,) + collapsed + (r,), False)
        buf[fixed + (slice(first, None),) + collapsed + (rows,)] = 0.0
        if isinstance(op, ReduceDimension):
            for r in range(lo, hi):
                self.write(op.target, (r,), False)
            self.buffers[op.target][rows] += total
        else:
            buf[fixed + (0,) + collapsed + (rows,)] += total

    def write(self, buffer: str, index: tuple, atomic: bool) -> None:
        if atomic:
            return
        key = (buffer, index)
        for frame in self.frames:
            seen = frame["writes"].setdefault(key, frame["iter"])
            assert seen == frame["iter"], f"race on {buffer}{list(index)}"


def _holds(cond: Cond | None, env: dict[str, int]) -> bool:
    return cond is None or cond.evaluate(env)
