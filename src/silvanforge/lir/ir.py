"""LIR: the kernel IR every backend renders.

A kernel is structured code over typed scalars: expressions are trees of immutable
nodes, statements are loops, ifs, assignments to mutable local variables, loads and
stores into buffers. There is no SSA and no control-flow graph: a backend renders a
``For`` as a loop and a ``Var`` as a local slot (LLVM's mem2reg makes them registers), and
a C-style GPU renderer prints the same tree as text. Everything a lower level needs is an
attribute on a node; nothing here knows about forests, schedules or libraries.

Vectors (CPU only): :class:`Broadcast`, :class:`Iota`, :class:`VectorLoad`,
:class:`Lookup` and a :class:`Load` whose index is a vector make vectors of ``lanes``
values; ``dtype`` is always the element type. Every other expression applies lane-wise
when an operand is a vector (scalar operands are broadcast), a ``Store`` of a vector
writes consecutive elements, :class:`Extract` takes one lane back,
:class:`Shuffle` rearranges the lanes of two vectors and :class:`LaneBits` packs a
boolean vector into an integer.

One statement, :class:`BranchTree`, is a binary tree of tests ending in constants, held
as lists of numbers (control flow as data: 25,000 nodes of nested ``If`` objects took a
second to build and render); :meth:`BranchTree.expand` gives the same code as those
statements, which is what a backend without a renderer of its own for it runs.

Buffers are kernel parameters (pointers with an element type) or small fixed-size local
arrays. Indices are element indices of type i64. Floating-point comparisons are ordered
(false when either side is NaN); ``IsNaN`` tests for NaN explicitly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence, Union


@dataclass(frozen=True)
class DType:
    name: str
    bits: int
    is_float: bool

    def __repr__(self) -> str:
        return self.name


BOOL = DType("i1", 1, False)
I8 = DType("i8", 8, False)
I32 = DType("i32", 32, False)
I64 = DType("i64", 64, False)
F32 = DType("f32", 32, True)
F64 = DType("f64", 64, True)
DTYPES = {d.name: d for d in (BOOL, I8, I32, I64, F32, F64)}

# Integer types are two's complement; whether an operation is signed is the op's choice
# ("lshr" is logical, "ashr" arithmetic; comparisons of integers are signed).
BINARY_OPS = {"add", "sub", "mul", "div", "rem", "and", "or", "xor", "shl", "lshr",
              "ashr", "min", "max"}
COMPARE_OPS = {"lt", "le", "gt", "ge", "eq", "ne"}
# "cttz" (integers): the number of trailing zero bits (the width for 0); "ctpop"
# (integers): the number of one bits; the others take floats.
MATH_FUNCS = {"exp", "log", "log1p", "sqrt", "fabs", "trunc", "floor", "cttz", "ctpop"}


# ---- expressions ---------------------------------------------------------------------

class Expr:
    """An expression; ``dtype`` is its type."""

    dtype: DType


@dataclass(frozen=True)
class Const(Expr):
    value: Union[int, float, bool]
    dtype: DType


@dataclass(frozen=True)
class Var(Expr):
    """A scalar: a kernel parameter, a loop index or a mutable local variable."""

    name: str
    dtype: DType


@dataclass(frozen=True)
class Buffer:
    """A pointer parameter (``size`` None) or a local array of ``size`` elements."""

    name: str
    dtype: DType
    size: int | None = None
    readonly: bool = False
    # A local array in GPU shared (OpenCL: local) memory: one copy per thread block,
    # declared at the kernel's top level; CPU backends refuse it.
    shared: bool = False


@dataclass(frozen=True)
class Load(Expr):
    buffer: Buffer
    index: Expr

    @property
    def dtype(self) -> DType:  # type: ignore[override]
        return self.buffer.dtype


@dataclass(frozen=True)
class BinOp(Expr):
    op: str
    a: Expr
    b: Expr

    @property
    def dtype(self) -> DType:  # type: ignore[override]
        return self.a.dtype


@dataclass(frozen=True)
class Cmp(Expr):
    op: str
    a: Expr
    b: Expr
    dtype: DType = BOOL


@dataclass(frozen=True)
class Not(Expr):
    a: Expr
    dtype: DType = BOOL


@dataclass(frozen=True)
class IsNaN(Expr):
    a: Expr
    dtype: DType = BOOL


@dataclass(frozen=True)
class Select(Expr):
    cond: Expr
    a: Expr
    b: Expr

    @property
    def dtype(self) -> DType:  # type: ignore[override]
        return self.a.dtype


@dataclass(frozen=True)
class Cast(Expr):
    """Numeric conversion: int↔int sign-extends or truncates, float→int truncates toward
    zero (the value must fit), int→float rounds, bool→int gives 0/1."""

    a: Expr
    dtype: DType


@dataclass(frozen=True)
class Bitcast(Expr):
    """The bits of ``a`` read as ``dtype`` of the same width (f64 ↔ i64, f32 ↔ i32)."""

    a: Expr
    dtype: DType


@dataclass(frozen=True)
class Math(Expr):
    func: str
    a: Expr

    @property
    def dtype(self) -> DType:  # type: ignore[override]
        return self.a.dtype


@dataclass(frozen=True)
class Broadcast(Expr):
    """``lanes`` copies of the scalar ``a``."""

    a: Expr
    lanes: int

    @property
    def dtype(self) -> DType:  # type: ignore[override]
        return self.a.dtype


@dataclass(frozen=True)
class Iota(Expr):
    """The vector ``0, 1, ..., lanes - 1``."""

    lanes: int
    dtype: DType = I32


@dataclass(frozen=True)
class VectorLoad(Expr):
    """``lanes`` consecutive elements of ``buffer`` from the scalar ``index`` on."""

    buffer: Buffer
    index: Expr
    lanes: int

    @property
    def dtype(self) -> DType:  # type: ignore[override]
        return self.buffer.dtype


@dataclass(frozen=True)
class Lookup(Expr):
    """Lane ``i`` reads ``buffer[base + offset[i]]``, where ``base`` is a scalar and every
    ``offset`` lies in ``[0, span)``: a read from a small window of a table, which a
    backend may load whole and permute (``span`` elements from ``base`` must exist)."""

    buffer: Buffer
    base: Expr
    offset: Expr
    span: int

    @property
    def dtype(self) -> DType:  # type: ignore[override]
        return self.buffer.dtype


@dataclass(frozen=True)
class Extract(Expr):
    """Lane ``lane`` of the vector ``a``."""

    a: Expr
    lane: int

    @property
    def dtype(self) -> DType:  # type: ignore[override]
        return self.a.dtype


@dataclass(frozen=True)
class Shuffle(Expr):
    """The lanes ``order`` of the vectors ``a`` and ``b`` side by side (lane ``i`` of
    ``b`` is number ``lanes(a) + i``): a constant rearrangement, e.g. a step of a
    transpose."""

    a: Expr
    b: Expr
    order: tuple[int, ...]

    @property
    def dtype(self) -> DType:  # type: ignore[override]
        return self.a.dtype


@dataclass(frozen=True)
class LaneBits(Expr):
    """The lanes of the boolean vector ``a`` as the bits of an integer of ``dtype``: lane
    ``i`` is bit ``i`` (``a`` has at most ``dtype.bits`` lanes; higher bits are 0)."""

    a: Expr
    dtype: DType


THREAD_DIMS = ("x", "y", "z")
THREAD_KINDS = ("thread", "block", "block_dim", "grid_dim")


@dataclass(frozen=True)
class ThreadIndex(Expr):
    """GPU only: the i64 index of this thread in its block (``thread``), of its block in
    the grid (``block``), or the block's / grid's size (``block_dim`` / ``grid_dim``, in
    blocks) along ``dim``."""

    dim: str
    kind: str
    dtype: DType = I64


# ---- statements ----------------------------------------------------------------------

class Stmt:
    """A statement."""


@dataclass
class Declare(Stmt):
    """Introduce mutable local ``var`` with an initial value (scoped to the block)."""

    var: Var
    init: Expr


@dataclass
class Assign(Stmt):
    var: Var
    value: Expr


@dataclass
class Store(Stmt):
    buffer: Buffer
    index: Expr
    value: Expr


@dataclass
class AtomicAdd(Stmt):
    buffer: Buffer
    index: Expr
    value: Expr


@dataclass
class Prefetch(Stmt):
    buffer: Buffer
    index: Expr


@dataclass
class LocalArray(Stmt):
    """Declare a local array (``buffer.size`` elements), scoped to the block."""

    buffer: Buffer


@dataclass
class For(Stmt):
    """``for var in range(start, stop, step)`` (``step`` > 0).

    ``parallel`` splits the iterations over ``threads`` threads (an i64 expression; the
    runtime's default when None) in contiguous static chunks; the body must not race: it
    may write only what its iteration owns. ``unroll`` asks for full unrolling (constant
    trip counts only)."""

    var: Var
    start: Expr
    stop: Expr
    step: Expr
    body: list[Stmt] = field(default_factory=list)
    parallel: bool = False
    threads: Expr | None = None
    unroll: bool = False


@dataclass
class While(Stmt):
    cond: Expr
    body: list[Stmt] = field(default_factory=list)


@dataclass
class If(Stmt):
    cond: Expr
    then: list[Stmt] = field(default_factory=list)
    orelse: list[Stmt] = field(default_factory=list)


@dataclass
class Cold(Stmt):
    """Run ``body`` (a scope of its own): code that seldom runs, which a CPU backend
    builds as a function of its own where the block can be one (it assigns nothing
    declared outside it; its results leave through buffers), so that LLVM builds it
    apart from the hot code, in parallel with it. The last block of a vector walk's
    batch walks fewer groups this way (docs/ARCHITECTURE.md "The last block")."""

    body: list[Stmt] = field(default_factory=list)


@dataclass
class Switch(Stmt):
    """Run block ``cases[value]`` (``value`` an integer), each case a scope of its own;
    nothing when ``value`` is outside ``[0, len(cases))``. A CPU backend jumps through a
    table of the cases."""

    value: Expr
    cases: list[list[Stmt]] = field(default_factory=list)


@dataclass
class BranchTree(Stmt):
    """``var`` = the constant of the leaf reached from node 0 of a binary tree of tests.

    Node k is a leaf where ``left[k]`` < 0, of constant ``leaf[k]`` (of ``var``'s type);
    else it goes to node ``left[k]`` where its test holds, to ``right[k]`` where not.
    Its test is ``tests[test[k]]`` where ``test[k]`` >= 0, else the compare
    ``Cmp(op[k], values[value[k]], Load(table, i64(slot[k])))``: most nodes of trees as
    code are such compares, kept as numbers. A subtree of at most ``select_nodes``
    tests is one expression of selects (all its tests run, none branches), the rest
    are branches: what :meth:`expand` spells out.

    >>> x, v = Var("x", F64), Var("v", I64)
    >>> t = BranchTree(v, left=[1, -1, -1], right=[2, -1, -1], leaf=[0, 10, 20],
    ...                op=["lt", "", ""], value=[0, 0, 0], slot=[3, 0, 0], test=[-1, -1, -1],
    ...                values=[x], tests=[], table=Buffer("t", F64))
    >>> t.expand()[0].cond.op, [s.value.value for s in t.expand()[0].then]
    ('lt', [10])
    """

    var: Var
    left: list[int]
    right: list[int]
    leaf: list[int]
    op: list[str]
    value: list[int]
    slot: list[int]
    test: list[int]
    values: list[Expr]
    tests: list[Expr]
    table: Buffer
    select_nodes: int = 0

    def cond(self, k: int) -> Expr:
        """Node ``k``'s test."""
        if self.test[k] >= 0:
            return self.tests[self.test[k]]
        return Cmp(self.op[k], self.values[self.value[k]],
                   Load(self.table, Const(self.slot[k], I64)))

    def sizes(self) -> list[int]:
        """Per node: the number of tests in its subtree (0 at a leaf)."""
        left, right = self.left, self.right
        sizes = [0] * len(left)
        order, stack = [], [0]
        while stack:  # parents before children; reversed, children first
            k = stack.pop()
            if left[k] >= 0:
                order.append(k)
                stack += (left[k], right[k])
        for k in reversed(order):
            sizes[k] = 1 + sizes[left[k]] + sizes[right[k]]
        return sizes

    def expand(self) -> list[Stmt]:
        """The tree as ``If``, ``Select`` and ``Assign`` statements."""
        sizes = self.sizes()

        def code(k: int) -> list[Stmt] | Expr:
            if self.left[k] < 0:
                return Const(self.leaf[k], self.var.dtype)
            cond, yes, no = self.cond(k), code(self.left[k]), code(self.right[k])
            if sizes[k] <= self.select_nodes:
                return Select(cond, yes, no)  # type: ignore[arg-type]
            return [If(cond, assigning(yes), assigning(no))]

        def assigning(c: list[Stmt] | Expr) -> list[Stmt]:
            return c if isinstance(c, list) else [Assign(self.var, c)]

        return assigning(code(0))


@dataclass
class Barrier(Stmt):
    """GPU only: every thread of the block waits here, and then sees the global and
    shared memory writes the others made before it. Every thread of a block must reach
    the same barriers (none inside code that only some threads run)."""


@dataclass
class Kernel:
    """A function ``void name(params...)``; params are Buffers (pointers) and Vars."""

    name: str
    params: Sequence[Union[Buffer, Var]]
    body: list[Stmt]


# ---- helpers -------------------------------------------------------------------------

def const(value: Union[int, float, bool], dtype: DType) -> Const:
    return Const(value, dtype)


def i64(value: int) -> Const:
    return Const(int(value), I64)
