"""Schedules: the loop tree over rows (``batch``) and trees (``tree``), built by directives.

A :class:`Schedule` starts as two perfectly nested loops, ``batch`` (rows, trip count N
known only at run time) outside ``tree`` (trees, T known at compile time), and is changed
by directives named after seed 002 §4. Each directive is checked when applied and kept,
so ``str(schedule)`` prints the text form back and :func:`Schedule.parse` reads it.

Loop modifiers:
- ``tile(v, outer, inner, size)``: ``outer`` steps over v's range by ``size`` iterations,
  ``inner`` runs ``[outer, min(outer + size, end of v))``. ``size`` may be ``share``
  (:data:`SHARE`) for ``batch`` itself: a thread's share of the call's rows, known at run
  time (``ceil(N / threads)``, at most :data:`MAX_SHARE`), so that a parallel ``outer``
  gives each thread one block of rows, and one thread the whole call.
- ``split(v, first, second, n)``: ``first`` runs v's first ``n`` iterations, ``second`` the
  rest; the loops nested in v are duplicated. **Naming rule**: a loop ``x`` nested in v
  becomes ``x.first`` under ``first`` and ``x.second`` under ``second`` (a dotted name,
  usable in later directives: ``unrollWalk(batch.t0, 2)``).
- ``reorder(v1, v2, ...)``: the named loops must be perfectly nested (each the only
  loop in the previous one's body, in any order); they become nested in the given order.
  Any such order is legal: every iteration of the nest walks one (row, tree) pair and
  adds its leaf into that row's sum, so the order changes only the order of additions.
  A loop may move outside a loop its range starts from (``inner`` of a tile outside its
  ``outer``): it then runs its trip count from 0, as in Halide, the index is rebuilt as
  ``outer + inner`` and a guard ``outer + inner < end`` skips the ragged tail (see
  ``mir.ir.Loop``'s ``offset``). Where the inner loop stays inside, it runs
  ``[outer, min(outer + size, end))`` as before, without a guard. Lowering refuses what
  it cannot build (an interleaved loop whose walks would need two guards, a vectorized
  loop whose rows are a stride apart, offset loops on GPUs).
- ``unroll(v)`` (tree loops with a compile-time trip count), ``specialize(v)`` (a tree
  loop with constant bounds: one copy per iteration, constant tree indices).
- ``gpuDimension(v, grid.x|grid.y|grid.z|block.x|block.y|block.z)``.

Optimizations: ``parallel(v)``, ``cache(v)``, ``interleave(v)`` (innermost loop, trip count
a compile-time constant <= 64), ``vectorize(v)`` (an innermost batch loop whose trip count
is a multiple of :data:`VECTOR_LANES`: its rows walk as the lanes of vectors, groups of
that many interleaved; a ``cache``d batch loop around it copies its rows transposed),
``unrollWalk(v, depth)``, ``peelWalk(v, steps)`` (both on
an innermost loop). Reductions: ``atomicReduce(v)``, ``vectorReduce(v, width)``,
``sharedReduce(v)`` (v a parallel or GPU-mapped tree loop; checked when lowered).

>>> s = Schedule()
>>> b0, b1 = s.tile("batch", "b0", "b1", 64)
>>> s.reorder(b0, "tree", b1).parallel(b0)                  # doctest: +ELLIPSIS
Schedule(...)
>>> print(s)
tile(batch, b0, b1, 64)
reorder(b0, tree, b1)
parallel(b0)
>>> s.loop_order()
[['b0', 'tree', 'b1']]
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterator, Union

from ..errors import ScheduleError

BATCH, TREE = "batch", "tree"
GPU_DIMENSIONS = ("grid.x", "grid.y", "grid.z", "block.x", "block.y", "block.z")
MAX_INTERLEAVE = 64
# Rows a vectorized tile may hold: eight vector walks of 16 rows in turn (AVX-512's
# default block, docs/ARCHITECTURE.md "Eight groups on AVX-512").
MAX_VECTOR_TILE = 128
# ``tile(batch, b0, b1, share)``: blocks of a thread's share of the rows (MIR symbol S).
# Capped, so that a huge call on one thread still reuses its rows and sums from cache
# between tiles of trees (docs/ARCHITECTURE.md "Row blocks").
SHARE = "share"
MAX_SHARE = 16384
VECTOR_LANES = 16  # rows a vector walk takes at once (16 float32 lanes of AVX-512)
# Rows a vector walk takes where vectors are 256 bits (AVX2 without AVX-512): one register
# a walk (docs/ARCHITECTURE.md "Eight lanes on AVX2"). A vectorized tile stays a multiple
# of VECTOR_LANES rows whatever the CPU, so one schedule serves both.
AVX2_VECTOR_LANES = 8
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

# Directive name -> attribute it sets on a loop; "flag" attributes take no argument.
_FLAGS = {"parallel": "parallel", "unroll": "unroll", "specialize": "specialize",
          "interleave": "interleave", "vectorize": "vectorize", "cache": "cache",
          "atomicReduce": "atomic_reduce", "sharedReduce": "shared_reduce"}
_VALUED = {"unrollWalk": "unroll_walk", "peelWalk": "peel_walk",
           "vectorReduce": "vector_reduce", "gpuDimension": "gpu_dim"}
# Directives on an innermost loop (vectorize sets interleave) -> the attribute they set.
_INNERMOST = {"interleave": "interleave", "unrollWalk": "unroll_walk", "peelWalk": "peel_walk"}


@dataclass(frozen=True)
class IndexVar:
    """A loop index variable; directives accept an IndexVar or its name.

    >>> IndexVar("b0")
    IndexVar('b0')
    """

    name: str

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"IndexVar({self.name!r})"


Var = Union[IndexVar, str]


@dataclass(frozen=True)
class Directive:
    """One applied directive: its name, its arguments as written, its line (text form)."""

    op: str
    args: tuple
    line: int | None = None

    def __str__(self) -> str:
        return f"{self.op}({', '.join(str(a) for a in self.args)})"


@dataclass(frozen=True)
class VarInfo:
    """How a variable was made: ``rule`` in root, tile_outer, tile_inner, split_first,
    split_second, copy. ``parent`` is the variable it derives from (for a copy: the loop
    it duplicates), ``size`` the tile size or split count, ``partner`` the outer loop of
    a tile_inner, ``rename`` (copies and split parts) how names inside the split subtree map
    in this part (a part's range starts from a loop inside it once reordered outside it).
    """

    name: str
    kind: str
    rule: str
    parent: str | None = None
    size: int | str = 0  # an int, or SHARE for a batch tile sized at run time
    partner: str | None = None
    rename: tuple[tuple[str, str], ...] = ()


@dataclass
class LoopNode:
    """A loop of the current nest and the loops directly in its body (in order)."""

    var: str
    children: list["LoopNode"] = field(default_factory=list)


class Schedule:
    """A loop tree over ``batch`` and ``tree`` and the directives that made it.

    ``forest_or_n_trees`` (a Forest, an int or None) lets checks that need T run at once;
    otherwise they run when the schedule is lowered (:meth:`check`).

    >>> Schedule(4).reorder("tree", "batch").loop_order()
    [['tree', 'batch']]
    """

    def __init__(self, forest_or_n_trees: Any = None) -> None:
        n = getattr(forest_or_n_trees, "n_trees", forest_or_n_trees)
        self.n_trees: int | None = None if n is None else int(n)
        self.directives: list[Directive] = []
        self.vars: dict[str, VarInfo] = {BATCH: VarInfo(BATCH, BATCH, "root"),
                                         TREE: VarInfo(TREE, TREE, "root")}
        self.roots: list[LoopNode] = [LoopNode(BATCH, [LoopNode(TREE)])]
        self.attrs: dict[str, dict[str, Any]] = {BATCH: {}, TREE: {}}
        self.alias: dict[str, str] = {}  # a tiled variable's values are its inner loop's
        self._current: Directive | None = None

    # ---- text form -------------------------------------------------------------------

    @classmethod
    def parse(cls, text: str, forest_or_n_trees: Any = None) -> "Schedule":
        """Read the text form (one directive per line, ``#`` comments).

        >>> print(Schedule.parse("reorder(tree, batch)  # XGBoost's order"))
        reorder(tree, batch)
        """
        from .parse import parse_into
        return parse_into(cls(forest_or_n_trees), text)

    def __str__(self) -> str:
        return "\n".join(str(d) for d in self.directives)

    def __repr__(self) -> str:
        return f"Schedule({'; '.join(str(d) for d in self.directives)})"

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Schedule)
                and [(d.op, d.args) for d in self.directives]
                == [(d.op, d.args) for d in other.directives])

    # ---- directives ------------------------------------------------------------------

    def apply(self, op: str, *args: Any, line: int | None = None) -> "Schedule":
        """Apply the directive named ``op`` (its text-form name) to ``args``."""
        method = _METHODS.get(op)
        if method is None:
            raise ScheduleError(self._where(Directive(op, args, line))
                                + f"unknown directive {op!r}; known: {', '.join(_METHODS)}")
        d = Directive(op, tuple(str(a) if isinstance(a, IndexVar) else a for a in args), line)
        self._current = d
        try:
            getattr(self, "_" + method)(*d.args)
        except TypeError as exc:
            raise self._error(f"wrong arguments ({exc})") from None
        finally:
            self._current = None
        self.directives.append(d)
        return self

    def tile(self, v: Var, outer: Var, inner: Var, size: int) -> tuple[IndexVar, IndexVar]:
        """Tile loop v by ``size`` iterations; returns (outer, inner)."""
        self.apply("tile", v, outer, inner, size)
        return IndexVar(str(outer)), IndexVar(str(inner))

    def split(self, v: Var, first: Var, second: Var, n: int) -> tuple[IndexVar, IndexVar]:
        """Split loop v after ``n`` iterations; returns (first, second)."""
        self.apply("split", v, first, second, n)
        return IndexVar(str(first)), IndexVar(str(second))

    def reorder(self, *vs: Var) -> "Schedule":
        return self.apply("reorder", *vs)

    def unroll(self, v: Var) -> "Schedule":
        return self.apply("unroll", v)

    def specialize(self, v: Var) -> "Schedule":
        return self.apply("specialize", v)

    def parallel(self, v: Var) -> "Schedule":
        return self.apply("parallel", v)

    def interleave(self, v: Var) -> "Schedule":
        return self.apply("interleave", v)

    def vectorize(self, v: Var) -> "Schedule":
        return self.apply("vectorize", v)

    def unrollWalk(self, v: Var, depth: int) -> "Schedule":  # noqa: N802 (seed's name)
        return self.apply("unrollWalk", v, depth)

    def peelWalk(self, v: Var, steps: int) -> "Schedule":  # noqa: N802
        return self.apply("peelWalk", v, steps)

    def cache(self, v: Var) -> "Schedule":
        return self.apply("cache", v)

    def atomicReduce(self, v: Var) -> "Schedule":  # noqa: N802
        return self.apply("atomicReduce", v)

    def vectorReduce(self, v: Var, width: int) -> "Schedule":  # noqa: N802
        return self.apply("vectorReduce", v, width)

    def sharedReduce(self, v: Var) -> "Schedule":  # noqa: N802
        return self.apply("sharedReduce", v)

    def gpuDimension(self, v: Var, dim: str) -> "Schedule":  # noqa: N802
        return self.apply("gpuDimension", v, dim)

    # ---- queries ---------------------------------------------------------------------

    @property
    def vectorized(self) -> bool:
        """Whether a loop is vectorized (its walks need trees of one depth).

        >>> schedule = Schedule()
        >>> _ = schedule.tile("batch", "b0", "b1", 16)
        >>> schedule.reorder("b0", "tree", "b1").vectorize("b1").vectorized
        True
        """
        return any("vectorize" in attrs for attrs in self.attrs.values())

    def loop_order(self) -> list[list[str]]:
        """Every path from an outermost loop to an innermost one, as variable names."""
        return [[n.var for n in path] for path in self.paths()]

    def paths(self) -> Iterator[list[LoopNode]]:
        def walk(node: LoopNode, above: list[LoopNode]) -> Iterator[list[LoopNode]]:
            path = above + [node]
            if not node.children:
                yield path
            for child in node.children:
                yield from walk(child, path)
        for root in self.roots:
            yield from walk(root, [])

    def resolve(self, name: str) -> str:
        """The live loop whose values a (possibly tiled-away) variable takes."""
        while name in self.alias:
            name = self.alias[name]
        return name

    def max_trip(self, var: str) -> int | None:
        """An upper bound of var's trip count known at compile time, or None.

        >>> s = Schedule(10); _ = s.tile("tree", "t0", "t1", 4); s.max_trip("t0")
        3
        """
        info = self.vars[var]
        if info.rule == "root":
            return self.n_trees if info.kind == TREE else None
        if info.rule == "copy":
            return self.max_trip(info.parent)
        if info.rule == "tile_inner":
            return None if info.size == SHARE else info.size
        if info.rule == "split_first":
            parent = self.max_trip(info.parent)
            return info.size if parent is None else min(info.size, parent)
        parent = self.max_trip(info.parent)
        if parent is None:
            return None
        if info.rule == "tile_outer":
            return -(-parent // info.size)
        return max(parent - info.size, 0)  # split_second

    def check(self, n_trees: int) -> None:
        """Re-run the checks that need T (called by lowering with the forest's T)."""
        saved, self.n_trees = self.n_trees, n_trees
        try:
            for var, attrs in self.attrs.items():
                if attrs.get("interleave"):
                    self._current = attrs["interleave"]
                    self._check_interleave_trip(var)
        finally:
            self.n_trees, self._current = saved, None

    # ---- implementation --------------------------------------------------------------

    def _where(self, d: Directive | None) -> str:
        if d is None:
            return ""
        return (f"line {d.line}: " if d.line is not None else "") + f"{d}: "

    def _error(self, reason: str) -> ScheduleError:
        return ScheduleError(self._where(self._current) + reason)

    def _live(self, v: Any) -> str:
        name = str(v)
        if name not in self.attrs:
            if name in self.vars:
                raise self._error(f"{name!r} no longer names a loop (it was tiled or split)")
            raise self._error(f"unknown index variable {name!r}")
        return name

    def _new(self, *names: Any) -> list[str]:
        out = [str(n) for n in names]
        for n in out:
            if not _NAME.match(n):
                raise self._error(f"{n!r} is not a valid name (letters, digits, _)")
            if n in self.vars or out.count(n) > 1:
                raise self._error(f"the name {n!r} is already used")
        return out

    def _size(self, value: Any, what: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._error(f"{what} must be an integer, not {value!r}")
        if value <= 0:
            raise self._error(f"{what} must be > 0, not {value}")
        return value

    def _find(self, var: str) -> tuple[list[LoopNode], int]:
        """The sibling list holding var's loop and its position there."""
        def search(siblings: list[LoopNode]) -> tuple[list[LoopNode], int] | None:
            for i, node in enumerate(siblings):
                if node.var == var:
                    return siblings, i
                found = search(node.children)
                if found:
                    return found
            return None
        found = search(self.roots)
        assert found is not None, var
        return found

    def _not_by_share(self, var: str) -> None:
        """Refuse to cut ``var`` when it steps by a thread's share (unknown until run time:
        its iterations have no size to cut by)."""
        info = self.vars[var]
        if info.rule == "tile_outer" and info.size == SHARE:
            raise self._error(f"{var!r} steps by a thread's share of the rows, known only "
                              "when predict runs: it cannot be tiled or split (its inner "
                              "loop can)")

    def _no_attrs(self, var: str) -> None:
        if self.attrs[var]:
            raise self._error(f"{var!r} already has {', '.join(self.attrs[var])}; "
                              "tile it before adding other directives")

    def _tile(self, v: Any, outer: Any, inner: Any, size: Any) -> None:
        v = self._live(v)
        outer, inner = self._new(outer, inner)
        if size == SHARE:
            if v != BATCH or self.vars[v].rule != "root":
                raise self._error(f"a tile of size {SHARE!r} (a thread's share of the "
                                  f"rows) divides {BATCH!r} itself, not {v!r}")
        else:
            size = self._size(size, "tile size")
        self._not_by_share(v)
        self._no_attrs(v)
        kind = self.vars[v].kind
        self.vars[outer] = VarInfo(outer, kind, "tile_outer", v, size)
        self.vars[inner] = VarInfo(inner, kind, "tile_inner", v, size, partner=outer)
        siblings, i = self._find(v)
        siblings[i] = LoopNode(outer, [LoopNode(inner, siblings[i].children)])
        del self.attrs[v]
        self.attrs[outer], self.attrs[inner] = {}, {}
        self.alias[v] = inner

    def _split(self, v: Any, first: Any, second: Any, n: Any) -> None:
        v = self._live(v)
        first, second = self._new(first, second)
        n = self._size(n, "split count")
        self._not_by_share(v)
        kind = self.vars[v].kind
        siblings, i = self._find(v)
        node = siblings[i]
        inside = [p.var for child in node.children for p in _nodes(child)]
        for x in sorted(set(self.attrs) - set(inside) - {v}):
            for d in sorted(self._deps(x) & {v, *inside}):
                # x would need d's index from both parts, where it is two loops.
                raise self._error(f"{x!r}, outside {v!r}, starts from {d!r}'s index; "
                                  f"split {v!r} before reordering {x!r} outside it")
        parts = []
        for part, rule in ((first, "split_first"), (second, "split_second")):
            rename = tuple([(v, part)] + [(x, f"{x}.{part}") for x in inside])
            self.vars[part] = VarInfo(part, kind, rule, v, n, rename=rename)
            self.attrs[part] = dict(self.attrs[v])
            for x in inside:
                copy = f"{x}.{part}"
                self.vars[copy] = VarInfo(copy, self.vars[x].kind, "copy", x, rename=rename)
                self.attrs[copy] = dict(self.attrs[x])
            parts.append(LoopNode(part, [_copy(c, part) for c in node.children]))
        siblings[i:i + 1] = parts
        for x in [v] + inside:
            del self.attrs[x]

    def _reorder(self, *vs: Any) -> None:
        names = [self._live(v) for v in vs]
        if len(names) < 2 or len(set(names)) != len(names):
            raise self._error("reorder needs two or more distinct loops")
        chain = None
        for path in self.paths():
            on = [k for k, node in enumerate(path) if node.var in names]
            if len(on) == len(names):
                chain = path[on[0]:on[-1] + 1]
                break
        if chain is None or len(chain) != len(names) or any(
                len(node.children) != 1 for node in chain[:-1]):
            raise self._error("the loops must be successive, perfectly nested loops")
        innermost = chain[-1]
        needs = [op for op, attr in _INNERMOST.items() if attr in self.attrs[innermost.var]]
        if needs and not innermost.children and names[-1] != innermost.var:
            raise self._error(f"{innermost.var!r} has {needs[0]}, which needs it innermost")
        top_siblings, top_i = self._find(chain[0].var)
        body = chain[-1].children
        new = LoopNode(names[-1], body)
        for name in reversed(names[:-1]):
            new = LoopNode(name, [new])
        top_siblings[top_i] = new

    def _deps(self, var: str) -> set[str]:
        """Live loops whose index var's range starts from."""
        info = self.vars[var]
        if info.rule == "root":
            return set()
        deps = self._deps(info.parent)
        if info.rule == "tile_inner":
            deps |= {self.resolve(info.partner)}
        rename = dict(info.rename)
        return {self.resolve(rename.get(d, d)) for d in deps}

    def _set(self, var: str, attr: str, value: Any = True) -> None:
        if attr in self.attrs[var]:
            raise self._error(f"{var!r} already has {attr}")
        self.attrs[var][attr] = value

    def _flag(self, op: str, v: Any) -> None:
        var = self._live(v)
        kind = self.vars[var].kind
        if op in ("unroll", "specialize") and kind == BATCH:
            raise self._error(f"cannot {op} a batch loop (its trip count is not a "
                              "compile-time constant); use interleave")
        if op == "parallel":
            self._check_not_nested_parallel(var)
            if "gpu_dim" in self.attrs[var]:
                raise self._error(f"{var!r} is mapped to a GPU dimension")
        if op == "interleave":
            self._innermost(var)
            self._set(var, "interleave", self._current)
            self._check_interleave_trip(var)
            return
        if op == "vectorize":
            self._innermost(var)
            trip = self.max_trip(var)
            if kind != BATCH or trip is None or trip % VECTOR_LANES \
                    or self.vars[var].rule != "tile_inner" or trip > MAX_VECTOR_TILE:
                raise self._error(
                    f"vectorize takes the inner loop of a tiled batch loop whose tile is a "
                    f"multiple of {VECTOR_LANES} rows (at most {MAX_VECTOR_TILE}); {var!r} "
                    "is not")
            self._set(var, "interleave", self._current)
            self._set(var, "vectorize")
            return
        self._set(var, _FLAGS[op])

    def _check_not_nested_parallel(self, var: str) -> None:
        for path in self.paths():
            names = [n.var for n in path]
            if var in names and any(self.attrs[o].get("parallel") for o in names if o != var):
                raise self._error("parallel loops cannot nest (another loop around or "
                                  "inside it is parallel)")

    def _innermost(self, var: str) -> None:
        siblings, i = self._find(var)
        if siblings[i].children:
            raise self._error(f"{var!r} is not an innermost loop "
                              f"({siblings[i].children[0].var!r} is inside it)")

    def _check_interleave_trip(self, var: str) -> None:
        trip = self.max_trip(var)
        if trip is None:
            if self.vars[var].kind == TREE and self.n_trees is None:
                return  # checked again when lowered, with T
            raise self._error(f"{var!r} has a run-time trip count; interleave needs a "
                              "compile-time one (tile the loop and interleave the inner)")
        # A vectorized loop's walks are its vectors: it may hold more rows (checked
        # where vectorize is applied).
        most = MAX_VECTOR_TILE if self.attrs[var].get("vectorize") else MAX_INTERLEAVE
        if trip > most:
            raise self._error(f"{var!r} runs up to {trip} iterations; interleave takes at "
                              f"most {most}")

    def _valued(self, op: str, v: Any, value: Any) -> None:
        var = self._live(v)
        attr = _VALUED[op]
        if op == "gpuDimension":
            if value not in GPU_DIMENSIONS:
                raise self._error(f"unknown GPU dimension {value!r}; "
                                  f"one of {', '.join(GPU_DIMENSIONS)}")
            if any(a.get("gpu_dim") == value for a in self.attrs.values()):
                raise self._error(f"{value} is already mapped")
            if self.attrs[var].get("parallel"):
                raise self._error(f"{var!r} is already parallel")
            self._check_gpu_nesting(var, value)
        else:
            value = self._size(value, {"unrollWalk": "depth", "peelWalk": "steps",
                                       "vectorReduce": "width"}[op])
            if op in ("unrollWalk", "peelWalk"):
                self._innermost(var)
        self._set(var, attr, value)

    def _check_gpu_nesting(self, var: str, dim: str) -> None:
        for path in self.paths():
            names = [n.var for n in path]
            if var not in names:
                continue
            k = names.index(var)
            for j, other in enumerate(names):
                od = self.attrs[other].get("gpu_dim")
                if od and od.startswith("grid") and dim.startswith("block") and j > k:
                    raise self._error(f"block dimension outside grid dimension {other!r}")
                if od and od.startswith("block") and dim.startswith("grid") and j < k:
                    raise self._error(f"grid dimension inside block dimension {other!r}")

    def __getattr__(self, name: str) -> Any:
        # _parallel, _unroll, ... and _unrollWalk, ... dispatch to the two shared checks.
        if name.startswith("_") and name[1:] in _FLAGS:
            return lambda v: self._flag(name[1:], v)
        if name.startswith("_") and name[1:] in _VALUED:
            return lambda v, value: self._valued(name[1:], v, value)
        raise AttributeError(name)


_METHODS = {op: op for op in ("tile", "split", "reorder", *_FLAGS, *_VALUED)}


def _nodes(node: LoopNode) -> Iterator[LoopNode]:
    yield node
    for child in node.children:
        yield from _nodes(child)


def _copy(node: LoopNode, part: str) -> LoopNode:
    return LoopNode(f"{node.var}.{part}", [_copy(c, part) for c in node.children])
