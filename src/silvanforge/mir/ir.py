"""MIR: the loop nest a schedule describes, with tree walks and reductions as single ops.

Index arithmetic is affine: an :class:`Affine` is ``(const + sum(coef * var)) floordiv
div`` over loop variables and the symbols ``N`` (the batch size, known at run time) and
``S`` (a thread's share of the rows, ``min(ceil(N / threads), MAX_SHARE)``, at least 1:
the step of a ``tile(batch, b0, b1, share)``). A
:class:`Bound` is the minimum of one or more affine terms (``min`` expresses remainders).

Ops (a body is a tuple of ops, executed in order):

- ``Loop(var, kind, lower, upper, step, body)``: ``for var = lower; var < upper; var +=
  step`` (``step`` an int, or the symbol ``S`` as an Affine). ``kind`` is ``batch`` (var indexes rows) or ``tree``. Loop variables hold
  absolute indices: the inner loop of a tile runs ``[outer, min(outer + size, end))``.
  Flags: ``parallel`` (iterations may run concurrently), ``gpu_dim`` (mapped to a grid or
  block dimension: also concurrent), ``cache``; reduction attributes ``atomic_reduce``,
  ``vector_reduce``, ``shared_reduce`` say how reductions conflicting on this loop are done.
- ``Guard(cond, body)``: ``body`` runs only where ``cond`` holds (an offset loop's index
  is within its range: ``t0 + t1 < T``, placed inside the innermost loop it uses).
- ``Walk(tree, row, result)``: walk tree ``tree`` for input row ``row``; ``result`` names
  the reached leaf's ``leaf_width`` values. ``unroll_depth``/``peel_depth``: hops to unroll;
  steps to take without a leaf test (every leaf of the tree is at least that deep).
- ``InterleavedWalk(members)``: the members' walks advance round-robin, one step each in
  turn; a member whose ``valid`` condition is false (a batch remainder) is skipped.
  ``lanes`` > 0 (``vectorize``): each run of that many consecutive members (rows of one
  tree) walks as the lanes of one vector walk.
- ``Reduce(target, privatized, row, tree, value)``: ``target[privatized..., row,
  tree_output[tree] : tree_output[tree] + leaf_width] += value`` (op ``+``, init 0.0),
  skipped when ``valid`` is false; ``atomic`` marks an atomic update.
- ``ReduceDimension(target, source, dim, indices, rows)``: with ``source`` of shape
  ``(P_0, ..., P_m-1, N, n_outputs)``, for each row in ``rows`` and every output:
  ``target[row, :] += sum_i source[indices..., i, 0..., row, :]`` (dimensions before
  ``dim`` fixed by ``indices``, those after it already collapsed to slot 0), then those
  source slots are reset to 0 so the next run of the loop starts clean.
- ``ReduceDimensionInplace(buffer, dim, indices, rows)``: the same, adding slots 1.. of
  dimension ``dim`` into slot 0 of the same buffer and resetting slots 1...
- ``CacheRows(lower, upper)`` / ``CacheTrees(lower, upper)``: the rows (trees) in
  ``[lower, upper)`` are used by the rest of the enclosing body; a backend may copy or
  prefetch them. They change no result.

A :class:`Function` declares its buffers (``result`` of shape ``(N, n_outputs)`` and the
privatized ones) and its body; buffers start at 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Union

from ..schedule.schedule import MAX_SHARE

N = "N"  # the batch-size symbol
S = "S"  # a thread's share of the rows (the module's docstring)


def share(n_rows: int, threads: int) -> int:
    """The value of ``S`` for a call of ``n_rows`` rows on ``threads`` threads (what a
    kernel computes in ``lir.lower.share_expr``).

    >>> share(1000, 2), share(100000, 1), share(0, 4)
    (500, 16384, 1)
    """
    return max(1, min(-(-n_rows // max(threads, 1)), MAX_SHARE))


@dataclass(frozen=True)
class Affine:
    """``(const + sum(coef * var)) floordiv div``; terms sorted by name, no zero coefs.

    >>> e = Affine.var("t0") + 3
    >>> str(e), e.evaluate({"t0": 4})
    ('t0 + 3', 7)
    """

    terms: tuple[tuple[str, int], ...] = ()
    const: int = 0
    div: int = 1

    @staticmethod
    def var(name: str) -> "Affine":
        return Affine(((name, 1),))

    @staticmethod
    def of(value: Union["Affine", int]) -> "Affine":
        return value if isinstance(value, Affine) else Affine((), int(value))

    def __add__(self, other: Union["Affine", int]) -> "Affine":
        other = Affine.of(other)
        assert self.div == other.div == 1, "floordiv results are not added"
        coefs = dict(self.terms)
        for name, c in other.terms:
            coefs[name] = coefs.get(name, 0) + c
        return Affine(tuple(sorted((n, c) for n, c in coefs.items() if c)),
                      self.const + other.const)

    def __sub__(self, other: Union["Affine", int]) -> "Affine":
        return self + Affine.of(other).scale(-1)

    def scale(self, k: int) -> "Affine":
        assert self.div == 1
        return Affine(tuple((n, c * k) for n, c in self.terms if c * k), self.const * k)

    def floordiv(self, k: int) -> "Affine":
        return Affine(self.terms, self.const, self.div * k)

    @property
    def is_const(self) -> bool:
        return not self.terms

    def free(self) -> set[str]:
        return {n for n, _ in self.terms}

    def subs(self, env: Mapping[str, "Affine"]) -> "Affine":
        """Replace variables by affine expressions (the floordiv is kept)."""
        out = Affine((), self.const)
        for name, c in self.terms:
            out = out + (env[name] if name in env else Affine.var(name)).scale(c)
        return Affine(out.terms, out.const, self.div) if self.div > 1 else out

    def evaluate(self, env: Mapping[str, int]) -> int:
        return (self.const + sum(c * env[n] for n, c in self.terms)) // self.div

    def __str__(self) -> str:
        parts = [(f"{c}*{n}" if c not in (1, -1) else ("-" if c < 0 else "") + n)
                 for n, c in self.terms]
        if self.const or not parts:
            parts.append(str(self.const))
        text = " + ".join(parts).replace("+ -", "- ")
        return f"({text}) floordiv {self.div}" if self.div > 1 else text


@dataclass(frozen=True)
class Bound:
    """The minimum of affine terms.

    >>> str(Bound.of(Affine.var("b0") + 64, Affine.var("N")))
    'min(b0 + 64, N)'
    """

    terms: tuple[Affine, ...]

    @staticmethod
    def of(*terms: Union[Affine, int]) -> "Bound":
        """Drop terms a constant difference shows are never the minimum; dedupe."""
        kept: list[Affine] = []
        for t in map(Affine.of, terms):
            if any((k - t).is_const and (k - t).const <= 0 for k in kept if k.div == t.div == 1):
                continue
            kept = [k for k in kept if not (k.div == t.div == 1 and (k - t).is_const)]
            kept.append(t)
        return Bound(tuple(kept))

    @property
    def single(self) -> Affine | None:
        return self.terms[0] if len(self.terms) == 1 else None

    def subs(self, env: Mapping[str, Affine]) -> "Bound":
        return Bound.of(*(t.subs(env) for t in self.terms))

    def free(self) -> set[str]:
        return {n for t in self.terms for n in t.free()}

    def evaluate(self, env: Mapping[str, int]) -> int:
        return min(t.evaluate(env) for t in self.terms)

    def __str__(self) -> str:
        if len(self.terms) == 1:
            return str(self.terms[0])
        return f"min({', '.join(map(str, self.terms))})"


@dataclass(frozen=True)
class Cond:
    """``value < bound``: an index is within its loop's range (a member of an interleaved
    group past a remainder, an offset loop's index past its range's end)."""

    value: Affine
    bound: Bound

    def subs(self, env: Mapping[str, Affine]) -> "Cond":
        return Cond(self.value.subs(env), self.bound.subs(env))

    def free(self) -> set[str]:
        return self.value.free() | self.bound.free()

    def evaluate(self, env: Mapping[str, int]) -> bool:
        return self.value.evaluate(env) < self.bound.evaluate(env)

    def __str__(self) -> str:
        return f"{self.value} < {self.bound}"


@dataclass(frozen=True)
class Guard:
    cond: Cond
    body: tuple["Op", ...]


@dataclass(frozen=True)
class Walk:
    tree: Affine
    row: Affine
    result: str
    unroll_depth: int = 0
    peel_depth: int = 0


@dataclass(frozen=True)
class WalkMember:
    tree: Affine
    row: Affine
    result: str
    valid: Cond | None = None


@dataclass(frozen=True)
class InterleavedWalk:
    members: tuple[WalkMember, ...]
    unroll_depth: int = 0
    peel_depth: int = 0
    lanes: int = 0


@dataclass(frozen=True)
class Reduce:
    target: str
    privatized: tuple[Affine, ...]
    row: Affine
    tree: Affine
    value: str
    op: str = "+"
    init: float = 0.0
    atomic: bool = False
    valid: Cond | None = None


@dataclass(frozen=True)
class ReduceDimension:
    target: str
    source: str
    dim: int
    indices: tuple[Affine, ...]
    rows: tuple[Bound, Bound]
    vector_width: int = 0
    shared: bool = False


@dataclass(frozen=True)
class ReduceDimensionInplace:
    buffer: str
    dim: int
    indices: tuple[Affine, ...]
    rows: tuple[Bound, Bound]
    vector_width: int = 0
    shared: bool = False


@dataclass(frozen=True)
class CacheRows:
    lower: Bound
    upper: Bound
    lanes: int = 0  # > 0: copied transposed for vector walks of that many lanes
    rows: int = 0   # the most rows the range holds (0: not known at compile time)


@dataclass(frozen=True)
class CacheTrees:
    lower: Bound
    upper: Bound


@dataclass(frozen=True)
class Loop:
    var: str
    kind: str
    lower: Bound
    upper: Bound
    step: "int | Affine"
    body: tuple["Op", ...]
    parallel: bool = False
    gpu_dim: str | None = None
    cache: bool = False
    atomic_reduce: bool = False
    vector_reduce: int = 0
    shared_reduce: bool = False
    offset: bool = False

    @property
    def concurrent(self) -> bool:
        """Whether iterations may run at the same time (parallel or GPU-mapped)."""
        return self.parallel or self.gpu_dim is not None

    def max_trip(self) -> int | None:
        """A compile-time bound of the trip count, or None (rows)."""
        lo = self.lower.single
        if lo is None or not isinstance(self.step, int):
            return None
        spans = [(t - lo) for t in self.upper.terms if t.div == lo.div == 1]
        consts = [max(s.const, 0) for s in spans if s.is_const]
        return -(-min(consts) // self.step) if consts else None

    def exact_trip(self) -> int | None:
        """The trip count when it is the same on every run (no remainder), else None."""
        return self.max_trip() if len(self.upper.terms) == 1 else None


Op = Union[Loop, Guard, Walk, InterleavedWalk, Reduce, ReduceDimension, ReduceDimensionInplace,
           CacheRows, CacheTrees]


@dataclass(frozen=True)
class BufferDecl:
    """A buffer of ``dims`` (ints, ``"N"`` or ``"n_outputs"``), float64, zeroed."""

    name: str
    dims: tuple[Union[int, str], ...]


@dataclass(frozen=True)
class Function:
    name: str
    n_trees: int
    n_outputs: int
    buffers: tuple[BufferDecl, ...]
    body: tuple[Op, ...]
    result: str = "result"
