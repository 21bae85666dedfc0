"""The CPU backend: LIR → LLVM IR → machine code for the host or a named CPU, parallel loops
on OpenMP.

>>> from silvanforge.backends.cpu import compile_kernel
>>> from silvanforge.lir import ir
>>> compile_kernel(ir.Kernel("noop", [], [])).function()
"""

from .build import start_workers
from .entry import RowsLayout, predict_method, quick_predict
from .jit import CompiledKernel, Target, compile_kernel, compile_kernels, render_kernel
from .llvm import render_module

__all__ = ["compile_kernel", "compile_kernels", "CompiledKernel", "RowsLayout", "Target",
           "predict_method", "quick_predict", "render_kernel", "render_module", "start_workers"]
