"""Cut large blocks of LIR into pieces the CPU backend renders as separate functions.

LLVM's optimisation and code generation grow faster than linearly with a function's size
(a 100-tree forest emitted as code, ~6000 nodes, took 4.9 s in one function), so a block
bigger than a budget is rendered as a sequence of calls to internal ``noinline``
functions, each under the budget: LLVM handles each alone and the total stays linear.

A piece's function receives what it reads from outside by value (scalars) or as pointers
(buffers), so the cuts respect the block's variables: a block is cut only between
top-level statements, never between the declaration of a variable and a later statement
assigning it; a piece is outlined only when it fits the budget, assigns nothing declared
outside it and declares nothing used after it. Other pieces stay inline (one statement
bigger than the budget too: its inner blocks are cut in their turn when rendered).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import NamedTuple

from ...lir import ir
from .freevars import EXPR_CHILDREN, STMT_EXPRS, FreeValues, blocks

# Size (statements plus expression nodes) of one outlined function: LightGBM-like trees
# take ~7 units a node. Larger budgets let a row loop over many trees fit one function,
# whose loop passes are slow (docs/ARCHITECTURE.md "Compiling big kernels"); a call per
# piece costs nothing next to the work of ~10 trees.
BUDGET = 5000
# Statements whose meaning this module knows; a piece holding another (a backend's own)
# stays inline.
_KNOWN = frozenset((ir.Declare, ir.Assign, ir.Store, ir.AtomicAdd, ir.Prefetch,
                    ir.LocalArray, ir.For, ir.While, ir.If, ir.Switch, ir.BranchTree,
                    ir.Cold))


@dataclass(frozen=True)
class Piece:
    """Consecutive statements of a block; ``free`` (the parameters of the function that
    runs them) is set when they are to be outlined."""

    stmts: list[ir.Stmt]
    free: FreeValues | None = None


class _Info(NamedTuple):
    """What the sizer knows of one statement (a tuple: one is made a statement, and a
    frozen dataclass took several times as long to build)."""

    stmt: ir.Stmt  # kept so that its id stays its own while memoised
    size: int
    names: frozenset[str]  # variables, and buffers as "buffer NAME", used
    assigned: frozenset[str]  # variables assigned
    declared: frozenset[str]  # variables and local arrays declared (loop indices too)
    known: bool  # every statement inside is one of _KNOWN


class Sizer:
    """Size, used names, assigned and declared variables of statements, nested ones
    included; memoised, since the renderer asks again for every nested block."""

    def __init__(self) -> None:
        self._memo: dict[int, _Info] = {}
        self.objects: dict[str, ir.Var | ir.Buffer] = {}  # name → variable or buffer

    def __call__(self, s: ir.Stmt) -> _Info:
        hit = self._memo.get(id(s))
        if hit is not None and hit.stmt is s:
            return hit
        kind = type(s)
        if kind is ir.BranchTree:
            info = self._memo[id(s)] = self._branch_tree(s)
            return info
        size, names, assigned, declared = 1, set(), set(), set()
        known = kind in _KNOWN
        if kind is ir.Assign:
            assigned.add(s.var.name)
        elif kind is ir.Declare or kind is ir.For:
            declared.add(s.var.name)
        elif kind is ir.LocalArray:
            declared.add("buffer " + s.buffer.name)
        if known:  # the tables say where the expressions and blocks are
            exprs, nested = STMT_EXPRS[kind], list(blocks(s))
            buffer = getattr(s, "buffer", None)
            if buffer is not None:
                self._name(buffer, names)
        else:
            exprs = [f for f in _fields(s) if isinstance(getattr(s, f), (ir.Expr, ir.Buffer))]
            nested = [getattr(s, f) for f in _fields(s) if isinstance(getattr(s, f), list)]
        for name in exprs:
            value = getattr(s, name)
            if isinstance(value, ir.Buffer):
                self._name(value, names)
            elif value is not None:
                size += self._expr(value, names)
        for block in nested:
            for child in block:
                inner = self(child)
                size += inner.size
                names |= inner.names
                assigned |= inner.assigned
                declared |= inner.declared
                known = known and inner.known
        info = _Info(s, size, frozenset(names), frozenset(assigned), frozenset(declared),
                     known)
        self._memo[id(s)] = info
        return info

    def _branch_tree(self, s: ir.BranchTree) -> _Info:
        """A :class:`~.ir.BranchTree`'s info: its expansion's, counted without building
        it (so that a block of trees is cut where the same block expanded would be)."""
        names: set[str] = set()
        values = [self._expr(v, names) for v in s.values]
        tests = [self._expr(t, names) for t in s.tests]
        sizes, select = s.sizes(), s.select_nodes
        size = 1 if sizes[0] <= select else 0  # the root's assignment, if no branch
        compares = False
        for k, left in enumerate(s.left):
            if left < 0:
                size += 1  # its constant
                continue
            if s.test[k] >= 0:
                size += 1 + tests[s.test[k]]  # an If or a Select, its test
            else:
                size += 4 + values[s.value[k]]  # ... a compare, its value, load, index
                compares = True
            if sizes[k] > select:  # a branch: an assignment where a select starts below
                size += (sizes[left] <= select) + (sizes[s.right[k]] <= select)
        if compares:
            self._name(s.table, names)
        return _Info(s, size, frozenset(names), frozenset((s.var.name,)), frozenset(), True)

    def _expr(self, e: ir.Expr, names: set[str]) -> int:
        """The number of nodes of ``e``; the names it uses are added to ``names``."""
        count, stack = 0, [e]
        while stack:
            node = stack.pop()
            count += 1
            kind = type(node)
            if kind is ir.Var:
                self._name(node, names)
                continue
            if kind in (ir.Load, ir.VectorLoad, ir.Lookup):
                self._name(node.buffer, names)
            children = EXPR_CHILDREN.get(kind)
            if children is None:  # a backend's own node: any field may hold one
                children = _fields(node)
            for name in children:
                value = getattr(node, name)
                if isinstance(value, ir.Expr):
                    stack.append(value)
                elif isinstance(value, ir.Buffer):
                    self._name(value, names)
        return count

    def _name(self, obj: ir.Var | ir.Buffer, names: set[str]) -> None:
        name = obj.name if isinstance(obj, ir.Var) else "buffer " + obj.name
        self.objects[name] = obj
        names.add(name)

    def free_of_loop(self, loop: ir.For) -> FreeValues:
        """What ``loop``'s body uses from outside it, from the memoised sizes (a big
        kernel's parallel body is walked once, not once more per question).

        The loop's own variable, variables declared in the body (``Declare`` or a nested
        loop's variable) and local arrays declared in the body are not free.
        ``assigned_outside`` names variables the body assigns but does not declare (the
        loop's own variable included: each thread steps its own copy).

        >>> i, n = ir.Var("i", ir.I64), ir.Var("n", ir.I64)
        >>> out = ir.Buffer("out", ir.I64)
        >>> fv = Sizer().free_of_loop(ir.For(i, ir.i64(0), n, ir.i64(1),
        ...                                  [ir.Store(out, i, n)]))
        >>> [v.name for v in fv.vars], [b.name for b in fv.buffers], fv.assigned_outside
        (['n'], ['out'], ())
        """
        free = self.free(loop.body)
        return FreeValues(tuple(v for v in free.vars if v.name != loop.var.name),
                          free.buffers, free.assigned_outside)

    def free(self, stmts: list[ir.Stmt]) -> FreeValues:
        """What ``stmts`` use from outside (the parameters of their function)."""
        infos = [self(s) for s in stmts]
        used = sorted(frozenset().union(*(i.names for i in infos))
                      - frozenset().union(*(i.declared for i in infos)))
        assigned = frozenset().union(*(i.assigned for i in infos))
        declared = frozenset().union(*(i.declared for i in infos))
        return FreeValues(
            vars=tuple(self.objects[n] for n in used if not n.startswith("buffer ")),
            buffers=tuple(self.objects[n] for n in used if n.startswith("buffer ")),
            assigned_outside=tuple(sorted(assigned - declared)))


def pieces(stmts: list[ir.Stmt], info: Sizer, budget: int | None = None) -> list[Piece]:
    """``stmts`` cut into pieces of at most ``budget`` (default :data:`BUDGET`) where the
    block is bigger; pieces with ``free`` set are to be outlined.

    >>> i, x = ir.Var("i", ir.I64), ir.Var("x", ir.I64)
    >>> out = ir.Buffer("out", ir.I64)
    >>> block = [ir.Declare(i, ir.i64(1)), ir.Declare(x, ir.i64(0)), ir.Assign(x, i),
    ...          ir.Store(out, i, x), ir.Store(out, i, i)]
    >>> [(len(p.stmts), p.free is not None) for p in pieces(block, Sizer(), budget=9)]
    [(1, False), (3, True), (1, True)]
    """
    budget = BUDGET if budget is None else budget
    infos = [info(s) for s in stmts]
    if sum(i.size for i in infos) <= budget:
        return [Piece(stmts)]
    legal = _legal_cuts(stmts, infos)
    # Segments: the runs between legal cuts; pieces: segments packed up to the budget.
    assigned = frozenset().union(*(item.assigned for item in infos))
    segments: list[list[int]] = []
    for i in range(len(stmts)):
        if not segments or legal[i]:
            segments.append([])
        segments[-1].append(i)
    groups: list[list[int]] = []
    total = 0
    for seg in segments:
        size = sum(infos[i].size for i in seg)
        # A variable declared and then only read (a loop index, a row) is declared in a
        # piece of its own: the pieces after it read it.
        after_constant = groups and isinstance(stmts[groups[-1][-1]], ir.Declare) and \
            stmts[groups[-1][-1]].var.name not in assigned
        if not groups or total + size > budget or after_constant:
            groups.append([])
            total = 0
        groups[-1] += seg
        total += size
    # Names used from each statement on: what a piece must not declare.
    used_after: list[frozenset[str]] = [frozenset()] * (len(stmts) + 1)
    for i in range(len(stmts) - 1, -1, -1):
        used_after[i] = used_after[i + 1] | infos[i].names
    out = []
    for g in groups:
        body = [stmts[i] for i in g]
        declared = {s.var.name for s in body if isinstance(s, ir.Declare)} | \
            {"buffer " + s.buffer.name for s in body if isinstance(s, ir.LocalArray)}
        free_ = None
        if sum(infos[i].size for i in g) <= budget and not declared & used_after[g[-1] + 1]:
            free_ = as_function(body, info)
        out.append(Piece(body, free_))
    return out


def as_function(stmts: list[ir.Stmt], info: Sizer) -> FreeValues | None:
    """The parameters of ``stmts`` rendered as a function of their own (a whole block:
    what it declares is used nowhere after it), or None where they cannot be one: a
    statement this module does not know, or a variable declared outside assigned.

    >>> i, x = ir.Var("i", ir.I64), ir.Var("x", ir.I64)
    >>> out = ir.Buffer("out", ir.I64)
    >>> [v.name for v in as_function([ir.Store(out, i, i)], Sizer()).vars]
    ['i']
    >>> as_function([ir.Assign(x, i)], Sizer()) is None
    True
    """
    if not all(info(s).known for s in stmts):
        return None
    free = info.free(stmts)
    return None if free.assigned_outside else free


_FIELDS: dict[type, tuple[str, ...]] = {}


def _fields(node: ir.Stmt | ir.Expr) -> tuple[str, ...]:
    """The attribute names of any LIR node (new node types included)."""
    names = _FIELDS.get(type(node))
    if names is None:
        names = _FIELDS[type(node)] = tuple(f.name for f in fields(node))  # type: ignore
    return names


def _legal_cuts(stmts: list[ir.Stmt], infos: list[_Info]) -> list[bool]:
    """Per index i: whether the block may be cut just before statement i: no variable
    declared before it and assigned after its declaration is used from i on."""
    declared_at = {s.var.name: i for i, s in enumerate(stmts) if isinstance(s, ir.Declare)}
    assigned, last_use = set(), {}
    for i, item in enumerate(infos):
        assigned |= item.assigned
        for name in item.names:
            last_use[name] = i
    crossing = [0] * (len(stmts) + 1)
    for name, start in declared_at.items():
        end = last_use.get(name, start)
        if name in assigned and end > start:
            crossing[start + 1] += 1
            crossing[end + 1] -= 1
    legal, open_ = [], 0
    for i in range(len(stmts)):
        open_ += crossing[i]
        legal.append(open_ == 0)
    return legal
