"""Compile a LIR kernel for the host CPU or a named one (:mod:`.target`), and reload its
object code without compiling.

Both paths end in the same place: object code is added to an MCJIT engine over an empty
module, so a kernel compiled now and one reloaded from bytes run identical machine code.
A big kernel is compiled as several modules in parallel (:mod:`.build`): its object
code is one object file per module, linked by the engine.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
from typing import Callable, Sequence, Union

import llvmlite.binding as llvm

from ... import progress
from ...errors import BackendError
from ...lir import ir
from . import build, llvmtext as ll, openmp
from .entry import RowsLayout, kernel_entry
from .freevars import walk_stmts
from .llvm import render_module
from .target import Target

_ARG_CTYPES = {ir.BOOL: ctypes.c_bool, ir.I8: ctypes.c_int8, ir.I32: ctypes.c_int32,
               ir.I64: ctypes.c_int64, ir.F32: ctypes.c_float, ir.F64: ctypes.c_double}
# A symbol only code with parallel loops references: reloading it needs the runtime.
_OMP_SYMBOL = b"GOMP_parallel"
# Instructions a module compiled in a worker process holds at least: below, the transfer
# and the parallel work do not pay for themselves (docs/ARCHITECTURE.md "Compiling big
# kernels").
MIN_PARALLEL_INSTRUCTIONS = 10_000
# The first such module is sent at this fraction of it, so that a worker starts building
# while the rest is rendered (2-7% less compile time on LightGBM forests as code with a
# quarter; an eighth 3-5% less again on 100 x 127 leaves, docs/ARCHITECTURE.md
# "Compiling big kernels").
FIRST_MODULE_FRACTION = 8
# A build's time, predicted from LLVM's rate on one core (docs/ARCHITECTURE.md
# "Measurements behind smaller rules": MIN_PARALLEL_INSTRUCTIONS), decides whether it
# shows a progress bar (silvanforge.progress). Trees as code, built with the fast
# instruction selector and a few passes, go ~4x as fast (100 x 255 leaves: 141,000
# instructions, ~1.5 s of CPU; docs/ARCHITECTURE.md "Trees as numbers").
LLVM_S_PER_INSTRUCTION = 1.2 / 30_000
LLVM_S_PER_FAST_INSTRUCTION = 1.5 / 141_000
log = logging.getLogger(__name__)

Params = Sequence[Union[ir.Buffer, ir.Var]]


def compile_kernel(kernel: ir.Kernel, *, opt: int = 2, target: Target | None = None,
                   fast_isel: bool = False) -> "CompiledKernel":
    """Compile ``kernel`` for ``target`` (default: the host CPU) at LLVM optimisation
    level ``opt`` (0-3), with LLVM's fast instruction selector where ``fast_isel``.
    Code for a target that does not run here is built, and can be saved, but not called
    (:class:`CompiledKernel`). A big kernel's pieces build in parallel
    (:func:`compile_kernels`).

    Parallel loops call the OpenMP runtime; without one they run serially (one warning).

    >>> x = ir.Buffer("x", ir.F64)
    >>> i = ir.Var("i", ir.I64)
    >>> k = ir.Kernel("twice", [x, ir.Var("n", ir.I64)], [ir.For(i, ir.i64(0),
    ...     ir.Var("n", ir.I64), ir.i64(1), [ir.Store(x, i, ir.BinOp("add", ir.Load(x, i),
    ...     ir.Load(x, i)))])])
    >>> import numpy as np
    >>> a = np.arange(3.0)
    >>> compile_kernel(k).function(a.ctypes.data, len(a))
    >>> a
    array([0., 2., 4.])
    """
    return compile_kernels([kernel], opt=opt, target=target, fast_isel=fast_isel)[0]


def _instructions(module: ll.Module) -> int:
    return sum(f.instructions for f in module.globals.values())


def _progress(desc: str, seconds: float, modules: int) -> progress.Bar:
    """A bar over the ``modules`` of a build predicted to take ``seconds``
    (:func:`silvanforge.progress.bar`)."""
    return progress.bar(desc, seconds, modules, "module")


def _log_sizes(name: str, instructions: int, built: list[tuple[bytes, str]]) -> None:
    log.debug("kernel %s: %d LLVM instructions, %d module(s), %d bytes of object code",
              name, instructions, len(built), sum(len(obj) for obj, _ in built))


def render_kernel(kernel: ir.Kernel, target: Target, pieces: "_Pieces | None" = None,
                  module: ll.Module | None = None, signed: bool = True) -> ll.Module:
    """The LLVM module of ``kernel`` for ``target`` (its outlined functions handed to
    ``pieces`` when given; added to ``module`` when given): what :func:`compile_kernel`
    builds, and an exported library holds (:mod:`silvanforge.export`, not ``signed``).
    Parallel loops call OpenMP where this process found a runtime, else run serially.
    ``signed``: with an empty function named for the kernel's parameters
    (:func:`signature_symbol`), which :class:`CompiledKernel` looks for when it loads
    object code.

    >>> print(render_kernel(ir.Kernel("noop", [], []), Target.host()).get_global("noop").ftype)
    void ()
    """
    parallel = any(isinstance(s, ir.For) and s.parallel for s in walk_stmts(kernel.body))
    module = render_module(kernel, openmp=parallel and openmp.runtime() is not None,
                           outlined=pieces, vector_bits=target.vector_bits(),
                           module=module)
    if signed:
        marker = ll.Function(module, ll.FunctionType(ll.VoidType(), []),
                             signature_symbol(kernel.name, kernel.params))
        ll.IRBuilder(marker.append_basic_block("entry")).ret_void()
    return module


def signature_symbol(name: str, params: Params) -> str:
    """The symbol that code of kernel ``name`` taking ``params`` defines: the name and a
    digest of the parameters' names, types and kinds. Object code saved by a SilvanForge
    whose kernel took other parameters lacks it, and is compiled again rather than
    called with arguments it does not expect."""
    text = ",".join(f"{p.name}:{p.dtype!r}{'*' if isinstance(p, ir.Buffer) else ''}"
                    for p in params)
    return f"{name}.params.{hashlib.sha256(text.encode()).hexdigest()[:16]}"


def compile_kernels(kernels: Sequence[ir.Kernel], *, opt: int = 2,
                    target: Target | None = None, fast_isel: bool = False,
                    levels: Sequence[tuple[int, bool]] | None = None,
                    meanwhile: Callable[[], object] | None = None
                    ) -> list["CompiledKernel"]:
    """Compile several kernels for ``target`` (default: the host CPU), each at level
    ``opt`` with ``fast_isel`` (as :func:`compile_kernel`), or at its own ``levels``
    entry, (opt, fast_isel) (a plan of two layouts).

    Where the machine has more than one core, every module goes to one parallel build
    (:class:`.build.ParallelBuild`) as soon as it is rendered: each big kernel's pieces
    (:class:`_Pieces`), and each kernel's main module but the last's, which the home
    worker builds once every kernel is rendered. ``meanwhile`` (work of the caller's
    that needs no code) runs while that last module builds, or first where there are
    no workers.

    >>> ks = [ir.Kernel(name, [], []) for name in ("a", "b")]
    >>> [k.name for k in compile_kernels(ks)]
    ['a', 'b']
    """
    target = target or Target.host()
    levels = list(levels) if levels is not None else [(opt, fast_isel)] * len(kernels)
    names = ", ".join(k.name for k in kernels)
    parallel = build.cores() > 1
    try:
        if parallel:
            built, sizes = _parallel(kernels, levels, target, names, meanwhile)
        else:
            if meanwhile is not None:
                meanwhile()
            modules = [render_kernel(k, target) for k in kernels]
            sizes = [_instructions(module) for module in modules]
            built = [[_build(str(module), target, level)]
                     for module, level in zip(modules, levels)]
    except build.BuildError as exc:
        raise BackendError(f"kernel(s) {names}: invalid LLVM IR: {exc}") from None
    for kernel, size, objects in zip(kernels, sizes, built):
        _log_sizes(kernel.name, size, objects)
    optimised = _OptimisedIR(kernels, levels, target, parallel)
    return [CompiledKernel(tuple(obj for obj, _ in objects), target, k.name, k.params,
                           llvm_ir=lambda i=i: optimised[i])
            for i, (k, objects) in enumerate(zip(kernels, built))]


def _build(text: str, target: Target, level: tuple[int, bool],
           passes: Sequence[str] | None = None, keep_ir: bool = False) -> tuple[bytes, str]:
    """:func:`.build.build` of one module for ``target`` at ``level``, (opt, fast_isel)."""
    return build.build(text, target.triple, target.cpu, target.features, level[0],
                       keep_ir=keep_ir, fast_isel=level[1], passes=passes)


class _OptimisedIR:
    """The optimised LLVM IR of each kernel of one compile, built again the first time
    one is asked for (:attr:`CompiledKernel.llvm_ir`, a debugging dump): the build
    itself keeps none, since printing its modules took ~8% of a big kernel's LLVM time
    and their text, megabytes, stayed with the predictor. The kernels render and build
    the same way again (the same modules, at the same levels and passes), keeping it."""

    def __init__(self, kernels: Sequence[ir.Kernel], levels: list[tuple[int, bool]],
                 target: Target, parallel: bool) -> None:
        self.kernels, self.levels, self.target = list(kernels), levels, target
        self.parallel = parallel
        self.texts: list[str] | None = None

    def __getitem__(self, k: int) -> str:
        if self.texts is None:
            self.texts = self._build()
        return self.texts[k]

    def _build(self) -> list[str]:
        if self.parallel:
            names = ", ".join(k.name for k in self.kernels)
            built, _ = _parallel(self.kernels, self.levels, self.target, names, None,
                                 keep_ir=True)
        else:
            built = [[_build(str(render_kernel(kernel, self.target)), self.target, level,
                             keep_ir=True)] for kernel, level in zip(self.kernels, self.levels)]
        return ["\n".join(text for _, text in objects) for objects in built]


def _parallel(kernels: Sequence[ir.Kernel], levels: list[tuple[int, bool]], target: Target,
              names: str, meanwhile: Callable[[], object] | None, keep_ir: bool = False
              ) -> tuple[list[list[tuple[bytes, str]]], list[int]]:
    """:func:`compile_kernels` on several cores: (each kernel's (object, optimised IR,
    "" without ``keep_ir``) pairs, its main module's first; each kernel's LLVM
    instructions)."""
    job = build.ParallelBuild(target.triple, target.cpu, target.features, *levels[-1],
                              keep_ir=keep_ir)
    parts: list[list[int]] = []  # each kernel's submitted modules (main first), by position
    sizes: list[int] = []
    try:
        for k, (kernel, level) in enumerate(zip(kernels, levels)):
            pieces = _Pieces(job, level)
            first = len(job.jobs)
            module = render_kernel(kernel, target, pieces)
            pieces.last(module)
            parts.append(list(range(first, len(job.jobs))))
            sizes.append(_instructions(module) + pieces.submitted)
            if k < len(kernels) - 1:
                parts[k].insert(0, len(job.jobs))
                job.submit(str(module), level=level)
    except BaseException:
        job.abandon()  # its threads stop; what they built is dropped
        raise
    modules = len(job.jobs) + 1
    seconds = sum(size * (LLVM_S_PER_FAST_INSTRUCTION if fast else LLVM_S_PER_INSTRUCTION)
                  for size, (_, fast) in zip(sizes, levels)) / min(build.cores(), modules)
    with _progress(f"LLVM build of {names}", seconds, modules) as bar:
        last, *submitted = job.finish(str(module), bar.update, meanwhile)
    built = [[submitted[p] for p in positions] for positions in parts]
    built[-1].insert(0, last)
    return built, sizes


class _Pieces:
    """Collects a kernel's outlined functions into modules of at least
    :data:`MIN_PARALLEL_INSTRUCTIONS` (the build's first, a :data:`FIRST_MODULE_FRACTION`
    of it), each sent to the parallel build ``job`` at ``level`` when full (built with
    :data:`.build.PLAIN_PASSES` or :data:`.build.STRAIGHT_PASSES` where none of its
    functions holds a loop). Of the last batch, what is not plain trees stays in the
    main module, under its pipeline (:meth:`last`)."""

    def __init__(self, job: build.ParallelBuild, level: tuple[int, bool]) -> None:
        self.job, self.level = job, level
        self.batch: list[ll.Function] = []
        self.instructions = 0
        self.submitted = 0  # instructions sent to the parallel build

    def __call__(self, module: ll.Module, fn: ll.Function) -> None:
        if fn.cold:  # a module of its own at once, whatever its size: the hot code's
            # build need not wait for it (the last block's walks of fewer groups)
            self._send(module, [fn])
            return
        self.batch.append(fn)
        self.instructions += fn.instructions
        first = FIRST_MODULE_FRACTION if not self.job.jobs else 1
        if self.instructions >= MIN_PARALLEL_INSTRUCTIONS // first:
            self._send(module)

    def last(self, module: ll.Module) -> None:
        """The render is done: if modules were sent, the last batch's plain trees (no
        loop, nothing InstCombine changes) go to the workers too, as a module of their
        own, instead of under the main module's pipeline; the rest (the parallel
        loop's launch) stays (docs/ARCHITECTURE.md, "Compiling big kernels")."""
        rest = [f for f in self.batch if f.loops or f.combine]
        plain = [f for f in self.batch if f not in rest]
        if plain and self.job.jobs:
            self.batch, self.instructions = plain, sum(f.instructions for f in plain)
            self._send(module)
            self.batch, self.instructions = rest, sum(f.instructions for f in rest)

    def _send(self, module: ll.Module, apart: list[ll.Function] | None = None) -> None:
        """Submit the batch, or the functions ``apart`` (the batch stays)."""
        fns = self.batch if apart is None else apart
        if any(f.loops for f in fns):
            passes = None
        elif any(f.combine for f in fns):
            passes = build.STRAIGHT_PASSES
        else:
            passes = build.PLAIN_PASSES
        self.job.submit(module.detach(fns), passes, self.level)
        self.submitted += sum(f.instructions for f in fns)
        if apart is None:
            self.batch, self.instructions = [], 0


