"""The CPU backend against numpy: every LIR node, parallel loops, reload, fallbacks."""

from __future__ import annotations

import gc
import importlib
import re
import threading
import warnings

import llvmlite.binding as llvm
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from silvanforge.backends import target_info
from silvanforge.backends.cpu.llvm import render_module
from silvanforge.backends.cpu import (CompiledKernel, RowsLayout, Target, build, compile_kernel,
                                     compile_kernels, entry, jit, openmp)
from silvanforge.backends.cpu.target import PSABI_LEVELS, llvm_help
from silvanforge.errors import BackendError, InputError, SilvanForgeWarning
from silvanforge.lir import ir
from silvanforge.lir.printer import print_lir
from util import unaligned

I, N = ir.Var("i", ir.I64), ir.Var("n", ir.I64)
NP_TYPES = {ir.F64: np.float64, ir.F32: np.float32, ir.I64: np.int64, ir.I32: np.int32,
            ir.I8: np.int8}


def call(k: CompiledKernel, *args) -> None:
    """Call a kernel with numpy arrays for buffers and Python numbers for scalars."""
    k.function(*(a.ctypes.data if isinstance(a, np.ndarray) else a for a in args))


def b(op: str, a: ir.Expr, c: ir.Expr) -> ir.BinOp:
    return ir.BinOp(op, a, c)


def elementwise(name: str, outs: list[tuple[ir.DType, ir.Expr]], ins: list[ir.Buffer],
                **loop) -> ir.Kernel:
    """``out_k[i] = expr_k`` for i < n, one output buffer per expression."""
    bufs = [ir.Buffer(f"out{k}", dt) for k, (dt, _) in enumerate(outs)]
    body = [ir.Store(buf, I, e) for buf, (_, e) in zip(bufs, outs)]
    return ir.Kernel(name, [*ins, *bufs, N],
                     [ir.For(I, ir.i64(0), N, ir.i64(1), body, **loop)])


def run_elementwise(kernel: ir.Kernel, compiled: CompiledKernel, inputs: list[np.ndarray]):
    """Run over the rows of ``inputs[0]``; returns the outputs."""
    n = len(inputs[0])
    outs = [np.zeros(n, NP_TYPES[p.dtype]) for p in kernel.params[len(inputs):-1]]
    call(compiled, *inputs, *outs, n)
    return outs


# ---- floating point -------------------------------------------------------------------

FLOAT_BINOPS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
                "rem": np.fmod, "min": np.fmin, "max": np.fmax}
CMPS = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
        "eq": np.equal, "ne": np.not_equal}
MATH = {"exp": np.exp, "log": np.log, "log1p": np.log1p, "sqrt": np.sqrt,
        "fabs": np.fabs, "trunc": np.trunc, "floor": np.floor}


def float_kernel(dt: ir.DType) -> ir.Kernel:
    x, y = ir.Buffer("x", dt, readonly=True), ir.Buffer("y", dt, readonly=True)
    lx, ly = ir.Load(x, I), ir.Load(y, I)
    outs = [(dt, b(op, lx, ly)) for op in FLOAT_BINOPS]
    outs += [(ir.I8, ir.Cast(ir.Cmp(op, lx, ly), ir.I8)) for op in CMPS]
    outs += [(dt, ir.Math(f, lx)) for f in MATH]
    outs += [(ir.I8, ir.Cast(ir.IsNaN(lx), ir.I8)),
             (ir.I8, ir.Cast(ir.Not(ir.Cmp("lt", lx, ly)), ir.I8)),
             (dt, ir.Select(ir.Cmp("gt", lx, ir.Const(0.5, dt)), lx, ly))]
    return elementwise(f"float_{dt.name}", outs, [x, y])


@pytest.fixture(scope="module", params=[ir.F64, ir.F32], ids=["f64", "f32"])
def float_case(request):
    kernel = float_kernel(request.param)
    return kernel, compile_kernel(kernel), NP_TYPES[request.param]


floats = st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=32),
                   st.sampled_from([0.0, -0.0, 0.5, 1.0, -1.0, 2.5, -3.75]))


@given(data=st.data())
def test_float_ops_match_numpy(float_case, data):
    kernel, compiled, npt = float_case
    n = data.draw(st.integers(1, 20))
    x = data.draw(hnp.arrays(npt, n, elements=floats))
    y = data.draw(hnp.arrays(npt, n, elements=floats))
    outs = iter(run_elementwise(kernel, compiled, [x, y]))
    tol = dict(rtol=2e-6 if npt == np.float32 else 1e-14, atol=0, equal_nan=True)
    with np.errstate(all="ignore"):
        for op, f in FLOAT_BINOPS.items():
            np.testing.assert_allclose(next(outs), f(x, y).astype(npt), err_msg=op, **tol)
        ordered = ~np.isnan(x) & ~np.isnan(y)
        for op, f in CMPS.items():
            np.testing.assert_array_equal(next(outs), f(x, y) & ordered, err_msg=op)
        for name, f in MATH.items():
            np.testing.assert_allclose(next(outs), f(x), err_msg=name, **tol)
    np.testing.assert_array_equal(next(outs), np.isnan(x))
    np.testing.assert_array_equal(next(outs), ~((x < y) & ordered))
    np.testing.assert_array_equal(next(outs), np.where(x > 0.5, x, y))


# ---- integers -------------------------------------------------------------------------

def int_kernel(dt: ir.DType) -> ir.Kernel:
    x, y, s = (ir.Buffer(name, dt, readonly=True) for name in "xys")
    lx, ly, ls = ir.Load(x, I), ir.Load(y, I), ir.Load(s, I)
    outs = [(dt, b(op, lx, ly)) for op in
            ("add", "sub", "mul", "div", "rem", "and", "or", "xor", "min", "max")]
    outs += [(dt, b(op, lx, ls)) for op in ("shl", "lshr", "ashr")]
    outs += [(ir.I8, ir.Cast(ir.Cmp(op, lx, ly), ir.I8)) for op in CMPS]
    return elementwise(f"int_{dt.name}", outs, [x, y, s])


