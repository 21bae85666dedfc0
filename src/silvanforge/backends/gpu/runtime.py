"""Running a GPU :class:`~silvanforge.lir.gpu.Program`: OpenCL through pyopencl, CUDA
through CuPy.

Both runners build the kernels and upload the model buffers (and the program's tables,
which follow them in the kernels' parameters) once; a call uploads the rows
(unless they already are on the device), zeroes the result and the global scratch
buffers, runs the launches in order on one queue (stream), and returns the finished
result, rows × outputs float64 (a numpy array for OpenCL, a CuPy array for CUDA).

The OpenCL device is pyopencl's choice (``PYOPENCL_CTX`` selects one, e.g. ``0`` for the
first platform's first device); float64 support (``cl_khr_fp64``) is required, and
``cl_khr_int64_base_atomics`` for schedules with ``atomicReduce``.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

from ...errors import BackendError, require
from ...lir.gpu import Program


def _launch_args(program: Program, n_rows: int, n_outputs: int):
    """(grid, block) per launch that has work, in order."""
    for i, launch in enumerate(program.launches):
        grid = launch.grid_size(n_rows)
        if 0 not in grid:
            yield i, grid, launch.block


@lru_cache(maxsize=None)
def _opencl_context():
    cl = require("pyopencl", "opencl")
    try:
        return cl.create_some_context(interactive=False)
    except cl.Error as exc:
        raise BackendError(f"no OpenCL device: {exc}") from None


class OpenCLRunner:
    """An OpenCL program with the model on the device."""

    def __init__(self, program: Program, source: str, model: list[np.ndarray]) -> None:
        cl = self.cl = require("pyopencl", "opencl")
        self.program = program
        self.context = _opencl_context()
        device = self.context.devices[0]
        self.device = device
        if not device.double_fp_config:
            raise BackendError(f"OpenCL device {device.name!r} has no float64 "
                               "(cl_khr_fp64); SilvanForge sums trees in float64")
        if program.uses_atomics and "cl_khr_int64_base_atomics" not in device.extensions:
            raise BackendError(f"OpenCL device {device.name!r} lacks "
                               "cl_khr_int64_base_atomics, which atomicReduce needs")
        shared = max((launch.shared_bytes for launch in program.launches), default=0)
        if shared > device.local_mem_size:
            raise BackendError(f"the kernels need {shared} bytes of local memory; "
                               f"{device.name!r} has {device.local_mem_size}")
        self.queue = cl.CommandQueue(self.context)
        try:
            built = cl.Program(self.context, source).build()
        except cl.RuntimeError as exc:
            raise BackendError(f"OpenCL could not build the kernels: {exc}") from None
        self.kernels = [getattr(built, launch.kernel.name) for launch in program.launches]
        flags = cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR
        # Zero-length buffers are invalid in OpenCL: a one-element stand-in is never read.
        self.model = [cl.Buffer(self.context, flags, hostbuf=a if a.size else np.zeros(1, a.dtype))
                      for a in [*model, *program.tables]]

    def run(self, rows: np.ndarray, n_outputs: int, finish: int) -> np.ndarray:
        """The result for ``rows``, finished as ``finish`` says (:mod:`...lir.finish`)."""
        cl = self.cl
        n = len(rows)
        result = np.zeros((n, n_outputs))
        if n == 0:
            return result
        mf = cl.mem_flags
        rows_dev = cl.Buffer(self.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=rows)
        outputs = [cl.Buffer(self.context, mf.READ_WRITE, max(8, 8 * int(np.prod(s))))
                   for s in [(n, n_outputs), *self.program.scratch_shapes(n, n_outputs)]]
        for buf in outputs:
            cl.enqueue_fill_buffer(self.queue, buf, np.float64(0), 0, buf.size)
        args = [rows_dev, np.int64(n), *outputs, np.int64(finish), *self.model]
        for i, grid, block in _launch_args(self.program, n, n_outputs):
            global_size = tuple(g * b for g, b in zip(grid, block))
            self.kernels[i](self.queue, global_size, block, *args)
        cl.enqueue_copy(self.queue, result, outputs[0])
        return result


class CUDARunner:
    """A CUDA program compiled by NVRTC through CuPy, with the model on the device."""

    def __init__(self, program: Program, source: str, model: list[np.ndarray]) -> None:
        cp = self.cp = require("cupy", "cuda")
        self.program = program
        try:
            module = cp.RawModule(code=source, backend="nvrtc", options=("-std=c++17",))
            self.kernels = [module.get_function(launch.kernel.name)
                            for launch in program.launches]
        except cp.cuda.compiler.CompileException as exc:
            raise BackendError(f"NVRTC could not compile the kernels: {exc}") from None
        self.model = [cp.asarray(a if a.size else np.zeros(1, a.dtype))
                      for a in [*model, *program.tables]]

    def run(self, rows: Any, n_outputs: int, finish: int) -> Any:
        """The result for ``rows``, a C-contiguous CuPy array of the input dtype, finished
        as ``finish`` says."""
        cp = self.cp
        n = len(rows)
        result = cp.zeros((n, n_outputs))
        if n == 0:
            return result
        scratch = [cp.zeros(s) for s in self.program.scratch_shapes(n, n_outputs)]
        args = (rows, np.int64(n), result, *scratch, np.int64(finish), *self.model)
        for i, grid, block in _launch_args(self.program, n, n_outputs):
            self.kernels[i](grid, block, args)
        return result
