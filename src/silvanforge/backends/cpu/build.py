"""LLVM IR text → optimised object code, in this process or in worker processes.

llvmlite runs every LLVM call under one process-wide lock, so threads cannot compile two
modules at once. The pieces of a big kernel (trees as code: 1000 trees are ~13 MB of IR,
15 s of LLVM on one core) are compiled as modules of their own (see
:meth:`.llvmtext.Module.detach`) by worker processes while this process is still
rendering the rest; once it is done, it builds the main module and takes its share of
the pieces not started yet. The workers are plain ``python`` processes running this file,
started on first use and kept for the life of the process: they never import the
caller's ``__main__`` (as ``multiprocessing`` would), nor SilvanForge: this module imports
only llvmlite and the standard library. A worker that cannot be started or dies leaves
its modules to this process, with the same result.

This process runs no LLVM pass itself either: its share of every build (the main
module, the modules no worker started, a one-core machine's single module) goes to a
"home" worker (:func:`build`), because running llvmlite 0.50's optimisation pipeline
keeps ~55-150 KB per module that no closing or reuse of its objects gives back (a
compiled-and-dropped predictor cost ~150 KB for good). Every worker is replaced after
:data:`BUILDS_PER_WORKER` modules, so what the leak holds stays bounded and leaves with
the process; the object code is the same wherever it is built.
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import struct
import subprocess
import sys
import threading
from typing import Callable, Sequence

import llvmlite.binding as llvm


class BuildError(RuntimeError):
    """LLVM refused a module (invalid IR: a bug of the renderer)."""


#: Modules a worker builds before it is replaced: at the leak's ~150 KB a module, a
#: worker holds at most ~15 MB of it, and its start (~0.2 s) is paid once per 100 builds.
BUILDS_PER_WORKER = 100
#: The instruction selector is a process-wide LLVM option, read when a module is
#: emitted: it is set, and the module emitted, under this lock. It is touched only once a
#: build asks for the fast one, so a process that never does keeps LLVM's default. The
#: same builds skip the machine instruction scheduler (``-enable-misched``, process-wide
#: too): a fifth of the fast selector's code generation time, and trees as code ran the
#: same without it (docs/ARCHITECTURE.md, "Compiling big kernels").
_ISEL_LOCK = threading.Lock()
_FAST_ISEL = [False]  # what the options were last set for (LLVM's default: off above O0)
_CODEGEN: list[tuple[str, ...]] = [()]  # the code generation options set now (see below)
#: Code generation passes that change nothing in straight-line modules (trees as code:
#: the same instructions, compared on 100 x 255 leaves, higgs, year, nyc_taxi and
#: mtpl2), turned off for them: 4.5% of their LLVM work (docs/ARCHITECTURE.md,
#: "Compiling big kernels").
LEAN_CODEGEN = ("-disable-machine-licm", "-disable-postra-machine-licm",
                "-disable-postra-machine-sink", "-disable-machine-dce", "-disable-copyprop",
                "-disable-early-taildup", "-disable-early-ifcvt", "-disable-ssc")
#: The passes a module of functions without loops gets instead of its level's whole
#: pipeline (:meth:`ParallelBuild.submit`; a big kernel's outlined pieces: trees as
#: code). The loop, inlining and module-wide passes have nothing to do there; what the
#: trees need is their variables in registers (SROA), their expressions folded
#: (InstCombine: without it, 100 x 255 leaves at 64 rows ran 1.2x slower) and their
#: blocks merged (SimplifyCFG). A row's sum goes from tree to tree in a register
#: because the renderer forwards stores to loads (``_s_Store``), as GVN did at a fifth
#: of these modules' LLVM time. Half the passes' CPU time of the pipeline, the same
#: code speed (docs/ARCHITECTURE.md, "Compiling big kernels"). An llvmlite without one
#: of them (0.44 lacks SROA there) runs the level's pipeline. Names that start with "-"
#: are LLVM options set (process-wide, under the selector's lock) while the module's
#: code is generated: :data:`LEAN_CODEGEN`.
STRAIGHT_PASSES = ("sroa", "instruction_combine", "simplify_cfg") + LEAN_CODEGEN
#: What a module of only code the renderer writes as InstCombine would leave it gets
#: (``llvmtext.Function.combine`` false: trees as code of float compares): the same
#: machine code as with :data:`STRAIGHT_PASSES` for a fifth less of its LLVM time; and
#: no machine CSE nor constant hoisting, 8% of what is left: nothing to do on 100 x 255
#: leaves and higgs, a few instructions moved on year and nyc_taxi, which ran the same
#: (docs/ARCHITECTURE.md, "Compiling big kernels").
PLAIN_PASSES = ("sroa",) + LEAN_CODEGEN + ("-disable-machine-cse",
                                           "-disable-constant-hoisting")


def build(text: str, triple: str, cpu: str, features: str, opt: int, pic: bool = False,
          keep_ir: bool = True, fast_isel: bool = False,
          passes: Sequence[str] | None = None) -> tuple[bytes, str]:
    """:func:`build_object`'s answer, built by this process's home worker (so that the
    pipeline's leak is not this process's); built here when no worker can be had.

    >>> obj, ir = build("define void @f() { ret void }", llvm.get_process_triple(),
    ...                 "", "", 2)
    >>> "define void @f()" in ir
    True
    """
    target = (triple, cpu, features, opt, pic, keep_ir, fast_isel, passes)
    with _HOME_LOCK:
        home = _home()
        if home is not None:
            try:
                answer = home.exchange(target, text)
            except (OSError, ValueError, struct.error):
                home.close()
            else:
                if isinstance(answer, BuildError):
                    raise answer
                return answer
    return build_object(text, *target)


def start_workers() -> None:
    """Start the workers a build will use (this process's home worker and one per core
    beyond this process's), if not running: a compile calls it before its lowering, so
    that their start (~0.1-0.2 s each: an interpreter and llvmlite) overlaps that work
    instead of delaying the first module."""
    _pool(cores() - 1)
    with _HOME_LOCK:
        _home()


def _home() -> _Worker | None:
    """The live home worker, started if need be; None where no process can be started.
    Called under ``_HOME_LOCK``."""
    home = _HOME[0] if _HOME else None
    if home is None or not home.alive():
        try:
            home = _Worker()
        except OSError:  # no way to start a process here
            home = None
        _HOME[:] = [home] if home is not None else []
    return home


def build_object(text: str, triple: str, cpu: str, features: str, opt: int,
                 pic: bool = False, keep_ir: bool = True, fast_isel: bool = False,
                 passes: Sequence[str] | None = None) -> tuple[bytes, str]:
    """Parse, verify and optimise ``text`` at level ``opt`` (0-3) and emit it for the
    given target: (object code, optimised IR; "" without ``keep_ir``: printing a module
    with megabytes of constants takes seconds). ``pic``: position-independent code for
    a shared library (an exported one, :mod:`silvanforge.export`), else code for the
    JIT. ``fast_isel``: LLVM's fast instruction selector at any level (what level 0
    uses), and no machine scheduler (see :data:`_ISEL_LOCK`). ``passes``: the
    optimisation passes to run (names of llvmlite's ``add_<name>_pass``, e.g.
    :data:`STRAIGHT_PASSES`) instead of the level's pipeline, where this llvmlite has
    them all, and LLVM's boolean options (``-disable-...``) to set while the module's
    code is generated. A triple of another architecture than this machine's is built too.

    >>> obj, ir = build_object("define void @f() { ret void }", llvm.get_process_triple(),
    ...                        "", "", 2)
    >>> obj[:4] == b"\\x7fELF" or sys.platform != "linux", "define void @f()" in ir
    (True, True)
    """
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    if triple.split("-")[0] != llvm.get_process_triple().split("-")[0]:
        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()
    options = {"reloc": "pic", "codemodel": "default"} if pic else {"jit": True}
    machine = llvm.Target.from_triple(triple).create_target_machine(
        cpu=cpu, features=features, opt=opt, **options)
    try:
        module = llvm.parse_assembly(text)
        module.triple = triple
        module.data_layout = str(machine.target_data)
        module.verify()
    except RuntimeError as exc:
        raise BuildError(str(exc)) from None
    options = llvm.create_pipeline_tuning_options(speed_level=opt)
    builder = llvm.create_pass_builder(machine, options)
    if passes is None or any(not p.startswith("-") for p in passes):
        (_pass_manager(passes) or builder.getModulePassManager()).run(module, builder)
    codegen = tuple(p for p in passes or () if p.startswith("-"))
    with _ISEL_LOCK:
        if fast_isel != _FAST_ISEL[0]:
            llvm.set_option("", f"-fast-isel={'true' if fast_isel else 'false'}")
            llvm.set_option("", f"-enable-misched={'false' if fast_isel else 'true'}")
            _FAST_ISEL[0] = fast_isel
        if codegen != _CODEGEN[0]:
            for flag in _CODEGEN[0]:
                llvm.set_option("", flag + "=false")
            for flag in codegen:
                llvm.set_option("", flag)
            _CODEGEN[0] = codegen
        obj = machine.emit_object(module)
    return obj, str(module) if keep_ir else ""


def _pass_manager(names: Sequence[str] | None):  # type: ignore[no-untyped-def]
    """A module pass manager running the passes ``names`` in order (LLVM options, which
    start with "-", are not passes); None where none are named or this llvmlite lacks
    one."""
    names = [name for name in names or () if not name.startswith("-")]
    if not names:
        return None
    manager = llvm.create_new_module_pass_manager()
    adders = [getattr(manager, f"add_{name}_pass", None) for name in names]
    if None in adders:
        return None
    for add in adders:
        add()
    return manager


class ParallelBuild:
    """Modules submitted one by one, built by workers as they come (one per core beyond
    this process's) and by this process in :meth:`finish`.

    >>> job = ParallelBuild(llvm.get_process_triple(), "", "", 2)
    >>> job.submit("define void @g() { ret void }")
    >>> [("define void @" in ir) for _, ir in job.finish("define void @f() { ret void }")]
    [True, True]
    """

    def __init__(self, triple: str, cpu: str, features: str, opt: int,
                 fast_isel: bool = False, keep_ir: bool = True) -> None:
        self.target = (triple, cpu, features, opt, False, keep_ir, fast_isel)
        self.jobs: list[_Job] = []
        self.pending: queue.Queue[_Job | None] = queue.Queue()
        self.workers = [threading.Thread(target=self._serve, args=(w,), daemon=True)
                        for w in _pool(cores() - 1)]
        for thread in self.workers:
            thread.start()

    def submit(self, text: str, passes: Sequence[str] | None = None,
               level: tuple[int, bool] | None = None) -> None:
        """Build ``text`` (with ``passes`` instead of the level's pipeline: see
        :func:`build_object`; at ``level``, (opt, fast_isel), instead of this build's:
        the kernels of a plan of two layouts)."""
        target = self.target
        if level is not None:
            target = target[:3] + (level[0],) + target[4:6] + (level[1],)
        job = _Job(text, target + (passes,))
        self.jobs.append(job)
        self.pending.put(job)

    def close(self) -> None:
        """Submit nothing more: each worker's thread stops once the modules are taken.

        One end mark per worker and never none: :meth:`finish` stops taking modules at
        one, and a build with no worker (the process's CPUs shrank to one after the
        workers were counted: libgomp pins the thread that loads it under
        ``OMP_PROC_BIND=true``) waited for a mark forever."""
        for _ in range(max(1, len(self.workers))):
            self.pending.put(None)

    def abandon(self) -> None:
        """Drop the build (its caller failed): the modules no worker has started are
        discarded, and the threads are joined once their current module is done, so no
        thread of this build outlives the call (a thread still talking to a worker when
        the process exits from C, as a fuzzing engine does, is a crash at exit)."""
        while True:
            try:
                self.pending.get_nowait()
            except queue.Empty:
                break
        self.close()
        for thread in self.workers:
            thread.join()

    def finish(self, main: str, progress: Callable[[], object] | None = None,
               meanwhile: Callable[[], object] | None = None) -> list[tuple[bytes, str]]:
        """Build ``main`` here, and the submitted modules no worker has started; wait
        for the others: (object, optimised IR) of ``main``, then of each submitted
        module in order. ``progress`` is called as each module is done (in order).
        ``meanwhile``, the caller's work that needs no code, runs while ``main`` builds
        (a thread waits for it; the build itself is the home worker's)."""
        self.close()
        if meanwhile is None:
            results = [build(main, *self.target)]
        else:
            answer: list = []

            def wait() -> None:
                try:
                    answer.append(build(main, *self.target))
                except BaseException as exc:  # noqa: BLE001 - raised again below
                    answer.append(exc)

            waiter = threading.Thread(target=wait, daemon=True)
            waiter.start()
            try:
                meanwhile()
            finally:
                waiter.join()
            if isinstance(answer[0], BaseException):
                raise answer[0]
            results = [answer[0]]
        if progress is not None:
            progress()
        while True:
            job = self.pending.get()
            if job is None:
                self.pending.put(None)  # the workers' threads stop on it too
                break
            job.build()
        for job in self.jobs:
            job.done.wait()
            if job.answer is None:  # its worker died
                job.build()
            if progress is not None:
                progress()
        for thread in self.workers:  # each has only the end of the queue left to take
            thread.join()
        for job in self.jobs:
            if isinstance(job.answer, BuildError):
                raise job.answer
        return results + [job.answer for job in self.jobs]  # type: ignore[misc]

    def _serve(self, worker: "_Worker") -> None:
        while True:
            job = self.pending.get()
            if job is None:
                self.pending.put(None)  # leave it for finish
                return
            try:
                job.answer = worker.exchange(job.target, job.text)
            except (OSError, ValueError, struct.error):
                worker.close()  # this process will build the job
                job.done.set()
                return
            job.done.set()


def cores() -> int:
    """The CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class _Job:
    """One module to build: its text and target (:func:`build`'s arguments), then its
    answer."""

    def __init__(self, text: str, target: tuple) -> None:
        self.text, self.target = text, target
        self.answer: tuple[bytes, str] | BuildError | None = None
        self.done = threading.Event()

    def build(self) -> None:
        try:
            self.answer = build(self.text, *self.target)
        except BuildError as exc:
            self.answer = exc
        self.done.set()


# ---- workers --------------------------------------------------------------------------

class _Worker:
    """One worker process and the pipes to it; one exchange at a time."""

    def __init__(self) -> None:
        # The worker runs this file by path: it needs neither SilvanForge on sys.path
        # nor its package imports.
        boot = ("import importlib.util as u, sys; s = u.spec_from_file_location("
                f"'silvanforge_build_worker', {__file__!r}); m = u.module_from_spec(s); "
                "s.loader.exec_module(m); m.serve(sys.stdin.buffer, sys.stdout.buffer)")
        self.process: subprocess.Popen | None = subprocess.Popen(
            [sys.executable, "-c", boot], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.lock = threading.Lock()
        self.pid = os.getpid()  # a forked child must not talk to its parent's workers
        self.builds = 0

    def alive(self) -> bool:
        """Still running, this process's, and not due for replacement."""
        return (self.process is not None and self.process.poll() is None
                and self.pid == os.getpid())

    def exchange(self, target: tuple,
                 text: str) -> tuple[bytes, str] | BuildError:
        """The worker's build of ``text``; OSError when the worker is gone."""
        request = _frame(json.dumps(target).encode()) + _frame(text.encode())
        with self.lock:
            if self.process is None or self.pid != os.getpid():
                raise OSError("no worker")
            self.process.stdin.write(request)  # type: ignore[union-attr]
            self.process.stdin.flush()  # type: ignore[union-attr]
            status = _read_frame(self.process.stdout)
            first, second = _read_frame(self.process.stdout), _read_frame(self.process.stdout)
            self.builds += 1
            if self.builds >= BUILDS_PER_WORKER:
                self.close()  # the next use starts a fresh one (see the module's doc)
        if status == b"error":
            return BuildError(first.decode())
        return first, second.decode()

    def close(self) -> None:
        process, self.process = self.process, None
        if process is not None:
            process.kill()
            process.wait()


_WORKERS: list[_Worker] = []
_POOL_LOCK = threading.Lock()  # predictors may be compiled in several threads
_HOME: list[_Worker] = []  # the worker that builds this process's share (see build)
_HOME_LOCK = threading.Lock()


def _pool(wanted: int) -> list[_Worker]:
    """Up to ``wanted`` live workers, one per core beyond this process's."""
    with _POOL_LOCK:
        _WORKERS[:] = [w for w in _WORKERS if w.alive()]
        while len(_WORKERS) < min(wanted, cores() - 1):
            try:
                _WORKERS.append(_Worker())
            except OSError:  # no way to start a process here: build in this one
                break
        return _WORKERS[:wanted]


@atexit.register
def _close_workers() -> None:
    for worker in _WORKERS + _HOME:
        if worker.pid == os.getpid():
            worker.close()


def _frame(data: bytes) -> bytes:
    return struct.pack("<Q", len(data)) + data


def _read_frame(stream) -> bytes:  # type: ignore[no-untyped-def]
    (size,) = struct.unpack("<Q", _read_exactly(stream, 8))
    return _read_exactly(stream, size)


def _read_exactly(stream, size: int) -> bytes:  # type: ignore[no-untyped-def]
    data = stream.read(size)
    if len(data) != size:
        raise OSError("the stream ended")
    return data


def serve(requests, answers) -> None:  # type: ignore[no-untyped-def]
    """A worker's loop: build each requested module until the requests end."""
    while True:
        try:
            header = _read_frame(requests)
        except OSError:
            return
        text = _read_frame(requests).decode()
        target = json.loads(header)
        try:
            obj, ir = build_object(text, *target)
            answers.write(_frame(b"ok") + _frame(obj) + _frame(ir.encode()))
        except BuildError as exc:
            answers.write(_frame(b"error") + _frame(str(exc).encode()) + _frame(b""))
        answers.flush()
