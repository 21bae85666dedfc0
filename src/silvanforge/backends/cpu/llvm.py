"""LIR → LLVM IR (a :class:`.llvmtext.Module`, built as text).

A LIR variable that something assigns is a stack slot allocated in the function's entry
block, so LLVM's mem2reg turns it into registers; one only declared is the SSA value of
its initialiser (structured code: a declaration dominates every use in its scope), which
keeps the emitted module small (trees as code declare thousands). Buffers are pointers to
their element type. A parallel
``For`` is outlined into an internal function ``void body(i8* data)`` that each OpenMP
thread runs; ``data`` points to a struct, on the caller's stack, of the loop bounds, every
scalar and buffer the body reads from outside, and a counter from which the threads claim
contiguous chunks of iterations (dynamic scheduling: a thread slowed by another process
on its core takes fewer chunks, where static halves would wait for it). Nothing is
written to globals, so the generated code is re-entrant. A block too large for LLVM to
optimise quickly (trees emitted as code) is rendered as calls to internal functions of
bounded size (:mod:`.outline`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Iterator

from ...errors import BackendError
from ...lir import ir
from . import llvmtext as ll
from . import outline
from .freevars import FreeValues, walk_stmts

_LL_TYPES = {ir.BOOL: ll.IntType(1), ir.I8: ll.IntType(8), ir.I32: ll.IntType(32),
             ir.I64: ll.IntType(64), ir.F32: ll.FloatType(), ir.F64: ll.DoubleType()}
_VOID = ll.VoidType()
_I8P = ll.IntType(8).as_pointer()
_I32 = ll.IntType(32)
_I64 = ll.IntType(64)

# LLVM opcodes per LIR operator.
_INT_BINOPS = {"add": "add", "sub": "sub", "mul": "mul", "div": "sdiv", "rem": "srem",
               "and": "and", "or": "or", "xor": "xor", "shl": "shl", "lshr": "lshr",
               "ashr": "ashr"}
_FLOAT_BINOPS = {"add": "fadd", "sub": "fsub", "mul": "fmul", "div": "fdiv", "rem": "frem"}
_FLOAT_MINMAX = {"min": "llvm.minnum", "max": "llvm.maxnum"}  # NaN operand: the other one
_CMP = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
# A branch on a float compare of these operators is rendered as InstCombine leaves it:
# the inverse (unordered) compare, the arms swapped (see float_compare).
_INVERSE_BRANCH = {"le": ">", "ge": "<", "ne": "=="}
# Math functions: LLVM intrinsics, except log1p, which LLVM lacks, from libm.
_MATH = {"exp": "llvm.exp.{t}", "log": "llvm.log.{t}", "sqrt": "llvm.sqrt.{t}",
         "fabs": "llvm.fabs.{t}", "trunc": "llvm.trunc.{t}", "floor": "llvm.floor.{t}"}
_LIBM = {("log1p", ir.F64): "log1p", ("log1p", ir.F32): "log1pf"}

# The OpenMP runtime's C ABI (GNU libgomp; LLVM's libomp implements it too).
_OMP_BODY = ll.FunctionType(_VOID, [_I8P])
_OMP_FUNCS = {
    "GOMP_parallel": ll.FunctionType(_VOID, [_OMP_BODY.as_pointer(), _I8P, _I32, _I32]),
    "omp_get_num_threads": ll.FunctionType(_I32, []),
}


# Statements that end a block by branching: rendered last in a block, they branch
# where control goes after it (see _FunctionBuilder.block).
_BRANCHING = (ir.If, ir.BranchTree)
# Statements whose code InstCombine leaves as the renderer writes it (with float
# compares: see _FunctionBuilder.branch_condition and _e_Cmp); a function of others is
# built with it (llvmtext.Function.combine).
_PLAIN = frozenset({ir.Declare, ir.Assign, ir.Store, ir.If, ir.BranchTree})
_BYTES = {ir.BOOL: 1, ir.I8: 1, ir.I32: 4, ir.I64: 8, ir.F32: 4, ir.F64: 8}
# On AVX-512, lookups into windows of up to this many 32-bit elements permute (16 loads
# of 16, 8 two-table permutes, 7 selects); wider ones gather: permuting the deep levels
# and the leaves of depth-8 trees beat gathering them (docs/ARCHITECTURE.md "Measurements
# behind smaller rules").
PERMUTE_SPAN = 256
# On AVX2, which permutes one table of 8 32-bit lanes and no 64-bit lanes by a vector:
# windows of up to 32 (4 permutes, 3 selects) beat loading a lane at a time, wider ones
# lose (same section).
AVX2_PERMUTE_SPAN = 32


def _offset_terms(index: ir.Expr) -> Iterator[tuple[ir.Expr, ir.Expr]]:
    """(scalar, offsets) for an index ``scalar + (i64)offsets`` of 32-bit offsets, in
    either order (what :meth:`_FunctionBuilder.offsets` and ``through_lookup`` read)."""
    if isinstance(index, ir.BinOp) and index.op == "add":
        for scalar, cast in ((index.a, index.b), (index.b, index.a)):
            if isinstance(cast, ir.Cast) and cast.a.dtype == ir.I32:
                yield scalar, cast.a


def _like(vector: ll.Type, element: ll.Type) -> ll.Type:
    """``element``, or a vector of it as wide as ``vector`` when that is a vector."""
    return (ll.VectorType(element, vector.count) if isinstance(vector, ll.VectorType)
            else element)


def _lane_width(buf: ir.Buffer) -> int:
    """The bits of a lane a lookup in ``buf`` permutes: 64 or 32 (narrower fields
    widen)."""
    return 64 if buf.dtype.bits == 64 else 32


def _suffix(ty: ll.Type, dtype: ir.DType) -> str:
    """An overloaded intrinsic's type suffix: ``f32``, ``v16f32``."""
    return f"v{ty.count}{dtype.name}" if isinstance(ty, ll.VectorType) else dtype.name


def llvm_type(dtype: ir.DType) -> ll.Type:
    """The LLVM type of a LIR scalar type.

    >>> str(llvm_type(ir.F32))
    'float'
    """
    return _LL_TYPES[dtype]


# Called with each outlined function once it is complete (it may be detached from the
# module and compiled elsewhere: :mod:`.build`).
Outlined = Callable[[ll.Module, ll.Function], None]


@dataclass(frozen=True)
class _Render:
    """What every function of one module's rendering shares."""

    module: ll.Module
    openmp: bool
    assigned: frozenset[str]  # names of variables that need a slot
    size: outline.Sizer  # blocks over its budget become functions
    outlined: Outlined | None
    vector_bits: int  # the target's permutes (vector lookups): 512, 256 (AVX2) or 0


