"""Building LLVM modules in worker processes (backends/cpu/build.py) and the text IR
builder whose modules they build (backends/cpu/llvmtext.py).

A module built by a worker is the same object code as one built here; a kernel split
into modules built apart predicts what the reference does, before and after a save; a
worker that dies, a worker of another process and a machine with one core leave the
work to this process; invalid IR is an error wherever it is built.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from dataclasses import replace

import numpy as np
import pytest

import silvanforge
from silvanforge import reference
from silvanforge.backends.cpu import build, jit, llvmtext as ll, outline
from silvanforge.errors import BackendError
from silvanforge.model.forest import OP_LE, OP_LT

from test_code_representation import CODE_SCHEDULES, _big_forest
from util import with_nans

TARGET = jit.Target.host()
ARGS = (TARGET.triple, TARGET.cpu, TARGET.features, 2)


def _module_text(name: str, value: float) -> str:
    """``void name(double* x)``: x[0] = x[0] * value + 1, as llvmtext renders it."""
    m = ll.Module(name)
    f = ll.Function(m, ll.FunctionType(ll.VoidType(), [ll.DoubleType().as_pointer()]), name)
    b = ll.IRBuilder(f.append_basic_block("entry"))
    x = b.load(f.args[0])
    y = b.binary("fmul", x, ll.Constant(ll.DoubleType(), value))
    b.store(b.binary("fadd", y, ll.Constant(ll.DoubleType(), 1.0)), f.args[0])
    b.ret_void()
    return str(m)


@pytest.fixture
def two_cores(monkeypatch):
    """At least one worker, whatever this machine has."""
    monkeypatch.setattr(build, "cores", lambda: 2)


@pytest.fixture
def submitted(monkeypatch):
    """What :meth:`build.ParallelBuild.submit` is given: (text, passes, target) a
    module, in order."""
    calls: list[tuple] = []
    original = build.ParallelBuild.submit

    def spy(self, text, passes=None, level=None):
        calls.append((text, passes, self.target))
        original(self, text, passes, level)

    monkeypatch.setattr(build.ParallelBuild, "submit", spy)
    return calls


def test_a_worker_builds_what_this_process_builds(two_cores):
    texts = [_module_text(f"f{i}", 1.5 + i) for i in range(3)]
    job = build.ParallelBuild(*ARGS)
    assert job.workers, "no worker process could be started"
    for text in texts[1:]:
        job.submit(text)
    built = job.finish(texts[0])
    assert [obj for obj, _ in built] == [build.build_object(t, *ARGS)[0] for t in texts]
    assert all(f"@f{i}" in ir for i, (_, ir) in enumerate(built))


_BRANCHES = """
define double @pick(double* noalias %x, double %t) {
entry:
  %v = load double, double* %x
  %c = fcmp ogt double %v, %t
  br i1 %c, label %a, label %b
a:
  %w = fmul double %v, 3.0
  ret double %w
b:
  %u = fadd double %v, 1.0
  ret double %u
}
"""


def test_the_fast_instruction_selector_is_chosen_per_build(two_cores):
    # LLVM's selector is a process-wide option: a build asking for the fast one must
    # not leave it on for the next (the other layouts' code), here or in a worker.
    full = build.build_object(_BRANCHES, *ARGS)[0]
    fast = build.build_object(_BRANCHES, *ARGS, fast_isel=True)[0]
    assert fast != full
    assert build.build_object(_BRANCHES, *ARGS)[0] == full
    job = build.ParallelBuild(*ARGS, fast_isel=True)
    job.submit(_BRANCHES)
    assert [obj for obj, _ in job.finish(_BRANCHES)] == [fast, fast]
    job = build.ParallelBuild(*ARGS)
    job.submit(_BRANCHES)
    assert [obj for obj, _ in job.finish(_BRANCHES)] == [full, full]


_STRAIGHT = """
define double @pick(double* noalias %x, double %t) {
entry:
  %slot = alloca double
  %v = load double, double* %x
  %c = fcmp ogt double %v, %t
  br i1 %c, label %a, label %b
a:
  store double 3.0, double* %slot
  br label %end
b:
  store double 1.0, double* %slot
  br label %end
end:
  %r = load double, double* %slot
  ret double %r
}
"""


def test_straight_passes_are_chosen_per_module(two_cores):
    # A module of functions without loops may get STRAIGHT_PASSES (its variables in
    # registers), in a worker as here; the others keep the level's pipeline.
    assert build._pass_manager(("no_such",)) is None
    fallback = build.build_object(_STRAIGHT, *ARGS, passes=("no_such",))
    assert fallback == build.build_object(_STRAIGHT, *ARGS)
    if build._pass_manager(build.STRAIGHT_PASSES) is None:
        pytest.skip("this llvmlite's new pass manager lacks SROA (0.44): the level's "
                    "pipeline runs")
    obj, text = build.build_object(_STRAIGHT, *ARGS, passes=build.STRAIGHT_PASSES)
    assert "alloca" not in text and "select" in text
    job = build.ParallelBuild(*ARGS)
    job.submit(_STRAIGHT, build.STRAIGHT_PASSES)
    job.submit(_STRAIGHT)
    built = job.finish(_BRANCHES)
    assert built[1] == (obj, text)
    assert built[2] == build.build_object(_STRAIGHT, *ARGS)


_LOOP = """
define void @scale(double* noalias %x, i64 %n) {
entry:
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%j, %loop]
  %p = getelementptr double, double* %x, i64 %i
  %v = load double, double* %p
  %w = fmul double %v, 3.25
  store double %w, double* %p
  %j = add i64 %i, 1
  %c = icmp slt i64 %j, %n
  br i1 %c, label %loop, label %done
