"""C-like text of a LIR kernel, for ``dump("lir")`` and for reading failing tests.

The text is for people, not for a compiler: it is unambiguous (every binary operation is
parenthesised, logical and arithmetic shifts differ) but not meant to be parsed back.
"""

from __future__ import annotations

from . import ir

# Operators printed infix; the others (min, max) print as calls.
_INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/", "rem": "%", "and": "&",
          "or": "|", "xor": "^", "shl": "<<", "ashr": ">>", "lshr": ">>>",
          "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
_INDENT = "  "


def print_lir(kernel: ir.Kernel) -> str:
    """Render ``kernel`` as C-like text.

    >>> x = ir.Buffer("x", ir.F64)
    >>> i = ir.Var("i", ir.I64)
    >>> k = ir.Kernel("double", [x, ir.Var("n", ir.I64)], [
    ...     ir.For(i, ir.i64(0), ir.Var("n", ir.I64), ir.i64(1),
    ...            [ir.Store(x, i, ir.BinOp("mul", ir.Load(x, i), ir.Const(2.0, ir.F64)))],
    ...            parallel=True)])
    >>> print(print_lir(k))
    kernel double(f64* x, i64 n) {
      parallel for (i64 i = 0; i < n; i += 1) {
        x[i] = (x[i] * 2.0);
      }
    }
    """
    params = ", ".join(_param(p) for p in kernel.params)
    lines = [f"kernel {kernel.name}({params}) {{"]
    _block(kernel.body, 1, lines)
    lines.append("}")
    return "\n".join(lines)


def format_expr(e: ir.Expr) -> str:
    """One expression as text.

    >>> format_expr(ir.Select(ir.IsNaN(ir.Var("v", ir.F32)), ir.i64(1), ir.i64(2)))
    '(isnan(v) ? 1 : 2)'
    """
    if isinstance(e, ir.Const):
        if e.dtype == ir.BOOL:
            return "true" if e.value else "false"
        return repr(float(e.value)) if e.dtype.is_float else str(int(e.value))
    if isinstance(e, ir.Var):
        return e.name
    if isinstance(e, ir.Load):
        return f"{e.buffer.name}[{format_expr(e.index)}]"
    if isinstance(e, (ir.BinOp, ir.Cmp)):
        a, b = format_expr(e.a), format_expr(e.b)
        return f"({a} {_INFIX[e.op]} {b})" if e.op in _INFIX else f"{e.op}({a}, {b})"
    if isinstance(e, ir.Not):
        return f"!{format_expr(e.a)}"
    if isinstance(e, ir.IsNaN):
        return f"isnan({format_expr(e.a)})"
    if isinstance(e, ir.Select):
        return f"({format_expr(e.cond)} ? {format_expr(e.a)} : {format_expr(e.b)})"
    if isinstance(e, ir.Cast):
        return f"({e.dtype.name}){format_expr(e.a)}"
    if isinstance(e, ir.Bitcast):
        return f"bitcast<{e.dtype.name}>({format_expr(e.a)})"
    if isinstance(e, ir.Math):
        return f"{e.func}({format_expr(e.a)})"
    if isinstance(e, ir.ThreadIndex):
        return f"{e.kind}.{e.dim}"
    if isinstance(e, ir.Broadcast):
        return f"broadcast<{e.lanes}>({format_expr(e.a)})"
    if isinstance(e, ir.Iota):
        return f"iota<{e.lanes}>"
    if isinstance(e, ir.VectorLoad):
        return f"{e.buffer.name}[{format_expr(e.index)} : +{e.lanes}]"
    if isinstance(e, ir.Lookup):
        return (f"{e.buffer.name}[{format_expr(e.base)} + "
                f"{format_expr(e.offset)} (< {e.span})]")
    if isinstance(e, ir.Extract):
        return f"{format_expr(e.a)}.lane{e.lane}"
    if isinstance(e, ir.Shuffle):
        return f"shuffle({format_expr(e.a)}, {format_expr(e.b)}, {list(e.order)})"
    if isinstance(e, ir.LaneBits):
        return f"lanebits<{e.dtype.name}>({format_expr(e.a)})"
    raise TypeError(f"not a LIR expression: {e!r}")


