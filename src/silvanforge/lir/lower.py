"""MIR → LIR: loops stay loops, walks become node-stepping code through a representation.

The kernel this produces has one signature for every schedule and representation::

    predict(rows, n_rows, result, <privatized buffers...>, n_threads, finish,
            tree_output, <representation buffers...>)

``rows`` holds ``n_rows`` C-contiguous rows in the forest's input dtype; ``result`` and
the privatized buffers are float64 and zeroed by the caller (per call: the kernel keeps
no state, so it is re-entrant); ``tree_output`` gives each tree's first output. The
kernel adds per-output tree sums into ``result``, then finishes them into margins,
scores or values as ``finish`` says (:mod:`.finish`).

A walk keeps its node in a local variable: ``node = root(t)``, then ``peel_depth`` steps
without leaf tests, ``unroll_depth`` steps each behind a leaf test, then a loop until a
leaf. Members of an interleaved walk advance one step each in turn while any is active,
so their loads overlap. Every load of a row or a tree is guarded by the member's validity
condition: the generated code never reads outside its buffers. A representation that emits
each tree's own code (``walk_code``) walks a tree in that code; where the tree index is
not a constant, it jumps on the index to the trees' code (a ``Switch``).
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

import numpy as np

from ..mir import ir as mir
from ..errors import ScheduleError
from ..mir.legalize import check_peel
from ..model.forest import Forest
from ..schedule import BATCH, TREE
from ..schedule.schedule import MAX_SHARE
from .representation import Representation, RowValues
from . import ir
from .finish import epilogue

# Straight-line code for at most this many steps of a walk group of known depth (32 rows
# through a depth-8 tree take 256); longer ones loop over the steps.
MAX_UNROLLED_STEPS = 512
# The tree loop over a block of rows copied for vector walks prefetches the next block's
# rows, at most this many cache lines an iteration (a block's copy waited on memory for
# rows not in the cache; a block's lines all at once stalled the walks after them:
# docs/ARCHITECTURE.md "The next block's rows, prefetched").
PREFETCH_LINES = 8
# Vector walks read a level of at most this many nodes from rows copied transposed as
# one vector per node, selected by position (faster than gathering levels 0-3; a wider
# select tree costs more than the gather it saves: docs/ARCHITECTURE.md "Vector walks").
DIRECT_SPAN = 8
# The most a block's transposed copy of its rows may take of a thread's stack (OpenMP
# threads get a few MiB): 64 rows of 4096 float32 features.
MAX_ROW_COPY_BYTES = 1 << 20
# Vector walks read rows in place (no copy) by 32-bit offsets from a group's first row:
# 16 rows of at most this many features.
MAX_IN_PLACE_FEATURES = 2 ** 31 // 16 - 1
# The most a block's sums by output may take of a thread's stack (lane_sums): 64 rows of
# 128 outputs.
MAX_LANE_SUMS_BYTES = 1 << 16
_INPUT_DTYPES = {np.dtype(np.float32): ir.F32, np.dtype(np.float64): ir.F64}
# The parameters of a kernel whose float32 rows may come as float64 (its row copy rounds
# them): the rows as float64, and whether they are (nonzero) or the float32 rows are.
WIDE_ROWS = ("rows_f64", "rows_are_f64")


def takes_float64_rows(params: Sequence[ir.Buffer | ir.Var]) -> bool:
    """Whether a kernel of ``params`` (as :func:`lower` makes them) reads float64 rows
    too: it has the ``WIDE_ROWS`` parameters, right after ``finish``."""
    names = [p.name for p in params]
    return all(name in names for name in WIDE_ROWS)


def _name(var: str) -> str:
    """A C identifier for a MIR variable (split loops have dotted names)."""
    return re.sub(r"\W", "_", var)


@dataclass
class _Walk:
    """What a reduce needs to know about the walk that produced its value."""

    tree: ir.Expr
    row: ir.Expr
    node: ir.Expr
    code: bool = False  # walked by the representation's code (``walk_code``)
    # A lane of a vector walk: (its leaf values, one vector per output; the lane; the
    # lanes; the condition under which all its group's lanes exist, None: always).
    lane: tuple[list[ir.Var], int, int, ir.Expr | None] | None = None


@dataclass
class _Lowering:
    forest: Forest
    rep: Representation
    rows: ir.Buffer
    n_rows: ir.Var
    n_threads: ir.Var
    tree_output: ir.Buffer
    buffers: dict[str, tuple[ir.Buffer, tuple]] = field(default_factory=dict)
    walks: dict[str, _Walk] = field(default_factory=dict)
    counter: int = 0
    # Rows whose walks as code the block being lowered has begun (see code_walks).
    row_caches: dict = field(default_factory=dict)
    # The rows the enclosing batch loop copied transposed (cache_rows with lanes):
    # (local array, first row, columns a row).
    transposed: tuple[ir.Buffer, ir.Expr, int] | None = None
    # The rows the enclosing batch loop prepared for the representation's walks (see
    # prepare_rows): (local array, first row, elements a row).
    prepared: tuple[ir.Buffer, ir.Expr, int] | None = None
    # The next block's rows (first element, elements), which the tree loop after a
    # block's copy prefetches (see prefetch_ahead).
    next_rows: tuple[ir.Expr, int] | None = None
    # Float32 rows copied for vector walks may come as float64 too (see transpose_rows):
    # the float64 view of the rows and the flag saying which the call passed.
    wide_rows: tuple[ir.Buffer, ir.Var] | None = None
    # Tree loop variables whose value the code being lowered knows (see tree_switch).
    fixed: dict[str, int] = field(default_factory=dict)
    # The sums of the block's rows that the tree loop being lowered adds its vector
    # walks' leaves to (see lane_sums).
    sums: "_LaneSums | None" = None
    # The value of MIR's S (a thread's share of the rows), declared by lower() when used.
    share: ir.Var = field(default_factory=lambda: ir.Var("share", ir.I64))
    # Vector walks whose block may lack rows split the loop being lowered around them:
    # where more than half the block's groups have rows (``split``, set by
    # vector_walks) all walk, the hot loop; the others, a batch's last block, walk
    # fewer (``fewer``: the loop being lowered is that cold one). See op().
    split: mir.Cond | None = None
    fewer: bool = False

    # ---- expressions --------------------------------------------------------------------
    def affine(self, a: mir.Affine) -> ir.Expr:
        fixed = self.fixed
        expr: ir.Expr = ir.i64(a.const + sum(c * fixed[v] for v, c in a.terms if v in fixed))
        for var, coef in a.terms:
            if var in fixed:
                continue
            v = self.n_rows if var == mir.N else self.share if var == mir.S \
                else ir.Var(_name(var), ir.I64)
            term = v if coef == 1 else ir.BinOp("mul", ir.i64(coef), v)
            expr = term if expr == ir.i64(0) else ir.BinOp("add", expr, term)
        if a.div != 1:
            # Indices here are never negative, so signed division is floor division.
            expr = ir.i64(expr.value // a.div) if isinstance(expr, ir.Const) \
                else ir.BinOp("div", expr, ir.i64(a.div))
        return expr

    def bound(self, b: mir.Bound) -> ir.Expr:
        exprs = [self.affine(t) for t in b.terms]
        out = exprs[0]
        for e in exprs[1:]:
            out = ir.BinOp("min", out, e)
        return out

    def cond(self, c: mir.Cond | None) -> ir.Expr | None:
        return None if c is None else ir.Cmp("lt", self.affine(c.value), self.bound(c.bound))

    def fresh(self, stem: str) -> str:
        self.counter += 1
        return f"{stem}{self.counter}"

    def feature_loader(self, row: ir.Expr):
        return self.row_loader(ir.BinOp("mul", row, ir.i64(self.forest.n_features)))

    def row_loader(self, offset: ir.Expr):
        """Loads of the features of the row starting at element ``offset``."""
        return RowValues(self.rows, offset, self.forest.n_features)

    def flat_index(self, name: str, indices: list[ir.Expr]) -> ir.Expr:
        """Row-major element index of ``indices`` in buffer ``name``."""
        _, dims = self.buffers[name]
        sizes = [self.n_rows if d == "N" else ir.i64(self.forest.n_outputs)
                 if d == "n_outputs" else ir.i64(d) for d in dims]
        index: ir.Expr = indices[0]
        for size, i in zip(sizes[1:], indices[1:]):
            index = ir.BinOp("add", ir.BinOp("mul", index, size), i)
        return index

    # ---- ops ---------------------------------------------------------------------------
    def body(self, ops) -> list[ir.Stmt]:
        out: list[ir.Stmt] = []
        outer, self.row_caches = self.row_caches, {}  # declared here serve this block
        transposed, prepared, next_rows = self.transposed, self.prepared, self.next_rows
        row_caches = [op for op in ops if isinstance(op, mir.CacheRows) and not op.lanes]
        for op in ops:
            if len(row_caches) == 1 and op is row_caches[0]:
                out.extend(self.prepare_rows(op))
            else:
                out.extend(self.op(op))
        self.row_caches, self.transposed, self.prepared = outer, transposed, prepared
        self.next_rows = next_rows
        return out

    def op(self, op) -> list[ir.Stmt]:
        if isinstance(op, mir.Loop):
            var = ir.Var(_name(op.var), ir.I64)
            sums, outer = self.lane_sums(op), self.sums
            self.sums = sums or outer
            # GPU dimensions mean nothing on a CPU: such loops run serially here, which
            # legalization has already made safe.
            ahead = self.prefetch_ahead(op, var)
            step = ir.i64(op.step) if isinstance(op.step, int) else self.affine(op.step)

            def loop_of(body: list[ir.Stmt]) -> list[ir.Stmt]:
                return [ir.For(var, self.bound(op.lower), self.bound(op.upper), step, body,
                               parallel=op.parallel,
                               threads=self.n_threads if op.parallel else None)]
            split, self.split = self.split, None
            body = ahead + (self.tree_switch(op, var) if self.switches_on(op)
                            else self.body(op.body))
            loop = loop_of(body)
            if self.split is not None:
                # Vector walks whose block may lack rows: this loop walks every group
                # where more than half have rows (the hot code), and a copy of it walks
                # fewer, a cold block of its own (a batch's last block alone runs it;
                # docs/ARCHITECTURE.md "The last block"); split inside the loop where
                # the block is the loop's own iteration.
                hot, fewer, self.fewer = self.split, self.fewer, True
                if op.var in hot.free():
                    loop = loop_of([ir.If(self.cond(hot), body,
                                          [ir.Cold(self.body(op.body))])])
                else:
                    if sums is not None and self.forest.n_outputs == 1:
                        # One output: the sums serve the hot loop alone; the cold copy
                        # adds to the target as before (a call of a few rows paid the
                        # sums' zeroing and copies: nyc_taxi, 16 rows, 1.10x the time).
                        loop, sums = sums.start + loop + sums.flush, None
                        self.sums = outer
                    loop = [ir.If(self.cond(hot), loop,
                                  [ir.Cold(loop_of(self.body(op.body)))])]
                self.fewer = fewer
            self.split = split
            self.sums = outer
            return loop if sums is None else sums.start + loop + sums.flush
        if isinstance(op, mir.Guard):
            return [ir.If(self.cond(op.cond), self.body(op.body))]
        if isinstance(op, mir.Walk):
            member = mir.WalkMember(op.tree, op.row, op.result)
            return self.walks_of([member], op.unroll_depth, op.peel_depth)
        if isinstance(op, mir.InterleavedWalk):
            return self.walks_of(list(op.members), op.unroll_depth, op.peel_depth, op.lanes)
        if isinstance(op, mir.Reduce):
            return self.reduce(op)
        if isinstance(op, mir.ReduceDimension):
            return self.reduce_dimension(op.source, op.target, op.dim, op.indices, op.rows,
                                         op.vector_width)
        if isinstance(op, mir.ReduceDimensionInplace):
            return self.reduce_dimension(op.buffer, None, op.dim, op.indices, op.rows,
                                         op.vector_width)
        if isinstance(op, mir.CacheTrees):
            return self.rep.cache_trees(self.bound(op.lower), self.bound(op.upper))
        if isinstance(op, mir.CacheRows) and op.lanes:
            return self.transpose_rows(op)
        if isinstance(op, mir.CacheRows):
            r = ir.Var(self.fresh("cached_row"), ir.I64)
            start = ir.BinOp("mul", r, ir.i64(self.forest.n_features))
            return [ir.For(r, self.bound(op.lower), self.bound(op.upper), ir.i64(1),
                           [ir.Prefetch(self.rows, start)])]
        raise TypeError(f"no LIR lowering for MIR op {type(op).__name__}")

    def prefetch_ahead(self, op: mir.Loop, var: ir.Var) -> list[ir.Stmt]:
        """For the tree loop after a block's rows were copied (:meth:`transpose_rows`):
        prefetches of the rows after the block, a few lines each iteration, the next
        block's first, so that its copy finds them in the cache. An iteration whose
        lines would pass the rows' end prefetches nothing (a call of one block none).
        Else nothing."""
        if self.next_rows is None or op.kind != TREE or self.fewer:
            return []  # (the walks of fewer groups: a batch's last block, none after)
        (start, count), self.next_rows = self.next_rows, None
        lower, upper = self.bound(op.lower), self.bound(op.upper)
        if not (isinstance(lower, ir.Const) and isinstance(upper, ir.Const)
                and isinstance(op.step, int)) or upper.value <= lower.value:
            return []
        turns = -(-(upper.value - lower.value) // op.step)
        turn: ir.Expr = ir.BinOp("sub", var, lower) if lower.value else var
        if op.step != 1:
            turn = ir.BinOp("div", turn, ir.i64(op.step))
        end = ir.BinOp("mul", self.n_rows, ir.i64(self.forest.n_features))

        def ahead(rows: ir.Buffer) -> ir.Stmt:
            per_line = 64 // (rows.dtype.bits // 8)
            each = min(PREFETCH_LINES, -(-count // (per_line * turns)))
            first = ir.BinOp("add", start, ir.BinOp("mul", turn, ir.i64(each * per_line)))
            return ir.If(ir.Cmp("le", ir.BinOp("add", first, ir.i64(each * per_line)), end), [
                ir.Prefetch(rows, ir.BinOp("add", first, ir.i64(j * per_line)) if j
                            else first) for j in range(each)])
        if self.wide_rows is None:
            return [ahead(self.rows)]
        wide, flag = self.wide_rows
        return [ir.If(ir.Cmp("ne", flag, ir.i64(0)), [ahead(wide)], [ahead(self.rows)])]

    def lane_sums(self, op: mir.Loop) -> "_LaneSums | None":
        """For a tree loop over one block's vector walks whose reduces add to one
        target: sums of the block's rows by output, a local array (output-major, so
        each walk adds its leaves as one vector, not a scatter to rows ``n_outputs``
        apart; on a cache line, and with no test of whether a group's rows all exist),
        read from the target before the loop and written back after it
        (docs/ARCHITECTURE.md "Vector walks across rows", "Sums by output"). Rows past
        the batch's end have sums (their lanes walk the last row) that are never
        written."""
        walks = [o for o in op.body if isinstance(o, mir.InterleavedWalk)]
        reduces = [o for o in op.body if isinstance(o, mir.Reduce)]
        if op.kind != TREE or op.parallel \
                or len(walks) != 1 or not walks[0].lanes \
                or len(reduces) + 1 != len(op.body) or self.switches_on(op) \
                or any(r.atomic or r.privatized or r.target != reduces[0].target
                       for r in reduces):
            return None
        members = walks[0].members
        rows, n_out = len(members), self.forest.n_outputs
        if rows * n_out * 8 > MAX_LANE_SUMS_BYTES:
            return None
        acc = ir.Buffer(self.fresh("sums"), ir.F64, rows * n_out)
        base = self.affine(members[0].row)
        count: ir.Expr = ir.i64(rows)
        if members[-1].valid is not None:
            count = ir.BinOp("min", count, ir.BinOp("sub", self.bound(
                members[-1].valid.bound), base))
        i = ir.Var(self.fresh("sum"), ir.I64)
        target, _ = self.buffers[reduces[0].target]

        def rows_of(load: bool) -> ir.Stmt:
            # The target's values to the sums, or back: each row's sum takes its trees
            # in the order the target would, so the sums are the same to the bit.
            r = ir.Var(self.fresh("row"), ir.I64)
            moves = []
            for k in range(n_out):
                at = self.flat_index(reduces[0].target, [ir.BinOp("add", base, r), ir.i64(k)])
                mine = ir.BinOp("add", ir.i64(k * rows), r)
                moves.append(ir.Store(acc, mine, ir.Load(target, at)) if load
                             else ir.Store(target, at, ir.Load(acc, mine)))
            return ir.For(r, ir.i64(0), count, ir.i64(1), moves)
        return _LaneSums(acc, base, rows, reduces[0].target, [
            ir.LocalArray(acc), ir.For(i, ir.i64(0), ir.i64(rows * n_out), ir.i64(1),
                                       [ir.Store(acc, i, ir.Const(0.0, ir.F64))]),
            rows_of(True)], [rows_of(False)])

    def switches_on(self, op: mir.Loop) -> bool:
        """Whether tree loop ``op`` jumps to a copy of its body per tree: for a
        representation emitting each tree's own code (``constant_trees``), when every
        walk in the body is of the loop's tree and the body loops over rows, so the
        jump is taken once for those rows' walks rather than once for each."""
        if op.kind != TREE or not self.rep.constant_trees:
            return False
        tree = mir.Affine.var(op.var)
        walks = _walks(op.body)
        return bool(walks) and all(w.tree == tree for w in walks) and any(
            isinstance(inner, mir.Loop) for inner in op.body)

    def tree_switch(self, op: mir.Loop, var: ir.Var) -> list[ir.Stmt]:
        """The body of tree loop ``op`` as a jump on its index to one copy of the body
        per tree, lowered with that index a constant (walks as each tree's own code)."""
        cases = []
        outer = self.row_caches
        for t in range(self.forest.n_trees):
            # What a case declares is its own (the GPU lowering's blocks keep the caches).
            self.fixed[op.var], self.row_caches = t, {}
            cases.append(self.body(op.body))
        del self.fixed[op.var]
        self.row_caches = outer
        return [ir.Switch(var, cases)]

    def prepare_rows(self, op: "mir.CacheRows") -> list[ir.Stmt]:
        """A cached block's rows in the form the representation's walks read
        (:meth:`~.Representation.prepared_row`), each prepared once for all the walks
        of the block; where there is no such form, or the block's size is not known,
        or its copy would take more than :data:`MAX_ROW_COPY_BYTES` of the stack, the
        rows are prefetched."""
        form = self.rep.prepared_row()
        if form is None or not op.rows \
                or op.rows * form[0] * (form[1].bits // 8) > MAX_ROW_COPY_BYTES:
            return self.op(op)
        size, dtype = form
        buf = ir.Buffer(self.fresh("prepared"), dtype, op.rows * size)
        first = self.bound(op.lower)
        r = ir.Var(self.fresh("r"), ir.I64)
        self.prepared = (buf, first, size)
        return [ir.LocalArray(buf), ir.For(
            r, ir.i64(0), ir.BinOp("sub", self.bound(op.upper), first), ir.i64(1),
            self.rep.prepare_row(self.feature_loader(ir.BinOp("add", first, r)), buf,
                                 ir.BinOp("mul", r, ir.i64(size))))]

    def transpose_rows(self, op: "mir.CacheRows") -> list[ir.Stmt]:
        """Copy the block's rows into a local array, feature-major within each group of
        ``lanes`` rows: a level whose lanes share a feature reads its values as one
        vector. The copy holds the representation's columns where it prepares some
        (:meth:`~.Representation.lane_columns`), else the row's features, ``lanes`` at a
        time transposed in registers (:meth:`_transpose_block`), the rest one by one. A
        row past the last is copied from the last (the walks stay in bounds; their
        reduces add nothing)."""
        lanes = op.lanes
        n, dtype = self.rep.lane_columns() or (self.forest.n_features, self.rows.dtype)
        groups = -(-op.rows // lanes)
        size = groups * lanes * n * (dtype.bits // 8)
        if size > MAX_ROW_COPY_BYTES:
            raise ScheduleError(
                f"cache on a vectorized block copies {groups * lanes} rows of {n} columns "
                f"({size} bytes) to each thread's stack, more than {MAX_ROW_COPY_BYTES}: "
                "leave out the cache directive (the walks then read the rows in place)")
        buf = ir.Buffer(self.fresh("rows_t"), dtype, groups * lanes * n)
        first = self.bound(op.lower)
        g, lane = ir.Var(self.fresh("group"), ir.I64), ir.Var(self.fresh("lane"), ir.I64)
        walked = _groups_walked(ir.BinOp("sub", self.n_rows, first), groups, lanes)

        def at(column: ir.Expr, g: ir.Var, lane: ir.Var) -> ir.Expr:
            return ir.BinOp("add", ir.BinOp("mul", ir.BinOp("add", ir.BinOp(
                "mul", g, ir.i64(n)), column), ir.i64(lanes)), lane)

        def row(i: ir.Expr, g: ir.Var) -> ir.Expr:  # group g's row i
            return ir.BinOp("min", ir.BinOp("add", first, ir.BinOp("add", ir.BinOp(
                "mul", g, ir.i64(lanes)), i)), ir.BinOp("sub", self.n_rows, ir.i64(1)))
        if self.rep.lane_columns() is not None:
            copy = ir.For(g, ir.i64(0), walked, ir.i64(1), [ir.For(
                lane, ir.i64(0), ir.i64(lanes), ir.i64(1), self.rep.lane_column_stores(
                    self.feature_loader(row(lane, g)),
                    lambda c, v: ir.Store(buf, at(ir.i64(c), g, lane), v),
                    self.fresh("column")))])
        else:
            copy = self._copy_rows(buf, self.rows, g, lane, walked, lanes, row, at)
            if self.rows.dtype == ir.F32:
                # float64 rows are rounded in the copy (fptrunc, as numpy's astype): no
                # converted copy of the whole call first, made by one thread for all.
                if self.wide_rows is None:
                    self.wide_rows = (ir.Buffer(WIDE_ROWS[0], ir.F64, readonly=True),
                                      ir.Var(WIDE_ROWS[1], ir.I64))
                wide, flag = self.wide_rows
                copy = ir.If(ir.Cmp("ne", flag, ir.i64(0)), [self._copy_rows(
                    buf, wide, ir.Var(self.fresh("group"), ir.I64),
                    ir.Var(self.fresh("lane"), ir.I64), walked, lanes, row, at)], [copy])
        self.transposed = (buf, first, n)
        features = self.forest.n_features
        self.next_rows = (ir.BinOp("mul", ir.BinOp("add", first, ir.i64(op.rows)),
                                   ir.i64(features)), op.rows * features)
        return [ir.LocalArray(buf), copy]

    def _copy_rows(self, buf: ir.Buffer, source: ir.Buffer, g: ir.Var, lane: ir.Var,
                   groups: ir.Expr, lanes: int, row: Callable, at: Callable) -> ir.Stmt:
        """The loop over a block's first ``groups`` groups ``g`` of rows copying
        ``source``'s features into ``buf`` (:meth:`transpose_rows`'s ``row(i, g)`` and
        ``at(column, g, lane)``), rounded to ``buf``'s type where ``source``'s is wider."""
        n = self.forest.n_features

        def value(index: ir.Expr, count: int = 0) -> ir.Expr:
            v = ir.VectorLoad(source, index, count) if count else ir.Load(source, index)
            return v if source.dtype == buf.dtype else ir.Cast(v, buf.dtype)
        f = ir.Var(self.fresh("f"), ir.I64)
        whole = n - n % lanes
        body: list[ir.Stmt] = [ir.For(f, ir.i64(0), ir.i64(whole), ir.i64(lanes),
                                      self._transpose_block(
                                          buf, value, lambda i: row(i, g), f, n, lanes,
                                          ir.BinOp("mul", g, ir.i64(n))))] if whole else []
        if whole < n:
            body.append(ir.For(lane, ir.i64(0), ir.i64(lanes), ir.i64(1), [ir.For(
                f, ir.i64(whole), ir.i64(n), ir.i64(1), [ir.Store(buf, at(f, g, lane), value(
                    ir.BinOp("add", ir.BinOp("mul", row(lane, g), ir.i64(n)), f)))])]))
        return ir.For(g, ir.i64(0), groups, ir.i64(1), body)

    def _transpose_block(self, buf: ir.Buffer, value: Callable[[ir.Expr, int], ir.Expr],
                         row: Callable[[ir.Expr], ir.Expr], f: ir.Var, n: int, lanes: int,
                         group: ir.Expr) -> list[ir.Stmt]:
        """Features ``f .. f + lanes - 1`` of a group's ``lanes`` rows into ``buf``,
        feature-major from column ``group + f``: a vector load of each row (``value``:
        rounded to ``buf``'s type from wider rows), a transpose
        in registers (halves of the block swapped, then quarters, ... log2(lanes)
        steps of shuffles), a vector store of each feature. Scattering a row's features
        to their columns was 15% of year's time on AVX-512 (docs/ARCHITECTURE.md
        "Vector walks across rows", "The row copy")."""
        stem = self.fresh("block")
        vectors: list[ir.Expr] = []
        code: list[ir.Stmt] = []
        for i in range(lanes):
            var = ir.Var(f"{stem}_0_{i}", buf.dtype)
            code.append(ir.Declare(var, value(ir.BinOp("add", ir.BinOp(
                "mul", row(ir.i64(i)), ir.i64(n)), f), lanes)))
            vectors.append(var)
        half, step = lanes // 2, 1
        while half:
            # Rows i and i + half (i without the bit `half`) trade the second half of
            # each run of 2 * half lanes of row i for the first half of row i + half's.
            runs = range(0, lanes, 2 * half)
            low = tuple(s + k + side for s in runs for side in (0, lanes) for k in range(half))
            high = tuple(x + half for x in low)
            after = list(vectors)
            for i in range(lanes):
                if i & half:
                    continue
                for j, order in ((i, low), (i + half, high)):
                    var = ir.Var(f"{stem}_{step}_{j}", buf.dtype)
                    code.append(ir.Declare(var, ir.Shuffle(vectors[i], vectors[i + half],
                                                           order)))
                    after[j] = var
            vectors, half, step = after, half // 2, step + 1
        return code + [ir.Store(buf, ir.BinOp("mul", ir.BinOp("add", ir.BinOp(
            "add", group, f), ir.i64(j)), ir.i64(lanes)), v) for j, v in enumerate(vectors)]

    def vector_walks(self, members: list[mir.WalkMember], lanes: int) -> list[ir.Stmt]:
        """Each run of ``lanes`` members (rows of one tree) walks as one vector walk of
        the representation; its leaf values are vectors each member's reduce takes its
        lane of. A lane past the rows' end walks the last row (in bounds; its reduce adds
        nothing).

        The groups' walks advance level by level in turn (the CPU overlaps their
        dependent loads; they share a level's windows). At the end of a batch, where
        fewer groups have rows, all walk in turn when more than half have rows, else the
        first half when more than a quarter have, and so on down to the first alone;
        groups without rows walk the last row (the fastest of the ways measured,
        docs/ARCHITECTURE.md "Vector walks across rows")."""
        if not self.rep.vector_walks:
            raise ScheduleError(
                f"vectorize needs a representation whose walks take rows as vector lanes "
                f"('array', 'mask'); this kernel walks {self.rep.name!r}")
        if self.rep.lane_columns() is not None and self.transposed is None:
            raise ScheduleError(
                f"vector walks of the {self.rep.name!r} representation read the block's "
                "rows prepared: cache the vectorized loop's outer batch loop (cache(b0))")
        groups = []
        for g in range(0, len(members), lanes):
            group = members[g:g + lanes]
            tree, row = self.affine(group[0].tree), self.affine(group[0].row)
            groups.append((group, tree, self.vector_loader(row, lanes)))

        def leaf_values(tail: list[ir.Stmt], tree, leaves, loader) -> list[ir.Expr]:
            return [self.local(tail, "leaf_values", self.rep.vector_leaf_value(
                tree, leaves, k, loader)) for k in range(self.forest.leaf_width)]

        def in_turn(count: int) -> tuple[list[ir.Stmt], list[list[ir.Var]]]:
            """The first ``count`` groups' walks, in turn (one statement a level each),
            or together where the representation walks groups as one (``array`` does
            where the groups walk one tree, ``mask`` always); their leaf values."""
            tail: list[ir.Stmt] = []
            together = getattr(self.rep, "vector_walk_groups", None)
            tree = groups[0][1]
            one_tree = all(g[1] == tree for g in groups[:count])
            if together is not None and (one_tree or not hasattr(self.rep, "vector_walk")):
                if not one_tree:
                    raise ScheduleError(f"the {self.rep.name!r} representation walks a "
                                        "vectorized block's rows through one tree at a time")
                code, leaves = together(tree, lanes, [g[2] for g in groups[:count]],
                                        self.fresh("position"))
                vss = [leaf_values(tail, tree, ls, g[2]) for ls, g in zip(leaves, groups)]
                return code + tail, vss
            walks = [self.rep.vector_walk(tree, lanes, loader, self.fresh("position"))
                     for _, tree, loader in groups[:count]]
            vss = [leaf_values(tail, g[1], w[1], g[2]) for w, g in zip(walks, groups)]
            return ([s for steps in itertools.zip_longest(*(w[0] for w in walks))
                     for s in steps if s is not None] + tail, vss)

        counts = _groups_in_turn(len(groups))
        if len(counts) == 1 or groups[-1][0][0].valid is None:
            code, values = in_turn(len(groups))
        elif not self.fewer:
            # All groups walk where more than half have rows (groups [count // 2, count)
            # may have none): the enclosing loop is split on that (see op()).
            code, values = in_turn(len(groups))
            self.split = self.split or groups[len(groups) // 2][0][0].valid
        else:
            # The first half of the groups, or fewer: the values live past the
            # branches, declared here and assigned in each (groups a path leaves out
            # keep zeros).
            counts = counts[1:]
            stmts, values = in_turn(counts[0])
            shared = [[ir.Var(self.fresh("leaf_values"), v.dtype) for v in vs]
                      for vs in values]
            shared += [[ir.Var(self.fresh("leaf_values"), x.dtype) for x in shared[0]]
                       for _ in groups[len(shared):]]

            def kept(stmts: list[ir.Stmt], vss) -> list[ir.Stmt]:
                return stmts + [ir.Assign(x, v) for xs, vs in zip(shared, vss)
                                for x, v in zip(xs, vs)]

            code = kept(stmts, values)
            for count, fewer in zip(counts, counts[1:]):
                stmts, vss = in_turn(fewer)
                code = [ir.If(self.cond(groups[count // 2][0][0].valid), code,
                              kept(stmts, vss))]
            code = [ir.Declare(x, ir.Broadcast(ir.Const(0, x.dtype), lanes))
                    for xs in shared for x in xs] + code
            values = shared
        for (group, tree, _), vs in zip(groups, values):
            full = self.cond(group[-1].valid)  # rows ascend: the last exists, all do
            for i, m in enumerate(group):
                self.walks[m.result] = _Walk(tree, self.affine(m.row), ir.i64(0),
                                             lane=(vs, i, lanes, full))
        return code

    def vector_loader(self, first_row: ir.Expr, lanes: int):
        """Loads of the values of a vector of features for rows ``first_row`` + lane:
        from the transposed copy when the block made one (a level of at most
        :data:`DIRECT_SPAN` nodes loads each node's feature as one vector and selects),
        else gathered from the rows (clamped to the last row)."""
        n = self.forest.n_features
        iota = ir.Iota(lanes)
        if self.transposed is None:
            if lanes * n >= 2 ** 31:
                raise ScheduleError(
                    f"vector walks read rows in place by 32-bit offsets, {lanes} rows of "
                    f"fewer than {2 ** 31 // lanes} features; these rows have {n}")
            # 32-bit offsets, never negative (the backend loads a lane at a time by
            # them), from the group's first row or the last row where the group has
            # none: lane i reads row first + min(i, the last row's lane).
            end = ir.BinOp("sub", self.n_rows, ir.i64(1))
            first = ir.BinOp("min", first_row, end)
            start = ir.BinOp("mul", first, ir.i64(n))
            last = ir.Cast(ir.BinOp("min", ir.BinOp("sub", end, first), ir.i64(lanes - 1)),
                           ir.I32)
            lane_rows = ir.BinOp("mul", ir.BinOp("min", iota, ir.Broadcast(last, lanes)),
                                 ir.Const(n, ir.I32))

            def gathered(feature: ir.Expr) -> ir.Expr:
                column = feature.a if isinstance(feature, ir.Cast) \
                    and feature.a.dtype == ir.I32 else ir.Cast(feature, ir.I32)
                return ir.Load(self.rows, ir.BinOp("add", start, ir.Cast(
                    ir.BinOp("add", lane_rows, column), ir.I64)))
            return gathered
        buf, block_first, columns = self.transposed
        group = ir.BinOp("mul", ir.BinOp("sub", first_row, block_first), ir.i64(columns))

        def column(feature: ir.Expr) -> ir.Expr:  # first element of a feature's lanes
            return ir.BinOp("add", group, ir.BinOp("mul", feature, ir.i64(lanes)))

        def cached(feature: ir.Expr) -> ir.Expr:
            if isinstance(feature, ir.Broadcast):  # one column for every lane
                return ir.VectorLoad(buf, column(feature.a), lanes)
            inner = feature.a if isinstance(feature, ir.Cast) else feature
            if isinstance(inner, ir.Lookup) and inner.span <= DIRECT_SPAN:
                values = [ir.VectorLoad(buf, column(ir.Cast(ir.Load(inner.buffer, ir.BinOp(
                    "add", inner.base, ir.i64(j))), ir.I64)), lanes) for j in range(inner.span)]
                bit = 1
                while len(values) > 1:
                    high = ir.Cmp("ne", ir.BinOp("and", inner.offset, ir.Const(
                        bit, inner.offset.dtype)), ir.Const(0, inner.offset.dtype))
                    values = [ir.Select(high, values[j + 1], values[j])
                              for j in range(0, len(values), 2)]
                    bit *= 2
                return values[0]
            if inner.dtype != ir.I32:
                inner = ir.Cast(inner, ir.I32)
            return ir.Load(buf, ir.BinOp("add", group, ir.Cast(ir.BinOp("add", ir.BinOp(
                "mul", inner, ir.Const(lanes, ir.I32)), iota), ir.I64)))
        return cached

    def walks_of(self, members: list[mir.WalkMember], unroll: int, peel: int,
                 lanes: int = 0) -> list[ir.Stmt]:
        if lanes:
            return self.vector_walks(members, lanes)
        code = self.code_walks(members)
        if code is not None:
            return code
        if all(self.rep.walk_depth(self.affine(m.tree)) is not None for m in members):
            return self.fixed_walks(members)
        rep = self.rep
        code: list[ir.Stmt] = []
        states = []
        for m in members:
            tree, row = self.affine(m.tree), self.affine(m.row)
            node = ir.Var(self.fresh("node"), ir.I64)
            active = ir.Var(self.fresh("active"), ir.BOOL)
            valid = self.cond(m.valid)
            start = [ir.Assign(node, rep.root(tree)),
                     ir.Assign(active, ir.Not(rep.is_leaf(tree, node)))]
            code += [ir.Declare(node, ir.i64(0)), ir.Declare(active, ir.Const(False, ir.BOOL))]
            code += start if valid is None else [ir.If(valid, start)]
            self.walks[m.result] = _Walk(tree, row, node)
            states.append((tree, row, node, active))

        def step(tree, row, node, active, check_leaf: bool) -> list[ir.Stmt]:
            move = [ir.Assign(node, rep.step(tree, node, self.feature_loader(row)))]
            if check_leaf:
                move.append(ir.Assign(active, ir.Not(rep.is_leaf(tree, node))))
            return [ir.If(active, move)]

        # Peeled steps: every leaf is deeper, so no member reaches one (leaf tests skipped).
        for _ in range(peel):
            for s in states:
                code += step(*s, check_leaf=False)
        if peel:
            for tree, _, node, active in states:
                code.append(ir.If(active, [ir.Assign(active, ir.Not(rep.is_leaf(tree, node)))]))
        for _ in range(unroll):
            for s in states:
                code += step(*s, check_leaf=True)
        any_active: ir.Expr = states[0][3]
        for s in states[1:]:
            any_active = ir.BinOp("or", any_active, s[3])
        loop: list[ir.Stmt] = []
        for s in states:
            loop += step(*s, check_leaf=True)
        code.append(ir.While(any_active, loop))
        return code

    def code_walks(self, members: list[mir.WalkMember]) -> list[ir.Stmt] | None:
        """Walks the representation emits as code (each member's tree as branches, one
        member after another), or None for a layout walked step by step.

        A row's walks in one block (the trees of an unrolled loop) share its offset (each
        node of the code loads at offset + feature) and the values the representation
        computes once per row (:meth:`~.Representation.row_preamble`: category
        operands), declared before the first walk that uses them. A walk that may not
        exist (guarded) keeps its own: its row may not exist either.
        """
        if type(self.rep).walk_code is Representation.walk_code:
            return None  # a layout walked step by step
        if self.rep.constant_trees and not all(
                isinstance(self.affine(m.tree), ir.Const) for m in members):
            return self.dispatched_walks(members)
        code: list[ir.Stmt] = []
        walks: list[ir.Stmt] = []
        before = {row: set(cache) for row, (_, cache) in self.row_caches.items()}
        for m in members:
            tree, row = self.affine(m.tree), self.affine(m.row)
            node = ir.Var(self.fresh("node"), ir.I64)
            valid = self.cond(m.valid)
            at_row = ir.BinOp("mul", row, ir.i64(self.forest.n_features))
            shared = None
            if valid is None:
                shared = self.row_caches.get(row)
                if shared is None:
                    first = ir.Var(self.fresh("row_offset"), ir.I64)
                    shared = self.row_caches[row] = (first, {"stem": first.name})
                    code.append(ir.Declare(first, at_row))
                offset = shared[0]
            else:
                offset = ir.Var(self.fresh("row_offset"), ir.I64)
            loader = self.row_loader(offset)
            if self.prepared is not None:
                buf, first, size = self.prepared
                loader = replace(loader, prepared=(buf, ir.BinOp(
                    "mul", ir.BinOp("sub", row, first), ir.i64(size))))
            walk = self.rep.walk_code(tree, node, loader, None if shared is None else shared[1])
            assert walk is not None, "a representation emitting code emits every tree"
            walks.append(ir.Declare(node, ir.i64(0)))
            walks += walk if shared is not None else [ir.Declare(offset, at_row),
                                                      ir.If(valid, walk)]
            self.walks[m.result] = _Walk(tree, row, node, code=True)
        for row, (offset, cache) in self.row_caches.items():
            new = {k: v for k, v in cache.items() if k not in before.get(row, ())}
            if set(new) - {"stem"}:
                code += self.rep.row_preamble({"stem": cache["stem"], **new},
                                              self.row_loader(offset))
        return code + walks

    def dispatched_walks(self, members: list[mir.WalkMember]) -> list[ir.Stmt]:
        """Walks as code whose tree indices are not all constants, for a representation
        that emits each tree's own code (``constant_trees``): a jump on the tree index
        to that tree's code (a :class:`~.ir.Switch`), which leaves each member's leaf in
        a local array its reduce reads.

        The members' row offsets (-1: the member does not exist, its row is never read)
        go into a local array first and a loop over them walks, so every tree's code is
        emitted once whatever the number of members (the twelve rows of the ``default``
        schedule's block would otherwise take twelve copies of the forest). Members of
        one tree (rows of a block) jump once, to a loop over them; members of different
        trees (a row's interleaved trees) each jump in the loop. Category operands are
        computed at each tree's entry (which trees a row meets is not known here)."""
        n, n_features = len(members), self.forest.n_features
        offsets, leaves = (ir.Buffer(self.fresh(stem), ir.I64, n)
                           for stem in ("walk_rows", "walk_leaves"))
        code: list[ir.Stmt] = [ir.LocalArray(offsets), ir.LocalArray(leaves)]
        trees = [self.affine(m.tree) for m in members]
        for k, (m, tree) in enumerate(zip(members, trees)):
            row = self.affine(m.row)
            at: ir.Expr = ir.BinOp("mul", row, ir.i64(n_features))
            valid = self.cond(m.valid)
            code.append(ir.Store(offsets, ir.i64(k), at if valid is None
                                 else ir.Select(valid, at, ir.i64(-1))))
            self.walks[m.result] = _Walk(tree, row, ir.Load(leaves, ir.i64(k)), code=True)
        member = ir.Var(self.fresh("member"), ir.I64)
        offset = ir.Var(self.fresh("row_offset"), ir.I64)
        node = ir.Var(self.fresh("node"), ir.I64)
        loader = self.row_loader(offset)
        cases = [[ir.Declare(node, ir.i64(0)), *self.rep.walk_code(ir.i64(t), node, loader),
                  ir.Store(leaves, member, node)] for t in range(self.forest.n_trees)]

        def each_member(body: list[ir.Stmt]) -> ir.For:
            return ir.For(member, ir.i64(0), ir.i64(n), ir.i64(1), [
                ir.Declare(offset, ir.Load(offsets, member)),
                ir.If(ir.Cmp("ge", offset, ir.i64(0)), body)])

        if all(tree == trees[0] for tree in trees):
            code.append(ir.Switch(trees[0], [[each_member(case)] for case in cases]))
        else:
            index = ir.Buffer(self.fresh("walk_trees"), ir.I64, n)
            code += [ir.LocalArray(index)] + [ir.Store(index, ir.i64(k), tree)
                                              for k, tree in enumerate(trees)]
            code.append(each_member([ir.Switch(ir.Load(index, member), cases)]))
        return code

    def fixed_walks(self, members: list[mir.WalkMember]) -> list[ir.Stmt]:
        """Walks whose trees keep every leaf at one depth: exactly that many steps, no
        leaf tests, no branches (unrollWalk and peelWalk have nothing left to do).

        A group whose members all exist (every row block but the last) runs straight-line
        code with the members' rows and trees as they are, so a row's address is the
        block's plus a constant. A partial group walks a member past its loop's end with
        tree 0 and row 0 instead (both exist whenever the loop runs), so every load stays
        in bounds without a branch, in a loop over the steps (compact: it runs at most
        once a call); its reduce is skipped by the reduce's own guard."""
        code: list[ir.Stmt] = []
        nodes = [self.local(code, "node", ir.i64(0)) for _ in members]
        for m, node in zip(members, nodes):
            self.walks[m.result] = _Walk(self.affine(m.tree), self.affine(m.row), node)
        conds = [c for c in (self.cond(m.valid) for m in members) if c is not None]
        whole = self.fixed_steps(members, nodes, clamp=False)
        if not conds:
            return code + whole
        all_exist = conds[0]
        for c in conds[1:]:
            all_exist = ir.BinOp("and", all_exist, c)
        code.append(ir.If(all_exist, whole, self.fixed_steps(members, nodes, clamp=True)))
        return code

    def fixed_steps(self, members: list[mir.WalkMember], nodes: list[ir.Var],
                    clamp: bool) -> list[ir.Stmt]:
        """The steps of a group of walks of known depth, leaving each leaf in ``nodes``.

        Members of one tree step together for that tree's depth; members of different
        trees step to the deepest one, each keeping its node once its own depth is reached
        (the node's slot is in bounds, so reading its fields again is harmless). With
        ``clamp``, members outside their loop walk tree 0 / row 0, and the steps loop;
        without, constant depths are unrolled up to :data:`MAX_UNROLLED_STEPS` steps."""
        rep = self.rep
        code: list[ir.Stmt] = []
        states = []
        for m, node in zip(members, nodes):
            tree, row = self.affine(m.tree), self.affine(m.row)
            valid = self.cond(m.valid) if clamp else None
            if valid is not None:
                # Clamp only what the condition bounds: members of a row block keep the
                # block's one tree expression, so its loads are shared.
                def clamped(stem: str, value: ir.Expr) -> ir.Expr:
                    return self.local(code, stem, ir.Select(valid, value, ir.i64(0)))
                if m.valid.value != m.tree:
                    row = clamped("row", row)
                if m.valid.value != m.row:
                    tree = clamped("tree", tree)
            code.append(ir.Assign(node, rep.root(tree)))
            states.append((tree, row, node, rep.walk_depth(tree)))
        depths = [s[3] for s in states]
        uniform = all(d == depths[0] for d in depths)
        if not uniform:
            depths = [d if isinstance(d, ir.Const) else self.local(code, "depth", d)
                      for d in depths]
        steps: ir.Expr = depths[0]
        if not uniform:
            for d in depths[1:]:
                steps = ir.BinOp("max", steps, d)

        def step(index: ir.Expr) -> list[ir.Stmt]:
            body: list[ir.Stmt] = []
            for (tree, row, node, _), depth in zip(states, depths):
                moved = rep.step(tree, node, self.feature_loader(row))
                if not uniform:
                    moved = ir.Select(ir.Cmp("lt", index, depth), moved, node)
                body.append(ir.Assign(node, moved))
            return body

        if not clamp and isinstance(steps, ir.Const) \
                and steps.value * len(states) <= MAX_UNROLLED_STEPS:
            for k in range(int(steps.value)):
                code += step(ir.i64(k))
        else:
            index = ir.Var(self.fresh("step"), ir.I64)
            code.append(ir.For(index, ir.i64(0), steps, ir.i64(1), step(index)))
        return code

    def local(self, code: list[ir.Stmt], stem: str, value: ir.Expr) -> ir.Var:
        """A fresh local variable declared in ``code`` with ``value``."""
        var = ir.Var(self.fresh(stem), value.dtype)
        code.append(ir.Declare(var, value))
        return var

    def reduce(self, op: mir.Reduce) -> list[ir.Stmt]:
        walk = self.walks[op.value]
        buffer, _ = self.buffers[op.target]
        tree_const = op.tree.is_const
        # One output: every tree adds to it, and the target index stays the same across
        # a loop over trees (LLVM keeps the sum in a register).
        first = (ir.i64(int(self.forest.tree_output[op.tree.const])) if tree_const
                 else ir.i64(0) if self.forest.n_outputs == 1
                 else ir.Cast(ir.Load(self.tree_output, walk.tree), ir.I64))

        def output(k: int) -> ir.Expr:  # the target's output of leaf component k
            return first if k == 0 else ir.BinOp("add", first, ir.i64(k))

        def index(row: ir.Expr, k: int) -> ir.Expr:
            return self.flat_index(op.target, [self.affine(p) for p in op.privatized]
                                   + [row, output(k)])

        if walk.lane is not None and not op.atomic:
            return self.reduce_lanes(op, walk, buffer, index, output)
        stmts: list[ir.Stmt] = []
        loader = self.feature_loader(walk.row)
        for k in range(self.forest.leaf_width):
            if walk.lane is not None:
                value: ir.Expr = ir.Extract(walk.lane[0][k], walk.lane[1])
            else:
                read = self.rep.code_leaf_value if walk.code else self.rep.leaf_value
                value = read(walk.tree, walk.node, k, loader)
            if op.atomic:
                stmts.append(ir.AtomicAdd(buffer, index(walk.row, k), value))
            else:
                stmts.append(ir.Store(buffer, index(walk.row, k), ir.BinOp(
                    "add", ir.Load(buffer, index(walk.row, k)), value)))
        valid = self.cond(op.valid)
        return stmts if valid is None else [ir.If(valid, stmts)]

    def reduce_lanes(self, op: mir.Reduce, walk: _Walk, buffer: ir.Buffer,
                     index: Callable[[ir.Expr, int], ir.Expr],
                     output: Callable[[int], ir.Expr]) -> list[ir.Stmt]:
        """A vector walk's group of rows adds its leaf values through its first lane's
        reduce (the others add nothing): to the block's sums by output where the tree
        loop keeps them (:meth:`lane_sums`; one vector add each); as whole vectors when
        all its rows exist and each has one output (consecutive in the target); else
        lane by lane from a local copy, over the rows that exist (one loop, not a test
        per lane)."""
        values, lane, lanes, full = walk.lane
        if lane:
            return []
        sums = self.sums
        if sums is not None and op.target == sums.target:
            adds: list[ir.Stmt] = []
            for k, v in enumerate(values):
                at = ir.BinOp("add", ir.BinOp("mul", output(k), ir.i64(sums.rows)),
                              ir.BinOp("sub", walk.row, sums.base))
                adds.append(ir.Store(sums.acc, at, ir.BinOp(
                    "add", ir.VectorLoad(sums.acc, at, lanes), v)))
            return adds
        count: ir.Expr = ir.i64(lanes)
        if op.valid is not None:
            count = ir.BinOp("min", count, ir.BinOp("sub", self.bound(op.valid.bound),
                                                    walk.row))
        i = ir.Var(self.fresh("lane"), ir.I64)
        row = ir.BinOp("add", walk.row, i)
        loop: list[ir.Stmt] = []
        adds: list[ir.Stmt] = []
        for k, vs in enumerate(values):
            copy = ir.Buffer(self.fresh("lanes"), vs.dtype, lanes)
            loop += [ir.LocalArray(copy), ir.Store(copy, ir.i64(0), vs)]
            adds.append(ir.Store(buffer, index(row, k), ir.BinOp(
                "add", ir.Load(buffer, index(row, k)), ir.Load(copy, i))))
        loop.append(ir.For(i, ir.i64(0), count, ir.i64(1), adds))
        if self.forest.n_outputs != 1:
            return loop
        at = index(walk.row, 0)
        whole = [ir.Store(buffer, at, ir.BinOp("add", ir.VectorLoad(buffer, at, lanes),
                                               values[0]))]
        return whole if full is None else [ir.If(full, whole, loop)]

    def reduction(self, source: str, target: str | None, dim: int, indices,
                  rows: tuple[mir.Bound, mir.Bound]) -> "_Reduction":
        """How a ``reduce_dimension`` addresses its buffers (see :class:`_Reduction`)."""
        src, dims = self.buffers[source]
        fixed = [self.affine(i) for i in indices]
        after = [ir.i64(0)] * (len(dims) - 2 - dim - 1)
        n_out = ir.i64(self.forest.n_outputs)

        def at(slot: ir.Expr, e: ir.Expr) -> ir.Expr:
            return self.flat_index(source, fixed + [slot] + after + [ir.i64(0), e])

        def dest(e: ir.Expr) -> tuple[ir.Buffer, ir.Expr]:
            if target is None:
                return src, at(ir.i64(0), e)
            return self.buffers[target][0], self.flat_index(target, [ir.i64(0), e])

        return _Reduction(src, int(dims[dim]), at, dest,
                          ir.BinOp("mul", self.bound(rows[0]), n_out),
                          ir.BinOp("mul", self.bound(rows[1]), n_out), target is None)

    def reduce_dimension(self, source: str, target: str | None, dim: int, indices,
                         rows: tuple[mir.Bound, mir.Bound], width: int) -> list[ir.Stmt]:
        """Add slots of ``dim`` of ``source`` into ``target`` (or into slot 0 of ``source``
        itself when ``target`` is None) and zero the slots read.

        The rows' outputs are contiguous in every slot, so the loop runs over them as one
        flat range; ``width`` > 1 (``vectorReduce``) handles that many neighbours per
        iteration in straight-line code, which LLVM turns into vector instructions of
        that width, with a scalar loop for the remainder."""
        r = self.reduction(source, target, dim, indices, rows)
        lo, hi = r.lo, r.hi

        def lanes(e: ir.Var, k: int) -> list[ir.Stmt]:
            elems = [e if j == 0 else ir.BinOp("add", e, ir.i64(j)) for j in range(k)]
            accs = [ir.Var(self.fresh("acc"), ir.F64) for _ in range(k)]
            slot = ir.Var(self.fresh("slot"), ir.I64)
            body = [ir.Assign(a, ir.BinOp("add", a, ir.Load(r.src, r.at(slot, x))))
                    for a, x in zip(accs, elems)]
            body += [ir.Store(r.src, r.at(slot, x), ir.Const(0.0, ir.F64)) for x in elems]
            code: list[ir.Stmt] = [ir.Declare(a, ir.Const(0.0, ir.F64)) for a in accs]
            code.append(ir.For(slot, ir.i64(int(r.inplace)), ir.i64(r.slots), ir.i64(1),
                               body))
            for a, x in zip(accs, elems):
                buf, index = r.dest(x)
                code.append(ir.Store(buf, index, ir.BinOp("add", ir.Load(buf, index), a)))
            return code

        e = ir.Var(self.fresh("element"), ir.I64)
        if width <= 1:
            return [ir.For(e, lo, hi, ir.i64(1), lanes(e, 1))]
        main = ir.Var(self.fresh("vector_end"), ir.I64)
        tail = ir.Var(self.fresh("element"), ir.I64)
        span = ir.BinOp("mul", ir.BinOp("div", ir.BinOp("sub", hi, lo), ir.i64(width)),
                        ir.i64(width))
        return [ir.Declare(main, ir.BinOp("add", lo, span)),
                ir.For(e, lo, main, ir.i64(width), lanes(e, width)),
                ir.For(tail, main, hi, ir.i64(1), lanes(tail, 1))]


@dataclass(frozen=True)
class _LaneSums:
    """A block's sums by output (see :meth:`_Lowering.lane_sums`): output ``k`` of the
    block's row ``r`` (from ``base``) at ``acc[k * rows + r]``; ``start`` declares them
    and reads the target's rows that exist, ``flush`` writes those back."""

    acc: ir.Buffer
    base: ir.Expr
    rows: int
    target: str
    start: list[ir.Stmt]
    flush: list[ir.Stmt]


@dataclass(frozen=True)
class _Reduction:
    """A ``reduce_dimension``'s addressing: ``at(slot, e)`` is element ``e`` (of the flat
    range ``[lo, hi)`` of the rows' outputs) in slot ``slot`` of ``src``, which has
    ``slots`` slots; ``dest(e)`` is where element ``e``'s sum goes (buffer, index) — slot
    0 of ``src`` itself when ``inplace``."""

    src: ir.Buffer
    slots: int
    at: Callable[[ir.Expr, ir.Expr], ir.Expr]
    dest: Callable[[ir.Expr], tuple[ir.Buffer, ir.Expr]]
    lo: ir.Expr
    hi: ir.Expr
    inplace: bool


def check_walks(fn: mir.Function, forest: Forest, rep: Representation) -> None:
    """Refuse peeled walks that would step past a leaf of ``rep``'s layout (a tile step
    covers several levels, so peeling safe in nodes can overrun in tiles)."""
    tiles = getattr(rep, "tile_size", 1)
    check_peel(fn, forest, rep.shortest_walks(),
               f" in the {rep.name!r} layout" + (f" with tiles of {tiles}" if tiles > 1 else ""))


def lower(fn: mir.Function, forest: Forest, rep: Representation,
          model_params: list[ir.Buffer] | None = None) -> ir.Kernel:
    """The LIR kernel of a legalized MIR function, walking trees through ``rep``; its
    model buffers are ``model_params`` when given (a plan of two layouts: both
    layouts' buffers, :mod:`~silvanforge.representations.pair`), else ``rep``'s."""
    check_walks(fn, forest, rep)
    rows = ir.Buffer("rows", _INPUT_DTYPES[forest.input_dtype], readonly=True)
    n_rows = ir.Var("n_rows", ir.I64)
    n_threads = ir.Var("n_threads", ir.I64)
    tree_output = ir.Buffer("tree_output", ir.I32, readonly=True)
    lowering = _Lowering(forest, rep, rows, n_rows, n_threads, tree_output)
    data_params = []
    for decl in fn.buffers:
        buf = ir.Buffer(_name(decl.name), ir.F64)
        lowering.buffers[decl.name] = (buf, decl.dims)
        data_params.append(buf)
    # The result buffer first, then the privatized ones, in declaration order.
    data_params.sort(key=lambda b: b.name != _name(fn.result))
    body = lowering.body(fn.body)
    if uses_share(fn.body):
        body.insert(0, ir.Declare(lowering.share, share_expr(n_rows, n_threads)))
    finish = ir.Var("finish", ir.I64)
    if not _finish_in_blocks(fn, body, forest, data_params[0], n_rows, finish):
        # Rows are finished in parallel when the kernel has threads to spare.
        body += epilogue(forest, data_params[0], n_rows, finish,
                         n_threads if _parallel(fn.body) else None)
    params = [rows, n_rows, *data_params, n_threads, finish,
              *(lowering.wide_rows or ()), tree_output,
              *(rep.params if model_params is None else model_params)]
    return ir.Kernel(fn.name, params, body)


def _finish_in_blocks(fn: mir.Function, body: list[ir.Stmt], forest: Forest,
                      result: ir.Buffer, n_rows: ir.Expr, finish: ir.Var) -> bool:
    """Where the kernel is one loop over blocks of rows, each iteration walking every
    tree for its rows into the result alone (nothing privatized), finish each block's
    rows at the end of its iteration, and say so: one parallel region a call, not a
    second for the finish, whose threads a PASSIVE wait policy wakes again
    (docs/ARCHITECTURE.md "Thread counts")."""
    top = fn.body[0] if len(fn.body) == 1 else None
    if not (isinstance(top, mir.Loop) and top.kind == BATCH and isinstance(top.step, int)
            and len(fn.buffers) == 1 and len(body) == 1 and isinstance(body[0], ir.For)):
        return False
    loop = body[0]
    stop = ir.BinOp("min", ir.BinOp("add", loop.var, ir.i64(top.step)), n_rows)
    loop.body += epilogue(forest, result, stop, finish, None, first=loop.var)
    return True


def _walks(ops: tuple) -> list[mir.WalkMember | mir.Walk]:
    """The walks (and walk group members) of ``ops``, nested loops and guards included."""
    out: list[mir.WalkMember | mir.Walk] = []
    for op in ops:
        if isinstance(op, (mir.Loop, mir.Guard)):
            out += _walks(op.body)
        elif isinstance(op, mir.Walk):
            out.append(op)
        elif isinstance(op, mir.InterleavedWalk):
            out += op.members
    return out


def uses_share(ops: tuple) -> bool:
    """Whether a loop of ``ops`` steps by MIR's ``S`` (a ``share`` tile of rows)."""
    return any(isinstance(op, (mir.Loop, mir.Guard)) and (
        (isinstance(op, mir.Loop) and not isinstance(op.step, int)) or uses_share(op.body))
        for op in ops)


def share_expr(n_rows: ir.Expr, n_threads: ir.Expr) -> ir.Expr:
    """``mir.share`` in LIR: min(ceil(n_rows / threads), MAX_SHARE), at least 1."""
    threads = ir.BinOp("max", n_threads, ir.i64(1))
    per = ir.BinOp("div", ir.BinOp("add", n_rows, ir.BinOp("sub", threads, ir.i64(1))),
                   threads)
    return ir.BinOp("max", ir.BinOp("min", per, ir.i64(MAX_SHARE)), ir.i64(1))


def _parallel(ops: tuple) -> bool:
    return any(isinstance(op, mir.Loop) and (op.parallel or _parallel(op.body)) for op in ops)


def scratch_shapes(fn: mir.Function, n_rows: int, n_outputs: int) -> list[tuple[int, ...]]:
    """Shapes of the privatized buffers for a call on ``n_rows`` rows, in kernel order."""
    def size(d):
        return n_rows if d == "N" else n_outputs if d == "n_outputs" else int(d)
    return [tuple(size(d) for d in decl.dims) for decl in fn.buffers
            if decl.name != fn.result]


def _groups_in_turn(groups: int) -> list[int]:
    """The counts of a block's first groups that walk in turn at the end of a batch
    (:meth:`_Lowering.vector_walks`), most first: all, then half (when at most half
    have rows), and so on down to the first alone.

    >>> _groups_in_turn(8), _groups_in_turn(3)
    ([8, 4, 2, 1], [3, 1])
    """
    counts = [groups]
    while counts[-1] > 1:
        counts.append(max(1, counts[-1] // 2))
    return counts


def _groups_walked(rows_left: ir.Expr, groups: int, lanes: int) -> ir.Expr:
    """The groups of ``lanes`` rows a block of ``groups`` walks when ``rows_left`` rows
    remain from its first (:func:`_groups_in_turn`: all when more than half have rows,
    else the first half, ...): the ones its row copy fills. A 16-row call in a 128-row
    block copied 128 rows, 1.12-1.31x the time of a 64-row block's (docs/ARCHITECTURE.md
    "The last block")."""
    counts = _groups_in_turn(groups)
    walked: ir.Expr = ir.i64(1)
    for count in reversed(counts[:-1]):
        walked = ir.Select(ir.Cmp("gt", rows_left, ir.i64(count // 2 * lanes)),
                           ir.i64(count), walked)
    return walked
