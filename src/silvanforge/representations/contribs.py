"""The contributions kernel: path-dependent TreeSHAP for every row, in LIR.

It runs Linear TreeSHAP over the tables of :mod:`.contribs_tables` (the algorithm is
described there; docs/ARCHITECTURE.md "Contributions (TreeSHAP)" says why this one).
Rows are split into ``threads`` contiguous blocks, one iteration of a parallel loop
each, and a block owns its slice of the two scratch buffers: ``lanes`` float64 partial
products or sums per node, and the row's merged one-fraction per node. For each row and
each unit (one output of one tree) a pass down the tree's nodes (breadth first) decides
every split once with :func:`.decision.go_left`, the same test every walk uses, and
multiplies the quadrature products; a pass up sums them and adds each edge's
contribution to its feature's column. Every index the kernel computes comes from the
tables (bounded by the validated forest) or from row and block numbers below the sizes
the caller allocated.

Signature: ``contribs(rows, n_rows, out, scratch, ones, threads, *model buffers)``:
``out`` is (n_rows, n_outputs, n_features + 1) float64, zeroed; ``scratch`` holds
``threads * scratch_stride`` float64 and ``ones`` ``threads * ones_stride`` int32 (the
tables' padded shares).

>>> kernel, arrays = contributions_kernel(forest, build_tables(forest))  # doctest: +SKIP
"""

from __future__ import annotations

import numpy as np

from ..lir import ir
from ..lir.representation import RowValues
from ..model.forest import Forest
from .contribs_tables import ContribTables, build_tables
from .decision import DecisionSpec, NodeLoads, go_left, node_arrays

KERNEL_NAME = "contribs"
_DTYPES = {np.dtype(np.int8): ir.I8, np.dtype(np.int32): ir.I32, np.dtype(np.int64): ir.I64,
           np.dtype(np.float32): ir.F32, np.dtype(np.float64): ir.F64}
I64 = ir.I64
# Rows that run through one unit before the next (see `unit` in the kernel).
ROW_TILE = 64
# Rows a thread takes at least: fewer cost more to wake than they save (a row through
# higgs's 100 trees takes about 0.2 ms here). The predictor and exported libraries size
# ``threads`` with it.
ROWS_PER_THREAD = 8


def _op(name: str, a: ir.Expr, b: ir.Expr | int) -> ir.Expr:
    return ir.BinOp(name, a, b if isinstance(b, ir.Expr) else ir.Const(b, a.dtype))


def _i64(e: ir.Expr) -> ir.Expr:
    return e if e.dtype == I64 else ir.Cast(e, I64)


def build(forest: Forest) -> tuple[ContribTables, dict[str, np.ndarray], ir.Kernel]:
    """The tables, model buffers and LIR kernel of ``forest``'s contributions (a
    forest :func:`~silvanforge.model.cover.require_contributions` accepts).

    >>> tables, arrays, kernel = build(forest)                   # doctest: +SKIP
    """
    tables = build_tables(forest)
    arrays = model_arrays(forest, tables)
    return tables, arrays, contributions_kernel(forest, tables, arrays)


def model_arrays(forest: Forest, tables: ContribTables) -> dict[str, np.ndarray]:
    """The kernel's model buffers by name, in parameter order: the split fields of the
    steps (as every representation stores them) and the tables.

    >>> sorted(model_arrays(forest, build_tables(forest)))[:3]   # doctest: +SKIP
    ['bias', 'coeff', 'ratio']
    """
    spec = DecisionSpec.of(forest, "float64")
    arrays = {f"split_{k}": v for k, v in node_arrays(
        forest, spec, tables.step_global, leaf_bit=False).items()}
    for name in ("unit_steps", "unit_nodes", "step_node", "step_target", "step_prev", "ratio", "coeff", "bias"):
        arrays[name] = getattr(tables, name)
    # An empty table still gets an element, so every buffer has an address.
    return {k: np.ascontiguousarray(v if len(v) else np.zeros(1, v.dtype))
            for k, v in arrays.items()}