@pytest.fixture(scope="module", params=[ir.I64, ir.I32], ids=["i64", "i32"])
def int_case(request):
    kernel = int_kernel(request.param)
    return kernel, compile_kernel(kernel), NP_TYPES[request.param]


@given(data=st.data())
def test_int_ops_match_numpy(int_case, data):
    kernel, compiled, npt = int_case
    info = np.iinfo(npt)
    bits = info.bits
    n = data.draw(st.integers(1, 20))
    x = data.draw(hnp.arrays(npt, n, elements=st.integers(info.min + 1, info.max)))
    y = data.draw(hnp.arrays(npt, n, elements=st.integers(info.min + 1, info.max)
                             .filter(bool)))
    s = data.draw(hnp.arrays(npt, n, elements=st.integers(0, bits - 1)))
    outs = iter(run_elementwise(kernel, compiled, [x, y, s]))
    unsigned = x.view(f"u{npt().itemsize}")
    # C division truncates toward zero; numpy's // floors.
    quotient = np.array([abs(int(a)) // abs(int(c)) * (1 if (a < 0) == (c < 0) else -1)
                         for a, c in zip(x, y)], dtype=npt)
    with np.errstate(over="ignore"):
        expected = [x + y, x - y, x * y, quotient, np.fmod(x, y), x & y, x | y, x ^ y,
                    np.minimum(x, y), np.maximum(x, y), x << s,
                    (unsigned >> s.astype(unsigned.dtype)).view(npt), x >> s]
    for k, e in enumerate(expected):
        np.testing.assert_array_equal(next(outs), e, err_msg=str(k))
    for op, f in CMPS.items():
        np.testing.assert_array_equal(next(outs), f(x, y), err_msg=op)


def test_bitset_membership_on_uint32_words():
    # Category bitsets are uint32 words stored as i32: the test needs a logical shift.
    words, cats = ir.Buffer("words", ir.I32, readonly=True), ir.Buffer("c", ir.I32)
    c = ir.Load(cats, I)
    word = ir.Load(words, ir.Cast(b("lshr", c, ir.Const(5, ir.I32)), ir.I64))
    bit = b("and", b("lshr", word, b("and", c, ir.Const(31, ir.I32))), ir.Const(1, ir.I32))
    kernel = elementwise("bitset", [(ir.I8, ir.Cast(ir.Cmp("ne", bit, ir.Const(0, ir.I32)),
                                                    ir.I8))], [cats, words])
    rng = np.random.default_rng(0)
    bitset = rng.integers(0, 2**32, 2, dtype=np.uint32) | np.uint32(0x80000000)
    categories = np.arange(64, dtype=np.int32)
    (out,) = run_elementwise(kernel, compile_kernel(kernel),
                             [categories, bitset.view(np.int32)])
    expected = (bitset[categories >> 5] >> (categories & 31).astype(np.uint32)) & 1
    np.testing.assert_array_equal(out, expected)
    assert out[31] == 1 and out[63] == 1  # the sign bits


# ---- casts ----------------------------------------------------------------------------

CASTS = [(ir.F64, ir.I32), (ir.F64, ir.I64), (ir.F32, ir.I32), (ir.F64, ir.F32),
         (ir.F32, ir.F64), (ir.I64, ir.I32), (ir.I32, ir.I64), (ir.I8, ir.I64),
         (ir.I64, ir.I8), (ir.I64, ir.F64), (ir.I32, ir.F32)]


@pytest.mark.parametrize("src,dst", CASTS, ids=[f"{s}-{d}" for s, d in CASTS])
def test_casts_match_numpy(src, dst):
    x = ir.Buffer("x", src, readonly=True)
    kernel = elementwise("cast", [(dst, ir.Cast(ir.Load(x, I), dst))], [x])
    if src.is_float:  # values that fit every destination; float→int truncates to zero
        values = np.array([0.0, -0.0, 0.4, -0.6, 1.5, -2.5, 99.99, -127.9, 1e6 + 0.5])
    else:
        values = np.array([0, 1, -1, 127, -128, 300, -70000, 2**31 - 1, -2**31])
    x_np = values.astype(NP_TYPES[src])
    (out,) = run_elementwise(kernel, compile_kernel(kernel), [x_np])
    np.testing.assert_array_equal(out, x_np.astype(NP_TYPES[dst]))


def test_bool_casts():
    x = ir.Buffer("x", ir.I64, readonly=True)
    positive = ir.Cmp("gt", ir.Load(x, I), ir.i64(0))
    outs = [(ir.I64, ir.Cast(positive, ir.I64)), (ir.F64, ir.Cast(positive, ir.F64)),
            (ir.I8, ir.Cast(ir.Cast(ir.Load(x, I), ir.BOOL), ir.I8))]
    kernel = elementwise("bools", outs, [x])
    x_np = np.array([-5, 0, 3, 2**40])
    ints, floats_, nonzero = run_elementwise(kernel, compile_kernel(kernel), [x_np])
    np.testing.assert_array_equal(ints, [0, 0, 1, 1])
    np.testing.assert_array_equal(floats_, [0.0, 0.0, 1.0, 1.0])
    np.testing.assert_array_equal(nonzero, [1, 0, 1, 1])


def test_constants_of_every_type():
    outs = [(ir.F32, ir.Const(0.1, ir.F32)), (ir.F64, ir.Const(float("-inf"), ir.F64)),
            (ir.F64, ir.Const(float("nan"), ir.F64)), (ir.I32, ir.Const(-7, ir.I32)),
            (ir.I8, ir.Cast(ir.Const(True, ir.BOOL), ir.I8))]
    kernel = elementwise("consts", outs, [])
    res = [np.zeros(1, NP_TYPES[dt]) for dt, _ in outs]
    call(compile_kernel(kernel), *res, 1)
    assert res[0][0] == np.float32(0.1) and res[1][0] == -np.inf and np.isnan(res[2][0])
    assert res[3][0] == -7 and res[4][0] == 1


# ---- control flow, locals, memory -----------------------------------------------------