done:
  ret void
}
"""


def test_lean_code_generation_is_set_per_module(two_cores):
    # LEAN_CODEGEN's options are process-wide: set while a module that names them is
    # emitted (they change this loop's code: machine LICM hoists its constant), reset
    # for the next, here and in a worker. No IR pass runs where only options are named.
    plain = build.build_object(_LOOP, *ARGS, passes=())
    lean = build.build_object(_LOOP, *ARGS, passes=build.LEAN_CODEGEN)
    assert lean[0] != plain[0] and lean[1] == plain[1]
    assert "phi" in plain[1]  # (as written: no pass ran)
    assert build.build_object(_LOOP, *ARGS, passes=())[0] == plain[0]
    job = build.ParallelBuild(*ARGS)
    job.submit(_LOOP, build.LEAN_CODEGEN)
    job.submit(_LOOP, ())
    built = job.finish(_BRANCHES)
    assert built[1][0] == lean[0] and built[2][0] == plain[0]


@pytest.mark.parametrize("op", [OP_LT, OP_LE])
def test_trees_as_code_are_built_as_instcombine_would_leave_them(op, two_cores, submitted,
                                                                 monkeypatch):
    # Pieces of trees as code of float compares are rendered in InstCombine's form
    # (branches on le/ge/ne as the inverse compare; no identities): built without it
    # and SimplifyCFG (PLAIN_PASSES), their machine code is the same.
    if build._pass_manager(build.STRAIGHT_PASSES[:3]) is None:
        pytest.skip("this llvmlite's new pass manager lacks SROA (0.44): the level's "
                    "pipeline runs")
    monkeypatch.setattr(outline, "BUDGET", 300)
    monkeypatch.setattr(jit, "MIN_PARALLEL_INSTRUCTIONS", 200)
    forest = _big_forest(n_trees=12, seed=7)
    forest = replace(forest, split_op=np.where(forest.left >= 0, op, forest.split_op))
    X = with_nans(np.random.default_rng(8).normal(size=(50, 5)), 0.2)
    # (trees in the row loop, as big trees' default: each outlined tree is straight code)
    predictor = silvanforge.compile(forest, representation="code", schedule="unroll(tree)",
                                    n_jobs=2)
    np.testing.assert_allclose(predictor.predict(X), reference.predict(forest, X),
                               rtol=1e-12, atol=1e-12)
    assert submitted and all(passes == build.PLAIN_PASSES for _, passes, _ in submitted)
    # (the same code generation options both ways: only the IR passes differ)
    options = tuple(p for p in build.PLAIN_PASSES if p.startswith("-"))
    combined = tuple(p for p in build.STRAIGHT_PASSES if not p.startswith("-")) + options
    for text, _, target in submitted:
        triple, cpu, features, opt, pic, keep_ir, fast_isel = target
        args = (triple, cpu, features, opt, pic, False, fast_isel)
        assert build.build_object(text, *args, passes=build.PLAIN_PASSES)[0] == \
            build.build_object(text, *args, passes=combined)[0]


def test_pieces_without_loops_get_the_straight_passes(two_cores, submitted, monkeypatch):
    monkeypatch.setattr(jit, "MIN_PARALLEL_INSTRUCTIONS", 1)
    monkeypatch.setattr(jit, "FIRST_MODULE_FRACTION", 1)
    job = build.ParallelBuild(TARGET.triple, TARGET.cpu, TARGET.features, 2)
    pieces = jit._Pieces(job, (2, False))
    module = ll.Module("m")
    for name, loops, combine in (("plain", False, False), ("combining", False, True),
                                 ("looping", True, False)):
        fn = ll.Function(module, ll.FunctionType(ll.VoidType(), []), name)
        ll.IRBuilder(fn.append_basic_block("entry")).ret_void()
        fn.loops, fn.combine = loops, combine
        pieces(module, fn)
    assert [passes for _, passes, _ in submitted] == [build.PLAIN_PASSES,
                                                      build.STRAIGHT_PASSES, None]
    job.finish("define void @main() { ret void }")


def test_the_last_batch_of_plain_trees_goes_to_the_workers(two_cores, submitted,
                                                           monkeypatch):
    # Once a module was sent, the plain functions left at the end are sent too; the
    # others (the parallel loop's launch) stay in the main module. A kernel that sent
    # nothing keeps its batch.
    monkeypatch.setattr(jit, "MIN_PARALLEL_INSTRUCTIONS", 6)
    monkeypatch.setattr(jit, "FIRST_MODULE_FRACTION", 1)
    job = build.ParallelBuild(TARGET.triple, TARGET.cpu, TARGET.features, 2)
    pieces = jit._Pieces(job, (2, False))
    module = ll.Module("m")

    def function(name: str, size: int, combine: bool = False) -> ll.Function:
        fn = ll.Function(module, ll.FunctionType(ll.VoidType(), []), name)
        b = ll.IRBuilder(fn.append_basic_block("entry"))
        for k in range(size - 1):
            b.binary("add", ll.Constant(ll.IntType(64), k), ll.Constant(ll.IntType(64), 1))
        b.ret_void()
        fn.combine = combine
        return fn

    pieces.last(module)
    assert submitted == []
    pieces(module, function("first", 6))
    small, launch = function("small", 2), function("launch", 2, combine=True)
    for fn in (small, launch):
        pieces(module, fn)
    assert len(submitted) == 1
    pieces.last(module)
    assert [(passes, text.count("define")) for text, passes, _ in submitted] == \
        [(build.PLAIN_PASSES, 1), (build.PLAIN_PASSES, 1)]
    assert pieces.batch == [launch]
    job.finish("define void @main() { ret void }")


def test_the_renderer_marks_functions_with_loops():
    from silvanforge.lir import ir

    x, i = ir.Buffer("x", ir.F64), ir.Var("i", ir.I64)
    store = ir.Store(x, ir.i64(0), ir.BinOp("add", ir.Load(x, ir.i64(0)), ir.const(1.0, ir.F64)))
    loop = ir.For(i, ir.i64(0), ir.i64(4), ir.i64(1), [store])
    spin = ir.While(ir.Cmp("gt", ir.Load(x, ir.i64(0)), ir.const(9.0, ir.F64)), [store])
    for body, loops in (([store], False), ([loop], True), ([spin], True)):
        module = jit.render_kernel(ir.Kernel("k", [x], body), TARGET)
        assert module.get_global("k").loops is loops


def test_work_meanwhile_runs_while_the_main_module_builds(two_cores):
    # The caller's work runs in this thread while the home worker builds: the same
    # objects come back; its failure, or the build's, is raised once both are over.
    texts = [_module_text(f"m{i}", 0.25 + i) for i in range(2)]
    ran = []
    job = build.ParallelBuild(*ARGS)
    job.submit(texts[1])
    built = job.finish(texts[0], meanwhile=lambda: ran.append(threading.get_ident()))
    assert ran == [threading.get_ident()]
    assert [obj for obj, _ in built] == [build.build_object(t, *ARGS)[0] for t in texts]

    def fail() -> None:
        raise KeyError("meanwhile")

    job = build.ParallelBuild(*ARGS)
    with pytest.raises(KeyError, match="meanwhile"):
        job.finish(texts[0], meanwhile=fail)
    job = build.ParallelBuild(*ARGS)
    with pytest.raises(build.BuildError):
        job.finish("define void @f() { ret i64 0 }", meanwhile=lambda: ran.append(1))
    assert ran[-1] == 1


def test_invalid_ir_is_a_build_error_in_a_worker_and_here(two_cores):
    job = build.ParallelBuild(*ARGS)
    job.submit("define void @f() { ret i64 0 }")
    with pytest.raises(build.BuildError):
        job.finish(_module_text("g", 2.0))
    with pytest.raises(build.BuildError):
        build.build_object("this is not LLVM IR", *ARGS)


def test_a_dead_worker_leaves_its_modules_to_this_process(two_cores):
    build._pool(1)
    for worker in build._WORKERS:
        worker.process.kill()
        worker.process.wait()
    job = build.ParallelBuild(*ARGS)  # finds the dead ones gone, starts new ones
    for worker in build._WORKERS:
        worker.process.kill()
        worker.process.wait()
    texts = [_module_text(f"h{i}", 0.5 * i) for i in range(4)]
    for text in texts[1:]:
        job.submit(text)
    built = job.finish(texts[0])
    assert [obj for obj, _ in built] == [build.build_object(t, *ARGS)[0] for t in texts]


def test_a_worker_answers_only_the_process_that_started_it(two_cores):
    (worker,) = build._pool(1)
    worker.pid = -1  # as a child forked after the worker started sees it
    try:
        with pytest.raises(OSError, match="no worker"):
            worker.exchange(ARGS, _module_text("k", 1.0))
        assert worker not in build._pool(1)
    finally:
        worker.pid = build.os.getpid()
        build._WORKERS.append(worker)


@pytest.mark.parametrize("representation", ["code", "sparse"])
def test_a_kernel_built_as_several_modules_predicts_exactly(representation, two_cores,
                                                            monkeypatch):
    monkeypatch.setattr(outline, "BUDGET", 300)
    monkeypatch.setattr(jit, "MIN_PARALLEL_INSTRUCTIONS", 200)
    forest = _big_forest(n_trees=12, seed=5)
    X = with_nans(np.random.default_rng(6).normal(size=(90, 5)), 0.1)
    schedules = CODE_SCHEDULES if representation == "code" else {
        "unrolled": "unroll(tree)", "interleaved": CODE_SCHEDULES["interleaved rows"]}
    split = 0
    for name, text in schedules.items():
        predictor = silvanforge.compile(forest, schedule=text, representation=representation,
                                        n_jobs=2)
        split += len(predictor.kernel.object_code) > 1
        np.testing.assert_allclose(predictor.predict(X), reference.predict(forest, X),
                                   rtol=1e-12, atol=1e-12, err_msg=name)
        again = silvanforge.Predictor.from_bytes(predictor.to_bytes())
        assert again.kernel.object_code == predictor.kernel.object_code
        np.testing.assert_array_equal(again.predict(X), predictor.predict(X))
    assert split >= (3 if representation == "code" else 1)


def test_one_core_builds_one_module_here(monkeypatch):
    monkeypatch.setattr(build, "cores", lambda: 1)
    monkeypatch.setattr(outline, "BUDGET", 300)
    monkeypatch.setattr(jit, "MIN_PARALLEL_INSTRUCTIONS", 200)

    def no_workers(*args, **kwargs):
        raise AssertionError("one core: no parallel build")

    monkeypatch.setattr(build, "ParallelBuild", no_workers)
    forest = _big_forest(n_trees=12, seed=5)
    predictor = silvanforge.compile(forest, representation="code", n_jobs=1)
    assert len(predictor.kernel.object_code) == 1
    X = np.random.default_rng(7).normal(size=(20, 5))
    np.testing.assert_allclose(predictor.predict(X), reference.predict(forest, X),
                               rtol=1e-12, atol=1e-12)


def test_invalid_ir_in_a_kernel_is_a_backend_error(monkeypatch):
    from silvanforge.lir import ir

    def broken(kernel, **kwargs):
        module = ll.Module(kernel.name)
        ll.Function(module, ll.FunctionType(ll.VoidType(), []), kernel.name).blocks.append(
            ll.Block(None, ".empty0"))  # a block without a terminator
        return module

    monkeypatch.setattr(jit, "render_module", broken)
    with pytest.raises(BackendError, match="invalid LLVM IR"):
        jit.compile_kernel(ir.Kernel("k", [], []))


def test_a_failed_render_stops_the_builds_threads(two_cores, monkeypatch):
    monkeypatch.setattr(outline, "BUDGET", 300)
    monkeypatch.setattr(jit, "MIN_PARALLEL_INSTRUCTIONS", 200)
    original = jit.render_module
    started: list[build.ParallelBuild] = []

    def failing(kernel, *, openmp, outlined, vector_bits, module=None):
        def collect(module, fn):
            outlined(module, fn)
            if outlined.job.jobs:
                started.append(outlined.job)
                raise BackendError("render failed")
        return original(kernel, openmp=openmp, outlined=collect)

    monkeypatch.setattr(jit, "render_module", failing)
    with pytest.raises(BackendError, match="render failed"):
        silvanforge.compile(_big_forest(n_trees=12, seed=5), representation="code")
    assert started
    # Joined before compile raised: none outlives the call (a thread still talking to a
    # worker when a fuzzing engine exits the process from C crashed it at exit).
    assert not any(t.is_alive() for t in started[0].workers)


def test_a_build_with_no_worker_finishes():
    """A process whose CPUs shrank to one after the check for a second one (libgomp pins
    its loading thread under OMP_PROC_BIND=true) gets a build with no worker; finish
    built the modules here and then waited for an end mark no worker would leave."""
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cpus)})
    try:
        job = build.ParallelBuild(*ARGS)
    finally:
        os.sched_setaffinity(0, cpus)
    assert not job.workers
    texts = [_module_text(f"h{i}", 2.5 + i) for i in range(2)]
    job.submit(texts[1])
    built: list = []
    finishing = threading.Thread(target=lambda: built.extend(job.finish(texts[0])),
                                 daemon=True)
    finishing.start()
    finishing.join(timeout=120)
    assert not finishing.is_alive(), "finish hung"
    assert [obj for obj, _ in built] == [build.build_object(t, *ARGS)[0] for t in texts]


def _fresh_python(script: str, folder, **env: str) -> subprocess.CompletedProcess:
    """``script`` run by a fresh interpreter in ``folder``, this folder importable, with
    ``env`` added to the environment; a timeout turns a hang into a failure."""
    path = os.pathsep.join([os.path.dirname(__file__), os.environ.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": path, **env}, timeout=240,
                          cwd=folder)


def test_compile_and_predict_under_omp_proc_bind(tmp_path):
    """The whole path in a fresh process with OMP_PROC_BIND=true: before the fix it hung
    in compile."""
    script = ("import numpy as np, silvanforge\n"
              "from silvanforge import reference\n"
              "from test_mir import random_forest\n"
              "f = random_forest(0, 40, depth=6)\n"  # a main and a small-batch kernel
              "p = silvanforge.compile(f)\n"
              "X = np.random.default_rng(3).normal(size=(4000, f.n_features))\n"
              "np.testing.assert_allclose(p.predict(X, n_jobs=2), reference.predict(f, X),"
              " rtol=1e-12, atol=1e-12)\n"
              "print('ok')\n")
    done = _fresh_python(script, tmp_path, OMP_PROC_BIND="true")
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_no_thread_outlives_a_load_and_compile(tmp_path):
    """Loading a JSON model and compiling a kernel in several modules, off a terminal,
    leave only the main thread: a disabled tqdm bar used to start tqdm's monitor thread
    for the life of the process."""
    script = ("import json, threading, numpy as np, xgboost as xgb, silvanforge\n"
              "from silvanforge.backends.cpu import build, jit, outline\n"
              "from test_code_representation import _big_forest\n"
              "X = np.random.default_rng(0).normal(size=(200, 4))\n"
              "b = xgb.train({'max_depth': 3}, xgb.DMatrix(X, X[:, 0]), 5)\n"
              "b.save_model('m.json')\n"
              "silvanforge.compile('m.json')\n"
              "build.cores = lambda: 2; outline.BUDGET = 300\n"
              "jit.MIN_PARALLEL_INSTRUCTIONS = 200\n"
              "p = silvanforge.compile(_big_forest(n_trees=12, seed=5), representation='code')\n"
              "assert len(p.kernel.object_code) > 1\n"
              "print([t.name for t in threading.enumerate()])\n")
    done = _fresh_python(script, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['MainThread']"


def test_workers_start_before_the_lowering_and_not_for_saved_code(tmp_path):
    """A compile starts its build workers first, so that their start overlaps its
    lowering; reloading saved code builds nothing and starts none (a fresh process)."""
    script = ("import numpy as np, silvanforge\n"
              "from silvanforge.backends.cpu import build\n"
              "from silvanforge.runtime import predictor as P\n"
              "from test_mir import random_forest\n"
              "build.cores = lambda: 2\n"
              "saved = silvanforge.compile(random_forest(0, 20, depth=5)).to_bytes()\n"
              "build._close_workers(); build._WORKERS.clear(); build._HOME.clear()\n"
              "P.Predictor.from_bytes(saved)\n"
              "assert not build._WORKERS and not build._HOME, 'a reload started workers'\n"
              "lower, seen = P.lower_schedules, []\n"
              "def spy(*args):\n"
              "    seen.append(sum(w.alive() for w in build._WORKERS + build._HOME))\n"
              "    return lower(*args)\n"
              "P.lower_schedules = spy\n"
              "silvanforge.compile(random_forest(1, 20, depth=5))\n"
              "print(seen[0])\n")
    done = _fresh_python(script, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "2"  # the home worker and one per extra core


def test_a_cold_block_is_a_function_of_its_own_sent_apart(two_cores, submitted):
    # ir.Cold: a function of its own (whatever its size), sent to the parallel build at
    # once as a module of its own, never cut further; its pointers captured by nobody
    # and a caller's local array noalias, which the declaration left in the caller's
    # module says too. Local arrays sit on a cache line.
    from silvanforge.lir import ir

    x, i = ir.Buffer("x", ir.F64), ir.Var("i", ir.I64)
    local = ir.Buffer("local", ir.F64, size=4)
    fill = ir.For(i, ir.i64(0), ir.i64(4), ir.i64(1), [
        ir.Store(local, i, ir.BinOp("add", ir.Load(x, i), ir.const(1.0, ir.F64)))])
    cold = ir.Cold([ir.For(i, ir.i64(0), ir.i64(4), ir.i64(1), [
        ir.Store(x, i, ir.BinOp("mul", ir.Load(local, i), ir.const(2.0, ir.F64)))])])
    kernel = ir.Kernel("k", [x], [ir.LocalArray(local), fill, cold])
    job = build.ParallelBuild(*ARGS)
    pieces = jit._Pieces(job, (2, False))
    module = jit.render_kernel(kernel, TARGET, pieces)
    pieces.last(module)
    assert len(submitted) == 1 and submitted[0][1] is None  # a loop: the whole pipeline
    text = submitted[0][0]
    assert text.count("define") == 1 and "k.part" in text
    assert "noalias nocapture" in text.split("define")[1].split("\n")[0]
    main = str(module)
    assert 'declare void @"k.part"' in main and "noalias nocapture" in main
    assert "alloca [4 x double], align 64" in main
    objects = job.finish(main)
    assert len(objects) == 2
    # The same kernel, built by compile_kernel, runs the cold block in place.
    values = np.arange(4.0)
    jit.compile_kernel(kernel).function(values.ctypes.data)
    np.testing.assert_array_equal(values, (np.arange(4.0) + 1) * 2)


def test_a_piece_reading_vectors_stays_in_place(monkeypatch):
    # A block over the budget is cut into functions, but never where a piece would
    # take vectors as arguments (a call passes them through memory).
    from silvanforge.lir import ir

    monkeypatch.setattr(outline, "BUDGET", 8)
    x = ir.Buffer("x", ir.F32)
    v, w = ir.Var("v", ir.F32), ir.Var("w", ir.F32)
    body = [ir.Declare(v, ir.VectorLoad(x, ir.i64(0), 8)),
            ir.Declare(w, ir.BinOp("add", v, ir.Broadcast(ir.const(1.0, ir.F32), 8))),
            ir.Store(x, ir.i64(0), ir.BinOp("mul", w, w)),
            ir.Store(x, ir.i64(8), ir.BinOp("add", ir.Load(x, ir.i64(8)),
                                            ir.const(1.0, ir.F32)))]
    module = jit.render_kernel(ir.Kernel("k", [x], body), TARGET)
    parts = [f for name, f in module.globals.items() if ".part" in name]
    assert len(parts) == 1  # the last store's piece, which reads no vector
    assert not any("<8 x float>" in str(a.type) for a in parts[0].args)
    values = np.arange(16, dtype=np.float32)
    jit.compile_kernel(ir.Kernel("k", [x], body)).function(values.ctypes.data)
    np.testing.assert_array_equal(values[:8], (np.arange(8) + 1.0) ** 2)
    assert values[8] == 9.0
