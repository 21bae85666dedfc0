"""CUDA C++: the C-style renderer's CUDA spelling (compiled by NVRTC).

Kernels are ``extern "C"`` so their names survive compilation unmangled. A float64
``atomicAdd`` needs compute capability 6.0 or newer; :data:`ARCH` is the target the
tests compile PTX for.

>>> from silvanforge.lir import ir
>>> CUDARenderer().expr(ir.ThreadIndex("x", "thread"))
'((long long)threadIdx.x)'
"""

from __future__ import annotations

from ...lir import ir
from ...lir.gpu import Program
from .render import CStyleRenderer

ARCH = "compute_75"  # the oldest target NVRTC 13 accepts (Turing)


class CUDARenderer(CStyleRenderer):
    language = "cuda"
    types = {ir.BOOL: "bool", ir.I8: "signed char", ir.I32: "int", ir.I64: "long long",
             ir.F32: "float", ir.F64: "double"}
    unsigned = {ir.I8: "unsigned char", ir.I32: "unsigned int",
                ir.I64: "unsigned long long"}
    kernel_prefix = 'extern "C" __global__ void'
    restrict = "__restrict__"
    shared_prefix = "__shared__"
    barrier = "__syncthreads()"
    thread_index = {"thread": "threadIdx.{dim}", "block": "blockIdx.{dim}",
                    "block_dim": "blockDim.{dim}", "grid_dim": "gridDim.{dim}"}
    int64_suffix = "LL"
    bitcast = {(ir.F64, ir.I64): "__double_as_longlong", (ir.I64, ir.F64): "__longlong_as_double",
               (ir.F32, ir.I32): "__float_as_int", (ir.I32, ir.F32): "__int_as_float"}

    def preamble(self, program: Program) -> str:
        return "#define INFINITY __longlong_as_double(0x7ff0000000000000LL)\n" \
               "#define NAN __longlong_as_double(0x7ff8000000000000LL)"

    def atomic_add(self, buffer: ir.Buffer, index: str, value: str) -> str:
        return f"atomicAdd(&{buffer.name}[{index}], {value})"