class CompiledKernel:
    """Machine code of one kernel, loaded and callable.

    ``function`` is a ctypes callable: buffers are passed as addresses (``c_void_p``),
    scalars as their C type. ``object_code`` (object files) and ``target`` are what
    :meth:`from_object` needs to load the same code again; ``llvm_ir`` is the optimised
    module or modules (None after a reload; built on first use). The JIT engine lives
    as long as this object.
    Code built for a target that does not run on this machine (``refusal`` says why)
    loads and can be saved, but ``function`` and the callable :meth:`entry` returns
    raise :class:`BackendError` when called: running it would end the process on an
    illegal instruction.
    """

    def __init__(self, object_code: tuple[bytes, ...], target: Target, name: str,
                 params: Params, llvm_ir: str | Callable[[], str] | None = None):
        if any(_OMP_SYMBOL in obj for obj in object_code) and openmp.runtime() is None:
            raise BackendError(f"kernel {name}: the code calls OpenMP and no OpenMP "
                               "runtime was found")
        self.object_code, self.target, self.name = object_code, target, name
        self.params, self._llvm_ir = tuple(params), llvm_ir
        host = Target.host()
        self.refusal = target.mismatch(host)
        self._machine = host.machine()
        self._engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), self._machine)
        for obj in object_code:
            self._engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
        self._engine.finalize_object()
        self.address = self._engine.get_function_address(name)
        if not self.address:
            raise BackendError(f"the object code has no function {name!r}")
        if not self._engine.get_function_address(signature_symbol(name, params)):
            raise BackendError(f"the object code's {name!r} takes other parameters than "
                               "this SilvanForge's (code saved by another version)")
        if self.refusal is not None:
            self.function: Callable = self._refuse
            return
        argtypes = [ctypes.c_void_p if isinstance(p, ir.Buffer) else _ARG_CTYPES[p.dtype]
                    for p in params]
        self.function = ctypes.CFUNCTYPE(None, *argtypes)(self.address)
        # The callable may outlive this object (``compile_kernel(k).function``): it
        # keeps the engine that owns its code alive.
        self.function.owner = self  # type: ignore[attr-defined]

    @property
    def llvm_ir(self) -> str | None:
        """The optimised module or modules (built again on first use: see
        :class:`_OptimisedIR`), None after a reload."""
        if callable(self._llvm_ir):
            self._llvm_ir = self._llvm_ir()
        return self._llvm_ir

    def _refuse(self, *args: object) -> None:
        raise BackendError(f"kernel {self.name} {self.refusal}: it runs where it was "
                           "built for (save it, load it there)")

    def entry(self, bound: Sequence[int] = (), rows: RowsLayout | None = None) -> Callable:
        """The kernel as a Python callable taking arrays and ints for its parameters
        before the trailing ones, which are ``bound`` to these addresses (model buffers);
        cheaper than ctypes, which converts each argument (:mod:`.entry`). It
        returns True, or False without running when ``rows`` is given and the first
        argument does not fit it.

        >>> x, v = ir.Buffer("x", ir.F64), ir.Var("v", ir.I64)
        >>> k = compile_kernel(ir.Kernel("put", [x, v],
        ...                              [ir.Store(x, ir.i64(0), ir.Cast(v, ir.F64))]))
        >>> import numpy as np
        >>> a = np.zeros(1)
        >>> k.entry()(a, 7)
        True
        >>> a
        array([7.])
        """
        if self.refusal is not None:
            return self._refuse
        return kernel_entry(self.params, self.function, self.address, bound, keep=self,
                            rows=rows)

    @classmethod
    def from_object(cls, object_code: tuple[bytes, ...], target: Target, kernel_name: str,
                    params: Params) -> "CompiledKernel":
        """Load object code built by :func:`compile_kernel`, without recompiling.

        Raises :class:`BackendError` where the code does not run on this machine
        (:meth:`.Target.mismatch`).

        >>> k = compile_kernel(ir.Kernel("noop", [], []))
        >>> CompiledKernel.from_object(k.object_code, k.target, "noop", []).function()
        """
        refusal = target.mismatch(Target.host())
        if refusal is not None:
            raise BackendError(f"kernel {kernel_name} {refusal}")
        return cls(object_code, target, kernel_name, params)
