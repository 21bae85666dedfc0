"""LIR → C-style GPU kernel source: one renderer, per-language details in subclasses.

The renderer walks a :class:`~silvanforge.lir.gpu.Program` and prints each launch's kernel
as C. What differs between CUDA and OpenCL C is data on the subclass: type names, kernel
and parameter qualifiers, thread-index spellings, the barrier, the shared-memory
qualifier, and how a float64 atomic add is written (tinygrad's renderer design; nothing
copied). Every binary operation is parenthesised, so C's precedence never matters.

Semantics kept from LIR: integers wrap (two's complement; the kernels' index arithmetic
stays far from overflow), ``lshr`` shifts an unsigned copy, float ``min``/``max`` are
``fmin``/``fmax`` (the non-NaN operand), comparisons are C's (false on NaN, as LIR's
ordered ones), constants print exactly (the shortest decimal that reads back as the same
double; float32 values read back exactly as floats).

>>> from silvanforge.lir import ir
>>> from silvanforge.backends.gpu.opencl import OpenCLRenderer
>>> OpenCLRenderer().expr(ir.BinOp("lshr", ir.Var("a", ir.I32), ir.Const(4, ir.I32)))
'((int)((uint)(a) >> (4)))'
"""

from __future__ import annotations

import math
from typing import ClassVar

from ...errors import BackendError
from ...lir import ir
from ...lir.gpu import Program

_INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/", "rem": "%", "and": "&",
          "or": "|", "xor": "^", "shl": "<<", "ashr": ">>",
          "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
_KEYWORDS = {"auto", "bool", "break", "case", "char", "const", "continue", "default", "do",
             "double", "else", "enum", "extern", "float", "for", "goto", "if", "inline",
             "int", "long", "register", "restrict", "return", "short", "signed", "sizeof",
             "static", "struct", "switch", "typedef", "union", "unsigned", "void",
             "volatile", "while", "half", "uint", "ulong", "uchar", "kernel", "global",
             "local", "private", "constant", "new", "delete", "class", "template", "this",
             "namespace", "operator", "private", "public", "true", "false"}


