"""MIR → LIR for GPUs: loops mapped to grid or block dimensions become thread indices.

The result is a :class:`Program`: kernels run one after another (*launches*), each with
its grid and block sizes as data, all with the signature of
:func:`silvanforge.lir.lower.lower` less ``n_threads`` and less the privatized buffers
that live in shared memory::

    predict_<i>(rows, n_rows, result, <global privatized buffers...>, finish, tree_output,
                <representation buffers...>)

The last launch finishes the sums as ``finish`` says (:mod:`.finish`, the CPU kernel's
epilogue): one thread a row, :data:`FINISH_BLOCK` rows a block. The result then is what
the caller returns, and it never leaves the device unless the caller wants it on the
host.

How a legalized MIR function becomes launches:

- **Launches.** Iterations of a grid-mapped loop run in different blocks, which cannot
  wait for each other, so whatever must follow all of them (the ``reduce_dimension`` of
  a tree loop mapped to ``grid.y``) is a new launch: the body is split around grid loops
  (loop fission, legal because a grid loop's iterations are independent).
- **Mapped loops.** ``for v in [lo, hi) step s`` mapped to ``block.x`` (``grid.x``)
  becomes ``v = lo + threadIdx.x * s`` (``blockIdx.x``); the block size is the loop's
  compile-time trip count, the grid size the trip count for the batch size
  (:meth:`Launch.grid_size`). Threads with ``v >= hi`` do nothing: the code they would
  run is guarded, never skipped with an early return, so every thread of a block reaches
  the same barriers.
- **Once per logical thread.** Code outside a block loop (a ``reduce_dimension`` after
  the tree loop mapped to ``block.y``) runs on the threads whose index in that dimension
  is 0, after a barrier.
- **Caching** (seed 002 §8.2). ``cache_rows`` where every thread of the block runs it
  (no block loop around it) becomes a cooperative copy of the rows into shared memory
  that the walks inside then read; elsewhere it is dropped (a cache changes no result).
  ``cache_trees`` under a tree loop mapped to the grid copies the trees of the block's
  iteration of that loop, as the representation lays them out
  (:meth:`_GPULowering.tree_part_cache`); elsewhere it copies the whole model once per
  block, at the top of the launch. Either only when it fits in :data:`SHARED_BUDGET`
  with everything else.
- **sharedReduce** (seed 002 §6.1.2). A privatized buffer whose reduction is marked
  shared lives in shared memory with only the rows one block touches: its row index is
  rebased on the block's first row. Its conflicting loops must be block dimensions.
- **Reductions by several threads** (seed 002 §6.1.2). A ``reduce_dimension`` over
  slots that are the threads of one block dimension is a tree reduction by those
  threads when the block has fewer reductions than threads
  (:meth:`_GPULowering.cooperative_reduce`); else one thread a reduction.
- **atomicReduce** stays an :class:`~silvanforge.lir.ir.AtomicAdd`; the renderer says how.

>>> import silvanforge
>>> from silvanforge.mir import lower as mir_lower
>>> from silvanforge.representations import REGISTRY
>>> from silvanforge.schedule import named
>>> forest = silvanforge.model.builder.build_forest(
...     [silvanforge.model.builder.Tree(left=[1, -1, -1], right=[2, -1, -1],
...      feature=[0, 0, 0], threshold=[0.5, 0, 0], leaf_value=[0.0, 1.0, 2.0])],
...     n_features=1, n_outputs=1)
>>> program = lower(mir_lower(forest, named("tahoe_direct", 1)), forest,
...                 REGISTRY["sparse"](forest))
>>> [launch.block for launch in program.launches], program.launches[0].grid_size(1000)
([(64, 1, 1), (128, 1, 1)], (16, 1, 1))
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import BackendError, ScheduleError
from ..mir import ir as mir
from ..mir.legalize import covered
from ..model.forest import Forest
from .representation import Representation
from . import ir
from .finish import finish_row
from .lower import _INPUT_DTYPES, _Lowering, _name, check_walks, uses_share

# Shared memory one block may use: CUDA's static limit, and at least what OpenCL devices
# offer (PoCL on a CPU gives far more). Caches that would exceed it are not built.
SHARED_BUDGET = 48 * 1024
# Threads in one block: CUDA's limit.
MAX_BLOCK_THREADS = 1024
# Rows (threads) in one block of the finishing launch.
FINISH_BLOCK = 128
_DIMS = {"x": 0, "y": 1, "z": 2}


@dataclass(frozen=True)
class Extent:
    """One grid dimension's size: the trips of ``for v in [lower, upper) step step``,
    bounds over the batch size N only.

    >>> Extent(mir.Bound.of(0), mir.Bound.of(mir.Affine.var(mir.N)), 64).size(1000)
    16
    """

    lower: mir.Bound
    upper: mir.Bound
    step: int

    def size(self, n_rows: int) -> int:
        env = {mir.N: n_rows}
        return max(0, -(-(self.upper.evaluate(env) - self.lower.evaluate(env)) // self.step))


@dataclass(frozen=True)
class Launch:
    """One kernel and its launch shape: per grid dimension the extents of the loops mapped
    to it (the grid is their maximum), and the block size."""

    kernel: ir.Kernel
    grid: tuple[tuple[Extent, ...], tuple[Extent, ...], tuple[Extent, ...]]
    block: tuple[int, int, int]
    shared_bytes: int

    def grid_size(self, n_rows: int) -> tuple[int, int, int]:
        """Blocks per dimension for a call on ``n_rows`` rows (a 0 means: nothing to run)."""
        return tuple(max([e.size(n_rows) for e in dim], default=1)  # type: ignore[return-value]
                     for dim in self.grid)


@dataclass(frozen=True)
class Program:
    """The launches of one schedule, in order, the global scratch buffers they share,
    and the tables their parameters end with (built with the program: where each
    chunk of cached trees starts, :meth:`_GPULowering.tree_part_cache`)."""

    launches: tuple[Launch, ...]
    scratch: tuple[mir.BufferDecl, ...]
    tables: tuple[np.ndarray, ...] = ()

    def scratch_shapes(self, n_rows: int, n_outputs: int) -> list[tuple[int, ...]]:
        """Shapes of the global privatized buffers (kernel parameter order) for a call."""
        def size(d: Any) -> int:
            return n_rows if d == mir.N else n_outputs if d == "n_outputs" else int(d)
        return [tuple(size(d) for d in decl.dims) for decl in self.scratch]

    @property
    def uses_atomics(self) -> bool:
        return any(_find(launch.kernel.body, ir.AtomicAdd) for launch in self.launches)


# ---- the MIR structure ----------------------------------------------------------------

def _is_grid(op: Any) -> bool:
    return isinstance(op, mir.Loop) and (op.gpu_dim or "").startswith("grid")


def _has(op: Any, test) -> bool:
    return test(op) or (isinstance(op, mir.Loop) and any(_has(o, test) for o in op.body))


def _mapped(op: Any) -> bool:
    return isinstance(op, mir.Loop) and op.gpu_dim is not None


def _phases(ops: tuple) -> list[tuple]:
    """Split a body into bodies that run one after another as separate launches."""
    out: list[tuple] = []
    plain: list = []
    for op in ops:
        if not _has(op, _is_grid):
            plain.append(op)
            continue
        if plain:
            out.append(tuple(plain))
            plain = []
        if _is_grid(op):
            out += [(dataclasses.replace(op, body=p),) for p in _phases(op.body)]
        elif len(_phases(op.body)) == 1:
            out.append((op,))
        else:
            raise BackendError(f"loop {op.var} runs serially around a grid-mapped loop "
                               "whose reduction needs a separate launch; map it to the "
                               "grid too or use atomicReduce")
    if plain:
        out.append(tuple(plain))
    return out


def _loops(ops: tuple) -> list[mir.Loop]:
    found: list[mir.Loop] = []
    for op in ops:
        if isinstance(op, mir.Loop):
            found += [op, *_loops(op.body)]
    return found


def _launch_shape(ops: tuple) -> tuple[tuple, tuple[int, int, int]]:
    grid: list[list[Extent]] = [[], [], []]
    block = [1, 1, 1]
    for loop in filter(_mapped, _loops(ops)):
        kind, dim = loop.gpu_dim.split(".")
        trip = loop.max_trip()
        if kind == "block":
            if trip is None:
                raise BackendError(f"gpuDimension({loop.var}, {loop.gpu_dim}): a block "
                                   "dimension needs a compile-time trip count; tile the "
                                   "loop and map the inner loop to the block")
            block[_DIMS[dim]] = max(block[_DIMS[dim]], trip)
        elif trip is not None:
            grid[_DIMS[dim]].append(Extent(mir.Bound.of(0), mir.Bound.of(trip), 1))
        elif all(t.free() <= {mir.N} for t in loop.lower.terms + loop.upper.terms):
            grid[_DIMS[dim]].append(Extent(loop.lower, loop.upper, loop.step))
        else:
            raise BackendError(f"gpuDimension({loop.var}, {loop.gpu_dim}): its range "
                               f"[{loop.lower}, {loop.upper}) depends on other loops")
    if math.prod(block) > MAX_BLOCK_THREADS:
        raise BackendError(f"a block of {' x '.join(map(str, block))} threads exceeds "
                           f"{MAX_BLOCK_THREADS}; map fewer iterations to the block")
    return tuple(tuple(g) for g in grid), tuple(block)  # type: ignore[return-value]


def _rows_per_iteration(loop: mir.Loop) -> int | None:
    """Most rows one iteration of ``loop`` covers (counted from its variable), if bounded."""
    counts = []
    for lo, hi in covered(loop.body, "batch", mir.Affine.var(mir.N)):
        if lo.single is None or (lo.single - mir.Affine.var(loop.var)).terms:
            return None
        spans = [(t - lo.single) for t in hi.terms if t.div == 1]
        consts = [s.const for s in spans if s.is_const]
        if not consts:
            return None
        counts.append(min(consts) + (lo.single - mir.Affine.var(loop.var)).const)
    return max(counts, default=0)


def _shared_reductions(fn: mir.Function) -> dict[str, tuple[int, str]]:
    """Privatized buffers reduced in shared memory: name → (rows per block, the grid
    batch loop whose variable is the block's first row)."""
    loops = {lp.var: lp for lp in _loops(fn.body)}
    found: dict[str, tuple[int, str]] = {}

    def visit(ops: tuple, batch_grid: mir.Loop | None) -> None:
        for op in ops:
            if isinstance(op, mir.Loop):
                if op.shared_reduce and _is_grid(op):
                    raise BackendError(f"sharedReduce({op.var}): {op.var} is mapped to "
                                       f"{op.gpu_dim}; shared memory belongs to one block, "
                                       "so map it to a block dimension or use atomicReduce")
                inner = op if _is_grid(op) and op.kind == "batch" else batch_grid
                visit(op.body, inner)
            elif isinstance(op, (mir.ReduceDimension, mir.ReduceDimensionInplace)) \
                    and op.shared:
                name = op.source if isinstance(op, mir.ReduceDimension) else op.buffer
                rows = None if batch_grid is None else _rows_per_iteration(batch_grid)
                if rows is None:
                    raise BackendError(f"sharedReduce into {name}: the rows one block "
                                       "handles are not bounded; map a tiled batch loop "
                                       "to the grid")
                found[name] = (rows, batch_grid.var)  # type: ignore[union-attr]

    visit(fn.body, None)
    for name in found:
        for v in _privatized_vars(fn.body, name):
            if _is_grid(loops[v]):
                raise BackendError(f"sharedReduce into {name}: it is also privatized over "
                                   f"{v}, mapped to {loops[v].gpu_dim}")
    return found


def _slot_dims(fn: mir.Function) -> dict[str, str]:
    """Privatized buffers whose slots are the threads of one block dimension: buffer
    name → that dimension ("x", "y" or "z")."""
    loops = {lp.var: lp for lp in _loops(fn.body)}
    found = {}
    for decl in fn.buffers:
        [*vs] = _privatized_vars(fn.body, decl.name)
        gpu_dim = loops[vs[0]].gpu_dim or "" if len(vs) == 1 else ""
        if gpu_dim.startswith("block."):
            found[decl.name] = gpu_dim.split(".")[1]
    return found


def _privatized_vars(ops: tuple, name: str) -> set[str]:
    found: set[str] = set()
    for op in ops:
        if isinstance(op, mir.Reduce) and op.target == name:
            found |= {v for p in op.privatized for v in p.free()}
        elif isinstance(op, mir.Loop):
            found |= _privatized_vars(op.body, name)
    return found


# ---- LIR helpers ------------------------------------------------------------------------

def _find(stmts: list, kind: type) -> bool:
    """Whether a statement or expression of ``kind`` occurs in ``stmts``."""
    def walk(node: Any) -> bool:
        if isinstance(node, kind):
            return True
        if isinstance(node, list):
            return any(map(walk, node))
        if dataclasses.is_dataclass(node) and not isinstance(node, (ir.Buffer, ir.DType)):
            return any(walk(getattr(node, f.name)) for f in dataclasses.fields(node))
        return False
    return walk(stmts)


def substitute_buffers(node: Any, mapping: dict[str, ir.Buffer]) -> Any:
    """``node`` (statements, an expression) with buffers renamed per ``mapping``."""
    if isinstance(node, list):
        return [substitute_buffers(n, mapping) for n in node]
    if isinstance(node, ir.Buffer):
        return mapping.get(node.name, node)
    if dataclasses.is_dataclass(node) and not isinstance(node, ir.DType):
        return dataclasses.replace(node, **{
            f.name: substitute_buffers(getattr(node, f.name), mapping)
            for f in dataclasses.fields(node) if f.init})
    return node


def rebase_loads(node: Any, moved: dict[str, tuple[ir.Buffer, ir.Var]]) -> Any:
    """``node`` with each load of a buffer named in ``moved`` reading its copy instead,
    at the index less the copy's first element."""
    if isinstance(node, list):
        return [rebase_loads(n, moved) for n in node]
    if isinstance(node, ir.Load) and node.buffer.name in moved:
        copy, first = moved[node.buffer.name]
        return ir.Load(copy, ir.BinOp("sub", rebase_loads(node.index, moved), first))
    if dataclasses.is_dataclass(node) and not isinstance(node, (ir.DType, ir.Buffer)):
        return dataclasses.replace(node, **{
            f.name: rebase_loads(getattr(node, f.name), moved)
            for f in dataclasses.fields(node) if f.init})
    return node


def _most(lower: mir.Bound, upper: mir.Bound) -> int | None:
    """The most elements of ``[lower, upper)`` known at compile time (an upper term a
    constant past the single lower one), else None."""
    lo = lower.single
    spans = [(t - lo).const for t in upper.terms
             if lo is not None and t.div == lo.div == 1 and (t - lo).is_const]
    return min(spans) if spans else None


def _all(conds: list[ir.Expr]) -> ir.Expr | None:
    out = None
    for c in conds:
        out = c if out is None else ir.BinOp("and", out, c)
    return out


def _add(a: ir.Expr, b: ir.Expr) -> ir.Expr:
    return ir.BinOp("add", a, b)


def _mul(a: ir.Expr, b: ir.Expr) -> ir.Expr:
    return ir.BinOp("mul", a, b)


# ---- lowering ---------------------------------------------------------------------------

@dataclass
class _GPULowering(_Lowering):
    """One launch's lowering (see the module doc for the rules it follows)."""

    block: tuple[int, int, int] = (1, 1, 1)
    shared_rows: dict[str, tuple[int, str]] = field(default_factory=dict)
    guards: list[ir.Expr] = field(default_factory=list)
    bound_dims: set[str] = field(default_factory=set)
    divergent: set[str] = field(default_factory=set)
    row_cache: list[tuple[ir.Var, ir.Buffer]] = field(default_factory=list)
    decls: list[ir.Stmt] = field(default_factory=list)
    shared_bytes: int = 0
    cache_trees_asked: bool = False
    in_plain: int = 0
    slot_dims: dict[str, str] = field(default_factory=dict)
    tables: list[tuple[ir.Buffer, Any]] = field(default_factory=list)
    part_cached: bool = False

    @property
    def threads(self) -> int:
        return math.prod(self.block)

    def linear_thread(self) -> ir.Expr:
        """The thread's index in its block, 0 .. threads-1."""
        x, y, z = (ir.ThreadIndex(d, "thread") for d in "xyz")
        return _add(x, _mul(ir.i64(self.block[0]), _add(y, _mul(ir.i64(self.block[1]), z))))

    def shared_array(self, stem: str, dtype: ir.DType, size: int) -> ir.Buffer | None:
        """A new shared array, or None when it would exceed the budget."""
        nbytes = max(size, 1) * max(dtype.bits // 8, 1)
        if self.shared_bytes + nbytes > SHARED_BUDGET:
            return None
        self.shared_bytes += nbytes
        buf = ir.Buffer(self.fresh(stem), dtype, max(size, 1), shared=True)
        self.decls.append(ir.LocalArray(buf))
        return buf

    def cooperative(self, n: ir.Expr, body) -> ir.Stmt:
        """``for e in [0, n)`` spread over the block's threads; ``body(e)`` statements."""
        e = ir.Var(self.fresh("e"), ir.I64)
        return ir.For(e, self.linear_thread(), n, ir.i64(self.threads), body(e))

    # ---- bodies: plain code is guarded, mapped loops and barriers are not --------------
    def op(self, op) -> list[ir.Stmt]:
        if isinstance(op, mir.Loop) and op.parallel:
            raise BackendError(f"parallel({op.var}) is a CPU directive; map loops to the "
                               "GPU with gpuDimension")
        return super().op(op)

    def body(self, ops) -> list[ir.Stmt]:
        if self.in_plain:
            return self.plain_body(ops)
        items: list[list[ir.Stmt]] = []
        plain: list[ir.Stmt] = []
        depth = len(self.row_cache)

        def flush() -> None:
            if plain:
                items.append(self.guarded(list(plain)))
                plain.clear()

        for op in ops:
            if isinstance(op, mir.Loop) and _has(op, _mapped):
                flush()
                items.append(self.structural(op))
            elif isinstance(op, mir.CacheRows):
                if not self.bound_dims:
                    flush()
                    items.append(self.cache_rows(op))
            elif isinstance(op, mir.CacheTrees):
                self.cache_trees_asked = True
            elif isinstance(op, (mir.ReduceDimension, mir.ReduceDimensionInplace)) and \
                    (together := self.cooperative_reduce(op)):
                flush()
                items.append(together)
            else:
                plain += self.plain_body((op,))
        flush()
        del self.row_cache[depth:]
        out: list[ir.Stmt] = []
        for i, item in enumerate(items):
            if i and self.threads > 1:
                out.append(ir.Barrier())
            out += item
        return out

    def plain_body(self, ops) -> list[ir.Stmt]:
        """Code one thread runs alone: the CPU lowering, less caches of rows."""
        self.in_plain += 1
        try:
            out: list[ir.Stmt] = []
            for op in ops:
                if isinstance(op, mir.CacheTrees):
                    self.cache_trees_asked = True
                elif not isinstance(op, mir.CacheRows):
                    out += self.op(op)
            return out
        finally:
            self.in_plain -= 1

    def guarded(self, stmts: list[ir.Stmt], by: str | None = None,
                when: ir.Expr | None = None) -> list[ir.Stmt]:
        """``stmts`` for one thread of the free block dimensions: index 0 in each, but
        that the threads of dimension ``by`` run them ``when`` true."""
        once = [ir.Cmp("eq", ir.ThreadIndex(d, "thread"), ir.i64(0))
                for d in "xyz" if self.block[_DIMS[d]] > 1 and d not in self.bound_dims
                and d != by]
        cond = _all(self.guards + once + ([when] if when is not None else []))
        return stmts if cond is None else [ir.If(cond, stmts)]

    def cooperative_reduce(self, op: Any) -> list[ir.Stmt]:
        """A ``reduce_dimension`` whose slots are the threads of one block dimension, as
        a tree reduction by those threads when the block has fewer independent
        reductions (its rows' outputs) than threads; else [] (one thread a reduction).

        Each step adds slot ``y + h`` into slot ``y`` for the threads ``y < n - h`` (``n``
        slots left, ``h = ceil(n / 2)``) and zeroes the slot read; a barrier separates
        the steps. Sums are added pairwise, not left to right (as every tree-parallel
        schedule, they may differ from the reference in the last bits)."""
        inplace = isinstance(op, mir.ReduceDimensionInplace)
        source = op.buffer if inplace else op.source
        dim = self.slot_dims.get(source)
        rows = _most(*op.rows)
        if dim is None or rows is None or self.threads == 1:
            return []
        r = self.reduction(source, None if inplace else op.target, op.dim, op.indices,
                           op.rows)
        slots = self.block[_DIMS[dim]]
        reductions = self.threads // slots * rows * self.forest.n_outputs
        if r.slots != slots or reductions >= self.threads:
            return []
        y = ir.ThreadIndex(dim, "thread")
        code: list[ir.Stmt] = []

        def each(when: ir.Expr, body) -> list[ir.Stmt]:
            e = ir.Var(self.fresh("element"), ir.I64)
            return self.guarded([ir.For(e, r.lo, r.hi, ir.i64(1), body(e))], dim, when)

        n = slots
        while n > 1:
            h = (n + 1) // 2
            code += each(ir.Cmp("lt", y, ir.i64(n - h)), lambda e, h=h: [
                ir.Store(r.src, r.at(y, e), _add(ir.Load(r.src, r.at(y, e)),
                                                 ir.Load(r.src, r.at(_add(y, ir.i64(h)), e)))),
                ir.Store(r.src, r.at(_add(y, ir.i64(h)), e), ir.Const(0.0, ir.F64))])
            code.append(ir.Barrier())
            n = h
        if not inplace:
            def total(e: ir.Expr) -> list[ir.Stmt]:
                buf, index = r.dest(e)
                first = r.at(ir.i64(0), e)
                return [ir.Store(buf, index, _add(ir.Load(buf, index), ir.Load(r.src, first))),
                        ir.Store(r.src, first, ir.Const(0.0, ir.F64))]
            code += each(ir.Cmp("eq", y, ir.i64(0)), total)
        return code

    def structural(self, op: mir.Loop) -> list[ir.Stmt]:
        var = ir.Var(_name(op.var), ir.I64)
        if op.gpu_dim is None:
            used = {_name(v) for t in op.lower.terms + op.upper.terms for v in t.free()}
            if used & self.divergent:
                raise BackendError(f"loop {op.var} has bounds that differ between the "
                                   "threads of a block and GPU-mapped loops inside; "
                                   "reorder it outside the block dimensions")
            body = self.body(op.body)
            if self.threads > 1 and _find(body, ir.Barrier):
                body.append(ir.Barrier())  # the next iteration overwrites what this read
            return [ir.For(var, self.bound(op.lower), self.bound(op.upper), ir.i64(op.step),
                           body)]
        kind, dim = op.gpu_dim.split(".")
        index = ir.ThreadIndex(dim, "thread" if kind == "block" else "block")
        start = _add(self.bound(op.lower), _mul(index, ir.i64(op.step)))
        code: list[ir.Stmt] = [ir.Declare(var, start)]
        cache = self.tree_part_cache(op, var) if kind == "grid" else None
        self.guards.append(ir.Cmp("lt", var, self.bound(op.upper)))
        if kind == "block":
            self.bound_dims.add(dim)
            self.divergent.add(var.name)
        try:
            body = self.body(op.body)
        finally:
            self.guards.pop()
            self.bound_dims.discard(dim)
            self.divergent.discard(var.name)
        if cache is not None:
            copies, moved = cache
            body = copies + [ir.Barrier()] + rebase_loads(body, moved)
        return code + body

    # ---- caching --------------------------------------------------------------------------
    def cache_rows(self, op: mir.CacheRows) -> list[ir.Stmt]:
        rows = _most(op.lower, op.upper)
        n_features = self.forest.n_features
        buf = None if rows is None else self.shared_array("cached_rows", self.rows.dtype,
                                                          rows * n_features)
        if buf is None:
            return []  # no compile-time bound or too big: read the rows where they are
        start = ir.Var(self.fresh("cache_start"), ir.I64)
        count = ir.Var(self.fresh("cache_count"), ir.I64)
        width = ir.i64(n_features)
        code = [ir.Declare(start, self.bound(op.lower)),
                ir.Declare(count, _mul(ir.BinOp("sub", self.bound(op.upper), start), width)),
                self.cooperative(count, lambda e: [ir.Store(buf, e, ir.Load(
                    self.rows, _add(_mul(start, width), e)))]),
                ir.Barrier()]
        self.row_cache.append((start, buf))
        return code

    def feature_loader(self, row: ir.Expr):
        if not self.row_cache:
            return super().feature_loader(row)
        start, buf = self.row_cache[-1]
        width = ir.i64(self.forest.n_features)

        def load(feature: ir.Expr) -> ir.Expr:
            if feature.dtype != ir.I64:
                feature = ir.Cast(feature, ir.I64)
            return ir.Load(buf, _add(_mul(ir.BinOp("sub", row, start), width), feature))
        return load

    def tree_part_cache(self, op: mir.Loop, var: ir.Var
                        ) -> tuple[list[ir.Stmt], dict[str, tuple[ir.Buffer, ir.Var]]] | None:
        """For a grid-mapped tree loop with ``cache`` inside: copy code for the trees of
        this block's iteration, ``[var, min(var + step, upper))``, from each buffer the
        representation stores tree after tree (:meth:`~silvanforge.lir.representation.
        Representation.tree_parts`), and the copies with their first element (buffer name
        → (copy, start)); None when the layout keeps no trees apart, the bounds are not
        constants, or the largest chunk does not fit in shared memory.

        Where each chunk starts in each buffer, and its length, come from a table built
        here (a kernel parameter after the model's: :attr:`Program.tables`)."""
        parts = self.rep.tree_parts()
        lo, hi = op.lower.single, op.upper.single
        if op.kind != "tree" or not _has(op, lambda o: isinstance(o, mir.CacheTrees)) or \
                parts is None or lo is None or hi is None or not (lo.is_const and hi.is_const):
            return None
        chunks = [(a, min(a + op.step, hi.const)) for a in range(lo.const, hi.const, op.step)]
        arrays, params = self.rep.buffers, {p.name: p for p in self.rep.params}
        spans = {name: [int(p[b] - p[a]) for a, b in chunks] for name, p in parts.items()}
        nbytes = sum(max(max(spans[n]), 1) * arrays[n].itemsize for n in parts)
        if self.shared_bytes + nbytes > SHARED_BUDGET:
            return None
        table = ir.Buffer(f"tree_parts_{len(self.tables)}", ir.I64, readonly=True)
        self.tables.append((table, [[int(parts[n][a]), spans[n][i]] for n in parts
                                    for i, (a, _) in enumerate(chunks)]))
        # The grid dimension is sized for this loop (a schedule maps one loop to it), so
        # no block runs past its end; clamped anyway: the table is never read past its
        # end, whatever the launch shape.
        chunk = ir.BinOp("min", ir.BinOp("div", ir.BinOp("sub", var, ir.i64(lo.const)),
                                         ir.i64(op.step)), ir.i64(len(chunks) - 1))
        copies: list[ir.Stmt] = []
        moved: dict[str, tuple[ir.Buffer, ir.Var]] = {}
        for j, name in enumerate(parts):
            param = params[name]
            copy = self.shared_array(f"cached_{name}", param.dtype, max(spans[name]))
            assert copy is not None  # the total was checked above
            first, count = (ir.Var(self.fresh(stem), ir.I64) for stem in ("first", "count"))
            entry = _mul(_add(ir.i64(j * len(chunks)), chunk), ir.i64(2))
            copies += [ir.Declare(first, ir.Load(table, entry)),
                       ir.Declare(count, ir.Load(table, _add(entry, ir.i64(1)))),
                       self.cooperative(count, lambda e, p=param, c=copy, f=first: [
                           ir.Store(c, e, ir.Load(p, _add(f, e)))])]
            moved[name] = (copy, first)
        self.part_cached = True
        return copies, moved

    def model_cache(self, body: list[ir.Stmt]) -> tuple[list[ir.Stmt], list[ir.Stmt]]:
        """(copy code, body reading the copies) when the whole model fits, else ([], body)."""
        arrays = self.rep.buffers
        nbytes = sum(max(a.nbytes, 1) for a in arrays.values())
        if not self.cache_trees_asked or self.part_cached or \
                self.shared_bytes + nbytes > SHARED_BUDGET:
            return [], body
        mapping: dict[str, ir.Buffer] = {}
        copies: list[ir.Stmt] = []
        for param in self.rep.params:
            size = arrays[param.name].size
            copy = self.shared_array(f"cached_{param.name}", param.dtype, size)
            assert copy is not None  # the total was checked above
            mapping[param.name] = copy
            copies.append(self.cooperative(ir.i64(size), lambda e, p=param, c=copy: [
                ir.Store(c, e, ir.Load(p, e))]))
        return copies, substitute_buffers(body, mapping)

    # ---- shared reductions ------------------------------------------------------------------
    def flat_index(self, name: str, indices: list[ir.Expr]) -> ir.Expr:
        if name not in self.shared_rows:
            return super().flat_index(name, indices)
        rows, first = self.shared_rows[name]
        _, dims = self.buffers[name]
        n_outputs = self.forest.n_outputs
        sizes = [rows if d == mir.N else n_outputs if d == "n_outputs" else int(d)
                 for d in dims]
        index: ir.Expr = indices[0]
        for size, i in zip(sizes[1:], indices[1:]):
            index = _add(_mul(index, ir.i64(size)), i)
        # The block's rows start at its grid loop's variable: rebase on it.
        base = _mul(ir.Var(_name(first), ir.I64), ir.i64(n_outputs))
        return ir.BinOp("sub", index, base)

    def shared_reduce_buffers(self) -> list[ir.Stmt]:
        """Declare the shared privatized buffers and zero them (MIR buffers start at 0)."""
        code: list[ir.Stmt] = []
        for name, (rows, _) in self.shared_rows.items():
            _, dims = self.buffers[name]
            size = rows * self.forest.n_outputs * math.prod(
                int(d) for d in dims if d not in (mir.N, "n_outputs"))
            buf = self.shared_array(_name(name), ir.F64, size)
            if buf is None:
                raise BackendError(f"sharedReduce into {name}: {size} doubles exceed the "
                                   f"{SHARED_BUDGET} bytes of shared memory; use fewer "
                                   "rows per block or fewer tree threads")
            self.buffers[name] = (buf, dims)
            code.append(self.cooperative(ir.i64(size), lambda e, b=buf: [
                ir.Store(b, e, ir.Const(0.0, ir.F64))]))
        return code


def lower(fn: mir.Function, forest: Forest, rep: Representation) -> Program:
    """The GPU launches of a legalized MIR function, walking trees through ``rep``."""
    moved = _offset_loop(fn.body)
    if moved is not None:
        # Launch shapes, mapped indices and tree caches take loop variables as indices.
        raise ScheduleError(f"{moved.var} runs outside a loop its range starts from (an "
                            "offset loop): GPU lowering takes only loops of absolute indices")
    if uses_share(fn.body):
        # A thread's share is a CPU notion: a GPU grid's shape comes from its tiles.
        raise ScheduleError("a tile of size 'share' (a CPU thread's share of the rows) "
                            "has no meaning on a GPU: give the tile a size")
    check_walks(fn, forest, rep)
    rows = ir.Buffer("rows", _INPUT_DTYPES[forest.input_dtype], readonly=True)
    n_rows = ir.Var("n_rows", ir.I64)
    tree_output = ir.Buffer("tree_output", ir.I32, readonly=True)
    shared = _shared_reductions(fn)
    result = next(d for d in fn.buffers if d.name == fn.result)
    scratch = tuple(d for d in fn.buffers if d.name != fn.result and d.name not in shared)
    # Shared buffers get their LIR Buffer in each launch that uses them.
    global_buffers = {d.name: (ir.Buffer(_name(d.name), ir.F64), d.dims) for d in fn.buffers}
    finish = ir.Var("finish", ir.I64)
    params = [rows, n_rows, *(global_buffers[d.name][0] for d in (result, *scratch)),
              finish, tree_output, *rep.params]
    slot_dims = _slot_dims(fn)
    tables: list[tuple[ir.Buffer, Any]] = []  # shared by the launches' lowerings
    bodies = []
    for phase in _phases(fn.body):
        grid, block = _launch_shape(phase)
        names = {d.name for d in fn.buffers if _uses(phase, d.name)}
        lowering = _GPULowering(forest, rep, rows, n_rows, ir.Var("n_threads", ir.I64),
                                tree_output, dict(global_buffers), block=block,
                                shared_rows={k: v for k, v in shared.items() if k in names},
                                slot_dims=slot_dims, tables=tables)
        zero = lowering.shared_reduce_buffers()
        body = lowering.body(phase)
        copies, body = lowering.model_cache(body)
        prologue = zero + copies
        if prologue and lowering.threads > 1:
            prologue.append(ir.Barrier())
        bodies.append((lowering.decls + prologue + body, grid, block, lowering.shared_bytes))
    params += [table for table, _ in tables]
    launches = [Launch(ir.Kernel(f"{fn.name}_{i}", params, body), grid, block, nbytes)
                for i, (body, grid, block, nbytes) in enumerate(bodies)]
    launches.append(_finish_launch(forest, f"{fn.name}_{len(launches)}", params,
                                   global_buffers[result.name][0], n_rows, finish))
    return Program(tuple(launches), scratch,
                   tuple(np.array(entries, dtype=np.int64).reshape(-1) for _, entries in tables))


def _offset_loop(ops: tuple) -> mir.Loop | None:
    for op in ops:
        if isinstance(op, mir.Loop) and op.offset:
            return op
        found = _offset_loop(op.body) if isinstance(op, mir.Loop) else None
        if found is not None:
            return found
    return None


def _finish_launch(forest: Forest, name: str, params: list, result: ir.Buffer,
                   n_rows: ir.Var, finish: ir.Var) -> Launch:
    """One thread a row: ``row = blockIdx.x * FINISH_BLOCK + threadIdx.x``, finished."""
    row = ir.Var("finish_row", ir.I64)
    first = _mul(ir.ThreadIndex("x", "block"), ir.i64(FINISH_BLOCK))
    body = [ir.Declare(row, _add(first, ir.ThreadIndex("x", "thread"))),
            ir.If(ir.Cmp("lt", row, n_rows), finish_row(forest, result, row, finish))]
    rows = Extent(mir.Bound.of(0), mir.Bound.of(mir.Affine.var(mir.N)), FINISH_BLOCK)
    return Launch(ir.Kernel(name, params, body), ((rows,), (), ()), (FINISH_BLOCK, 1, 1), 0)


def _uses(ops: tuple, name: str) -> bool:
    for op in ops:
        if isinstance(op, mir.Reduce) and op.target == name or \
                isinstance(op, mir.ReduceDimension) and name in (op.source, op.target) or \
                isinstance(op, mir.ReduceDimensionInplace) and op.buffer == name or \
                isinstance(op, mir.Loop) and _uses(op.body, name):
            return True
    return False