def _param(p: ir.Buffer | ir.Var) -> str:
    if isinstance(p, ir.Buffer):
        return f"{'const ' if p.readonly else ''}{p.dtype.name}* {p.name}"
    return f"{p.dtype.name} {p.name}"


def _block(stmts: list[ir.Stmt], depth: int, lines: list[str]) -> None:
    for s in stmts:
        _stmt(s, depth, lines)


def _stmt(s: ir.Stmt, depth: int, lines: list[str]) -> None:
    pad = _INDENT * depth
    if isinstance(s, ir.Declare):
        lines.append(f"{pad}{s.var.dtype.name} {s.var.name} = {format_expr(s.init)};")
    elif isinstance(s, ir.Assign):
        lines.append(f"{pad}{s.var.name} = {format_expr(s.value)};")
    elif isinstance(s, ir.Store):
        lines.append(f"{pad}{s.buffer.name}[{format_expr(s.index)}] = {format_expr(s.value)};")
    elif isinstance(s, ir.AtomicAdd):
        lines.append(f"{pad}atomic_add(&{s.buffer.name}[{format_expr(s.index)}], "
                     f"{format_expr(s.value)});")
    elif isinstance(s, ir.Prefetch):
        lines.append(f"{pad}prefetch(&{s.buffer.name}[{format_expr(s.index)}]);")
    elif isinstance(s, ir.LocalArray):
        shared = "shared " if s.buffer.shared else ""
        lines.append(f"{pad}{shared}{s.buffer.dtype.name} {s.buffer.name}[{s.buffer.size}];")
    elif isinstance(s, ir.Barrier):
        lines.append(f"{pad}barrier();")
    elif isinstance(s, ir.For):
        _for(s, depth, lines)
    elif isinstance(s, ir.While):
        lines.append(f"{pad}while ({format_expr(s.cond)}) {{")
        _block(s.body, depth + 1, lines)
        lines.append(f"{pad}}}")
    elif isinstance(s, ir.If):
        lines.append(f"{pad}if ({format_expr(s.cond)}) {{")
        _block(s.then, depth + 1, lines)
        if s.orelse:
            lines.append(f"{pad}}} else {{")
            _block(s.orelse, depth + 1, lines)
        lines.append(f"{pad}}}")
    elif isinstance(s, ir.Cold):
        lines.append(f"{pad}cold {{")
        _block(s.body, depth + 1, lines)
        lines.append(f"{pad}}}")
    elif isinstance(s, ir.BranchTree):
        _block(s.expand(), depth, lines)
    elif isinstance(s, ir.Switch):
        lines.append(f"{pad}switch ({format_expr(s.value)}) {{")
        for i, case in enumerate(s.cases):
            lines.append(f"{pad}{_INDENT}case {i}: {{")
            _block(case, depth + 2, lines)
            lines.append(f"{pad}{_INDENT}}}")
        lines.append(f"{pad}}}")
    else:
        raise TypeError(f"not a LIR statement: {s!r}")


def _for(s: ir.For, depth: int, lines: list[str]) -> None:
    pad = _INDENT * depth
    v = s.var.name
    head = "parallel for" if s.parallel else "for"
    if s.parallel and s.threads is not None:
        head += f" [threads={format_expr(s.threads)}]"
    if s.unroll:
        head = "unroll " + head
    lines.append(f"{pad}{head} ({s.var.dtype.name} {v} = {format_expr(s.start)}; "
                 f"{v} < {format_expr(s.stop)}; {v} += {format_expr(s.step)}) {{")
    _block(s.body, depth + 1, lines)
    lines.append(f"{pad}}}")