def render_module(kernel: ir.Kernel, *, openmp: bool = True,
                  outlined: Outlined | None = None, vector_bits: int = 0,
                  module: ll.Module | None = None) -> ll.Module:
    """Render ``kernel`` as an LLVM module holding ``void @<kernel.name>(params...)``
    (added to ``module`` when given: the functions it outlines are named after the
    kernel, so kernels of distinct names share a module).

    With ``openmp`` False parallel loops are rendered as serial loops. ``outlined`` is
    called with each piece of a large block rendered as a function of its own.
    ``vector_bits``: 512 where the target has AVX-512, 256 where it has AVX2 (vector
    lookups permute instead of gathering), else 0.

    >>> k = ir.Kernel("noop", [ir.Buffer("x", ir.F64), ir.Var("n", ir.I64)], [])
    >>> print(render_module(k).get_global("noop").ftype)
    void (double*, i64)
    """
    module = module if module is not None else ll.Module(name=kernel.name)
    for p in kernel.params:
        if isinstance(p, ir.Buffer) and p.dtype == ir.BOOL:
            raise BackendError(f"kernel {kernel.name}: buffer {p.name!r} of i1; use i8")
    types = [llvm_type(p.dtype).as_pointer() if isinstance(p, ir.Buffer)
             else llvm_type(p.dtype) for p in kernel.params]
    fn = ll.Function(module, ll.FunctionType(_VOID, types), kernel.name)
    size = outline.Sizer()
    render = _Render(module, openmp, _assigned(kernel.body, size), size, outlined,
                     vector_bits)
    body = _FunctionBuilder(render, fn)
    for p, arg in zip(kernel.params, fn.args):
        arg.name = p.name
        if isinstance(p, ir.Buffer):
            body.bind_argument(p, arg)
        else:
            body.declare(p, arg)
    body.block(kernel.body)
    body.finish()
    return module