class CStyleRenderer:
    """The shared C renderer; subclasses fill in the language (see the class attributes)."""

    language: ClassVar[str]
    types: ClassVar[dict[ir.DType, str]]
    unsigned: ClassVar[dict[ir.DType, str]]
    kernel_prefix: ClassVar[str]
    global_prefix: ClassVar[str] = ""      # pointer parameters' address space
    restrict: ClassVar[str] = "restrict"
    shared_prefix: ClassVar[str]
    barrier: ClassVar[str]
    thread_index: ClassVar[dict[str, str]]   # ThreadIndex kind -> spelling with {dim}
    bitcast: ClassVar[dict[tuple[ir.DType, ir.DType], str]]  # (from, to) -> function
    int64_suffix: ClassVar[str] = "L"
    indent: ClassVar[str] = "  "

    # ---- the program ----------------------------------------------------------------------
    def render(self, program: Program) -> str:
        """One source text with every launch's kernel."""
        parts = [self.preamble(program)]
        parts += [self.kernel(launch.kernel) for launch in program.launches]
        return "\n\n".join(p for p in parts if p) + "\n"

    def preamble(self, program: Program) -> str:
        return ""

    def kernel(self, k: ir.Kernel) -> str:
        params = ",\n    ".join(self.param(p) for p in k.params)
        lines = [f"{self.kernel_prefix} {k.name}(\n    {params}) {{"]
        self.block(k.body, 1, lines)
        lines.append("}")
        return "\n".join(lines)

    def param(self, p: ir.Buffer | ir.Var) -> str:
        if isinstance(p, ir.Var):
            return f"{self.types[p.dtype]} {self.name(p.name)}"
        const = "const " if p.readonly else ""
        return f"{self.global_prefix}{const}{self.types[p.dtype]}* {self.restrict} {p.name}"

    @staticmethod
    def name(name: str) -> str:
        return name + "_" if name in _KEYWORDS else name

    # ---- expressions ----------------------------------------------------------------------
    def expr(self, e: ir.Expr) -> str:
        return getattr(self, "_e_" + type(e).__name__)(e)

    def _e_Const(self, e: ir.Const) -> str:
        if e.dtype == ir.BOOL:
            return "true" if e.value else "false"
        if not e.dtype.is_float:
            suffix = self.int64_suffix if e.dtype == ir.I64 else ""
            text = f"{int(e.value)}{suffix}"
            return text if e.dtype in (ir.I64, ir.I32) else f"(({self.types[e.dtype]}){text})"
        value = float(e.value)
        if math.isnan(value) or math.isinf(value):
            text = "NAN" if math.isnan(value) else ("-" if value < 0 else "") + "INFINITY"
            return f"(({self.types[e.dtype]}){text})"
        text = repr(value)
        return text + "f" if e.dtype == ir.F32 else text

    def _e_Var(self, e: ir.Var) -> str:
        return self.name(e.name)

    def _e_Load(self, e: ir.Load) -> str:
        return f"{e.buffer.name}[{self.expr(e.index)}]"

    def _e_BinOp(self, e: ir.BinOp) -> str:
        a, b = self.expr(e.a), self.expr(e.b)
        if e.op in ("min", "max"):
            return f"{'f' if e.dtype.is_float else ''}{e.op}({a}, {b})"
        if e.op == "lshr":
            if e.dtype not in self.unsigned:
                raise BackendError(f"lshr on {e.dtype}")
            return f"(({self.types[e.dtype]})(({self.unsigned[e.dtype]})({a}) >> ({b})))"
        if e.op not in _INFIX:
            raise BackendError(f"operator {e.op!r} has no C spelling")
        return f"({a} {_INFIX[e.op]} {b})"

    def _e_Cmp(self, e: ir.Cmp) -> str:
        return f"({self.expr(e.a)} {_INFIX[e.op]} {self.expr(e.b)})"

    def _e_Not(self, e: ir.Not) -> str:
        return f"(!{self.expr(e.a)})"

    def _e_IsNaN(self, e: ir.IsNaN) -> str:
        return f"isnan({self.expr(e.a)})"

    def _e_Select(self, e: ir.Select) -> str:
        return f"({self.expr(e.cond)} ? {self.expr(e.a)} : {self.expr(e.b)})"

    def _e_Cast(self, e: ir.Cast) -> str:
        return f"(({self.types[e.dtype]}){self.expr(e.a)})"

    def _e_Bitcast(self, e: ir.Bitcast) -> str:
        return f"{self.bitcast[e.a.dtype, e.dtype]}({self.expr(e.a)})"

    def _e_Math(self, e: ir.Math) -> str:
        return f"{e.func}({self.expr(e.a)})"

    def _e_ThreadIndex(self, e: ir.ThreadIndex) -> str:
        return f"(({self.types[ir.I64]}){self.thread_index[e.kind].format(dim=e.dim)})"

    # ---- statements -----------------------------------------------------------------------
    def block(self, stmts: list[ir.Stmt], depth: int, lines: list[str]) -> None:
        for s in stmts:
            getattr(self, "_s_" + type(s).__name__)(s, self.indent * depth, depth, lines)

    def _s_Declare(self, s: ir.Declare, pad: str, depth: int, lines: list[str]) -> None:
        lines.append(f"{pad}{self.types[s.var.dtype]} {self.name(s.var.name)} = "
                     f"{self.expr(s.init)};")

    def _s_Assign(self, s: ir.Assign, pad: str, depth: int, lines: list[str]) -> None:
        lines.append(f"{pad}{self.name(s.var.name)} = {self.expr(s.value)};")

    def _s_Store(self, s: ir.Store, pad: str, depth: int, lines: list[str]) -> None:
        lines.append(f"{pad}{s.buffer.name}[{self.expr(s.index)}] = {self.expr(s.value)};")

    def _s_AtomicAdd(self, s: ir.AtomicAdd, pad: str, depth: int, lines: list[str]) -> None:
        if s.buffer.dtype != ir.F64:
            raise BackendError(f"atomic add into {s.buffer.dtype} buffer {s.buffer.name!r}")
        lines.append(f"{pad}{self.atomic_add(s.buffer, self.expr(s.index), self.expr(s.value))};")

    def atomic_add(self, buffer: ir.Buffer, index: str, value: str) -> str:
        raise NotImplementedError

    def _s_Prefetch(self, s: ir.Prefetch, pad: str, depth: int, lines: list[str]) -> None:
        pass  # GPUs cache through shared memory (the lowering's job), not prefetches

    def _s_LocalArray(self, s: ir.LocalArray, pad: str, depth: int, lines: list[str]) -> None:
        prefix = self.shared_prefix + " " if s.buffer.shared else ""
        lines.append(f"{pad}{prefix}{self.types[s.buffer.dtype]} {s.buffer.name}"
                     f"[{s.buffer.size}];")

    def _s_Barrier(self, s: ir.Barrier, pad: str, depth: int, lines: list[str]) -> None:
        lines.append(f"{pad}{self.barrier};")

    def _s_For(self, s: ir.For, pad: str, depth: int, lines: list[str]) -> None:
        if s.parallel:
            raise BackendError("a parallel LIR loop on a GPU target; map loops to the GPU "
                               "with gpuDimension")
        v = self.name(s.var.name)
        if s.unroll:
            lines.append(f"{pad}#pragma unroll")
        lines.append(f"{pad}for ({self.types[s.var.dtype]} {v} = {self.expr(s.start)}; "
                     f"{v} < {self.expr(s.stop)}; {v} += {self.expr(s.step)}) {{")
        self.block(s.body, depth + 1, lines)
        lines.append(f"{pad}}}")

    def _s_While(self, s: ir.While, pad: str, depth: int, lines: list[str]) -> None:
        lines.append(f"{pad}while ({self.expr(s.cond)}) {{")
        self.block(s.body, depth + 1, lines)
        lines.append(f"{pad}}}")

    def _s_If(self, s: ir.If, pad: str, depth: int, lines: list[str]) -> None:
        lines.append(f"{pad}if ({self.expr(s.cond)}) {{")
        self.block(s.then, depth + 1, lines)
        if s.orelse:
            lines.append(f"{pad}}} else {{")
            self.block(s.orelse, depth + 1, lines)
        lines.append(f"{pad}}}")

    def _s_Cold(self, s: ir.Cold, pad: str, depth: int, lines: list[str]) -> None:
        lines.append(f"{pad}{{")
        self.block(s.body, depth + 1, lines)
        lines.append(f"{pad}}}")

    def _s_BranchTree(self, s: ir.BranchTree, pad: str, depth: int,
                      lines: list[str]) -> None:
        self.block(s.expand(), depth, lines)

    def _s_Switch(self, s: ir.Switch, pad: str, depth: int, lines: list[str]) -> None:
        lines.append(f"{pad}switch ({self.expr(s.value)}) {{")
        for i, case in enumerate(s.cases):
            lines.append(f"{pad}{self.indent}case {i}: {{")
            self.block(case, depth + 2, lines)
            lines.append(f"{pad}{self.indent * 2}break;")
            lines.append(f"{pad}{self.indent}}}")
        lines.append(f"{pad}}}")
