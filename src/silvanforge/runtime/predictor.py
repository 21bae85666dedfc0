"""``compile()`` and the :class:`Predictor` it returns: the user's handle on compiled code.

A Predictor owns the Forest, the representation's model buffers, and the compiled kernel
(see :mod:`silvanforge.lir.lower` for its signature). ``predict`` converts the input
(without a copy when it already is C-contiguous in the model's input dtype), zeroes the
result and the privatized buffers of this call and runs the kernel, which also finishes
the sums (:mod:`silvanforge.lir.finish`: the reference's averaging, base scores and, for
the common transforms, the transform, in the same float64 operations); a transform the
kernel lacks is applied by :mod:`silvanforge.model.transforms`, and the output shape is
:func:`silvanforge.reference.shaped`'s.

Saved predictors are ``.npz`` archives read with ``allow_pickle=False``: the Forest as
arrays and JSON, the options, and the object code, which reloads without recompiling
(and is refused, then rebuilt, on a CPU that lacks the features it was built for).
Pickling uses the same bytes.
"""

from __future__ import annotations

import io
import itertools
import os
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..backends.cpu import CompiledKernel, RowsLayout, Target, compile_kernels
from ..errors import BackendError, InputError, ModelFormatError, SilvanForgeError
from ..frontends import load
from ..lir import finish as kernel_finish, lower as lir_lower
from ..lir.printer import print_lir
from ..mir import lower as mir_lower, print_mir
from ..model import serialize
from ..model import transforms
from ..model.forest import Forest
from ..model.inputs import as_rows
from ..reference import check_output, shaped
from ..hir import plan_tiling, print_plan, uniform_tiling
from . import gc_pause
from .layout import plan_layout
from ..representations import REGISTRY
from ..representations.mask import one_compare, stride as mask_stride
from ..representations.tiled import TILED
from ..schedule import Schedule, named
from ..schedule.library import LIBRARY

# 2: kernels finish their rows (a ``finish`` argument). 3: a kernel's code may be several
# object files. Older archives load with their code rebuilt.
FORMAT_VERSION = 3
DUMP_LEVELS = ("hir", "mir", "lir", "llvm")
# A one-row call is ~2 µs, half of it Python: a global is read faster than a module's.
_SCORE = kernel_finish.SCORE


# Batches of at most this many rows take the small-batch kernel when there is one: at
# these sizes interleaving the walks of one row through several trees beats a 12-row
# block, whose partial form walks absent rows too (higgs, array, 1 thread, µs per call,
# small vs main kernel: 1 row 4.4 vs 13; 4 rows 7.5 vs 13.5; 8 rows 13 vs 15; 12 rows 16
# vs 11.6, a full block).
SMALL_BATCH = 8
# A thread pays for waking up only with enough rows of its own, so a call of the default
# (row-parallel) schedule uses at most one thread per this many rows. Threads that spin
# between calls (OpenMP's default) wake at once: 2 threads against 1 at 128 rows, 1.47x
# on higgs, 1.37x nyc-taxi-like, 1.47x mtpl2-like (fewer rows are one 64-row block).
MIN_ROWS_PER_THREAD = 128
# Threads that sleep between calls (OMP_WAIT_POLICY=passive) cost 100-250 µs a call to
# wake on this VM (an empty 2-thread libgomp region: 110-140 µs), so each must get this
# many walks (rows x trees) too. 2 threads against 1, PASSIVE: higgs (100 trees) 0.60x
# at 256 rows, 0.90x at 512, 1.23x at 1024, 1.41x at 2048, 1.72x at 4096; nyc-taxi-like
# 0.54x at 512, 0.84x at 2048, 1.39x at 4096; mtpl2-like (1000 trees) 1.23x at 128, 1.55x
# at 256. Between those break-evens: 100-tree models take 2 threads from 2400 rows,
# 1000-tree ones from 240.
MIN_WALKS_PER_SLEEPING_THREAD = 120_000


