"""A plain-Python interpreter of LIR: slow, strict and obviously right.

It is the oracle of the representations and of the CPU and GPU backends: a kernel run
here and run compiled must write the same numbers. Every node has the meaning
:mod:`silvanforge.lir.ir` gives it, and whatever the IR leaves undefined is an error here
rather than a silent guess: loads and stores out of bounds (numpy would wrap a negative
index), stores into read-only buffers, float→int casts of values that do not fit, integer
division by zero, shifts by the width or more, and operands whose types disagree.

Values: integers are Python ints wrapped to their width (two's complement), ``i1`` values
are bools, floats are numpy ``float32``/``float64`` scalars, so every float operation
rounds in the kernel's precision. Parallel loops run serially, in order. Float ``min`` and
``max`` return the non-NaN operand when one is NaN (C's ``fmin``/``fmax``, LLVM's
``minnum``/``maxnum``).

>>> import numpy as np
>>> from silvanforge.lir import ir
>>> out = ir.Buffer("out", ir.F64)
>>> i = ir.Var("i", ir.I64)
>>> k = ir.Kernel("squares", [out], [ir.For(i, ir.i64(0), ir.i64(3), ir.i64(1), [
...     ir.Store(out, i, ir.Cast(ir.BinOp("mul", i, i), ir.F64))])])
>>> buf = np.zeros(3)
>>> run(k, {"out": buf}); buf.tolist()
[0.0, 1.0, 4.0]
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from . import ir

NUMPY_DTYPES = {ir.BOOL: np.dtype(np.bool_), ir.I8: np.dtype(np.int8),
                ir.I32: np.dtype(np.int32), ir.I64: np.dtype(np.int64),
                ir.F32: np.dtype(np.float32), ir.F64: np.dtype(np.float64)}
_FLOAT = {ir.F32: np.float32, ir.F64: np.float64}


class _Env:
    """Scalars and buffers in scope; blocks restore what they shadow when they end."""

    def __init__(self) -> None:
        self.vars: dict[str, Any] = {}
        self.buffers: dict[str, np.ndarray] = {}
        self.readonly: set[str] = set()
        # GPU launches (run_launch): the block's barrier and its shared arrays by name.
        self.barrier: Any = None
        self.shared: dict[str, np.ndarray] | None = None


def run(kernel: ir.Kernel, args: dict[str, np.ndarray | int | float]) -> None:
    """Execute ``kernel`` with ``args`` (parameter name → numpy array or scalar).

    Buffers are numpy arrays of the parameter's element type, modified in place.

    >>> run(kernel, {"x": rows, "out": out, "n_rows": len(rows)})    # doctest: +SKIP
    """
    env = _bind(kernel, args)
    with np.errstate(all="ignore"):
        _block(kernel.body, env)


def run_launch(kernel: ir.Kernel, args: dict[str, np.ndarray | int | float],
               grid: tuple[int, int, int], block: tuple[int, int, int]) -> None:
    """Execute a GPU kernel (:mod:`silvanforge.lir.gpu`) on ``grid`` × ``block`` threads.

    Blocks run one after another; the threads of a block are Python threads that meet at
    each ``Barrier`` and share the block's shared arrays, so a missing barrier or a
    barrier that only some threads reach shows up here (as a wrong result or a
    ``BrokenBarrierError``), not only on a device.
    """
    import itertools
    import threading

    def thread(env: _Env, errors: list) -> None:
        try:
            with np.errstate(all="ignore"):
                _block(kernel.body, env)
        except BaseException as exc:  # reported by the caller, after the others stop
            errors.append(exc)
            env.barrier.abort()

    for bz, by, bx in itertools.product(*(range(g) for g in reversed(grid))):
        n = block[0] * block[1] * block[2]
        barrier, shared, errors = threading.Barrier(n), {}, []
        threads = []
        for tz, ty, tx in itertools.product(*(range(b) for b in reversed(block))):
            env = _bind(kernel, args)
            env.barrier, env.shared = barrier, shared
            for kind, values in (("thread", (tx, ty, tz)), ("block", (bx, by, bz)),
                                 ("block_dim", block), ("grid_dim", grid)):
                env.vars.update({f"{kind}.{d}": v for d, v in zip("xyz", values)})
            threads.append(threading.Thread(target=thread, args=(env, errors)))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise next((e for e in errors if not isinstance(e, threading.BrokenBarrierError)),
                       errors[0])


def _bind(kernel: ir.Kernel, args: dict[str, np.ndarray | int | float]) -> _Env:
    env = _Env()
    for p in kernel.params:
        if p.name not in args:
            raise TypeError(f"kernel {kernel.name}: no argument for parameter {p.name!r}")
        value = args[p.name]
        if isinstance(p, ir.Buffer):
            if not isinstance(value, np.ndarray) or value.dtype != NUMPY_DTYPES[p.dtype]:
                raise TypeError(f"buffer {p.name!r} must be a numpy array of "
                                f"{NUMPY_DTYPES[p.dtype]}, got {type(value).__name__} "
                                f"{getattr(value, 'dtype', '')}")
            env.buffers[p.name] = value.reshape(-1)
            if p.readonly:
                env.readonly.add(p.name)
        else:
            env.vars[p.name] = _coerce(value, p.dtype)
    return env


# ---- values -------------------------------------------------------------------------

def _wrap(value: int, bits: int) -> int:
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def _coerce(value: Any, dtype: ir.DType) -> Any:
    """A Python or numpy scalar as the interpreter's value of ``dtype``."""
    if dtype == ir.BOOL:
        return bool(value)
    if dtype.is_float:
        return _FLOAT[dtype](value)
    if isinstance(value, (float, np.floating)) and value != int(value):
        raise TypeError(f"{value!r} is not a whole number for an {dtype} value")
    return _wrap(int(value), dtype.bits)


