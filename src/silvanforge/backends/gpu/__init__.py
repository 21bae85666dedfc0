"""GPU backends: LIR → CUDA C++ (NVRTC, CuPy) and OpenCL C (pyopencl) from one renderer."""

from .cuda import CUDARenderer
from .opencl import OpenCLRenderer
from .render import CStyleRenderer

RENDERERS = {"cuda": CUDARenderer, "opencl": OpenCLRenderer}

__all__ = ["CStyleRenderer", "CUDARenderer", "OpenCLRenderer", "RENDERERS"]