def rows_per_thread(forest: Forest) -> int:
    """The fewest rows a thread of a default-schedule call gets: ``MIN_ROWS_PER_THREAD``,
    or with sleeping OpenMP threads enough for ``MIN_WALKS_PER_SLEEPING_THREAD`` walks.

    >>> rows_per_thread(forest)                              # doctest: +SKIP
    128
    """
    if os.environ.get("OMP_WAIT_POLICY", "").strip().lower() != "passive":
        return MIN_ROWS_PER_THREAD
    walks = MIN_WALKS_PER_SLEEPING_THREAD
    return max(MIN_ROWS_PER_THREAD, -(-walks // max(1, forest.n_trees)))


# A call of fewer walks (rows x trees) than this keeps the GIL (backends/cpu/entry.py):
# about a microsecond of work, where releasing the GIL and taking it back costs 0.1.
HOLD_GIL_WALKS = 1024


@dataclass(frozen=True)
class Options:
    """Everything that decides the generated code, as plain values.

    ``small_schedule`` (when set) is compiled too and serves batches of up to
    ``SMALL_BATCH`` rows; it is set when the user leaves the schedule to SilvanForge.
    ``sized_threads``: a call uses at most one thread per :func:`rows_per_thread` rows
    (set, as is a small schedule, when the schedule is SilvanForge's: its row blocks
    run in parallel). ``tile_size`` > 1 walks tiles of that many nodes, tiled ``tiling``
    ("uniform", or "probability" from a profile: the predictor then keeps the tiling
    itself)."""

    schedule: str
    representation: str
    precision: str
    n_jobs: int
    small_schedule: str | None = None
    tile_size: int = 1
    tiling: str = "uniform"
    sized_threads: bool = False


# LLVM optimisation level per representation. Trees as code are mostly branches the
# later passes of O2 do not improve: at O1 mtpl2-like (1000 trees) compiles in 22.7 s
# instead of 26.5 (LLVM's passes 4.9 s instead of 7.6) at the same speed (8.5 vs 8.9
# µs/row; nyc-taxi-like and airline-cat-like within this VM's noise).
_OPT_LEVEL = {"code": 1}


class _Kernel:
    """One schedule's compiled code: MIR, LIR and machine code."""

    def __init__(self, forest: Forest, representation: Any, schedule: Schedule,
                 object_code: tuple[bytes, ...] | None, target: Target | None,
                 model_args: list[int]) -> None:
        self.schedule = schedule
        self.mir = mir_lower(forest, schedule)
        self.lir = lir_lower.lower(self.mir, forest, representation)
        self.has_scratch = len(self.mir.buffers) > 1
        self.code = None
        if object_code is not None and target is not None:
            try:
                self.code = CompiledKernel.from_object(object_code, target, self.lir.name,
                                                       self.lir.params)
            except BackendError as exc:
                warnings.warn(f"recompiling: {exc}", stacklevel=4)
        self._entry = (model_args, RowsLayout(forest.n_features, forest.input_dtype,
                                              HOLD_GIL_WALKS // max(1, forest.n_trees)))

    def bind(self, code: CompiledKernel | None = None) -> None:
        """Take ``code`` (when the kernel was not reloaded) and build the entry. The
        model buffers never change: they are bound into the entry once. The entry
        checks the rows itself (the module docstring of backends/cpu/entry.py)."""
        self.code = code or self.code
        self.call = self.code.entry(*self._entry)


def _compiled(kernels: list[_Kernel], representation: str) -> None:
    """Compile the kernels that were not reloaded, together (the small-batch kernel by
    a worker while this process builds the main one), and bind every kernel."""
    todo = [k for k in kernels if k.code is None]
    codes = compile_kernels([k.lir for k in todo],
                            opt=_OPT_LEVEL.get(representation, 2)) if todo else []
    for kernel in kernels:
        kernel.bind(codes.pop(0) if kernel.code is None else None)


def _object_files(archive: Any, kernel: int) -> tuple[bytes, ...]:
    """A saved kernel's object files: ``object_code_<kernel>_0``, ``_1``, ... ."""
    names = itertools.takewhile(archive.files.__contains__,
                                (f"object_code_{kernel}_{j}" for j in itertools.count()))
    return tuple(archive[name].tobytes() for name in names)


def model_arrays(forest: Forest, representation: Any) -> list[np.ndarray]:
    """The kernel's model arguments after the row-dependent ones, in signature order:
    each tree's first output, then the representation's buffers (every target)."""
    return [np.ascontiguousarray(forest.tree_output, dtype=np.int32)] + [
        np.ascontiguousarray(a) for a in representation.buffers.values()]


def build_representation(forest: Forest, name: str, precision: str, tile_size: int = 1,
                         node_tile: np.ndarray | None = None, one_depth: bool = False) -> Any:
    """The representation ``name`` of ``forest``; with ``tile_size`` > 1, its tiled form
    over ``node_tile`` (a tiling's per-node labels; default: uniform tiling).
    ``one_depth``: for vector walks, the array layout pads every tree to the deepest's
    depth (other layouts are refused by the walks themselves)."""
    if tile_size == 1 and node_tile is None:
        if one_depth and name == "array":
            return REGISTRY[name](forest, precision, depth=int(forest.tree_depths.max()))
        return REGISTRY[name](forest, precision)
    if name not in TILED:
        raise InputError(f"tile_size {tile_size} needs representation 'array' or 'sparse' "
                         f"(the {name!r} representation walks one node at a time)")
    labels = uniform_tiling(forest, tile_size) if node_tile is None else node_tile
    return TILED[name](forest, precision, plan_tiling(forest, labels, tile_size))


def _default_jobs() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        (os.cpu_count() or 1)


def _schedule(forest: Forest, schedule: Any, representation: str | None = None) -> Schedule:
    if schedule is None:
        # Code is fastest with constant tree indices: its default unrolls the tree loop. Masks
        # run a tree over a block of rows with its tables in registers, the block's rows
        # prepared once (cache).
        if representation == "mask":
            return named("xgboost", forest.n_trees, cache=True)
        return named("code_rows" if representation == "code" else "default", forest.n_trees)
    if isinstance(schedule, Schedule):
        return Schedule.parse(str(schedule), forest.n_trees)
    if isinstance(schedule, str):
        if schedule.strip() in LIBRARY:
            return named(schedule.strip(), forest.n_trees)
        return Schedule.parse(schedule, forest.n_trees)
    raise InputError(f"schedule must be None, a name, schedule text or a Schedule, not "
                     f"{type(schedule).__name__}")


# The array layout pads each tree to a complete binary tree; it is chosen by default while
# that costs at most this many slots per node (docs/ARCHITECTURE.md, "Default choices").
MAX_ARRAY_PADDING = 4
# Other forests become code up to this many nodes, and sparse tables beyond. As code,
# 6100 nodes compile in 1.2-1.6 s and 61,000 (mtpl2-like, 1000 trees) in 12-13 s on 2
# cores, where lleaves takes 2.8-4.9 and 72 s; 61,000 nodes run 3x faster as code.
MAX_CODE_NODES = 100_000
# Masks are the default up to this stride: trees of up to 31 splits, LightGBM's default
# 31 leaves (1 thread, mask's time over code's at 1 / 64 / 1024 rows: nyc-taxi-like
# 0.88-0.95 / 0.41-0.44 / 0.40-0.44, airline-cat-like 0.88-1.07 / 0.53-0.59 /
# 0.54-0.55, mtpl2-like 0.73-0.77 / 0.59-0.62 / 0.61-0.62, a 1000-tree model of 28
# numeric features 0.57 / 0.48 / 0.49). Strides of 64 lanes (32-63 splits) test twice
# the registers and match twice the leaves: 63 leaves on 5 features 1.23 / 0.62 / 0.69,
# on 28 features 1.45 / 0.94 / 0.87, 48 leaves on 13 features 1.28 / 0.85 / 0.88; a
# quarter to a half slower at one row, so those stay code.
MAX_DEFAULT_LANES = 32


def _representation(forest: Forest, name: str | None, code: bool = True,
                    precision: str = "float64", target: Target | None = None) -> str:
    """The representation named, or the default for this forest's tree shapes at
    ``precision`` on ``target`` (default: this CPU) (``code`` False: never the code or
    mask representations, for GPU targets)."""
    if name is None:
        # Walks of known depth are branch-free and fastest on near-complete trees (higgs-,
        # year-, random-forest shapes pad 1.0-2.1 slots a node: array 1.0-1.3x faster than
        # sparse). Skewed trees (LightGBM's 31 leaves pad ~40x) have short likely paths:
        # as branches with immediate thresholds the CPU runs ahead along them (code 1.5-4x
        # faster than sparse at 64 and 1024 rows on the nyc-taxi and airline shapes).
        slots = sum(2 ** (int(d) + 1) - 1 for d in forest.tree_depths)
        if slots <= MAX_ARRAY_PADDING * forest.n_nodes:
            return "array"
        # Trees of up to 31 splits, tested all at once with a few vector instructions
        # and no branch, beat their branches where the CPU has AVX-512 (see
        # MAX_DEFAULT_LANES).
        if code and "avx512f" in (target or Target.host()).enabled() \
                and 0 < mask_stride(forest) <= MAX_DEFAULT_LANES \
                and one_compare(forest, precision):
            return "mask"
        return "code" if code and forest.n_nodes <= MAX_CODE_NODES else "sparse"
    if name not in REGISTRY:
        raise InputError(f"unknown representation {name!r}; choose from "
                         f"{', '.join(sorted(REGISTRY))}")
    return name


def vectorizes(forest: Forest, representation: str, precision: str,
               target: Target | None = None) -> bool:
    """Whether ``compile`` gives this forest the ``vector`` schedule by default (16 rows
    as the lanes of one walk; docs/ARCHITECTURE.md "Vector walks"): array tables at
    float32 on a CPU with AVX-512 (``target``, default this one), while padding every
    tree to the deepest's depth keeps the array layout's padding bound.

    >>> vectorizes(forest, "array", "float32")                  # doctest: +SKIP
    True
    """
    if representation != "array" or precision != "float32":
        return False
    if "avx512f" not in (target or Target.host()).enabled():
        return False
    slots = forest.n_trees * (2 ** (int(forest.tree_depths.max()) + 1) - 1)
    return slots <= MAX_ARRAY_PADDING * forest.n_nodes


def vector_schedule(forest: Forest) -> Schedule:
    """The ``vector`` schedule for ``forest``: its blocks' rows are copied transposed
    when they have fewer features than a row's walks take levels (the copy costs a load
    and a store a feature; 1 thread, 1024 rows, time against the schedule without the
    copy: 28 features and 10 trees of depth 4: 0.95; 400 and 100 x 8: 0.67; 1000 and 300
    x 8: 0.71; 200 and 20 x 6: 1.08; bosch-like, 968 and 100 x 8: 1.2-1.5), and at
    most :data:`MAX_COPIED_FEATURES` of them (the copy is on the thread's stack)."""
    return named("vector", forest.n_trees, cache=copies_rows(forest))


# Vector walks copy a block's rows only up to this many features (64 rows of them take
# 256 KiB of a thread's stack; the lowering refuses copies past 1 MiB).
MAX_COPIED_FEATURES = 1024


def copies_rows(forest: Forest) -> bool:
    """Whether vector walks of ``forest`` copy a block's rows transposed first (see
    :func:`vector_schedule`)."""
    return forest.n_features <= min(MAX_COPIED_FEATURES,
                                    forest.n_trees * int(forest.tree_depths.max()))


def _precision(forest: Forest, precision: str | None) -> str:
    if precision is None:
        return "float32" if forest.input_dtype == np.float32 else "float64"
    if precision not in ("float32", "float64"):
        raise InputError(f"precision must be 'float32' or 'float64', not {precision!r}")
    return precision


def transformed(forest: Forest, scores: np.ndarray) -> np.ndarray:
    """The value from a kernel's SCORE result (rows x outputs), for the transforms
    kernels leave to numpy, in the library's shape."""
    return shaped(forest, transforms.apply(forest.post_transform, forest.transform_params,
                                           scores))


class ForestShape:
    """What every compiled predictor tells about its forest (CPU and GPU alike)."""

    forest: Forest

    @property
    def n_features(self) -> int:
        return self.forest.n_features

    @property
    def n_outputs(self) -> int:
        return self.forest.n_outputs


class Predictor(ForestShape):
    """Compiled inference for one forest. Build it with :func:`silvanforge.compile`.

    >>> predictor = silvanforge.compile("model.json")            # doctest: +SKIP
    >>> predictor.predict(X)                                     # doctest: +SKIP
    """

    def __init__(self, forest: Forest, options: Options,
                 object_code: tuple[tuple[bytes, ...], ...] = (),
                 target: Target | None = None,
                 node_tile: np.ndarray | None = None) -> None:
        self.forest = forest
        self.options = options
        self._node_tile = node_tile
        schedules = [_schedule(forest, text) for text in [options.schedule] + (
            [options.small_schedule] if options.small_schedule else [])]
        self.representation = build_representation(
            forest, options.representation, options.precision, options.tile_size, node_tile,
            one_depth=any(s.vectorized for s in schedules))
        self._model_arrays = model_arrays(forest, self.representation)
        addresses = [a.ctypes.data for a in self._model_arrays]
        codes = list(object_code) + [None] * (len(schedules) - len(object_code))
        with gc_pause.paused():  # lowering builds many objects (even when loading)
            kernels = [_Kernel(forest, self.representation, schedule, code, target,
                               addresses) for schedule, code in zip(schedules, codes)]
            _compiled(kernels, options.representation)
        self._main = kernels[0]
        self._small = kernels[1] if len(kernels) > 1 else None
        # (Predictors saved before sized_threads existed said so by their small kernel.)
        self._sized = options.sized_threads or self._small is not None
        self._rows_per_thread = rows_per_thread(forest)
        self._finish = kernel_finish.modes(forest)
        self._flat = forest.flat_output and forest.n_outputs == 1

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
    def predict(self, X: Any, output: str = "value", n_jobs: int | None = None) -> np.ndarray:
        """Predict like the source library (the conventions of ``reference.predict``).

        ``n_jobs`` overrides the thread count given to ``compile`` for this call. With the
        schedule left to SilvanForge, a call uses at most one thread per 128 rows (a
        thread with fewer costs more to wake than it saves), and under
        ``OMP_WAIT_POLICY=passive``, whose threads sleep between calls, one per 120,000
        walks (rows x trees) as well; an explicit schedule gets exactly ``n_jobs``
        threads.

        >>> predictor.predict(X, output="margin")                # doctest: +SKIP
        """
        # A one-row call spends as long here as in a 100-tree kernel (higgs), so the
        # common case, an ndarray the kernel takes as it is, runs the fewest steps.
        finish = self._finish.get(output)
        if finish is None:
            check_output(output)
        if n_jobs is None:
            threads = self.options.n_jobs
        else:
            threads = int(n_jobs)
            if threads < 1:
                raise InputError(f"n_jobs must be at least 1, not {threads}")
        # A 2-D ndarray goes to the kernel as it is, whose entry checks the rest of its
        # layout; one that does not fit, and anything else, is converted first.
        rows = X if type(X) is np.ndarray and X.ndim == 2 else as_rows(X, self.forest)
        n = len(rows)
        # Results the library returns as a vector are allocated as one (no reshaping);
        # scores that numpy transforms are rows of outputs.
        result = np.zeros(n) if self._flat and finish != _SCORE else \
            np.zeros((n, self.forest.n_outputs))
        if n <= SMALL_BATCH and self._small is not None:
            kernel, threads = self._small, 1
        else:
            kernel = self._main
            # A schedule of SilvanForge's (row blocks in parallel): sized to the call.
            if self._sized and n < threads * self._rows_per_thread:
                threads = n // self._rows_per_thread or 1
        if not (n and not kernel.has_scratch and kernel.call(rows, n, result, threads,
                                                              finish)):
            self._run_again(X, rows, result, kernel, threads, finish)
        return result if finish != _SCORE else transformed(self.forest, result)

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

    def dump(self, level: str) -> str:
        """The text of one compiler level: "hir", "mir", "lir" or "llvm".

        >>> print(predictor.dump("mir"))                          # doctest: +SKIP
        """
        if level == "hir":
            plan = getattr(self.representation, "plan", None)
            tiles = f"\ntiling ({self.options.tiling}):\n{print_plan(plan)}" if plan else ""
            return f"{self.forest.summary()}\nschedule:\n{self.schedule}{tiles}"
        if level == "mir":
            return print_mir(self.mir)
        if level == "lir":
            return print_lir(self._main.lir)
        if level == "llvm":
            return self.kernel.llvm_ir or "(LLVM IR is not kept for reloaded object code)"
        raise InputError(f"dump level must be one of {', '.join(DUMP_LEVELS)}, not {level!r}")

    def __repr__(self) -> str:
        o = self.options
        tiles = f", {o.tiling} tiles of {o.tile_size}" if o.tile_size > 1 else ""
        return (f"<Predictor {self.forest.n_trees} trees, {o.representation}{tiles}, "
                f"{o.precision}, n_jobs={o.n_jobs}>")

    # ---- persistence ---------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        arrays, meta = serialize.to_arrays(self.forest)
        t = self.kernel.target
        header = {"format": FORMAT_VERSION, "forest": meta, "options": vars(self.options),
                  "target": [t.triple, t.cpu, t.features]}
        codes = {f"object_code_{i}_{j}": np.frombuffer(obj, dtype=np.uint8)
                 for i, k in enumerate(filter(None, (self._main, self._small)))
                 for j, obj in enumerate(k.code.object_code)}
        if self._node_tile is not None:
            codes["node_tile"] = np.asarray(self._node_tile)
        buf = io.BytesIO()
        np.savez(buf, **{f"forest_{k}": v for k, v in arrays.items()},
                 header=serialize.dumps_meta(header), **codes)
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> "Predictor":
        try:
            archive = np.load(io.BytesIO(data), allow_pickle=False)
            header = serialize.loads_meta(archive["header"])
            fmt = header.get("format")
            if fmt not in range(1, FORMAT_VERSION + 1):
                raise ModelFormatError(f"predictor format {fmt!r} is not {FORMAT_VERSION}")
            arrays = {k[len("forest_"):]: archive[k] for k in archive.files
                      if k.startswith("forest_")}
            forest = serialize.from_arrays(arrays, header["forest"])
            options = Options(**header["options"])
            target = Target(*header["target"])
            codes = tuple(_object_files(archive, i)
                          for i in range(1 + bool(options.small_schedule)))
            if fmt != FORMAT_VERSION:
                warnings.warn(f"predictor saved in format {fmt} (an older SilvanForge): "
                              "recompiling its kernels", stacklevel=3)
                codes = ()
            node_tile = archive["node_tile"] if "node_tile" in archive.files else None
        except SilvanForgeError:
            raise
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ModelFormatError(f"not a saved SilvanForge predictor ({exc})") from None
        return cls(forest, options, codes, target, node_tile)

    def save(self, path: str | os.PathLike) -> None:
        """Write the predictor (model, options and machine code) to ``path``.

        >>> predictor.save("model.sfp")                         # doctest: +SKIP
        >>> silvanforge.load_predictor("model.sfp")             # doctest: +SKIP
        """
        with open(path, "wb") as fh:
            fh.write(self.to_bytes())

    def __reduce__(self) -> tuple:
        return (Predictor.from_bytes, (self.to_bytes(),))


def load_predictor(path: str | os.PathLike) -> Predictor:
    """Load a predictor written by :meth:`Predictor.save`, without recompiling."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise ModelFormatError(f"{os.fspath(path)}: cannot read: {exc.strerror or exc}") \
            from None
    try:
        return Predictor.from_bytes(data)
    except SilvanForgeError as exc:
        raise type(exc)(f"{os.fspath(path)}: {exc}") from None


@gc_pause.paused()
def compile(model: Any, target: str = "cpu", schedule: Any = None,
            representation: str | None = None, precision: str | None = None,
            n_jobs: int | None = None, tile_size: int | None = None,
            tiling: str | None = None, profile: Any = None) -> Predictor:
    """Compile a model (anything :func:`silvanforge.load` takes) into a :class:`Predictor`.

    ``schedule``: None (the default CPU schedule), a named schedule ("default",
    "xgboost", "one_tree_at_a_time", "tree_parallel"), schedule text, or a Schedule.
    ``representation``: "array", "sparse", "reorg", "code" (trees as code; its
    default schedule is "code_rows") or "mask" (a tree's splits tested at once as
    vectors, CPU only; its default schedule is "xgboost" with ``cache(b0)``, each row
    block prepared once). ``precision``: "float32" or "float64" thresholds (default: the
    model's input precision, which keeps parity).
    ``n_jobs``: threads for parallel loops (default: the CPUs this process may use).
    ``schedule`` may also be a tuned ``silvanforge.tune.Configuration`` (keywords given
    here win over its own) or "auto": the tuning cache's configuration for this model,
    thread count and CPU when there is one, else the default.

    Tiling (docs/ARCHITECTURE.md "Tiling"): ``tile_size`` 1-8 nodes evaluated per walk
    step (default 1: single nodes; above 1 with the "sparse" or "array" representation,
    "sparse" by default). ``tiling``: "uniform" (default) or "probability" (seed 004:
    needs ``profile``, sample rows or a :class:`~silvanforge.Profile`; skewed trees are
    tiled along their likely paths, trees are grouped by the walk depth that covers 90%
    of the profile, and each group's walks are unrolled to that depth; default tile
    size 4). A ``profile`` alone implies ``tiling="probability"``.

    >>> import silvanforge
    >>> predictor = silvanforge.compile("model.json", schedule="xgboost", n_jobs=1)  # doctest: +SKIP
    >>> silvanforge.compile("model.json", tile_size=4, profile=X_sample)  # doctest: +SKIP
    """
    if target != "cpu":
        from .gpu import compile_gpu  # imports pyopencl / CuPy only when asked for

        if tiling == "probability" or profile is not None:
            raise InputError("probability-based tiling is a CPU option (GPU walks take "
                             "tile_size with uniform tiling)")
        return compile_gpu(model, target, schedule, representation, precision, tile_size,
                           tiling)
    forest = load(model)
    if (isinstance(schedule, str) and schedule.strip() == "auto") or \
            hasattr(schedule, "compile_kwargs"):
        from ..tune import resolve  # tune compiles candidates with this function

        return compile(forest, target, **resolve(forest, schedule, {
            "representation": representation, "precision": precision, "n_jobs": n_jobs,
            "tile_size": tile_size, "tiling": tiling, "profile": profile}))
    jobs = _default_jobs() if n_jobs is None else int(n_jobs)
    if jobs < 1:
        raise InputError(f"n_jobs must be at least 1, not {jobs}")
    layout = plan_layout(forest, tile_size, tiling, profile)
    forest = layout.forest
    chosen_precision = _precision(forest, precision)
    rep = _representation(forest, representation or layout.representation,
                          precision=chosen_precision)
    if schedule is None and layout.schedule is None and layout.tile_size == 1 \
            and vectorizes(forest, rep, chosen_precision):
        chosen = vector_schedule(forest)
    else:
        chosen = _schedule(forest, schedule, rep) if schedule is not None or \
            layout.schedule is None else Schedule.parse(layout.schedule, forest.n_trees)
    # A schedule left to SilvanForge gets a second kernel for small batches (not code's:
    # its one kernel serves every batch, and a second would double its compile time;
    # nor mask's, whose own is as fast at one row and faster at eight).
    small = str(named("small_batch", forest.n_trees)) \
        if schedule is None and rep not in ("code", "mask") else None
    options = Options(schedule=str(chosen), representation=rep,
                      precision=chosen_precision, n_jobs=jobs,
                      small_schedule=small, tile_size=layout.tile_size,
                      tiling=layout.tiling, sized_threads=schedule is None)
    return Predictor(forest, options, node_tile=layout.node_tile)