class _FunctionBuilder:
    """Emits LIR statements into one LLVM function."""

    def __init__(self, render: _Render, fn: ll.Function):
        self.render, self.fn = render, fn
        self.module, self.openmp, self.size = render.module, render.openmp, render.size
        self.assigned = render.assigned
        entry = fn.append_basic_block("entry")
        self.allocas = ll.IRBuilder(entry)  # slots go here so mem2reg can promote them
        self.start = fn.append_basic_block("start")
        # Names (keys: ("var" or "buffer", name)) and known pure instructions (keys:
        # their text); a variable's entry is (value, whether it is the value's slot).
        self.scopes = ll.Scopes()
        self.b = ll.IRBuilder(self.start, known=self.scopes)
        # Stores to buffers, calls and loop heads so far: a stored value is read back
        # from its scope's ("stored", address) only while no other store, call or loop
        # came after it (see _s_Store).
        self.clobbers = 0
        # Whether blocks are rendered whole, never cut into pieces (outline.pieces): a
        # cold function's, which holds a variant of hot code it must run as fast.
        self.whole = False

    def finish(self) -> None:
        self.b.ret_void()
        self.allocas.branch(self.start)

    # ---- names ------------------------------------------------------------------------

    def declare(self, var: ir.Var, value: ll.Value, mutable: bool = False) -> None:
        if not mutable and var.name not in self.assigned:
            self.scopes.set(("var", var.name), (value, False))
            return
        # A vector's slot holds the vector (a LIR dtype is the element type).
        slot = self.allocas.alloca(value.type, name=var.name)
        self.b.store(value, slot)
        self.scopes.set(("var", var.name), (slot, True))

    def value(self, var: ir.Var) -> ll.Value:
        """The current value of ``var``."""
        entry = self.scopes.get(("var", var.name))
        if entry is None:
            raise BackendError(f"kernel {self.fn.name}: undefined var {var.name!r}")
        value, in_slot = entry
        return self.b.load(value) if in_slot else value

    def bind_buffer(self, buf: ir.Buffer, pointer: ll.Value) -> None:
        self.scopes.set(("buffer", buf.name), pointer)

    def bind_argument(self, buf: ir.Buffer, arg: ll.Argument) -> None:
        """Bind a function argument to ``buf``. Nothing writes a read-only buffer while
        the kernel runs (the rows, the model), so it is ``noalias``: stores to the others
        then keep its loaded values live (10% faster on trees as code, whose values were
        otherwise reloaded per tree) and a row's sum in a register."""
        self.bind_buffer(buf, arg)
        if buf.readonly:
            arg.add_attribute("noalias")

    def buffer(self, name: str) -> ll.Value:
        """The pointer bound to buffer ``name``."""
        pointer = self.scopes.get(("buffer", name))
        if pointer is None:
            raise BackendError(f"kernel {self.fn.name}: undefined buffer {name!r}")
        return pointer

    def slot(self, name: str) -> ll.Value:
        """The slot of mutable variable ``name``."""
        entry = self.scopes.get(("var", name))
        if entry is None or not entry[1]:
            raise BackendError(f"kernel {self.fn.name}: undefined var {name!r}")
        return entry[0]

    def block(self, stmts: list[ir.Stmt], then: ll.Block | None = None) -> None:
        """Render ``stmts``; ``then`` is where control goes after them, if known: an
        ``If`` ending the block branches there directly (nested ifs of trees as code
        would otherwise end in chains of blocks that only branch)."""
        self.scopes.push()
        last = stmts[-1] if stmts and then is not None and type(stmts[-1]) in _BRANCHING \
            else None
        pieces = [outline.Piece(stmts)] if self.whole else outline.pieces(stmts, self.size)
        for piece in pieces:
            if piece.free is not None and not any(map(self._is_vector, piece.free.vars)):
                self._outlined(piece.stmts, piece.free)
                continue
            for s in piece.stmts:
                if type(s) not in _PLAIN:
                    self.fn.combine = True
                if s is last:
                    getattr(self, "_s_" + type(s).__name__)(s, then)
                else:
                    getattr(self, "_s_" + type(s).__name__)(s)
        self.scopes.pop()

    def _is_vector(self, var: ir.Var) -> bool:
        """Whether ``var`` holds a vector: a piece of a block that reads one stays in
        place, as a call would pass it through memory (a vector walk's sums, 16 zmm
        registers a tree)."""
        value, in_slot = self.scopes.get(("var", var.name))
        held = value.type.pointee if in_slot else value.type  # type: ignore[attr-defined]
        return isinstance(held, ll.VectorType)

    def _outlined(self, stmts: list[ir.Stmt], free: FreeValues, cold: bool = False) -> None:
        """Render ``stmts`` as an internal function of their ``free`` values (``cold``:
        code that seldom runs); call it."""
        args = [self.value(v) for v in free.vars]
        args += [self.buffer(buf.name) for buf in free.buffers]
        fn = ll.Function(self.module, ll.FunctionType(_VOID, [a.type for a in args]),
                         self.module.get_unique_name(f"{self.fn.name}.part"))
        fn.linkage = "internal"
        fn.attributes.add("noinline")  # the point: LLVM optimises each piece alone
        body = _FunctionBuilder(self.render, fn)
        body.whole = cold  # built apart already: cut no further
        for var, arg in zip(free.vars, fn.args):
            body.declare(var, arg)
        # Nothing in the piece keeps a pointer (but a parallel loop's data for OpenMP):
        # its caller's local arrays stay its own, and LLVM does not reload them around
        # the call (the last block's walks of fewer groups without it: the hot walks of
        # year 1.2x the time).
        captures = any(isinstance(s, ir.For) and s.parallel for s in walk_stmts(stmts))
        for buf, arg in zip(free.buffers, fn.args[len(free.vars):]):
            body.bind_argument(buf, arg)
            if buf.size is not None and not buf.readonly:
                # A caller's local array (the row copy the last block's walks read): no
                # other argument points into it, so the stores of their sums leave it
                # be (not measured apart: year ran the same with and without).
                arg.add_attribute("noalias")
            if not captures:
                arg.add_attribute("nocapture")
        body.block(stmts)
        body.finish()
        fn.cold = cold
        self.b.call(fn, args)
        self.clobbers += 1
        if self.render.outlined is not None:
            self.render.outlined(self.module, fn)

    def function(self, name: str, fnty: ll.FunctionType) -> ll.Function:
        """The module's declaration of ``name``, added on first use."""
        existing = self.module.globals.get(name)
        return existing if existing is not None else ll.Function(self.module, fnty, name)

    # ---- expressions ------------------------------------------------------------------

    def expr(self, e: ir.Expr) -> ll.Value:
        return getattr(self, "_e_" + type(e).__name__)(e)

    def _e_Const(self, e: ir.Const) -> ll.Value:
        return ll.Constant(llvm_type(e.dtype),
                           float(e.value) if e.dtype.is_float else int(e.value))

    def _e_Var(self, e: ir.Var) -> ll.Value:
        return self.value(e)

    def _e_Load(self, e: ir.Load) -> ll.Value:
        through = self.through_lookup(e)
        if through is not None:
            return through
        split = self.offsets(e.buffer, e.index)
        if split is not None:
            return self.gather_from(split[0], split[1], e.buffer)
        address = self.element_address(e.buffer, e.index)
        if isinstance(address.type, ll.VectorType):
            return self.gather(address, e.buffer)
        stored = self.scopes.get(("stored", address.ref))
        if (stored is not None and stored[1] == self.clobbers
                and stored[0].type == address.type.pointee):  # type: ignore[attr-defined]
            return stored[0]
        return self.b.load(address, invariant=e.buffer.readonly)

    def gather_from(self, start: ll.Value, offsets: ll.Value, buf: ir.Buffer) -> ll.Value:
        """One element per lane at ``start`` + the lane's offset (32 or 64 bits). Where the
        target permutes (x86 with AVX2 or AVX-512), a load per lane (:meth:`_lane_offset`),
        which beat both ``vpgatherdps`` and LLVM's own scalarized gather, whose
        addresses it computes as 64-bit vectors (docs/ARCHITECTURE.md "Vector walks
        across rows"). Elsewhere one gather."""
        if not self.render.vector_bits:
            return self.gather(self.b.gep(start, [offsets]), buf)
        return self._lane_loads(buf, offsets.type.count,  # type: ignore[attr-defined]
                                lambda lane: self.b.gep(start, [self._lane_offset(offsets,
                                                                                  lane)]))

    def through_lookup(self, e: ir.Load) -> ll.Value | None:
        """A vector load at ``scalar + (i64)(lookup * scale + iota)`` (a vector walk's
        row values at a level's features) whose lookup loads a lane at a time on this
        target: each lane's offset computed from its looked-up element as a scalar, and
        its value loaded (the lookup's elements are not put into a vector only to be
        taken out again: 0.88-0.90x the time on higgs and year built for x86-64-v3,
        docs/ARCHITECTURE.md "Vector walks across rows"). Else None."""
        if not self.render.vector_bits:
            return None
        for scalar, column in _offset_terms(e.index):
            scaled = column.a if isinstance(column, ir.BinOp) and column.op == "add" \
                and isinstance(column.b, ir.Iota) and column.b.dtype == ir.I32 else None
            if not (isinstance(scaled, ir.BinOp) and scaled.op == "mul"
                    and isinstance(scaled.a, ir.Lookup) and isinstance(scaled.b, ir.Const)):
                continue
            lookup, lanes = scaled.a, column.b.lanes  # type: ignore[union-attr]
            if self.permutes(lookup, lanes):
                return None
            start = self.address(e.buffer, scalar)
            if isinstance(start.type, ll.VectorType):
                return None
            table = self.address(lookup.buffer, lookup.base)
            positions = self.expr(lookup.offset)
            factor = ll.Constant(_I32, int(scaled.b.value))

            def at(lane: int) -> ll.Value:
                element = self.b.load(self.b.gep(table, [self._lane_offset(positions, lane)]),
                                      invariant=lookup.buffer.readonly)
                offset = self.b.binary("add", self.b.binary("mul", element, factor),
                                       ll.Constant(_I32, lane))
                return self.b.gep(start, [self.b.convert("zext", offset, _I64)])
            return self._lane_loads(e.buffer, lanes, at)
        return None

    def _lane_loads(self, buf: ir.Buffer, lanes: int,
                    at: Callable[[int], ll.Value]) -> ll.Value:
        """A vector of ``lanes`` elements of ``buf``, lane ``i`` loaded from ``at(i)``."""
        value = ll.Value(ll.VectorType(llvm_type(buf.dtype), lanes), "poison")
        for lane in range(lanes):
            value = self.b.insert(value, self.b.load(at(lane), invariant=buf.readonly), lane)
        return value

    def _lane_offset(self, offsets: ll.Value, lane: int) -> ll.Value:
        """Lane ``lane`` of ``offsets`` as a 64-bit index (zero-extended: offsets index
        a buffer, never negative, and on x86 a 32-bit register write clears the upper
        half, so the offset is a load's index register as it is). 32-bit offsets leave
        the vector two at a time, as one 64-bit lane split by a shift and a mask: half
        the moves from vector to general registers (AVX-512: higgs 0.90x the time on Zen
        4; AVX2: level on Zen 4, 0.93-0.96x on Zen 5; docs/ARCHITECTURE.md "Vector walks
        across rows")."""
        count = offsets.type.count  # type: ignore[attr-defined]
        if offsets.type.element == _I32 and count % 2 == 0:
            pairs = self.b.convert("bitcast", offsets, ll.VectorType(_I64, count // 2))
            pair = self.b.extract(pairs, lane // 2)
            return self.b.binary("lshr", pair, ll.Constant(_I64, 32)) if lane % 2 else \
                self.b.binary("and", pair, ll.Constant(_I64, 0xFFFFFFFF))
        offset = self.b.extract(offsets, lane)
        return offset if offset.type == _I64 else self.b.convert("zext", offset, _I64)

    def gather(self, addresses: ll.Value, buf: ir.Buffer) -> ll.Value:
        """One element per lane from a vector of addresses (all lanes enabled)."""
        lanes = addresses.type.count  # type: ignore[attr-defined]
        element = llvm_type(buf.dtype)
        vty = ll.VectorType(element, lanes)
        mask = ll.VectorType(ll.IntType(1), lanes)
        fnty = ll.FunctionType(vty, [addresses.type, _I32, mask, vty])
        name = f"llvm.masked.gather.{_suffix(vty, buf.dtype)}.v{lanes}p0"
        args = [addresses, ll.Constant(_I32, _BYTES[buf.dtype]),
                ll.splat(ll.Constant(ll.IntType(1), 1), lanes),
                ll.Value(vty, "poison")]
        return self.b.call(self.function(name, fnty), args, pure=buf.readonly)

    def _e_Broadcast(self, e: ir.Broadcast) -> ll.Value:
        return self.splat(self.expr(e.a), e.lanes)

    def _e_Iota(self, e: ir.Iota) -> ll.Value:
        element = llvm_type(e.dtype)
        lanes = ", ".join(f"{element} {i}" for i in range(e.lanes))
        return ll.Value(ll.VectorType(element, e.lanes), f"<{lanes}>")

    def _e_VectorLoad(self, e: ir.VectorLoad) -> ll.Value:
        return self.b.load_vector(self.address(e.buffer, e.index), e.lanes,
                                  invariant=e.buffer.readonly)

    def _e_Extract(self, e: ir.Extract) -> ll.Value:
        return self.b.extract(self.expr(e.a), e.lane)

    def _e_Shuffle(self, e: ir.Shuffle) -> ll.Value:
        return self.b.shuffle(self.expr(e.a), self.expr(e.b), e.order)

    def _e_Lookup(self, e: ir.Lookup) -> ll.Value:
        """Where the target has AVX-512, a window of at most :data:`PERMUTE_SPAN` elements
        of 32 bits or fewer (half as many of 64 bits) is loaded whole, a register at a
        time (the last one masked, so nothing past the window is read), and permuted by
        the offsets, a register of lanes at a time (a permute is one instruction, a
        gather one load per lane); on AVX2, windows of at most :data:`AVX2_PERMUTE_SPAN`
        elements of 32 bits or fewer, with one-table permutes. Other lookups gather."""
        offset = self.expr(e.offset)
        lanes = offset.type.count  # type: ignore[attr-defined]
        width = _lane_width(e.buffer)
        vector_bits = self.render.vector_bits
        avx2 = vector_bits == 256
        per = vector_bits // width  # lanes a register (read only where it permutes)
        start = self.address(e.buffer, e.base)
        if not self.permutes(e, lanes):
            return self.gather_from(start, offset, e.buffer)
        ity = ll.VectorType(ll.IntType(width), per)
        windows = [self.window(e.buffer, start, k, min(per, e.span - k), ity)
                   for k in range(0, max(e.span, 1), per)]
        while len(windows) & (len(windows) - 1):  # the select tree halves a power of 2
            windows.append(windows[-1])  # never picked: every offset is below the span
        kind = "si" if width == 32 else "di"
        permute = self.function("llvm.x86.avx2.permd" if avx2 else
                                f"llvm.x86.avx512.permvar.{kind}.512",
                                ll.FunctionType(ity, [ity, ity]))
        chunks = []
        for first in range(0, lanes, per):
            part = offset if lanes == per else \
                self.b.shuffle(offset, offset, range(first, first + per))
            if part.type != ity:
                part = self.b.convert("trunc" if part.type.element.width > width  # type: ignore
                                      else "sext", part, ity)
            if len(windows) == 1 or avx2:  # each window, then by the offset's high bits
                picked = [self.b.call(permute, [w, part], pure=True) for w in windows]
                bit = per
            else:  # each pair by the offset's low bits, then by its higher bits
                pair = self.function(
                    f"llvm.x86.avx512.vpermi2var.{'d' if width == 32 else 'q'}.512",
                    ll.FunctionType(ity, [ity, ity, ity]))
                picked = [self.b.call(pair, [windows[k], part, windows[k + 1]], pure=True)
                          for k in range(0, len(windows), 2)]
                bit = 2 * per
            while len(picked) > 1:
                high = self.b.icmp_unsigned("!=", self.b.binary(
                    "and", part, ll.splat(ll.Constant(ity.element, bit), per)),
                    ll.splat(ll.Constant(ity.element, 0), per))
                picked = [self.b.select(high, picked[k + 1], picked[k])
                          for k in range(0, len(picked), 2)]
                bit *= 2
            chunks.append(picked[0])
        while len(chunks) & (len(chunks) - 1):  # concatenated pairwise, then cut
            chunks.append(chunks[-1])
        while len(chunks) > 1:
            n = chunks[0].type.count  # type: ignore[attr-defined]
            chunks = [self.b.shuffle(chunks[k], chunks[k + 1], range(2 * n))
                      for k in range(0, len(chunks), 2)]
        value = chunks[0]
        if value.type.count > lanes:  # type: ignore[attr-defined]
            value = self.b.shuffle(value, value, range(lanes))
        element = llvm_type(e.buffer.dtype)
        if e.buffer.dtype.bits != width:
            return self.b.convert("trunc", value, ll.VectorType(element, lanes))
        if e.buffer.dtype.is_float:
            return self.b.convert("bitcast", value, ll.VectorType(element, lanes))
        return value

    def permutes(self, e: ir.Lookup, lanes: int) -> bool:
        """Whether :meth:`_e_Lookup` permutes the window of ``e`` (for ``lanes`` lanes),
        rather than loading it a lane at a time."""
        width = _lane_width(e.buffer)
        vector_bits = self.render.vector_bits
        span = AVX2_PERMUTE_SPAN if vector_bits == 256 and width == 32 else \
            PERMUTE_SPAN * 32 // width if vector_bits == 512 else 0
        return bool(span) and lanes % (vector_bits // width) == 0 and e.span <= span

    def window(self, buf: ir.Buffer, start: ll.Value, first: int, count: int,
               ity: ll.VectorType) -> ll.Value:
        """Elements ``first .. first + count`` of ``buf`` from ``start`` as the lanes of
        ``ity`` (a lane past ``count`` is 0 and never read)."""
        per = ity.count
        at = start if first == 0 else self.b.gep(start, [ll.Constant(_I64, first)])
        if count >= per:
            window = self.b.load_vector(at, per, invariant=buf.readonly)
        else:
            vty = ll.VectorType(llvm_type(buf.dtype), per)
            mask = ll.VectorType(ll.IntType(1), per)
            at = self.b.pointer_to(at, vty)
            fnty = ll.FunctionType(vty, [at.type, _I32, mask, vty])
            name = f"llvm.masked.load.{_suffix(vty, buf.dtype)}.p0"
            lanes = ", ".join(f"i1 {int(i < count)}" for i in range(per))
            window = self.b.call(self.function(name, fnty), [
                at, ll.Constant(_I32, _BYTES[buf.dtype]), ll.Value(mask, f"<{lanes}>"),
                ll.Value(vty, "zeroinitializer")], pure=buf.readonly)
        if buf.dtype.bits != ity.element.width:  # narrow fields widen to 32-bit lanes
            return self.b.convert("sext", window, ity)
        if buf.dtype.is_float:
            return self.b.convert("bitcast", window, ity)
        return window

    def _e_LaneBits(self, e: ir.LaneBits) -> ll.Value:
        a = self.expr(e.a)
        lanes = a.type.count  # type: ignore[attr-defined]
        if lanes > e.dtype.bits:
            raise BackendError(f"{lanes} lanes do not fit the bits of a {e.dtype}")
        packed = self.b.convert("bitcast", a, ll.IntType(lanes))
        return packed if lanes == e.dtype.bits else \
            self.b.convert("zext", packed, llvm_type(e.dtype))

    def _e_BinOp(self, e: ir.BinOp) -> ll.Value:
        a, b = self.lanewise(e.a, e.b)
        if e.op in ("min", "max"):
            if e.dtype.is_float:
                fnty = ll.FunctionType(a.type, [a.type, a.type])
                name = f"{_FLOAT_MINMAX[e.op]}.{_suffix(a.type, e.dtype)}"
                return self.b.call(self.function(name, fnty), [a, b], pure=True)
            return self.b.select(self.b.icmp_signed("<" if e.op == "min" else ">", a, b),
                                 a, b)
        table = _FLOAT_BINOPS if e.dtype.is_float else _INT_BINOPS
        if e.op not in table:
            raise BackendError(f"operator {e.op!r} is not defined on {e.dtype}")
        return self.b.binary(table[e.op], a, b)

    def _e_Cmp(self, e: ir.Cmp) -> ll.Value:
        a, b = self.lanewise(e.a, e.b)
        if e.a.dtype.is_float:
            return self.float_compare(e.op, a, b)[0]
        self.fn.combine = True  # (InstCombine canonicalises integer compares' selects)
        if e.a.dtype == ir.BOOL:  # true is 1, not -1
            return self.b.icmp_unsigned(_CMP[e.op], a, b)
        return self.b.icmp_signed(_CMP[e.op], a, b)

    def _e_Not(self, e: ir.Not) -> ll.Value:
        self.fn.combine = True
        return self.b.not_(self.expr(e.a))

    def _e_IsNaN(self, e: ir.IsNaN) -> ll.Value:
        a = self.expr(e.a)
        return self.b.fcmp_unordered("uno", a, a)

    def _e_Select(self, e: ir.Select) -> ll.Value:
        cond, a, b = self.lanewise(e.cond, e.a, e.b)
        return self.b.select(cond, a, b)

    def lanewise(self, *exprs: ir.Expr) -> list[ll.Value]:
        """The operands of a lane-wise operation: scalars broadcast to the lanes of a
        vector operand, if there is one."""
        values = [self.expr(x) for x in exprs]
        lanes = [v.type.count for v in values if isinstance(v.type, ll.VectorType)]
        if not lanes:
            return values
        return [v if isinstance(v.type, ll.VectorType) else self.splat(v, lanes[0])
                for v in values]

    def splat(self, value: ll.Value, lanes: int) -> ll.Value:
        if isinstance(value, ll.Constant):
            return ll.splat(value, lanes)
        return self.b.broadcast(value, lanes)

    def _e_Cast(self, e: ir.Cast) -> ll.Value:
        a, src, dst = self.expr(e.a), e.a.dtype, e.dtype
        to = _like(a.type, llvm_type(dst))
        if src == dst:
            return a
        if dst == ir.BOOL:  # nonzero is true
            zero = ll.Constant(llvm_type(src), 0.0 if src.is_float else 0)
            if isinstance(a.type, ll.VectorType):
                zero = ll.splat(zero, a.type.count)
            return (self.b.fcmp_unordered("!=", a, zero) if src.is_float
                    else self.b.icmp_unsigned("!=", a, zero))
        if src.is_float and dst.is_float:
            op = "fpext" if dst.bits > src.bits else "fptrunc"
        elif src.is_float:
            op = "fptosi"
        elif dst.is_float:
            op = "uitofp" if src == ir.BOOL else "sitofp"
        elif dst.bits < src.bits:
            op = "trunc"
        else:
            op = "zext" if src == ir.BOOL else "sext"
        return self.b.convert(op, a, to)

    def _e_Bitcast(self, e: ir.Bitcast) -> ll.Value:
        if e.a.dtype.bits != e.dtype.bits or e.a.dtype == ir.BOOL:
            raise BackendError(f"bitcast from {e.a.dtype} to {e.dtype}: widths differ")
        a = self.expr(e.a)
        return self.b.convert("bitcast", a, _like(a.type, llvm_type(e.dtype)))

    def _e_Math(self, e: ir.Math) -> ll.Value:
        a = self.expr(e.a)
        if e.func in ("cttz", "ctpop") and not e.dtype.is_float:
            # cttz's flag: a zero input is defined (the width).
            flag = [ll.Constant(ll.IntType(1), 0)] if e.func == "cttz" else []
            fnty = ll.FunctionType(a.type, [a.type] + [f.type for f in flag])
            name = f"llvm.{e.func}.{_suffix(a.type, e.dtype)}"
            return self.b.call(self.function(name, fnty), [a] + flag, pure=True)
        if not e.dtype.is_float:
            raise BackendError(f"math function {e.func!r} on {e.dtype}: floats only")
        name = _MATH[e.func].format(t=_suffix(a.type, e.dtype)) \
            if isinstance(a.type, ll.VectorType) and e.func in _MATH \
            else _LIBM.get((e.func, e.dtype)) or _MATH[e.func].format(t=e.dtype.name)
        return self.b.call(self.function(name, ll.FunctionType(a.type, [a.type])), [a],
                           pure=True)

    def offsets(self, buf: ir.Buffer, index: ir.Expr) -> tuple[ll.Value, ll.Value] | None:
        """A vector index ``scalar + (i64)offsets`` of 32-bit offsets as (the scalar's
        address, the offsets): gathered from the one address by those offsets, not by
        64-bit addresses a lane. Else None."""
        for scalar, term in _offset_terms(index):
            offsets = self.expr(term)
            if isinstance(offsets.type, ll.VectorType):
                start = self.address(buf, scalar)
                if not isinstance(start.type, ll.VectorType):
                    return start, offsets
        return None

    def address(self, buf: ir.Buffer, index: ir.Expr) -> ll.Value:
        """The address of element ``index`` (a vector of addresses for a vector)."""
        split = self.offsets(buf, index)
        if split is not None:
            return self.b.gep(split[0], [split[1]])
        return self.element_address(buf, index)

    def element_address(self, buf: ir.Buffer, index: ir.Expr) -> ll.Value:
        """:meth:`address` without looking for 32-bit offsets (a caller that looked)."""
        i = self.expr(index)
        if i.type.text != "i64":  # (by text: a type's equality is Python code)
            wide = _like(i.type, _I64)
            if i.type != wide:
                i = self.b.convert("sext", i, wide)
        return self.b.gep(self.buffer(buf.name), [i])

    # ---- statements -------------------------------------------------------------------

    def _s_Declare(self, s: ir.Declare) -> None:
        self.declare(s.var, self.expr(s.init))

    def _s_Assign(self, s: ir.Assign) -> None:
        self.b.store(self.expr(s.value), self.slot(s.var.name))

    def _s_Store(self, s: ir.Store) -> None:
        """A store; a load of the same address in a block it dominates, with no other
        store, call or loop head between them, reads the stored value (a row's sum
        from tree to tree of trees as code: what LLVM's GVN did, whose pass was a fifth
        of those modules' LLVM time; docs/ARCHITECTURE.md "Compiling big kernels")."""
        value = self.expr(s.value)
        address = self.address(s.buffer, s.index)
        vector = isinstance(value.type, ll.VectorType)
        self.b.store(value, address, _BYTES[s.buffer.dtype] if vector else 0)
        self.clobbers += 1
        if not vector and not isinstance(address.type, ll.VectorType):
            self.scopes.set(("stored", address.ref), (value, self.clobbers))

    def _s_AtomicAdd(self, s: ir.AtomicAdd) -> None:
        self.clobbers += 1
        op = "fadd" if s.buffer.dtype.is_float else "add"
        self.b.atomic_rmw(op, self.address(s.buffer, s.index), self.expr(s.value),
                          "monotonic")

    def _e__Claim(self, e: "_Claim") -> ll.Value:
        self.clobbers += 1
        counter = self.address(e.counter, ir.i64(0))
        return self.b.atomic_rmw("add", counter, self.expr(e.grain), "monotonic")

    def _s_Prefetch(self, s: ir.Prefetch) -> None:
        # llvm.prefetch(address, rw=read, locality=keep in all cache levels, data cache)
        fnty = ll.FunctionType(_VOID, [_I8P, _I32, _I32, _I32])
        ptr = self.b.convert("bitcast", self.address(s.buffer, s.index), _I8P)
        args = [ptr] + [ll.Constant(_I32, v) for v in (0, 3, 1)]
        self.b.call(self.function("llvm.prefetch.p0", fnty), args)

    # GPU-only nodes (thread ids, barriers, shared memory) have no meaning on a CPU.
    def _e_ThreadIndex(self, e: ir.ThreadIndex) -> ll.Value:
        raise BackendError(f"kernel {self.fn.name}: GPU thread index {e.kind}.{e.dim} "
                           "on a CPU target")

    def _s_Barrier(self, s: ir.Barrier) -> None:
        raise BackendError(f"kernel {self.fn.name}: GPU barrier on a CPU target")

    def _s_LocalArray(self, s: ir.LocalArray) -> None:
        if s.buffer.shared:
            raise BackendError(f"kernel {self.fn.name}: shared-memory array "
                               f"{s.buffer.name!r} on a CPU target")
        if s.buffer.size is None or s.buffer.size <= 0:
            raise BackendError(f"local array {s.buffer.name!r} needs a positive size")
        # On a cache line: a vector walk's row copy is read by vectors of up to 64
        # bytes, each then in one line; at float alignment the frame decided (year
        # 0.90x the time once aligned; docs/ARCHITECTURE.md "Local arrays on a cache
        # line").
        array = self.allocas.alloca(ll.ArrayType(llvm_type(s.buffer.dtype), s.buffer.size),
                                    name=s.buffer.name, align=64)
        zero = ll.Constant(_I64, 0)
        self.bind_buffer(s.buffer, self.allocas.gep(array, [zero, zero]))

    def _s_While(self, s: ir.While) -> None:
        self.fn.loops = True
        cond = self.fn.append_basic_block("while.cond")
        body = self.fn.append_basic_block("while.body")
        done = self.fn.append_basic_block("while.end")
        self.b.branch(cond)
        self.b.position_at_end(cond)
        # The body's stores come before the test's and the body's loads from the
        # second run on: nothing stored before the loop is read back inside it.
        self.clobbers += 1
        self.b.cbranch(self.expr(s.cond), body, done)
        self.b.position_at_end(body)
        self.block(s.body)
        self.b.branch(cond)
        self.b.position_at_end(done)

    def _s_If(self, s: ir.If, then: ll.Block | None = None) -> None:
        """``then``: where control goes after the ``If`` (see :meth:`block`)."""
        cond = self.branch_condition(s.cond)
        arms = [(self.fn.append_basic_block("if"), s.then)]
        if s.orelse:
            arms.append((self.fn.append_basic_block("else"), s.orelse))
        end = then or self.fn.append_basic_block("endif")
        self.cbranch(cond, arms[0][0], arms[1][0] if s.orelse else end)
        for block, stmts in arms:
            self.b.position_at_end(block)
            self.block(stmts, end)
            if not self.b.block.terminated:
                self.b.branch(end)
        if then is None:
            self.b.position_at_end(end)

    def _s_Cold(self, s: ir.Cold) -> None:
        """A function of its own where the block can be one (:func:`.outline.as_function`),
        which :mod:`.jit` may build in another process; else in place."""
        free = outline.as_function(s.body, self.size)
        if free is None:
            self.block(s.body)
            return
        self.scopes.push()  # what its arguments compute stays here
        self._outlined(s.body, free, cold=True)
        self.scopes.pop()

    def float_compare(self, op: str, a: ll.Value, b: ll.Value,
                      branch: bool = False) -> tuple[ll.Value, bool]:
        """``a op b`` of floats (ordered), and whether it is rendered as its inverse:
        for a ``branch``, ``le``, ``ge`` and ``ne`` are the inverse unordered compare
        (the branch's arms swap, :meth:`cbranch`), the form InstCombine gives them, so
        that trees as code need not run that pass (docs/ARCHITECTURE.md, "Compiling
        big kernels")."""
        if branch and op in _INVERSE_BRANCH:
            return self.b.fcmp_unordered(_INVERSE_BRANCH[op], a, b), True
        return self.b.fcmp_ordered(_CMP[op], a, b), False

    def cbranch(self, cond: tuple[ll.Value, bool], yes: ll.Block, no: ll.Block) -> None:
        """Branch on a :meth:`branch_condition` or :meth:`float_compare` answer."""
        value, inverse = cond
        self.b.cbranch(value, *((no, yes) if inverse else (yes, no)))

    def branch_condition(self, cond: ir.Expr) -> tuple[ll.Value, bool]:
        """``cond`` rendered for a branch, and whether it is its inverse
        (:meth:`float_compare`)."""
        if isinstance(cond, ir.Cmp) and cond.a.dtype.is_float:
            return self.float_compare(cond.op, *self.lanewise(cond.a, cond.b), branch=True)
        if not isinstance(cond, (ir.Cmp, ir.Var, ir.Const)):
            self.fn.combine = True  # (it folds logic of compares, a NaN test's form)
        return self.expr(cond), False

    def _s_BranchTree(self, s: ir.BranchTree, then: ll.Block | None = None) -> None:
        """What rendering :meth:`~.ir.BranchTree.expand` gives, in the same order,
        from the tree's numbers: its compares are not built as expressions and rendered
        one by one, most of the time of trees as code (docs/ARCHITECTURE.md "Trees as
        numbers"). A tree over the outlining budget, or of compares other than of
        floats, renders its expansion (whose big blocks are cut into functions)."""
        if self.size(s).size > outline.BUDGET or not s.table.dtype.is_float:
            self.block(s.expand(), then)
            return
        b, sizes, select = self.b, s.sizes(), s.select_nodes
        slot, leaf_type = self.slot(s.var.name), llvm_type(s.var.dtype)
        table: list[ll.Value] = []  # looked up where a compare first reads it (a tree
        readonly = s.table.readonly  # of none is not passed it)

        def cond(k: int, for_branch: bool = False) -> tuple[ll.Value, bool]:
            if s.test[k] >= 0:  # (a category or missing-value rule's test)
                self.fn.combine = True
                return self.expr(s.tests[s.test[k]]), False
            x = self._row_value(s.values[s.value[k]])
            if not table:
                table.append(self.buffer(s.table.name))
            t = b.load(b.element(table[0], s.slot[k]), invariant=readonly)
            return self.float_compare(s.op[k], x, t, for_branch)

        def value(k: int) -> ll.Value:
            if s.left[k] < 0:
                return ll.Constant(leaf_type, s.leaf[k])
            c = cond(k)[0]
            return b.select(c, value(s.left[k]), value(s.right[k]))

        def branch(k: int, end: ll.Block | None) -> ll.Block:
            c = cond(k, for_branch=True)
            yes, no = self.fn.append_basic_block("if"), self.fn.append_basic_block("else")
            end = end or self.fn.append_basic_block("endif")
            self.cbranch(c, yes, no)
            for block, child in ((yes, s.left[k]), (no, s.right[k])):
                b.position_at_end(block)
                self.scopes.push()
                if sizes[child] <= select:
                    b.store(value(child), slot)
                    b.branch(end)
                else:
                    branch(child, end)
                self.scopes.pop()
            return end

        if sizes[0] <= select:
            b.store(value(0), slot)
            return
        end = branch(0, then)
        if then is None:
            b.position_at_end(end)

    def _row_value(self, e: ir.Expr) -> ll.Value:
        """``e`` rendered once where it dominates and no store came after: a tree's row
        values, each read at many nodes (rendering it again found the same value by
        its text, at several times the cost)."""
        key = ("row value", id(e))
        known = self.scopes.get(key)
        if known is not None and known[1] == self.clobbers:
            return known[0]
        value = self.expr(e)
        self.scopes.set(key, (value, self.clobbers))
        return value

    def _s_Switch(self, s: ir.Switch) -> None:
        """A jump table of the cases. In a switch over the budget each case is a function
        of its own where it can be one (trees as code dispatched on a variable tree
        index: a table of per-tree functions), so that LLVM handles each tree alone and
        compile time stays linear in the forest, whatever the size of each case."""
        value = self.expr(s.value)
        end = self.fn.append_basic_block("switch.end")
        cases = [(i, self.fn.append_basic_block("case"), case)
                 for i, case in enumerate(s.cases) if case]
        self.b.switch(value, end, [(i, block) for i, block, _ in cases])
        split = self.size(s).size > outline.BUDGET
        for _, block, case in cases:
            self.b.position_at_end(block)
            free = outline.as_function(case, self.size) if split else None
            if free is None:
                self.block(case, end)
            else:
                self.scopes.push()  # what its arguments compute stays in the case
                self._outlined(case, free)
                self.scopes.pop()
            if not self.b.block.terminated:
                self.b.branch(end)
        self.b.position_at_end(end)

    def _s_For(self, s: ir.For) -> None:
        if s.parallel and self.openmp:
            self._parallel_for(s)
        else:
            self.loop(s.var, self.expr(s.start), self.expr(s.stop), self.expr(s.step),
                      lambda: self.block(s.body))

    def loop(self, var: ir.Var, start: ll.Value, stop: ll.Value, step: ll.Value,
             body: Callable[[], None]) -> None:
        """``for (var = start; var < stop; var += step) body()``; bounds evaluated once."""
        self.fn.loops = True
        self.scopes.push()
        self.declare(var, start, mutable=True)
        slot = self.slot(var.name)
        cond = self.fn.append_basic_block("for.cond")
        block = self.fn.append_basic_block("for.body")
        done = self.fn.append_basic_block("for.end")
        self.b.branch(cond)
        self.b.position_at_end(cond)
        self.clobbers += 1  # as in _s_While
        self.b.cbranch(self.b.icmp_signed("<", self.b.load(slot), stop), block, done)
        self.b.position_at_end(block)
        body()
        self.b.store(self.b.binary("add", self.b.load(slot), step), slot)
        self.b.branch(cond)
        self.b.position_at_end(done)
        self.scopes.pop()

    # ---- parallel loops ---------------------------------------------------------------

    def _parallel_for(self, s: ir.For) -> None:
        free = self.size.free_of_loop(s)
        if free.assigned_outside:
            raise BackendError(
                f"kernel {self.fn.name}: parallel loop over {s.var.name!r} assigns "
                f"{', '.join(map(repr, free.assigned_outside))}, declared outside it; "
                "shared mutable scalars would race (declare them inside the loop)")
        bounds = [self.expr(s.start), self.expr(s.stop), self.expr(s.step)]
        values = bounds + [self.value(v) for v in free.vars]
        values += [self.buffer(buf.name) for buf in free.buffers]
        counter = self.allocas.alloca(_I64, name="omp.counter")
        self.b.store(ll.Constant(_I64, 0), counter)  # reset on every run of the loop
        values.append(counter)
        data_type = ll.LiteralStructType([v.type for v in values])
        data = self.allocas.alloca(data_type, name="omp.data")
        for k, v in enumerate(values):
            self.b.store(v, self.b.gep(data, [ll.Constant(_I32, 0), ll.Constant(_I32, k)]))

        outlined = ll.Function(self.module, _OMP_BODY,
                               self.module.get_unique_name(f"{self.fn.name}.omp"))
        outlined.linkage = "internal"
        _emit_chunk(self.render, outlined, s, free, data_type)

        threads = (ll.Constant(_I32, 0) if s.threads is None
                   else self._thread_count(self.expr(s.threads)))
        # One thread, or at most one iteration: call the body directly. Outside a
        # parallel region OpenMP reports thread 0 of 1, so the body runs every iteration,
        # and the call costs no thread start-up (small batches, n_jobs=1).
        start, stop, step = bounds
        one_iteration = self.b.icmp_signed("<=", self.b.binary("sub", stop, start), step)
        serial = self.b.binary("or", one_iteration,
                            self.b.icmp_unsigned("==", threads, ll.Constant(_I32, 1)))
        self.clobbers += 1
        with self.b.if_else(serial) as (direct, parallel):
            with direct:
                self.b.call(outlined, [self.b.convert("bitcast", data, _I8P)])
            with parallel:
                self.b.call(self.function("GOMP_parallel", _OMP_FUNCS["GOMP_parallel"]),
                            [outlined, self.b.convert("bitcast", data, _I8P), threads,
                             ll.Constant(_I32, 0)])

    def _thread_count(self, threads: ll.Value) -> ll.Value:
        """An i64 thread count as GOMP's unsigned; <= 0 means the runtime's default."""
        positive = self.b.icmp_signed(">", threads, ll.Constant(threads.type, 0))
        clamped = self.b.select(positive, threads, ll.Constant(threads.type, 0))
        return (self.b.convert("trunc", clamped, _I32) if threads.type.width > 32
                else clamped)

    def omp_call(self, name: str, dtype: ir.DType) -> ll.Value:
        """Call an ``omp_get_*`` i32 function; the result widened to ``dtype``."""
        value = self.b.call(self.function(name, _OMP_FUNCS[name]), [])
        to = llvm_type(dtype)
        return value if to == _I32 else self.b.convert("sext", value, to)


def _emit_chunk(render: _Render, fn: ll.Function, loop: ir.For, free: FreeValues,
                data_type: ll.Type) -> None:
    """Fill ``fn``: unpack the data struct, run this thread's contiguous iterations."""
    t = loop.var.dtype
    start, stop, step, nt = (ir.Var(f"omp.{n}", t) for n in ("start", "stop", "step", "nt"))
    chunks = _chunk_loop(loop, start, stop, step, nt)
    body = _FunctionBuilder(replace(render, assigned=render.assigned |
                                    _assigned(chunks, render.size)), fn)
    data = body.b.convert("bitcast", fn.args[0], data_type.as_pointer())
    fields = [body.b.load(body.b.gep(data, [ll.Constant(_I32, 0), ll.Constant(_I32, k)]))
              for k in range(len(data_type.elements))]
    # The chunks run in a function of their own, inlined, whose read-only buffers are
    # noalias arguments (pointers loaded from the struct carry no such fact): stores
    # to the results then neither reload the model nor keep a row's sum in memory.
    inner = ll.Function(render.module, ll.FunctionType(_VOID, [f.type for f in fields]),
                        render.module.get_unique_name(f"{fn.name}.chunks"))
    inner.linkage = "internal"
    inner.attributes.add("alwaysinline")
    body.b.call(inner, fields)
    body.finish()
    body = _FunctionBuilder(body.render, inner)
    args = list(inner.args)
    for var, value in zip([start, stop, step, *free.vars], args):
        body.declare(var, value)
    for buf, value in zip(free.buffers, args[3 + len(free.vars):]):
        body.bind_argument(buf, value)
    body.bind_buffer(_COUNTER, args[-1])
    body.declare(nt, body.omp_call("omp_get_num_threads", t))
    body.block(chunks)
    body.finish()


def _assigned(stmts: list[ir.Stmt], size: outline.Sizer) -> frozenset[str]:
    """Names of the variables ``stmts`` assign after declaring them (from the sizer's
    memoised walk, which the outlining needs anyway)."""
    return frozenset().union(*(size(s).assigned for s in stmts))


_COUNTER = ir.Buffer("omp.counter", ir.I64)


@dataclass(frozen=True)
class _Claim(ir.Expr):
    """Backend-internal: ``counter[0]``, which is then raised by ``grain``, atomically
    (assigned to the claiming thread's chunk start)."""

    grain: ir.Expr
    counter: ir.Buffer = _COUNTER  # a field, so that an outlined claim receives it
    dtype: ir.DType = ir.I64


def _chunk_loop(loop: ir.For, start: ir.Var, stop: ir.Var, step: ir.Var,
                nt: ir.Var) -> list[ir.Stmt]:
    """LIR for one thread: claim chunks of ``grain`` iterations until none are left.

    About eight chunks a thread: few enough that claiming costs nothing next to the
    work, enough to even out threads that run at different speeds."""
    t = loop.var.dtype
    one, zero = ir.Const(1, t), ir.Const(0, t)
    n, grain, lo, k = (ir.Var(f"omp.{x}", t) for x in ("n", "grain", "lo", "k"))
    more = ir.Var("omp.more", ir.BOOL)

    def op(name: str, a: ir.Expr, b: ir.Expr) -> ir.Expr:
        return ir.BinOp(name, a, b)

    span = op("sub", op("add", op("sub", stop, start), step), one)
    chunk = ir.For(k, lo, op("min", op("add", lo, grain), n), one,
                   [ir.Declare(loop.var, op("add", start, op("mul", k, step))), *loop.body])
    return [
        ir.Declare(n, ir.Select(ir.Cmp("gt", stop, start), op("div", span, step), zero)),
        ir.Declare(grain, op("max", one, op("div", n, op("mul", nt, ir.Const(8, t))))),
        ir.Declare(lo, zero),
        ir.Declare(more, ir.Const(True, ir.BOOL)),
        ir.While(more, [ir.Assign(lo, _Claim(grain)),
                        ir.If(ir.Cmp("lt", lo, n), [chunk],
                              [ir.Assign(more, ir.Const(False, ir.BOOL))])]),
    ]