def test_while_nested_if_and_local_array():
    # Per element: the number of halvings to reach <= 1 (while), a 3-way class (nested
    # ifs), and a sum through a 4-element local array written in an unrolled loop.
    x = ir.Buffer("x", ir.I64, readonly=True)
    steps, cls, acc = (ir.Buffer(name, ir.I64) for name in ("steps", "cls", "acc"))
    v, c, j, total = (ir.Var(name, ir.I64) for name in ("v", "c", "j", "total"))
    local = ir.Buffer("tmp", ir.I64, size=4)
    body = [
        ir.Declare(v, ir.Load(x, I)), ir.Declare(c, ir.i64(0)),
        ir.While(ir.Cmp("gt", v, ir.i64(1)),
                 [ir.Assign(v, b("div", v, ir.i64(2))), ir.Assign(c, b("add", c, ir.i64(1)))]),
        ir.Store(steps, I, c),
        ir.If(ir.Cmp("lt", ir.Load(x, I), ir.i64(10)),
              [ir.If(ir.Cmp("lt", ir.Load(x, I), ir.i64(0)),
                     [ir.Store(cls, I, ir.i64(-1))], [ir.Store(cls, I, ir.i64(0))])],
              [ir.Store(cls, I, ir.i64(1))]),
        ir.LocalArray(local),
        ir.For(j, ir.i64(0), ir.i64(4), ir.i64(1),
               [ir.Store(local, j, b("mul", ir.Load(x, I), j))], unroll=True),
        ir.Declare(total, ir.i64(0)),
        ir.For(j, ir.i64(0), ir.i64(4), ir.i64(1),
               [ir.Prefetch(x, I), ir.Assign(total, b("add", total, ir.Load(local, j)))]),
        ir.Store(acc, I, total),
    ]
    kernel = ir.Kernel("control", [x, steps, cls, acc, N],
                       [ir.For(I, ir.i64(0), N, ir.i64(1), body)])
    compiled = compile_kernel(kernel)
    assert "llvm.prefetch" in compiled.llvm_ir
    x_np = np.array([-3, 0, 1, 2, 9, 10, 1000, 2**40])
    outs = [np.zeros_like(x_np) for _ in range(3)]
    call(compiled, x_np, *outs, len(x_np))
    halvings = [0, 0, 0, 1, 3, 3, 9, 40]
    np.testing.assert_array_equal(outs[0], halvings)
    np.testing.assert_array_equal(outs[1], np.where(x_np < 0, -1, np.where(x_np < 10, 0, 1)))
    np.testing.assert_array_equal(outs[2], x_np * 6)


def test_serial_loop_with_start_and_step_and_i32_index():
    j = ir.Var("j", ir.I32)
    out = ir.Buffer("out", ir.I32)
    kernel = ir.Kernel("strided", [out, ir.Var("m", ir.I32)],
                       [ir.For(j, ir.Const(3, ir.I32), ir.Var("m", ir.I32), ir.Const(4, ir.I32),
                               [ir.Store(out, j, j)])])
    res = np.full(20, -1, np.int32)
    call(compile_kernel(kernel), res, 18)
    expected = np.full(20, -1, np.int32)
    expected[3:18:4] = np.arange(3, 18, 4)
    np.testing.assert_array_equal(res, expected)


# ---- parallel loops -------------------------------------------------------------------

def parallel_kernel(threads: ir.Expr | None) -> ir.Kernel:
    """out[i] = i * 3 + offset and visits[i] += 1 for i in range(start, stop, step)."""
    out, visits = ir.Buffer("out", ir.I64), ir.Buffer("visits", ir.I64)
    start, stop, step, offset = (ir.Var(n, ir.I64) for n in ("start", "stop", "step", "off"))
    tmp = ir.Var("tmp", ir.I64)
    body = [ir.Declare(tmp, b("mul", I, ir.i64(3))),
            ir.Assign(tmp, b("add", tmp, offset)),
            ir.Store(out, I, tmp), ir.AtomicAdd(visits, I, ir.i64(1))]
    return ir.Kernel("par", [out, visits, start, stop, step, offset],
                     [ir.For(I, start, stop, step, body, parallel=True, threads=threads)])


@pytest.fixture(scope="module")
def par_kernels():
    t = ir.Var("t", ir.I64)
    with_threads = parallel_kernel(t)
    with_threads.params = [*with_threads.params, t]
    return {"param": compile_kernel(with_threads), "default": compile_kernel(
        parallel_kernel(None))}


def check_parallel(k: CompiledKernel, start: int, stop: int, step: int, *threads) -> None:
    size = max(stop, 1)
    out, visits = np.full(size, -1, np.int64), np.zeros(size, np.int64)
    call(k, out, visits, start, stop, step, 5, *threads)
    idx = np.arange(start, stop, step)
    expected_visits = np.zeros(size, np.int64)
    expected_visits[idx] = 1
    expected_out = np.full(size, -1, np.int64)
    expected_out[idx] = idx * 3 + 5
    np.testing.assert_array_equal(visits, expected_visits)
    np.testing.assert_array_equal(out, expected_out)


@pytest.mark.parametrize("threads", [1, 2, 3, 0])
@pytest.mark.parametrize("trips", [0, 1, 7, 1000])
def test_parallel_loop_threads_and_trip_counts(par_kernels, threads, trips):
    assert "GOMP_parallel" in par_kernels["param"].llvm_ir
    check_parallel(par_kernels["param"], 0, trips, 1, threads)
    check_parallel(par_kernels["param"], 2, 2 + 3 * trips, 3, threads)


def test_parallel_loop_default_threads_and_empty_ranges(par_kernels):
    check_parallel(par_kernels["default"], 0, 1000, 1)
    check_parallel(par_kernels["default"], 5, 3, 1)  # stop < start: no iteration
    check_parallel(par_kernels["default"], 1, 10, 4)


@given(start=st.integers(-5, 40), length=st.integers(-3, 60), step=st.integers(1, 9),
       threads=st.integers(0, 4))