def contributions_kernel(forest: Forest, tables: ContribTables,
                         arrays: dict[str, np.ndarray]) -> ir.Kernel:
    """The LIR of the contributions kernel over ``arrays`` (:func:`model_arrays`).

    >>> compile_kernel(contributions_kernel(forest, tables, arrays))  # doctest: +SKIP
    """
    spec = DecisionSpec.of(forest, "float64")
    buf = {name: ir.Buffer(name, _DTYPES[a.dtype], readonly=True)
           for name, a in arrays.items()}
    rows = ir.Buffer("rows", spec.input, readonly=True)
    out = ir.Buffer("out", ir.F64)
    prod = ir.Buffer("scratch", ir.F64)
    ones = ir.Buffer("ones", ir.I32)
    n_rows, threads = ir.Var("n_rows", I64), ir.Var("threads", I64)
    L, F = tables.lanes, forest.n_features
    row_width = forest.n_outputs * (F + 1)
    v = {name: ir.Var(name, I64) for name in (
        "per", "blk", "pb", "ob", "lo", "hi", "r", "xo", "yo", "k", "u", "s0", "s1", "nb",
        "s", "i", "t0")}

    def load(name: str, index: ir.Expr) -> ir.Expr:
        return ir.Load(buf[name], index)

    def products(node: ir.Expr) -> ir.Expr:
        return ir.VectorLoad(prod, _op("add", v["pb"], _op("mul", node, L)), L)

    def store_products(node: ir.Expr, value: ir.Expr) -> ir.Stmt:
        return ir.Store(prod, _op("add", v["pb"], _op("mul", node, L)), value)

    split = NodeLoads(
        feature=load("split_feature", v["s"]), threshold=load("split_threshold", v["s"]),
        flags=load("split_flags", v["s"]) if "split_flags" in buf else None,
        cat_offset=load("split_cat_offset", v["s"]) if "split_cat_offset" in buf else None,
        cat_words=load("split_cat_words", v["s"]) if "split_cat_words" in buf else None,
        cat_bitset=buf.get("split_cat_bitset"))
    def child(step: ir.Expr, side: str) -> ir.Expr:
        """The BFS number of a step's child: the i-th internal node's children are
        numbered 2i + 1 and 2i + 2 (breadth first, they come in that order)."""
        i = _op("sub", step, v["s0"])
        return _op("add", _op("mul", i, 2), 1 if side == "left" else 2)

    goes_left = ir.Var("goes_left", ir.BOOL)
    n, prev, o_prev = ir.Var("n", I64), ir.Var("prev", I64), ir.Var("o_prev", ir.I32)
    down: list[ir.Stmt] = [
        ir.Declare(n, _i64(load("step_node", v["s"]))),
        ir.Declare(prev, _i64(load("step_prev", v["s"]))),
        ir.Declare(goes_left, go_left(spec, split, RowValues(rows, v["xo"], F))),
        # No earlier edge of this feature: its one-fraction so far is 1.
        ir.Declare(o_prev, ir.Select(ir.Cmp("lt", prev, ir.i64(0)), ir.Const(1, ir.I32),
                                     ir.Load(ones, _op("add", v["ob"], _op("max", prev, 0))))),
        ir.Declare(ir.Var("pn", ir.F64), products(n))]
    pn = ir.Var("pn", ir.F64)
    for side, holds in (("left", goes_left), ("right", ir.Not(goes_left))):
        c, o_c = ir.Var(f"c_{side}", I64), ir.Var(f"oc_{side}", ir.I32)
        ratio_at = _op("add", _op("mul", _op("add", v["nb"], c), 3), _i64(_op("add", o_prev, o_c)))
        down += [
            ir.Declare(c, child(v["s"], side)),
            ir.Declare(o_c, _op("and", o_prev, ir.Cast(holds, ir.I32))),
            ir.Store(ones, _op("add", v["ob"], c), o_c),
            store_products(c, _op("mul", pn, ir.VectorLoad(
                buf["ratio"], _op("mul", ratio_at, L), L)))]

    def coefficients(node: ir.Expr) -> ir.Expr:
        o = _i64(ir.Load(ones, _op("add", v["ob"], node)))
        at = _op("add", _op("mul", _op("add", v["nb"], node), 2), o)
        return ir.VectorLoad(buf["coeff"], _op("mul", at, L), L)

    up: list[ir.Stmt] = [
        ir.Declare(v["s"], _op("sub", _op("sub", v["s1"], 1), v["i"])),
        ir.Declare(n, _i64(load("step_node", v["s"]))),
        # Without an earlier edge of this feature, the root's zero coefficients.
        ir.Declare(prev, _op("max", _i64(load("step_prev", v["s"])), 0))]
    sums = []
    for side in ("left", "right"):
        c, sc = ir.Var(f"c_{side}", I64), ir.Var(f"s_{side}", ir.F64)
        up += [ir.Declare(c, child(v["s"], side)), ir.Declare(sc, products(c))]
        sums.append((c, sc))
    total = ir.Var("total", ir.F64)
    up += [ir.Declare(total, _op("add", sums[0][1], sums[1][1])), store_products(n, total)]
    # The edges below this node gain their subtrees' sums; the edge above that tested
    # this feature last loses this node's (module docstring of contribs_tables).
    term = _op("sub", _op("add", _op("mul", sums[0][1], coefficients(sums[0][0])),
                          _op("mul", sums[1][1], coefficients(sums[1][0]))),
               _op("mul", total, coefficients(prev)))
    target = ir.Var("target", I64)
    up += [ir.Declare(target, _op("add", v["yo"], _i64(load("step_target", v["s"])))),
           ir.Store(out, target, _op("add", ir.Load(out, target), _lane_sum(term, L)))]

    row = [
        ir.Declare(v["xo"], _op("mul", v["r"], F)),
        ir.Declare(v["yo"], _op("mul", v["r"], row_width)),
        store_products(ir.i64(0), ir.Broadcast(ir.Const(1.0, ir.F64), L)),
        ir.Store(ones, v["ob"], ir.Const(0, ir.I32)),  # the root's (read with its zero coefficients)
        ir.For(v["s"], v["s0"], v["s1"], ir.i64(1), down),
        ir.For(v["i"], ir.i64(0), _op("sub", v["s1"], v["s0"]), ir.i64(1), up)]
    # A unit's tables (about 100 KB for a tree of 500 nodes) are read for a tile of rows
    # at a time, from cache: row by row, every row read the whole forest's from memory.
    tile_end = _op("min", v["hi"], _op("add", v["t0"], ROW_TILE))
    unit = [
        ir.Declare(v["s0"], load("unit_steps", v["u"])),
        ir.Declare(v["s1"], load("unit_steps", _op("add", v["u"], 1))),
        ir.Declare(v["nb"], load("unit_nodes", v["u"])),
        ir.For(v["r"], v["t0"], tile_end, ir.i64(1), row)]
    n_units = len(tables.unit_steps) - 1
    tile = [
        ir.For(v["r"], v["t0"], tile_end, ir.i64(1), [
            ir.For(v["k"], ir.i64(0), ir.i64(forest.n_outputs), ir.i64(1), [ir.Store(
                out, _op("add", _op("mul", v["r"], row_width),
                         _op("add", _op("mul", v["k"], F + 1), F)),
                load("bias", v["k"]))])]),
        ir.For(v["u"], ir.i64(0), ir.i64(n_units), ir.i64(1), unit)]
    block = [
        ir.Declare(v["pb"], _op("mul", v["blk"], tables.scratch_stride)),
        ir.Declare(v["ob"], _op("mul", v["blk"], tables.ones_stride)),
        ir.Declare(v["lo"], _op("mul", v["blk"], v["per"])),
        ir.Declare(v["hi"], _op("min", n_rows, _op("add", v["lo"], v["per"]))),
        ir.For(v["t0"], v["lo"], v["hi"], ir.i64(ROW_TILE), tile)]
    body: list[ir.Stmt] = [
        ir.Declare(v["per"], _op("div", _op("sub", _op("add", n_rows, threads), 1), threads)),
        ir.For(v["blk"], ir.i64(0), threads, ir.i64(1), block, parallel=True,
               threads=threads)]
    params = [rows, n_rows, out, prod, ones, threads, *buf.values()]
    return ir.Kernel(KERNEL_NAME, params, body)


def _lane_sum(x: ir.Expr, lanes: int) -> ir.Expr:
    """The sum of a vector's lanes, pairwise."""
    terms = [ir.Extract(x, i) for i in range(lanes)]
    while len(terms) > 1:
        terms = [_op("add", terms[i], terms[i + 1]) if i + 1 < len(terms) else terms[i]
                 for i in range(0, len(terms), 2)]
    return terms[0]
