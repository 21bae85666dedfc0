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
from ..frontends import load
from ..lir.gpu import lower as gpu_lower
from ..lir.printer import print_lir
from ..mir import lower as mir_lower, print_mir
from ..model.forest import Forest
from ..model.inputs import as_rows
from ..lir import finish as kernel_finish
from ..reference import check_output, shaped
from ..schedule import Schedule, named
from ..schedule.library import GPU_SCHEDULES
from .predictor import ForestShape, build_representation, model_arrays, transformed

TARGETS = ("cuda", "opencl")
_DLPACK_CUDA = 2  # DLDeviceType kDLCUDA


class GPUPredictor(ForestShape):
    """Compiled GPU inference for one forest. Build it with
    ``silvanforge.compile(model, target="opencl")`` (or ``"cuda"``)."""

    def __init__(self, forest: Forest, target: str, schedule: Schedule,
                 representation: str, precision: str, tile_size: int = 1) -> None:
        self.forest = forest
        self.target = target
        self.schedule = schedule
        self.representation = build_representation(forest, representation, precision,
                                                   tile_size)
        self.mir = mir_lower(forest, schedule)
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
            check_output(output)
        f = self.forest
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
        """The text of one level: "hir", "mir", "lir" (every launch) or the target's
        source ("opencl" or "cuda")."""
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
        raise InputError(f"dump level must be one of hir, mir, lir, {self.target}; "
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


def compile_gpu(model: Any, target: str, schedule: Any = None,
                representation: str | None = None,
                precision: str | None = None, tile_size: int | None = None,
                tiling: str | None = None) -> GPUPredictor:
    """What ``silvanforge.compile`` does for a GPU ``target`` ("cuda" or "opencl").

    ``schedule`` None is the ``tahoe_direct`` schedule (64 rows per block, one row per
    thread, every tree).

    >>> compile_gpu("model.json", "opencl", schedule="gpu_tree_parallel")  # doctest: +SKIP
    """
    from .layout import plan_layout
    from .predictor import _precision, _representation, _schedule

    if target not in TARGETS:
        raise InputError(f"unknown target {target!r}; choose from 'cpu', "
                         + ", ".join(repr(t) for t in TARGETS))
    forest = load(model)
    if (isinstance(schedule, str) and schedule.strip() == "auto") or \
            hasattr(schedule, "compile_kwargs"):
        from ..tune.gpu import resolve  # the tuning cache, else Algorithm 1's choice

        schedule, tuned = resolve(forest, target, schedule)
        representation = representation or tuned
    chosen = named(GPU_SCHEDULES[0], forest.n_trees) if schedule is None else \
        _schedule(forest, schedule)
    layout = plan_layout(forest, tile_size, tiling, None)
    rep = _representation(forest, representation or layout.representation, code=False)
    if rep == "mask":
        raise InputError("representation 'mask' is CPU-only (its tests are packed with "
                         "x86 vector instructions); use 'sparse' or 'array' on GPUs")
    return GPUPredictor(forest, target, chosen, rep, _precision(forest, precision),
                        layout.tile_size)