def test_parallel_chunks_cover_every_iteration_once(par_kernels, start, length, step,
                                                     threads):
    start = max(start, 0)  # indices into the buffers
    check_parallel(par_kernels["param"], start, start + length, step, threads)


def test_nested_parallel_loops():
    j, cols = ir.Var("j", ir.I64), ir.Var("cols", ir.I64)
    out = ir.Buffer("out", ir.I64)
    inner = ir.For(j, ir.i64(0), cols, ir.i64(1), parallel=True, threads=ir.i64(2), body=[
        ir.Store(out, b("add", b("mul", I, cols), j), b("add", b("mul", I, ir.i64(100)), j))])
    kernel = ir.Kernel("grid", [out, N, cols], [ir.For(I, ir.i64(0), N, ir.i64(1), [inner],
                                                       parallel=True, threads=ir.i64(2))])
    res = np.zeros((5, 7), np.int64)
    call(compile_kernel(kernel), res, 5, 7)
    np.testing.assert_array_equal(res, np.arange(5)[:, None] * 100 + np.arange(7))


def test_parallel_loop_called_from_many_python_threads(par_kernels):
    errors = []

    def work(seed: int) -> None:
        try:
            for trips in range(50):
                check_parallel(par_kernels["param"], seed, seed + 37 * trips, 1 + seed % 3,
                               1 + seed % 3)
        except AssertionError as exc:  # pragma: no cover - reported below
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(s,)) for s in range(6)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors


def test_parallel_float_atomics_and_nested_loops():
    # A histogram: many iterations add into the same bins; each iteration also runs an
    # inner serial loop over a local variable (declared inside, so legal).
    x, hist = ir.Buffer("x", ir.F64, readonly=True), ir.Buffer("hist", ir.F64)
    j, acc = ir.Var("j", ir.I64), ir.Var("acc", ir.F64)
    body = [ir.Declare(acc, ir.Const(0.0, ir.F64)),
            ir.For(j, ir.i64(0), ir.i64(3), ir.i64(1),
                   [ir.Assign(acc, b("add", acc, ir.Load(x, I)))]),
            ir.AtomicAdd(hist, b("rem", I, ir.i64(4)), acc)]
    kernel = ir.Kernel("hist", [x, hist, N], [ir.For(I, ir.i64(0), N, ir.i64(1), body,
                                                     parallel=True, threads=ir.i64(3))])
    x_np = np.arange(1001, dtype=np.float64)
    hist_np = np.zeros(4)
    call(compile_kernel(kernel), x_np, hist_np, len(x_np))
    np.testing.assert_array_equal(hist_np, [3 * x_np[k::4].sum() for k in range(4)])


def test_parallel_loop_refuses_shared_mutable_scalars():
    out, acc = ir.Buffer("out", ir.F64), ir.Var("acc", ir.F64)
    kernel = ir.Kernel("racy", [out, N], [
        ir.Declare(acc, ir.Const(0.0, ir.F64)),
        ir.For(I, ir.i64(0), N, ir.i64(1), [ir.Assign(acc, ir.Load(out, I))], parallel=True),
        ir.Store(out, ir.i64(0), acc)])
    with pytest.raises(BackendError, match="'acc'"):
        compile_kernel(kernel)
    loop_var = ir.Kernel("stepper", [N], [ir.For(I, ir.i64(0), N, ir.i64(1),
                                                 [ir.Assign(I, N)], parallel=True)])
    with pytest.raises(BackendError, match="'i'"):
        compile_kernel(loop_var)


def test_undefined_names_raise():
    out = ir.Buffer("out", ir.I64)
    with pytest.raises(BackendError, match="undefined var 'ghost'"):
        compile_kernel(ir.Kernel("k", [out], [ir.Store(out, ir.i64(0), ir.Var("ghost", ir.I64))]))
    with pytest.raises(BackendError, match="undefined buffer 'out'"):
        compile_kernel(ir.Kernel("k", [], [ir.Store(out, ir.i64(0), ir.i64(1))]))


@pytest.fixture
def no_openmp(monkeypatch):
    monkeypatch.setattr(openmp, "candidates", lambda: ["/nonexistent/libgomp.so.1"])
    openmp.runtime.cache_clear()
    yield
    openmp.runtime.cache_clear()


