"""OpenCL C: the C-style renderer's OpenCL spelling.

Float64 needs ``cl_khr_fp64``. OpenCL 1.2 has no float atomics, so an atomic float64 add
is a compare-and-swap loop on the value's 64-bit pattern (``cl_khr_int64_base_atomics``);
the runtime checks both extensions on the device.

>>> from silvanforge.lir import ir
>>> OpenCLRenderer().expr(ir.ThreadIndex("y", "block"))
'((long)get_group_id(1))'
"""

from __future__ import annotations

from ...lir import ir
from ...lir.gpu import Program
from .render import CStyleRenderer

_ATOMIC_ADD = """\
inline void sf_atomic_add_{space}(volatile __{space} double* p, double v) {{
  union {{ ulong u; double d; }} seen, want;
  do {{
    seen.d = *p;
    want.d = seen.d + v;
  }} while (atom_cmpxchg((volatile __{space} ulong*)p, seen.u, want.u) != seen.u);
}}"""


class OpenCLRenderer(CStyleRenderer):
    language = "opencl"
    types = {ir.BOOL: "bool", ir.I8: "char", ir.I32: "int", ir.I64: "long",
             ir.F32: "float", ir.F64: "double"}
    unsigned = {ir.I8: "uchar", ir.I32: "uint", ir.I64: "ulong"}
    kernel_prefix = "__kernel void"
    global_prefix = "__global "
    shared_prefix = "__local"
    barrier = "barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE)"
    thread_index = {"thread": "get_local_id({dim})", "block": "get_group_id({dim})",
                    "block_dim": "get_local_size({dim})", "grid_dim": "get_num_groups({dim})"}
    bitcast = {(ir.F64, ir.I64): "as_long", (ir.I64, ir.F64): "as_double",
               (ir.F32, ir.I32): "as_int", (ir.I32, ir.F32): "as_float"}

    def _e_ThreadIndex(self, e: ir.ThreadIndex) -> str:
        index = self.thread_index[e.kind].format(dim="xyz".index(e.dim))
        return f"((long){index})"

    def preamble(self, program: Program) -> str:
        lines = ["#pragma OPENCL EXTENSION cl_khr_fp64 : enable"]
        if program.uses_atomics:
            lines.append("#pragma OPENCL EXTENSION cl_khr_int64_base_atomics : enable")
            lines += [_ATOMIC_ADD.format(space=s) for s in ("global", "local")]
        return "\n".join(lines)

    def atomic_add(self, buffer: ir.Buffer, index: str, value: str) -> str:
        space = "local" if buffer.shared else "global"
        return f"sf_atomic_add_{space}(&{buffer.name}[{index}], {value})"
