"""CUDA source → PTX with NVRTC, through ``cuda-python`` (no GPU needed).

The NVRTC library comes from the ``nvidia-cuda-nvrtc`` wheel (or a CUDA toolkit);
``cuda.bindings`` finds it. The tests compile every CUDA kernel they render this way, so
CUDA code is checked on machines without a GPU.

>>> ptx = compile_ptx('extern "C" __global__ void k(double* x) { x[0] = 1.0; }')  # doctest: +SKIP
>>> ".entry k" in ptx                                                        # doctest: +SKIP
True
"""

from __future__ import annotations

from ...errors import BackendError, require
from .cuda import ARCH


def _nvrtc():
    try:
        from cuda.bindings import nvrtc  # cuda-python >= 12.6
    except ImportError:
        nvrtc = require("cuda.nvrtc", "cuda")  # older cuda-python
    return nvrtc


def compile_ptx(source: str, arch: str = ARCH, name: str = "silvanforge.cu") -> str:
    """PTX for ``source``; a compile error raises BackendError with NVRTC's log."""
    nvrtc = _nvrtc()
    ok = nvrtc.nvrtcResult.NVRTC_SUCCESS

    def check(result, what: str):
        err, *rest = result
        if err != ok:
            raise BackendError(f"NVRTC {what}: {nvrtc.nvrtcGetErrorString(err)[1].decode()}")
        return rest[0] if len(rest) == 1 else rest

    program = check(nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], []),
                    "create")
    try:
        options = [f"--gpu-architecture={arch}".encode(), b"-std=c++17"]
        err, = nvrtc.nvrtcCompileProgram(program, len(options), options)
        if err != ok:
            size = check(nvrtc.nvrtcGetProgramLogSize(program), "log size")
            log = b" " * size
            check(nvrtc.nvrtcGetProgramLog(program, log), "log")
            raise BackendError(f"NVRTC could not compile the kernel:\n"
                               f"{log.decode(errors='replace').rstrip(chr(0))}")
        size = check(nvrtc.nvrtcGetPTXSize(program), "PTX size")
        ptx = b" " * size
        check(nvrtc.nvrtcGetPTX(program, ptx), "PTX")
        return ptx.rstrip(b"\0").decode()
    finally:
        nvrtc.nvrtcDestroyProgram(program)