def test_without_openmp_parallel_loops_run_serially_with_one_warning(no_openmp):
    with pytest.warns(SilvanForgeWarning, match="no OpenMP runtime"):
        k = compile_kernel(parallel_kernel(None))
    assert "GOMP" not in k.llvm_ir
    check_parallel(k, 0, 1000, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compile_kernel(parallel_kernel(ir.i64(2)))


# ---- object code, targets -------------------------------------------------------------

def test_object_code_reloads_without_recompiling(par_kernels, monkeypatch):
    original = par_kernels["param"]

    def no_compiling(*args, **kwargs):
        raise AssertionError("reloading must not compile")

    monkeypatch.setattr(jit, "render_module", no_compiling)
    monkeypatch.setattr(build, "build_object", no_compiling)
    reloaded = CompiledKernel.from_object(original.object_code, original.target, "par",
                                          original.params)
    assert reloaded.llvm_ir is None and reloaded.address != original.address
    check_parallel(reloaded, 1, 500, 2, 3)


def test_object_code_for_missing_cpu_features_is_refused(par_kernels):
    k = par_kernels["default"]
    alien = Target(k.target.triple, "future-cpu", k.target.features + ",+quantum-avx")
    with pytest.raises(BackendError, match="quantum-avx"):
        CompiledKernel.from_object(k.object_code, alien, "par", k.params)
    arm = Target("aarch64-unknown-linux-gnu", "neoverse-v2", "+neon")
    with pytest.raises(BackendError, match="aarch64"):
        CompiledKernel.from_object(k.object_code, arm, "par", k.params)
    with pytest.raises(BackendError, match="no function 'nope'"):
        CompiledKernel.from_object(k.object_code, k.target, "nope", k.params)


def vector_product(name: str = "product") -> ir.Kernel:
    """out[0:16] = x[0:16] * x[16:32] in doubles: 1024 bits, as wide as a target's
    registers allow."""
    x, out = ir.Buffer("x", ir.F64, readonly=True), ir.Buffer("out", ir.F64)
    return ir.Kernel(name, [x, out], [ir.Store(out, ir.i64(0), ir.BinOp(
        "mul", ir.VectorLoad(x, ir.i64(0), 16), ir.VectorLoad(x, ir.i64(16), 16)))])


def assembly(k: CompiledKernel) -> str:
    return k.target.machine().emit_assembly(llvm.parse_assembly(k.llvm_ir))


@pytest.mark.parametrize("cpu, register, wider", [
    ("x86-64-v2", "xmm", ("ymm", "zmm")), ("x86-64-v3", "ymm", ("zmm",)),
    ("x86-64-v4", "zmm", ()), ("skylake-avx512", "zmm", ())])
def test_named_cpus_get_vector_registers_of_their_width(cpu, register, wider):
    k = compile_kernel(vector_product(), target=Target.named(cpu))
    code = assembly(k)
    assert k.target.cpu == cpu and register in code
    assert not [w for w in wider if w in code]
    x, out = np.arange(32.0), np.zeros(16)
    if not k.target.runs_on(Target.host()):
        with pytest.raises(BackendError, match=cpu):
            call(k, x, out)
        with pytest.raises(BackendError, match=cpu):
            k.entry()(x, out)
        return
    call(k, x, out)
    np.testing.assert_array_equal(out, x[:16] * x[16:])


def test_compile_kernels_builds_each_kernel_for_the_target():
    # With two cores or more, the second kernel is built by a worker process.
    v3 = Target.named("x86-64-v3")
    built = compile_kernels([vector_product("a"), vector_product("b")], target=v3)
    assert [k.target for k in built] == [v3, v3]
    assert not [k.name for k in built if "zmm" in assembly(k) or "ymm" not in assembly(k)]


def test_named_targets_and_where_their_code_runs():
    host = Target.host()
    assert Target.named("native") == host
    levels = [Target.named(level) for level in PSABI_LEVELS]
    for below, above in zip(levels, levels[1:]):
        assert below.enabled() < above.enabled()
    assert {"sse2", "avx2", "avx512f"} & levels[2].enabled() == {"sse2", "avx2"}
    # Each level's features are names LLVM knows: a misspelt one would refuse every host.
    assert set().union(*PSABI_LEVELS.values()) <= llvm_help(host.triple)["features"]
    for level in levels:
        assert level.runs_on(host) == (level.enabled() <= host.enabled())
    sse2_only = Target(host.triple, "opteron", "+cmov,+cx8,+fxsr,+mmx,+sse,+sse2")
    assert levels[0].runs_on(sse2_only) and not levels[1].runs_on(sse2_only)
    # A CPU named without features runs only where LLVM gives the host that name.
    skx = Target.named("skylake-avx512")
    assert skx.features == "" and skx.runs_on(Target(host.triple, "skylake-avx512", ""))
    assert not skx.runs_on(Target(host.triple, "cascadelake", host.features))
    assert Target(host.triple, "generic", "").runs_on(sse2_only)
    arm = Target("aarch64-unknown-linux-gnu", "neoverse-v2", "+neon")
    assert not arm.runs_on(host) and "aarch64" in arm.mismatch(host)


@pytest.mark.parametrize("name", ["pentium-9000", "help", "x86-64-v5", ""])
def test_unknown_cpu_names_are_refused(name):
    with pytest.raises(BackendError, match=f"unknown CPU '{name}'"):
        Target.named(name)


def test_object_code_for_another_named_cpu_is_refused(par_kernels):
    k = par_kernels["default"]
    other = Target(k.target.triple, "cpu-of-tomorrow", "")
    with pytest.raises(BackendError, match="runs only on that CPU"):
        CompiledKernel.from_object(k.object_code, other, "par", k.params)


def test_function_outlives_its_compiled_kernel():
    out = ir.Buffer("out", ir.I64)
    fn = compile_kernel(ir.Kernel("one", [out], [ir.Store(out, ir.i64(0), ir.i64(1))])).function
    res = np.zeros(1, np.int64)
    fn(res.ctypes.data)
    assert res[0] == 1


# ---- Python entry ---------------------------------------------------------------------

def axpy_kernel() -> ir.Kernel:
    """``out[i] = a * x[i] + bias[0]`` for i < n; ``bias`` is the bound (model) buffer."""
    x, out = ir.Buffer("x", ir.F32, readonly=True), ir.Buffer("out", ir.F64)
    bias, a = ir.Buffer("bias", ir.F64, readonly=True), ir.Var("a", ir.I32)
    value = b("add", b("mul", ir.Cast(a, ir.F64), ir.Cast(ir.Load(x, I), ir.F64)),
              ir.Load(bias, ir.i64(0)))
    return ir.Kernel("axpy", [x, N, out, a, bias],
                     [ir.For(I, ir.i64(0), N, ir.i64(1), [ir.Store(out, I, value)])])


@pytest.fixture(params=["builtin", "ctypes"])
def entry_kind(request, monkeypatch):
    """Both entries: the machine-code builtin, and the ctypes function other Pythons
    get (forced by failing the object-layout probe)."""
    if request.param == "ctypes":
        monkeypatch.setattr(entry, "_layout", lambda: None)
    return request.param


def test_entry_binds_model_buffers_and_converts_arguments(entry_kind):
    bias = np.array([0.5])
    call_ = compile_kernel(axpy_kernel()).entry([bias.ctypes.data])
    assert (type(call_).__name__ == "builtin_function_or_method") == (entry_kind == "builtin")
    x = np.arange(5, dtype=np.float32)
    out = np.zeros(5)
    assert call_(x, 4, out, np.int64(-3)) is True
    np.testing.assert_array_equal(out, [0.5, -2.5, -5.5, -8.5, 0])


def test_entry_checks_the_rows(entry_kind):
    # Rows of 2 features; the kernel reads them as a vector: out[i] = a * rows.flat[i] + bias
    # for i < n.
    bias = np.array([0.5])
    call_ = compile_kernel(axpy_kernel()).entry([bias.ctypes.data],
                                                RowsLayout(2, np.dtype(np.float32)))
    rows = np.arange(6, dtype=np.float32).reshape(3, 2)
    out = np.zeros(6)
    assert call_(rows, 3, out, 1) is True
    np.testing.assert_array_equal(out[:3], [0.5, 1.5, 2.5])
    unfit = {"int32": rows.astype(np.int32), "big-endian": rows.astype(">f4"),
             "big-endian float64": rows.astype(">f8"),
             "transposed float64": np.asfortranarray(rows.astype(np.float64)),
             "transposed": np.asfortranarray(rows),
             "strided": np.zeros((3, 4), np.float32)[:, ::2],
             "1-D": rows.ravel(), "3 features": np.zeros((3, 3), np.float32),
             "unaligned": unaligned(rows)}
    assert not unfit["unaligned"].flags.aligned
    for name, array in unfit.items():
        out[:] = -1
        assert call_(array, len(array), out, 1) is False, name
        assert (out == -1).all(), name
    # The row count must be the array's.
    assert call_(rows, 2, out, 1) is False
    assert call_(rows, 4, out, 1) is False
    assert (out == -1).all()


def test_entry_rounds_few_float64_rows(entry_kind):
    # float64 rows of up to NARROW_VALUES values are rounded to float32 by the builtin
    # itself, as astype does (nearest, ties to even, infinities beyond float32's range,
    # NaN kept); more go back to the caller, as every float64 array does through ctypes.
    bias = np.array([0.0])
    call_ = compile_kernel(axpy_kernel()).entry([bias.ctypes.data],
                                                RowsLayout(1, np.dtype(np.float32)))
    tie = 1 + 2.0**-24  # halfway between two float32 values: rounds to even (1.0)
    rows = np.array([[0.1], [-1e300], [np.nan], [tie], [3.4e38], [1e-46]])
    out = np.zeros(6)
    ran = call_(rows, 6, out, 1)
    assert ran is (entry_kind == "builtin")
    if ran:
        with np.errstate(over="ignore"):
            want = rows.astype(np.float32).ravel().astype(np.float64)
        assert want[1] == -np.inf and want[3] == 1.0 and want[5] == 0.0
        np.testing.assert_array_equal(out, want)
    wide = np.zeros((entry.NARROW_VALUES + 1, 1))
    assert call_(wide[:-1], len(wide) - 1, np.zeros(len(wide)), 1) is ran
    assert call_(wide, len(wide), np.zeros(len(wide)), 1) is False


def test_entry_refuses_wrong_arguments(entry_kind):
    call_ = compile_kernel(axpy_kernel()).entry([np.zeros(1).ctypes.data])
    x, out = np.zeros(2, np.float32), np.zeros(2)
    with pytest.raises(TypeError, match="expected 4 arguments"):
        call_(x, 2, out)
    with pytest.raises(TypeError):
        call_(x, "2", out, 1)
    with pytest.raises(TypeError, match="ndarrays"):
        call_(list(x), 2, out, 1)


def test_entries_survive_garbage_collection():
    # The builtin reads its method table while it is freed, and each JIT engine owns its
    # target machine: both broke once when a collection freed kernels in a cycle.
    for _ in range(20):
        kernel = compile_kernel(axpy_kernel())
        kernel.cycle = kernel, kernel.entry([np.zeros(1).ctypes.data])
        del kernel
        gc.collect()
    x, out = np.ones(3, np.float32), np.zeros(3)
    compile_kernel(axpy_kernel()).entry([np.ones(1).ctypes.data])(x, 3, out, 2)
    np.testing.assert_array_equal(out, [3, 3, 3])


def spin_kernel(limit: int, rows: bool = False) -> ir.Kernel:
    """A kernel spinning until another Python thread sets flag[0], counting its turns in
    flag[1] up to ``limit`` (so that a held GIL fails a test instead of hanging it);
    with ``rows``, rows and their count come first (unread). Compile at level 0: no
    pass may hoist the load out of the loop."""
    flag = ir.Buffer("flag", ir.I64)
    turns = ir.Load(flag, ir.i64(1))
    params = ([ir.Buffer("rows", ir.F32, readonly=True), N] if rows else []) + [flag]
    return ir.Kernel("spin", params, [ir.While(
        b("and", ir.Cmp("eq", ir.Load(flag, ir.i64(0)), ir.i64(0)),
          ir.Cmp("lt", turns, ir.i64(limit))),
        [ir.Store(flag, ir.i64(1), b("add", turns, ir.i64(1)))])])


def spin_turns(call_, *args) -> int:
    """The turns a spin kernel's entry took with a thread setting its flag at 50 ms."""
    raw = np.zeros(2, np.int64)
    setter = threading.Timer(0.05, lambda: raw.__setitem__(0, 1))
    setter.start()
    assert call_(*args, raw) is True
    setter.join()
    return int(raw[1])


def test_entry_releases_the_gil():
    limit = 10**9
    assert spin_turns(compile_kernel(spin_kernel(limit), opt=0).entry()) < limit


def test_entry_keeps_the_gil_for_few_rows():
    # Fewer rows than hold_gil_below: the other thread cannot run before the kernel
    # ends, so the kernel spins to its limit; as many rows: it is released.
    limit = 3 * 10**8
    call_ = compile_kernel(spin_kernel(limit, rows=True), opt=0).entry(
        rows=RowsLayout(1, np.dtype(np.float32), hold_gil_below=2))
    rows = np.zeros((2, 1), np.float32)
    assert spin_turns(call_, rows[:1], 1) == limit
    assert spin_turns(call_, rows, 2) < limit


def test_a_repeated_math_call_is_rendered_once():
    # Trees as code test one row value's category at many nodes: trunc(x) each time.
    x, out = ir.Buffer("x", ir.F64, readonly=True), ir.Buffer("out", ir.F64)
    t = ir.Math("trunc", ir.Load(x, ir.i64(0)))
    kernel = ir.Kernel("twice", [x, out], [
        ir.Store(out, ir.i64(0), ir.BinOp("add", t, ir.Math("trunc", ir.Load(x, ir.i64(0))))),
        ir.Store(out, ir.i64(1), t)])
    text = str(render_module(kernel))
    assert text.count("call double @\"llvm.trunc.f64\"") == 1
    rows, result = np.array([2.5]), np.zeros(2)
    compile_kernel(kernel).function(rows.ctypes.data, result.ctypes.data)
    assert result.tolist() == [4.0, 2.0]


def test_a_stored_value_is_read_back_only_where_nothing_may_have_changed_it():
    # out and alias are one array: a store to either may change what the other reads.
    x = ir.Buffer("x", ir.F64, readonly=True)
    out, alias = ir.Buffer("out", ir.F64), ir.Buffer("alias", ir.F64)
    j = ir.Var("j", ir.I64)

    def at(buf: ir.Buffer, k: int) -> ir.Load:
        return ir.Load(buf, ir.i64(k))

    def put(buf: ir.Buffer, k: int, value: ir.Expr) -> ir.Store:
        return ir.Store(buf, ir.i64(k), value)

    one, two = ir.Const(1.0, ir.F64), ir.Const(2.0, ir.F64)
    body = [
        # Forwarded: nothing between the store and the load (a row's sum, tree to tree).
        put(out, 0, b("mul", at(x, 0), two)), put(out, 0, b("add", at(out, 0), at(x, 0))),
        # A store through another buffer comes between.
        put(out, 1, one), put(alias, 1, two), put(out, 2, at(out, 1)),
        # A store in an arm comes between the store before the If and the load after it.
        put(out, 3, one), ir.If(ir.Cmp("gt", at(x, 0), ir.Const(0.0, ir.F64)),
                                [put(alias, 3, two)]), put(out, 4, at(out, 3)),
        # A loop's body reads what its previous run stored.
        put(out, 5, ir.Const(0.0, ir.F64)),
        ir.For(j, ir.i64(0), ir.i64(3), ir.i64(1),
               [put(out, 6, at(out, 5)), put(out, 5, b("add", at(out, 5), one))]),
        ir.Declare(ir.Var("k", ir.I64), ir.i64(0)), put(out, 8, one),
        ir.While(ir.Cmp("lt", ir.Var("k", ir.I64), ir.i64(3)),
                 [put(out, 7, at(out, 8)), put(out, 8, b("add", at(out, 8), two)),
                  ir.Assign(ir.Var("k", ir.I64), b("add", ir.Var("k", ir.I64), ir.i64(1)))]),
        # A loop's test reads what its body stored (a bound keeps a wrong one finite).
        put(out, 9, ir.Const(0.0, ir.F64)), ir.Assign(ir.Var("k", ir.I64), ir.i64(0)),
        ir.While(b("and", ir.Cmp("lt", at(out, 9), ir.Const(3.0, ir.F64)),
                   ir.Cmp("lt", ir.Var("k", ir.I64), ir.i64(10))),
                 [put(out, 9, b("add", at(out, 9), one)),
                  ir.Assign(ir.Var("k", ir.I64), b("add", ir.Var("k", ir.I64), ir.i64(1)))]),
    ]
    kernel = ir.Kernel("forwarding", [x, out, alias], body)
    first = str(render_module(ir.Kernel("first", [x, out], body[:2])))
    assert first.count("load double") == 1  # x's: out[0] is read back from the store
    compiled = compile_kernel(kernel, opt=0)  # no LLVM pass forwards anything either
    for value in (3.0, -3.0):
        result = np.zeros(10)
        call(compiled, np.array([value]), result, result)
        assert result.tolist() == [value * 3, 2.0, 2.0, 2.0 if value > 0 else 1.0, 2.0 if
                                   value > 0 else 1.0, 3.0, 2.0, 5.0, 7.0, 3.0]


@pytest.mark.parametrize("opt", [0, 1, 3])
def test_optimisation_levels(opt):
    k = compile_kernel(parallel_kernel(ir.i64(2)), opt=opt)
    check_parallel(k, 0, 7, 1)


def test_target_registry():
    assert target_info("cpu").device == "cpu"
    assert importlib.import_module(target_info("cpu").backend).compile_kernel \
        is compile_kernel
    assert {target_info(t).device for t in ("opencl", "cuda")} == {"gpu"}
    with pytest.raises(InputError, match="unknown target 'tpu'"):
        target_info("tpu")


# ---- printer --------------------------------------------------------------------------

def test_printer_shows_every_node():
    x, loc = ir.Buffer("x", ir.F32, readonly=True), ir.Buffer("loc", ir.I32, size=8)
    out = ir.Buffer("out", ir.F32)
    v, k = ir.Var("v", ir.F32), ir.Var("k", ir.I64)
    lv = ir.Load(x, I)
    kernel = ir.Kernel("show", [x, out, N], [
        ir.For(I, ir.i64(0), N, ir.i64(1), parallel=True, threads=ir.i64(4), body=[
            ir.Declare(v, ir.Math("sqrt", lv)),
            ir.LocalArray(loc),
            ir.Prefetch(x, b("add", I, ir.i64(16))),
            ir.If(ir.Not(ir.IsNaN(v)),
                  [ir.Assign(v, ir.Select(ir.Cmp("le", v, ir.Const(1.5, ir.F32)),
                                          b("max", v, lv), v))],
                  [ir.Assign(v, ir.Const(0.0, ir.F32))]),
            ir.While(ir.Const(False, ir.BOOL), []),
            ir.For(k, ir.i64(0), ir.i64(8), ir.i64(2), unroll=True, body=[
                ir.Store(loc, k, b("lshr", ir.Cast(k, ir.I32), ir.Const(1, ir.I32)))]),
            ir.Store(out, I, v),
            ir.AtomicAdd(out, ir.i64(0), v)])])
    assert print_lir(kernel) == """\
kernel show(const f32* x, f32* out, i64 n) {
  parallel for [threads=4] (i64 i = 0; i < n; i += 1) {
    f32 v = sqrt(x[i]);
    i32 loc[8];
    prefetch(&x[(i + 16)]);
    if (!isnan(v)) {
      v = ((v <= 1.5) ? max(v, x[i]) : v);
    } else {
      v = 0.0;
    }
    while (false) {
    }
    unroll for (i64 k = 0; k < 8; k += 2) {
      loc[k] = ((i32)k >>> 1);
    }
    out[i] = v;
    atomic_add(&out[0], v);
  }
}"""
    # ... and the same kernel compiles and runs.
    x_np = np.array([0.25, 4.0, np.nan], np.float32)
    out_np = np.zeros(3, np.float32)
    call(compile_kernel(kernel), x_np, out_np, 3)
    assert out_np[1] == 2.0 and out_np[2] == 0.0


# ---- vectors ----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.int32, np.float64, np.int64])
@pytest.mark.parametrize("span", [1, 16, 32, 128, 256])
def test_vector_lookups_gathers_and_broadcasts_read_what_numpy_reads(dtype, span):
    """Lookup windows (permuted on AVX-512 hosts for narrow fields up to 256 elements,
    gathered otherwise), gathers, broadcasts and lane extraction."""
    kind = {np.float32: ir.F32, np.int8: ir.I8, np.int32: ir.I32, np.float64: ir.F64,
            np.int64: ir.I64}[dtype]
    table = ir.Buffer("table", kind, readonly=True)
    out = ir.Buffer("out", kind)
    offsets = ir.Buffer("offsets", ir.I32, readonly=True)
    window = ir.BinOp("rem", ir.VectorLoad(offsets, ir.i64(0), 16), ir.Const(span, ir.I32))
    gathered = ir.Load(table, ir.Cast(ir.BinOp("add", ir.Iota(16), ir.Const(5, ir.I32)),
                                      ir.I64))
    body = [ir.Store(out, ir.i64(0), ir.Lookup(table, ir.i64(3), window, span)),
            ir.Store(out, ir.i64(16), gathered),
            ir.Store(out, ir.i64(32), ir.Broadcast(ir.Extract(gathered, 3), 16))]
    kernel = compile_kernel(ir.Kernel("vectors", [table, offsets, out], body))
    rng = np.random.default_rng(span)
    values = (rng.standard_normal(300) * 100).astype(dtype)
    at = rng.integers(0, 1000, 16).astype(np.int32)
    result = np.zeros(48, dtype)
    kernel.function(values.ctypes.data, at.ctypes.data, result.ctypes.data)
    np.testing.assert_array_equal(result[:16], values[3 + at % span])
    np.testing.assert_array_equal(result[16:32], values[5:21])
    np.testing.assert_array_equal(result[32:], values[8])


def test_values_at_looked_up_columns_read_what_numpy_reads():
    # A vector walk's row values: rows[1 + feature[2 + position] * 16 + lane], the
    # features' window wider than any permute (512 slots), so on x86 with AVX2 or
    # AVX-512 each lane's offset is computed from its feature as a scalar.
    feature = ir.Buffer("feature", ir.I32, readonly=True)
    positions = ir.Buffer("positions", ir.I32, readonly=True)
    rows = ir.Buffer("rows", ir.F32, readonly=True)
    out = ir.Buffer("out", ir.F32)
    look = ir.Lookup(feature, ir.i64(2), ir.VectorLoad(positions, ir.i64(0), 16), 512)
    column = ir.BinOp("add", ir.BinOp("mul", look, ir.Const(16, ir.I32)), ir.Iota(16))
    value = ir.Load(rows, ir.BinOp("add", ir.i64(1), ir.Cast(column, ir.I64)))
    kernel = ir.Kernel("columns", [feature, positions, rows, out],
                       [ir.Store(out, ir.i64(0), value)])
    for bits in (256, 512):
        text = str(render_module(kernel, vector_bits=bits))
        assert "masked.gather" not in text and len(re.findall(r"= load i32, ", text)) == 16
        assert "insertelement <16 x i32>" not in text  # no vector of the features
    rng = np.random.default_rng(3)
    features = rng.integers(0, 28, 520).astype(np.int32)
    at = rng.integers(0, 512, 16).astype(np.int32)
    values = rng.standard_normal(1 + 28 * 16).astype(np.float32)
    result = np.zeros(16, np.float32)
    compile_kernel(kernel).function(features.ctypes.data, at.ctypes.data, values.ctypes.data,
                                    result.ctypes.data)
    np.testing.assert_array_equal(result, values[1 + features[2 + at] * 16 + np.arange(16)])


@pytest.mark.parametrize("vector_bits", [0, 256, 512])
def test_a_gather_by_32_bit_offsets_loads_a_lane_at_a_time_where_the_target_permutes(
        vector_bits):
    # x86 with AVX2 or AVX-512 (vector_bits 256, 512): a load per lane at the start plus
    # the lane's offset, two offsets a 64-bit extract, split by a shift and a mask;
    # elsewhere (0) LLVM's masked gather. The IR only: the loads' results are tested
    # above on this machine's CPU.
    table = ir.Buffer("table", ir.F32, readonly=True)
    out = ir.Buffer("out", ir.F32)
    offsets = ir.VectorLoad(ir.Buffer("offsets", ir.I32, readonly=True), ir.i64(0), 16)
    gathered = ir.Load(table, ir.BinOp("add", ir.i64(3), ir.Cast(offsets, ir.I64)))
    kernel = ir.Kernel("gather", [table, ir.Buffer("offsets", ir.I32, readonly=True), out],
                       [ir.Store(out, ir.i64(0), gathered)])
    text = str(render_module(kernel, vector_bits=vector_bits))
    if not vector_bits:
        assert "llvm.masked.gather.v16f32" in text and "zext" not in text
        return
    assert "masked.gather" not in text
    assert len(re.findall(r"= load float, ", text)) == 16
    assert "zext" not in text
    assert len(re.findall(r"extractelement <8 x i64> ", text)) == 8
    assert len(re.findall(r"lshr i64 %\S+, 32", text)) == 8
    assert len(re.findall(r"and i64 %\S+, 4294967295", text)) == 8
