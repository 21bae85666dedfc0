"""``compile(model, target="opencl"|"cuda")``: the :class:`GPUPredictor` it returns.

The pipeline is the CPU one up to MIR; then :mod:`silvanforge.lir.gpu` lowers to launches,
:mod:`silvanforge.backends.gpu` renders them as OpenCL C or CUDA C++ and runs them. The
kernels and the model buffers are built once, in the constructor. ``predict`` has the
CPU :class:`~silvanforge.runtime.predictor.Predictor`'s contract: inputs go through
:func:`~silvanforge.model.inputs.as_rows`, the tree sums through
:func:`silvanforge.reference.finish`, so results match the reference by construction.

With ``target="cuda"``, device arrays (CuPy, or anything with ``__cuda_array_interface__``
or a CUDA ``__dlpack__``, such as torch tensors on the GPU) are read where they are, and
the result is a CuPy array. Only the sums (rows × outputs float64) visit the host, where
``finish`` applies base scores and transforms.

>>> predictor = silvanforge.compile("model.json", target="opencl")   # doctest: +SKIP
>>> predictor.predict(X)                                             # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

from ..backends.gpu import RENDERERS
from ..backends.gpu.runtime import CUDARunner, OpenCLRunner
from ..errors import InputError, require
from ..lir import finish as kernel_finish
from ..lir.gpu import lower as gpu_lower
from ..lir.printer import print_lir
from ..mir import lower as mir_lower, print_mir
from ..model.inputs import as_rows
from ..model.sparse import blockwise
from ..plan import Plan
from ..plan.plan import checked_jobs
from ..reference import check_output, shaped
from . import guard
from .base import ForestShape, build_representation, model_arrays, transformed

_DLPACK_CUDA = 2  # DLDeviceType kDLCUDA


class GPUPredictor(ForestShape):
    """Compiled GPU inference for one forest. Build it with
    ``silvanforge.compile(model, target="opencl")`` (or ``"cuda"``)."""

    def __init__(self, plan: Plan) -> None:
        guard.check(f"a {plan.target} program")
        forest = self.forest = plan.forest
        self.plan = plan
        self.target = target = plan.target
        self.schedule = plan.schedule
        self.representation = build_representation(plan)
        self.mir = mir_lower(forest, plan.schedule)
        self.program = gpu_lower(self.mir, forest, self.representation)
        self.source = RENDERERS[target]().render(self.program)
        model = model_arrays(forest, self.representation)
        runner = OpenCLRunner if target == "opencl" else CUDARunner
        self._runner = runner(self.program, self.source, model)
        self._finish = kernel_finish.modes(forest)

    def predict(self, X: Any, output: str = "value", n_jobs: int | None = None) -> Any:
        """Predict like the source library (``n_jobs`` is accepted and ignored: the
        schedule decides the GPU's parallelism). A CUDA device array in gives a CuPy
        array out.

        >>> predictor.predict(X, output="margin")                # doctest: +SKIP
        """
        finish = self._finish.get(output)
        if finish is None:
            if output == "leaf":
                raise InputError("output='leaf' runs on CPU predictors for now: compile "
                                 "with target='cpu' for leaf ids")
            check_output(output)
        if n_jobs is not None:  # ignored, but a wrong one is wrong here as on the CPU
            checked_jobs(n_jobs)
        f = self.forest
        by_block = blockwise(X, f, lambda part: self.predict(part, output))
        if by_block is not None:  # a large sparse matrix, never densified whole
            return by_block
        if self.target == "opencl":
            result = self._runner.run(as_rows(X, f), f.n_outputs, finish)
            return transformed(f, result) if finish == kernel_finish.SCORE else shaped(f, result)
        cp = require("cupy", "cuda")
        device = _device_array(X, cp)
        rows = self._device_rows(device, cp) if device is not None else \
            cp.asarray(as_rows(X, f))
        result = self._runner.run(rows, f.n_outputs, finish)
        if finish == kernel_finish.SCORE:
            value = transformed(f, result.get())
            return cp.asarray(value) if device is not None else value
        result = shaped(f, result)
        return result if device is not None else result.get()

    def _device_rows(self, X: Any, cp: Any) -> Any:
        if X.ndim != 2 or X.shape[1] != self.forest.n_features:
            raise InputError(f"input must be 2-D with {self.forest.n_features} features "
                             f"(columns); got shape {tuple(X.shape)}")
        if X.dtype.kind not in "fiub":
            raise InputError(f"input has dtype {X.dtype}; expected numbers")
        return cp.ascontiguousarray(X, dtype=self.forest.input_dtype)

    def dump(self, level: str) -> str:
        """The text of one level: "plan", "hir", "mir", "lir" (every launch) or the
        target's source ("opencl" or "cuda")."""
        if level == "plan":
            return str(self.plan)
        if level == "hir":
            return f"{self.forest.summary()}\nschedule:\n{self.schedule}"
        if level == "mir":
            return print_mir(self.mir)
        if level == "lir":
            return "\n\n".join(
                f"// launch {i}: block {launch.block}\n{print_lir(launch.kernel)}"
                for i, launch in enumerate(self.program.launches))
        if level == self.target:
            return self.source
        raise InputError(f"dump level must be one of plan, hir, mir, lir, {self.target}; "
                         f"not {level!r}")

    def __repr__(self) -> str:
        return (f"<GPUPredictor {self.forest.n_trees} trees, {self.target}, "
                f"{len(self.program.launches)} launch(es)>")


def _device_array(X: Any, cp: Any) -> Any:
    """X as a CuPy array when it lives on a CUDA device, else None."""
    if isinstance(X, cp.ndarray):
        return X
    if hasattr(X, "__cuda_array_interface__"):
        return cp.asarray(X)
    device = getattr(X, "__dlpack_device__", None)
    if device is not None and device()[0] == _DLPACK_CUDA:
        return cp.from_dlpack(X)
    return None