# ---- expressions --------------------------------------------------------------------

def _same_type(node: Any, a: ir.Expr, b: ir.Expr) -> None:
    if a.dtype != b.dtype:
        raise TypeError(f"operands of different types {a.dtype} and {b.dtype} in {node}")


def _c_div(a: int, b: int) -> int:
    if b == 0:
        raise ZeroDivisionError("integer division by zero in a kernel")
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def _c_rem(a: int, b: int) -> int:
    return a - b * _c_div(a, b)


def _shift_amount(b: int, bits: int) -> int:
    if not 0 <= b < bits:
        raise ValueError(f"shift by {b} of an i{bits} value")
    return b


_INT_OPS: dict[str, Callable[[int, int, int], int]] = {
    "add": lambda a, b, n: a + b,
    "sub": lambda a, b, n: a - b,
    "mul": lambda a, b, n: a * b,
    "div": lambda a, b, n: _c_div(a, b),
    "rem": lambda a, b, n: _c_rem(a, b),
    "and": lambda a, b, n: a & b,
    "or": lambda a, b, n: a | b,
    "xor": lambda a, b, n: a ^ b,
    "shl": lambda a, b, n: a << _shift_amount(b, n),
    "lshr": lambda a, b, n: (a & ((1 << n) - 1)) >> _shift_amount(b, n),
    "ashr": lambda a, b, n: a >> _shift_amount(b, n),
    "min": lambda a, b, n: min(a, b),
    "max": lambda a, b, n: max(a, b),
}
_FLOAT_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b, "rem": np.fmod, "min": np.fmin, "max": np.fmax,
}
_BOOL_OPS: dict[str, Callable[[bool, bool], bool]] = {
    "and": lambda a, b: a and b, "or": lambda a, b: a or b, "xor": lambda a, b: a != b,
}
_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b,
}
_MATH = {"exp": np.exp, "log": np.log, "log1p": np.log1p, "sqrt": np.sqrt,
         "fabs": np.fabs, "trunc": np.trunc, "floor": np.floor}


def _math(e: ir.Math, env: _Env) -> Any:
    a = _eval(e.a, env)
    if e.func in ("cttz", "ctpop"):
        if e.dtype.is_float:
            raise TypeError(f"{e.func} of a {e.dtype}: integers only")
        a &= (1 << e.dtype.bits) - 1
        if e.func == "ctpop":
            return bin(a).count("1")
        return e.dtype.bits if a == 0 else (a & -a).bit_length() - 1
    return _MATH[e.func](a)


def _eval(e: ir.Expr, env: _Env) -> Any:
    return _EVAL[type(e)](e, env)


def _binop(e: ir.BinOp, env: _Env) -> Any:
    _same_type(e, e.a, e.b)
    return _apply(e.op, e.a.dtype, _eval(e.a, env), _eval(e.b, env))


