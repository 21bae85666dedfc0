"""The CPU :class:`Predictor`: a plan's compiled code, the user's handle on it.

A Predictor owns its :class:`~silvanforge.plan.Plan` (and so the Forest), the
representation's model buffers, and the compiled kernel
(see :mod:`silvanforge.lir.lower` for its signature). ``predict`` converts the input
(without a copy when it already is C-contiguous in the model's input dtype), zeroes the
result and the privatized buffers of this call and runs the kernel, which also finishes
the sums (:mod:`silvanforge.lir.finish`: the reference's averaging, base scores and, for
the common transforms, the transform, in the same float64 operations); a transform the
kernel lacks is applied by :mod:`silvanforge.model.transforms`, and the output shape is
:func:`silvanforge.reference.shaped`'s.

Saved predictors are ``.npz`` archives (uncompressed) read with ``allow_pickle=False``:
the Forest as arrays and JSON, the plan, the object code, and a SHA-256 digest of all of
these, checked on loading. The object code reloads without recompiling, only when the
caller trusts it (``load_predictor(path, trust_code=True)``, the default: a saved
predictor is a program) and only on a CPU with the features it was built for (else it
is rebuilt for this CPU: object code is code, run only where it was built to run);
``trust_code=False`` rebuilds every kernel from the model data and the plan.
Pickling uses the same bytes, with the code trusted (unpickling runs code anyway).

``output="leaf"`` runs a second predictor, for the plan's :meth:`~Plan.leaf_plan`, built
on the first such call (or at once when the plan's ``outputs`` name "leaf") and saved
with this one (members ``leaf_object_code_*``), so a reloaded predictor does not build it
again.
"""

from __future__ import annotations

import hashlib
import inspect
import io
import itertools
import logging
import math
import os
import time
import tokenize
import warnings
import zipfile
from dataclasses import replace
from typing import Any, Callable

import numpy as np

from ..backends.cpu import (CompiledKernel, RowsLayout, Target, compile_kernels,
                            predict_method, quick_predict, start_workers)
from ..errors import BackendError, InputError, ModelFormatError, SilvanForgeError
from ..export import Exported, Kernels, write_library
from ..hir import print_plan
from ..lir import finish as kernel_finish, lower as lir_lower
from ..lir.printer import print_lir
from ..mir import print_mir
from ..model import leaf_ids, serialize
from ..model.forest import Forest
from ..model.inputs import as_rows
from ..model.sparse import blockwise
from ..plan import Plan
from ..plan.plan import MAX_JOBS, checked_jobs
from ..plan.planner import SMALL_BATCH, cpu_target, rows_per_thread
from ..reference import check_output
from ..representations import REGISTRY
from ..representations.pair import lower_schedules
from ..schedule import Schedule
from . import fork, gc_pause, guard
from .contribs import Contributions
from .base import ForestShape, build_representation, model_arrays, transformed

# 2: kernels finish their rows (a ``finish`` argument). 3: a kernel's code may be several
# object files. 4: the plan (schedules, layout, threads, CPU) replaces the options.
# 5: a SHA-256 digest of the other members (``digest``). Older archives load with their
# code rebuilt: they have no digest, so their code is never run. 6: the plan may have
# two layouts (``small_representation``). 7: a kernel copying float32 rows for vector
# walks takes float64 rows too (two parameters more, lir/lower.py ``WIDE_ROWS``):
# archives of formats 5 and 6 load with their code rebuilt as well (their kernels' other
# signature), and the versions before refuse 7 (their kernels would not take the rows).
FORMAT_VERSION = 7
DIGEST_FORMAT = 5
DUMP_LEVELS = ("plan", "hir", "mir", "lir", "llvm")
# What ``predict`` computes (reference.check_output's message names them).
OUTPUTS = ("value", "margin", "leaf", "contribs")
# A one-row call is half Python: a global is read faster than a module's attribute,
# and the default output is this very string (another equal one takes the longer path).
_SCORE = kernel_finish.SCORE
_NDARRAY, _zeros, _VALUE = np.ndarray, np.zeros, "value"

# A call of fewer walks (rows x trees) than this keeps the GIL (backends/cpu/entry.py):
# about a microsecond of work, where releasing the GIL and taking it back costs 0.1.
HOLD_GIL_WALKS = 1024
log = logging.getLogger(__name__)