def _apply(op: str, dtype: ir.DType, a: Any, b: Any) -> Any:
    if dtype == ir.BOOL:
        return bool(_BOOL_OPS[op](a, b))
    if dtype.is_float:
        return _FLOAT[dtype](_FLOAT_OPS[op](a, b))
    return _wrap(_INT_OPS[op](a, b, dtype.bits), dtype.bits)


def _cmp(e: ir.Cmp, env: _Env) -> bool:
    _same_type(e, e.a, e.b)
    a, b = _eval(e.a, env), _eval(e.b, env)
    if e.a.dtype.is_float and (np.isnan(a) or np.isnan(b)):
        return False  # ordered comparisons, "ne" included
    return bool(_COMPARE[e.op](a, b))


def _select(e: ir.Select, env: _Env) -> Any:
    _same_type(e, e.a, e.b)
    if e.cond.dtype != ir.BOOL:
        raise TypeError(f"select condition of type {e.cond.dtype} in {e}")
    cond = _eval(e.cond, env)
    # Both sides are evaluated, as a select does: an out-of-bounds load on the side not
    # taken is still a bug.
    a, b = _eval(e.a, env), _eval(e.b, env)
    return a if cond else b


def _cast(e: ir.Cast, env: _Env) -> Any:
    value = _eval(e.a, env)
    src, dst = e.a.dtype, e.dtype
    if dst == ir.BOOL:
        if src.is_float:
            raise TypeError(f"no cast from {src} to i1 in {e}")
        return bool(int(value) & 1)
    if dst.is_float:
        if src.is_float:
            return _FLOAT[dst](value)
        # Straight from the integer (one rounding), not through a float64.
        return np.array(int(value), dtype=np.int64).astype(NUMPY_DTYPES[dst])[()]
    if src.is_float:
        if not np.isfinite(value) or not -2.0 ** (dst.bits - 1) <= np.trunc(value) \
                < 2.0 ** (dst.bits - 1):
            raise ValueError(f"cast of {value} to {dst}, which does not hold it")
        return int(value)
    return _wrap(int(value), dst.bits)


def _bitcast(e: ir.Bitcast, env: _Env) -> Any:
    src, dst = e.a.dtype, e.dtype
    if src.bits != dst.bits or ir.BOOL in (src, dst):
        raise TypeError(f"bitcast between types of different widths in {e}")
    bits = np.array(_eval(e.a, env), dtype=NUMPY_DTYPES[src]).view(NUMPY_DTYPES[dst])[()]
    return _coerce(bits, dst)


def _load(e: ir.Load, env: _Env) -> Any:
    array = env.buffers[e.buffer.name]
    return _coerce(array[_index(e.buffer, e.index, array, env)], e.buffer.dtype)


def _index(buffer: ir.Buffer, index: ir.Expr, array: np.ndarray, env: _Env) -> int:
    if index.dtype.is_float or index.dtype == ir.BOOL:
        raise TypeError(f"index of type {index.dtype} into buffer {buffer.name!r}")
    i = _eval(index, env)
    if not 0 <= i < len(array):
        raise IndexError(f"index {i} out of bounds of buffer {buffer.name!r} "
                         f"({len(array)} elements)")
    return i


_EVAL: dict[type, Callable[[Any, _Env], Any]] = {
    ir.Const: lambda e, env: _coerce(e.value, e.dtype),
    ir.Var: lambda e, env: env.vars[e.name],
    ir.Load: _load,
    ir.BinOp: _binop,
    ir.Cmp: _cmp,
    ir.Not: lambda e, env: not _eval(e.a, env),
    ir.IsNaN: lambda e, env: bool(np.isnan(_eval(e.a, env))),
    ir.Select: _select,
    ir.Cast: _cast,
    ir.Bitcast: _bitcast,
    ir.Math: _math,
    ir.ThreadIndex: lambda e, env: _thread_index(e, env),
}


# ---- statements ---------------------------------------------------------------------

def _block(stmts: list[ir.Stmt], env: _Env) -> None:
    """Run ``stmts`` in a scope: names they declare vanish (or are restored) after."""
    saved_vars: dict[str, Any] = {}
    saved_buffers: dict[str, Any] = {}
    missing = object()
    try:
        for s in stmts:
            if isinstance(s, ir.Declare) and s.var.name not in saved_vars:
                saved_vars[s.var.name] = env.vars.get(s.var.name, missing)
            elif isinstance(s, ir.LocalArray) and s.buffer.name not in saved_buffers:
                saved_buffers[s.buffer.name] = env.buffers.get(s.buffer.name, missing)
            _EXEC[type(s)](s, env)
    finally:
        for scope, saved in ((env.vars, saved_vars), (env.buffers, saved_buffers)):
            for name, old in saved.items():
                if old is missing:
                    scope.pop(name, None)
                else:
                    scope[name] = old