class _Kernel:
    """One schedule's compiled code: MIR, LIR and machine code."""

    def __init__(self, forest: Forest, schedule: Schedule, mir: Any, lir: Any,
                 object_code: tuple[bytes, ...] | None, target: Target | None) -> None:
        self.schedule, self.mir, self.lir = schedule, mir, lir
        self.has_scratch = len(self.mir.buffers) > 1
        self.code = None
        if object_code is not None and target is not None:
            try:
                self.code = CompiledKernel.from_object(object_code, target, self.lir.name,
                                                       self.lir.params)
            except BackendError as exc:
                warnings.warn(f"recompiling: {exc}", stacklevel=4)
        self._rows = RowsLayout(forest.n_features, forest.input_dtype,
                                HOLD_GIL_WALKS // max(1, forest.n_trees))

    def bind(self, model_args: list[int], code: CompiledKernel | None = None) -> None:
        """Take ``code`` (when the kernel was not reloaded) and build the entry over the
        model buffers at ``model_args``. The model buffers never change: they are bound
        into the entry once. The entry checks the rows itself (the module docstring of
        backends/cpu/entry.py)."""
        self.code = code or self.code
        self.call = self.code.entry(model_args, self._rows)


def _compiled(kernels: list[_Kernel], plan: Plan, model_args: Callable[[], list[int]]
              ) -> None:
    """Compile the kernels that were not reloaded, in one parallel build
    (:func:`compile_kernels`), and bind every kernel to the model buffers
    ``model_args()`` gives (asked for while the workers build: the representation may
    fill its tables only then)."""
    todo = [k for k in kernels if k.code is None]
    if todo:
        guard.check(f"{len(todo)} kernel(s) of a {plan.representation} plan")
    # Each kernel at its own layout's level (a pair's small kernel as code: its quick
    # build), all in one parallel build.
    names = [plan.representation] + [plan.small_representation or plan.representation
                                      ] * (len(kernels) - 1)
    levels = [(REGISTRY[name].llvm_opt, REGISTRY[name].llvm_fast_isel)
              for k, name in zip(kernels, names) if k.code is None]
    codes = compile_kernels([k.lir for k in todo], target=cpu_target(plan.cpu),
                            levels=levels, meanwhile=model_args) if todo else []
    args = model_args()
    for kernel in kernels:
        kernel.bind(args, codes.pop(0) if kernel.code is None else None)


def _code_members(prefix: str, codes: list[tuple[bytes, ...]]) -> dict[str, np.ndarray]:
    """Kernels' object files as archive members, read back by :func:`_object_files`."""
    return {f"{prefix}object_code_{i}_{j}": np.frombuffer(obj, dtype=np.uint8)
            for i, code in enumerate(codes) for j, obj in enumerate(code)}


def _object_files(archive: dict[str, np.ndarray], kernel: int,
                  prefix: str = "") -> tuple[bytes, ...]:
    """A saved kernel's object files: ``<prefix>object_code_<kernel>_0``, ``_1``, ... ."""
    names = itertools.takewhile(archive.__contains__, (f"{prefix}object_code_{kernel}_{j}"
                                                       for j in itertools.count()))
    return tuple(archive[name].tobytes() for name in names)


class Predictor(ForestShape):
    """Compiled inference for one forest. Build it with :func:`silvanforge.compile`.

    >>> predictor = silvanforge.compile("model.json")            # doctest: +SKIP
    >>> predictor.predict(X)                                     # doctest: +SKIP
    """

    def __init__(self, plan: Plan, object_code: tuple[tuple[bytes, ...], ...] = (),
                 built_for: Target | None = None,
                 leaf_code: tuple[tuple[bytes, ...], ...] = (),
                 contribs_code: tuple[bytes, ...] = ()) -> None:
        """Build ``plan``'s kernels, or load them from ``object_code`` (one tuple of
        object files a kernel) built for ``built_for``; likewise the leaf output's from
        ``leaf_code`` when given (or when the plan's ``outputs`` ask for it), and the
        contributions' from ``contribs_code`` (when the plan's ``outputs`` ask for it,
        else on first use). Code this CPU cannot run is rebuilt for it, with a
        warning."""
        forest = self.forest = plan.forest
        mismatch = built_for.mismatch(Target.host()) if object_code else None
        if mismatch:
            warnings.warn(f"recompiling for this CPU: the saved code {mismatch}",
                          stacklevel=3)
            plan = replace(plan, cpu="native", vector_lanes=REGISTRY[
                plan.representation].vector_lanes(forest, frozenset(Target.host().enabled())))
            object_code, leaf_code = (), ()
        self.plan = plan
        if len(object_code) < len(plan.schedules):  # a build: its workers start meanwhile
            start_workers()
        self.representation = build_representation(plan)
        codes = list(object_code) + [None] * (len(plan.schedules) - len(object_code))
        with gc_pause.paused():  # lowering builds many objects (even when loading)
            start = time.perf_counter()
            kernels = [_Kernel(forest, schedule, mir, lir, code, built_for)
                       for schedule, (mir, lir), code in zip(
                           plan.schedules, lower_schedules(
                               forest, plan.schedules, self.representation,
                               plan.vector_lanes), codes)]
            lowered = time.perf_counter()
            log.info("lower to MIR and LIR: %d kernel(s) (%.2f s)", len(kernels),
                     lowered - start)
            if log.isEnabledFor(logging.DEBUG):  # printing a big kernel's IR takes time
                for k in kernels:
                    log.debug("kernel %s: MIR %d lines, LIR %d lines", k.lir.name,
                              print_mir(k.mir).count("\n"), print_lir(k.lir).count("\n"))
            built = sum(k.code is None for k in kernels)  # the others were reloaded
            _compiled(kernels, plan, self._bound_arrays)
            log.info("LLVM build: %d kernel(s), %d reloaded (%.2f s)", built,
                     len(kernels) - built, time.perf_counter() - lowered)
        self._main = kernels[0]
        self._small = kernels[1] if len(kernels) > 1 else None
        self._small_batch = plan.small_batch
        self._jobs = plan.n_jobs
        self._rows_per_thread = plan.rows_per_thread if plan.sized_threads else 0
        self._finish = kernel_finish.modes(forest)
        self._flat = forest.flat_output and forest.n_outputs == 1
        # predict's first lines: a few rows and the default output, straight to the small
        # kernel (one thread, whatever n_jobs says once it is valid) when the kernel
        # finishes the values itself (no numpy step). A plan without one sends its main
        # kernel the calls its threads, sized to the call, leave on one thread (fewer
        # than two threads' rows: one thread on the general path too).
        value = self._finish.get("value")
        main, solo = self._main, 2 * self._rows_per_thread - 1
        few = self._small if self._small is not None else \
            main if self._rows_per_thread else None
        self._few_kernel = few
        self._few_rows = self._small_batch if few is not main else solo
        self._few = few is not None and not few.has_scratch and \
            value is not None and value != _SCORE
        self._few_finish = value
        self._few_width = None if self._flat else forest.n_outputs
        # Those first lines as machine code, which the class's predict calls first (see
        # the end of this module); with a small kernel, it also runs the main one for
        # the calls left on one thread: the general path's ~0.6-0.9 µs of Python.
        more = (main.call, solo) if self._few and main is not few and \
            not main.has_scratch and solo > self._few_rows else None
        self._quick = quick_predict(few.call, _zeros, self._few_rows, value,
                                    self._model_arrays, self._few_width,
                                    more) if self._few else None
        self._leaf: Predictor | None = None
        if leaf_code or "leaf" in plan.outputs:
            self._leaf = Predictor(plan.leaf_plan(), leaf_code, built_for)
        # SHAP contributions: compiled on the first call that asks (runtime/contribs.py),
        # from this saved object code when from_bytes found some.
        self._contribs: Contributions | None = None
        self._contribs_code: tuple[bytes, ...] = contribs_code
        if "contribs" in plan.outputs:
            self._contributions_kernel()

    @property
    def schedule(self) -> Schedule:
        """The schedule of the main kernel."""
        return self._main.schedule

    @property
    def mir(self) -> Any:
        return self._main.mir

    @property
    def kernel(self) -> CompiledKernel:
        """The main kernel's machine code."""
        return self._main.code

    # ---- the user surface ----------------------------------------------------------------
    def _bound_arrays(self) -> list[int]:
        """The model buffers' addresses, as the kernels take them (made on the first
        call, and held for the predictor's life)."""
        if not hasattr(self, "_model_arrays"):
            self._model_arrays = model_arrays(self.forest, self.representation)
        return [a.ctypes.data for a in self._model_arrays]

    def predict(self, X: Any, output: str = _VALUE, n_jobs: int | None = None) -> np.ndarray:
        """Predict like the source library (the conventions of ``reference.predict``).

        ``n_jobs`` (an int from 1 to 1024) overrides the thread count given to ``compile``
        for this call. With the schedule left to SilvanForge, a call uses at most one
        thread per 128 rows (a thread with fewer costs more to wake than it saves), and under
        ``OMP_WAIT_POLICY=passive``, whose threads sleep between calls, one per 120,000
        walks (rows x trees) as well; an explicit schedule gets exactly ``n_jobs``
        threads.

        >>> predictor.predict(X, output="margin")                # doctest: +SKIP
        """
        # A one-row call spends as long here as in a 100-tree kernel (higgs), so the
        # common case, a few rows in an ndarray the kernel takes as it is, runs the fewest
        # steps (docs/ARCHITECTURE.md "Calling a kernel from Python"); its entry checks
        # the rows, and anything it refuses, or an n_jobs to check, takes the general
        # path below.
        if type(X) is _NDARRAY and output is _VALUE and self._few and X.ndim == 2 and (
                n_jobs is None or type(n_jobs) is int and 0 < n_jobs <= MAX_JOBS):
            n = len(X)
            if 0 < n <= self._few_rows:
                width = self._few_width
                result = _zeros(n) if width is None else _zeros((n, width))
                if self._few_kernel.call(X, n, result, 1, self._few_finish):
                    return result
        if type(X) is not np.ndarray:
            by_block = blockwise(X, self.forest, lambda part: self.predict(part, output, n_jobs))
            if by_block is not None:  # a large sparse matrix, never densified whole
                return by_block
        finish = self._finish.get(output)
        if finish is None:
            if output == "leaf":
                return self._leaf_output(X, n_jobs)
            if output == "contribs":
                return self._contributions(X, n_jobs)
            check_output(output, OUTPUTS)
        threads = self._jobs if n_jobs is None else checked_jobs(n_jobs)
        # A 2-D ndarray goes to the kernel as it is, whose entry checks the rest of its
        # layout; one that does not fit, and anything else, is converted first.
        rows = X if type(X) is np.ndarray and X.ndim == 2 else as_rows(X, self.forest)
        n = len(rows)
        # Results the library returns as a vector are allocated as one (no reshaping);
        # scores that numpy transforms are rows of outputs.
        result = np.zeros(n) if self._flat and finish != _SCORE else \
            np.zeros((n, self.forest.n_outputs))
        if n <= self._small_batch:
            kernel, threads = self._small, 1
        else:
            kernel = self._main
            # A schedule of SilvanForge's (row blocks in parallel): sized to the call.
            if n < threads * self._rows_per_thread:
                threads = n // self._rows_per_thread or 1
            if threads > 1:
                threads = fork.threads(threads)
        if not (n and not kernel.has_scratch and kernel.call(rows, n, result, threads,
                                                              finish)):
            self._run_again(X, rows, result, kernel, threads, finish)
        return result if finish != _SCORE else transformed(self.forest, result)

    _predict = predict  # the Python method, which the machine-code one calls

    def _leaf_output(self, X: Any, n_jobs: int | None) -> np.ndarray:
        """``predict(X, output="leaf")``: the leaf predictor's sums are the leaf ids."""
        return leaf_ids.shaped(self.forest,
                               self._leaf_predictor().predict(X, "margin", n_jobs))

    def _leaf_predictor(self) -> "Predictor":
        """The leaf output's predictor, built on first use."""
        if self._leaf is None:
            log.info("leaf output: building its kernels (once; saved with the predictor)")
            self._leaf = Predictor(self.plan.leaf_plan())
        return self._leaf

    def _contributions(self, X: Any, n_jobs: int | None) -> np.ndarray:
        """``predict(X, output="contribs")``: exact TreeSHAP values (the shape and
        meaning of :func:`silvanforge.reference.contributions`)."""
        threads = self._jobs if n_jobs is None else checked_jobs(n_jobs)
        return self._contributions_kernel()(X, threads)

    def _contributions_kernel(self) -> Contributions:
        """The contributions kernel, built (or reloaded) on first use."""
        if self._contribs is None:
            self._contribs = Contributions(self.forest, self.kernel.target,
                                           self._contribs_code)
        return self._contribs

    def _run_again(self, X: Any, rows: np.ndarray, result: np.ndarray, kernel: _Kernel,
                   threads: int, finish: int) -> None:
        """Fill ``result`` where :meth:`predict`'s one call did not: no rows, a kernel
        with scratch buffers, rows the entry refused (converted here)."""
        n = len(rows)
        if n == 0:
            as_rows(X, self.forest)  # an empty input with wrong columns is still wrong
            return
        args = [np.zeros(s) for s in lir_lower.scratch_shapes(
            kernel.mir, n, self.forest.n_outputs)] if kernel.has_scratch else []
        if kernel.has_scratch and kernel.call(rows, n, result, *args, threads, finish):
            return
        rows = as_rows(X, self.forest)
        if not kernel.call(rows, n, result, *args, threads, finish):
            raise BackendError(f"the kernel refused rows converted for it: "
                               f"{rows.dtype} {rows.shape} {rows.flags}")

    def export(self, directory: str | os.PathLike, name: str = "model") -> Exported:
        """Write this predictor as ``directory/libNAME.so`` and ``directory/NAME.h``: the
        same kernels and model, for the same CPU, callable from C without Python
        (docs/DEPLOY.md); without a C compiler here, ``NAME.o`` and the command that
        links it. The leaf output's and the contributions' functions come too when the
        plan's ``outputs`` name "leaf" and "contribs". ``silvanforge.load_library`` loads
        the library in Python.

        >>> predictor.export("out", name="higgs")                # doctest: +SKIP
        >>> silvanforge.load_library("out/libhiggs.so").predict(X)  # doctest: +SKIP
        """
        leaf = self._leaf_predictor()._kernels() if "leaf" in self.plan.outputs else None
        contribs = None
        if "contribs" in self.plan.outputs:
            c = self._contributions_kernel()
            contribs = Kernels(self.plan, c.tables, list(c.arrays.values()),
                               [(None, c.lir)])
        return write_library(self._kernels(), directory, name, self.kernel.target,
                             leaf=leaf, contribs=contribs)

    def _kernels(self) -> Kernels:
        """This predictor's kernels as an exported library holds them."""
        return Kernels(self.plan, self.representation, self._model_arrays,
                       [(k.mir, k.lir) for k in self._built()])

    def _built(self) -> list[_Kernel]:
        """The main kernel, then the small-batch one when the plan has it."""
        return [k for k in (self._main, self._small) if k is not None]

    def dump(self, level: str) -> str:
        """The text of one level: "plan" (every choice the planner made), "hir", "mir",
        "lir" or "llvm".

        >>> print(predictor.dump("plan"))                         # doctest: +SKIP
        >>> print(predictor.dump("mir"))                          # doctest: +SKIP
        """
        if level == "plan":
            return str(self.plan)
        if level == "hir":
            tiling = getattr(self.representation, "plan", None)
            tiles = f"\ntiling ({self.plan.tiling}):\n{print_plan(tiling)}" if tiling else ""
            return f"{self.forest.summary()}\nschedule:\n{self.schedule}{tiles}"
        if level == "mir":
            return print_mir(self.mir)
        if level == "lir":
            return print_lir(self._main.lir)
        if level == "llvm":
            return self.kernel.llvm_ir or "(LLVM IR is not kept for reloaded object code)"
        raise InputError(f"dump level must be one of {', '.join(DUMP_LEVELS)}, not {level!r}")

    def __repr__(self) -> str:
        p = self.plan
        tiles = f", {p.tiling} tiles of {p.tile_size}" if p.tile_size > 1 else ""
        return (f"<Predictor {self.forest.n_trees} trees, {p.representation}{tiles}, "
                f"{p.precision}, n_jobs={p.n_jobs}, cpu={p.cpu}>")

    # ---- persistence ---------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        """The saved predictor: an ``.npz`` archive (module docstring) of the model data,
        the plan and the machine code, with a SHA-256 digest of every other member."""
        arrays, meta = serialize.to_arrays(self.forest)
        t = self.kernel.target
        header = {"format": FORMAT_VERSION, "forest": meta, "plan": self.plan.to_json(),
                  "target": [t.triple, t.cpu, t.features]}
        members = {f"forest_{k}": v for k, v in arrays.items()}
        members["header"] = serialize.dumps_meta(header)
        members.update(_code_members("", [k.code.object_code for k in self._built()]))
        if self._leaf is not None:
            members.update(_code_members("leaf_", [k.code.object_code
                                                   for k in self._leaf._built()]))
        if self._contribs is not None:
            members.update(_code_members("contribs_", [self._contribs.code.object_code]))
        for name in ("node_tile", "tree_order"):
            if getattr(self.plan, name) is not None:
                members[name] = np.asarray(getattr(self.plan, name))
        files = {f"{name}.npy": _npy(value) for name, value in members.items()}
        files[_DIGEST] = _npy(np.frombuffer(_digest(files), dtype=np.uint8))
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as archive:
            for name, content in files.items():
                # A fixed date: the same predictor gives the same bytes, which engines
                # name by their digest (silvanforge.shipping).
                archive.writestr(zipfile.ZipInfo(name, date_time=_ZIP_DATE), content)
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes, trust_code: bool = True) -> "Predictor":
        """The predictor :meth:`to_bytes` wrote. With ``trust_code`` its machine code is
        loaded and will run; without, the code is ignored and the kernels are compiled
        afresh from the model data and the plan (:func:`load_predictor` says when to use
        which)."""
        try:
            archive, has_digest = _read_archive(data)
            header = serialize.loads_meta(archive["header"])
            fmt = header.get("format")
            # JSON's true is Python's 1 in a range: only an int names a format.
            if type(fmt) is not int or fmt not in range(1, FORMAT_VERSION + 1):
                raise ModelFormatError(f"predictor format {fmt!r} is not {FORMAT_VERSION}")
            current = fmt == FORMAT_VERSION
            if fmt >= DIGEST_FORMAT and not has_digest:
                raise ModelFormatError("the archive has no digest")
            arrays = {k[len("forest_"):]: v for k, v in archive.items()
                      if k.startswith("forest_")}
            forest = serialize.from_arrays(arrays, header["forest"])
            saved = header["plan"] if fmt >= 4 else _plan_of_options(header["options"])
            # Threads are sized for the process that predicts (its OpenMP wait policy).
            plan = replace(Plan.from_json(forest, saved, archive.get("node_tile"),
                                          archive.get("tree_order")),
                           rows_per_thread=rows_per_thread(forest))
            target = Target(*header["target"])
            codes = tuple(_object_files(archive, i) for i in range(len(plan.schedules)))
            leaf_codes = tuple(_object_files(archive, i, "leaf_")
                               for i in range(len(plan.schedules)))
            leaf_codes = leaf_codes if all(leaf_codes) else ()
            if not current:
                # Older formats' kernels have other signatures (and no digest before 5).
                warnings.warn(f"predictor saved in format {fmt} (an older SilvanForge): "
                              "recompiling its kernels", stacklevel=3)
                codes = leaf_codes = ()
        except SilvanForgeError:
            raise
        except (OSError, ValueError, KeyError, TypeError, EOFError,
                zipfile.BadZipFile) as exc:
            raise ModelFormatError(f"not a saved SilvanForge predictor ({exc})") from None
        contribs_code = _object_files(archive, 0, "contribs_") if trust_code and codes \
            else ()
        return cls(plan, codes if trust_code else (), target,
                   leaf_codes if trust_code else (), contribs_code)

    def save(self, path: str | os.PathLike) -> None:
        """Write the predictor (model, plan and machine code) to ``path``.

        >>> predictor.save("model.sfp")                         # doctest: +SKIP
        >>> silvanforge.load_predictor("model.sfp")             # doctest: +SKIP
        """
        with open(path, "wb") as fh:
            fh.write(self.to_bytes())

    def __reduce__(self) -> tuple:
        # Unpickling runs whatever the pickle names: a pickle is trusted, and so its code.
        return (Predictor.from_bytes, (self.to_bytes(),))


# The archive member holding the SHA-256 of every other member.
_ZIP_DATE = (1980, 1, 1, 0, 0, 0)
_DIGEST = "digest.npy"


def _npy(value: np.ndarray) -> bytes:
    """``value`` as a ``.npy`` file (what ``np.savez`` writes for a member)."""
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.asanyarray(value), allow_pickle=False)
    return buf.getvalue()


def _digest(files: dict[str, bytes]) -> bytes:
    """SHA-256 of an archive's members but the digest: each name, length and content,
    in name order (a member renamed, moved or cut changes it)."""
    digest = hashlib.sha256()
    for name in sorted(files):
        if name != _DIGEST:
            digest.update(f"{name}\0{len(files[name])}\0".encode())
            digest.update(files[name])
    return digest.digest()


def _read_archive(data: bytes) -> tuple[dict[str, np.ndarray], bool]:
    """The members of a saved predictor as arrays (by name, without ``.npy``), checked
    against its digest when it has one, and whether it had one. Members must be stored
    uncompressed (as ``np.savez`` and :meth:`Predictor.to_bytes` write them), so reading
    takes no more memory than the file's size."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            infos = z.infolist()
            packed = [i.filename for i in infos if i.compress_type != zipfile.ZIP_STORED]
            if packed:
                raise ModelFormatError(f"compressed members ({', '.join(packed[:3])})")
            raw = {i.filename: z.read(i) for i in infos}  # checks each member's CRC
    except RuntimeError as exc:
        # zipfile's answer to a zip version it does not know (NotImplementedError) and
        # to an encrypted member (found by fuzz/harness.py).
        raise ModelFormatError(f"not a saved SilvanForge predictor ({exc})") from None
    if _DIGEST in raw and raw[_DIGEST] != _npy(np.frombuffer(_digest(raw), np.uint8)):
        raise ModelFormatError("the digest does not match the contents (the file was "
                               "changed or damaged)")
    return {name[:-len(".npy")]: _read_npy(name, content)
            for name, content in raw.items() if name.endswith(".npy") and name != _DIGEST}, \
        _DIGEST in raw


def _read_npy(name: str, content: bytes) -> np.ndarray:
    """One ``.npy`` member as an array; its header is checked against its length before
    anything is allocated. numpy parses the header with Python's tokenizer and
    ``ast.literal_eval``, so a damaged one raises their errors too (fuzz/: a header cut
    inside its dict raised a raw ``tokenize.TokenError``)."""
    stream = io.BytesIO(content)
    try:
        version = np.lib.format.read_magic(stream)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(stream)
        elif version == (2, 0):
            shape, _, dtype = np.lib.format.read_array_header_2_0(stream)
        else:
            raise ValueError(f"npy format {version}")
        if dtype.hasobject or math.prod(shape) * dtype.itemsize != len(content) - stream.tell():
            raise ValueError("the array's size is not its data's")
        stream.seek(0)
        return np.lib.format.read_array(stream, allow_pickle=False)
    except (ValueError, TypeError, SyntaxError, OverflowError, tokenize.TokenError) as exc:
        raise ModelFormatError(f"member {name}: not an array ({exc})") from None


def load_predictor(path: str | os.PathLike, trust_code: bool = True) -> Predictor:
    """Load a predictor written by :meth:`Predictor.save`.

    A saved predictor holds machine code, and ``trust_code=True`` (the default) loads
    and runs it without recompiling: that is running a program, like unpickling, and
    only for files you (or whoever you trust as much as your own code) wrote. With
    ``trust_code=False`` the code is ignored and the kernels are compiled again from
    the file's model data and plan, which are read as data only: use it for a file from
    elsewhere. The file's digest is checked either way (it finds damage, not intent:
    whoever can write the file can write its digest).

    >>> silvanforge.load_predictor("model.sfp", trust_code=False)  # doctest: +SKIP
    """
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise ModelFormatError(f"{os.fspath(path)}: cannot read: {exc.strerror or exc}") \
            from None
    try:
        return Predictor.from_bytes(data, trust_code)
    except SilvanForgeError as exc:
        raise type(exc)(f"{os.fspath(path)}: {exc}") from None


def _plan_of_options(options: dict[str, Any]) -> dict[str, Any]:
    """The plan (as JSON) of a predictor saved with options (formats 1-3), built for this
    machine. Those with a small-batch kernel sized their threads (before
    ``sized_threads`` was saved)."""
    small = options.get("small_schedule")
    return {**options, "target": "cpu", "cpu": "native",
            "small_batch": SMALL_BATCH if small else 0,
            "sized_threads": bool(options.get("sized_threads") or small)}


# predict as machine code (backends/cpu/entry.py predict_method): a call its first lines
# take (a few rows, the default output, any valid n_jobs) runs the predictor's quick
# builtin (~0.25 µs faster a call); any other call, and what that builtin declines,
# runs the Python method above.
_PREDICT = predict_method(Predictor, MAX_JOBS, "predict($self, X, output='value', "
                          "n_jobs=None)\n--\n\n" + (inspect.getdoc(Predictor.predict) or ""))
if _PREDICT is not None:
    Predictor.predict = _PREDICT  # type: ignore[method-assign]