def _assign(var: ir.Var, value: ir.Expr, env: _Env) -> None:
    if value.dtype != var.dtype:
        raise TypeError(f"{value.dtype} value assigned to {var.dtype} variable {var.name}")
    env.vars[var.name] = _eval(value, env)


def _assign_existing(s: ir.Assign, env: _Env) -> None:
    if s.var.name not in env.vars:
        raise NameError(f"assignment to undeclared variable {s.var.name!r}")
    _assign(s.var, s.value, env)


def _store(s: ir.Store | ir.AtomicAdd, env: _Env) -> None:
    if s.buffer.name in env.readonly:
        raise PermissionError(f"store into read-only buffer {s.buffer.name!r}")
    if s.value.dtype != s.buffer.dtype:
        raise TypeError(f"{s.value.dtype} value stored into {s.buffer.dtype} buffer "
                        f"{s.buffer.name!r}")
    array = env.buffers[s.buffer.name]
    i = _index(s.buffer, s.index, array, env)
    value = _eval(s.value, env)
    if isinstance(s, ir.AtomicAdd):
        value = _apply("add", s.buffer.dtype, _coerce(array[i], s.buffer.dtype), value)
    array[i] = value


def _for(s: ir.For, env: _Env) -> None:
    start, stop, step = (_eval(x, env) for x in (s.start, s.stop, s.step))
    if step <= 0:
        raise ValueError(f"loop over {s.var.name} with step {step}")
    for i in range(start, stop, step):
        _block([ir.Declare(s.var, ir.Const(i, s.var.dtype)), *s.body], env)


def _while(s: ir.While, env: _Env) -> None:
    while _eval(s.cond, env):
        _block(s.body, env)


def _if(s: ir.If, env: _Env) -> None:
    _block(s.then if _eval(s.cond, env) else s.orelse, env)


def _branch_tree(s: ir.BranchTree, env: _Env) -> None:
    for stmt in s.expand():  # in the enclosing scope: it assigns, declares nothing
        _EXEC[type(stmt)](stmt, env)


def _switch(s: ir.Switch, env: _Env) -> None:
    value = _eval(s.value, env)
    if 0 <= value < len(s.cases):
        _block(s.cases[value], env)


def _local_array(s: ir.LocalArray, env: _Env) -> None:
    if s.buffer.size is None:
        raise TypeError(f"local array {s.buffer.name!r} needs a size")
    array = np.zeros(s.buffer.size, NUMPY_DTYPES[s.buffer.dtype])
    if s.buffer.shared:
        if env.shared is None:
            raise TypeError(f"shared array {s.buffer.name!r} outside a GPU launch")
        array = env.shared.setdefault(s.buffer.name, array)  # the block's one copy
    env.buffers[s.buffer.name] = array


def _barrier(s: ir.Barrier, env: _Env) -> None:
    if env.barrier is None:
        raise TypeError("barrier outside a GPU launch")
    env.barrier.wait()


def _thread_index(e: ir.ThreadIndex, env: _Env) -> int:
    if "thread.x" not in env.vars:
        raise TypeError(f"thread index {e.kind}.{e.dim} outside a GPU launch")
    return env.vars[f"{e.kind}.{e.dim}"]


def _prefetch(s: ir.Prefetch, env: _Env) -> None:
    _eval(s.index, env)  # a hint: any address may be prefetched, so no bounds check


_EXEC: dict[type, Callable[[Any, _Env], None]] = {
    ir.Declare: lambda s, env: _assign(s.var, s.init, env),
    ir.Assign: _assign_existing,
    ir.Store: _store,
    ir.AtomicAdd: _store,
    ir.Prefetch: _prefetch,
    ir.LocalArray: _local_array,
    ir.For: _for,
    ir.While: _while,
    ir.If: _if,
    ir.Switch: _switch,
    ir.Cold: lambda s, env: _block(s.body, env),
    ir.BranchTree: _branch_tree,
    ir.Barrier: _barrier,
}
