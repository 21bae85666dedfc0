"""A Python builtin that calls a compiled kernel: small calls without ctypes' costs.

A ctypes call converts each argument through Python objects, about 0.2 µs an argument
here: 2.3 µs for a kernel's 11, twice the kernel's own walk of one row through 100 trees
(higgs), and more again to take the arrays' addresses in Python. The entry built here is
a ``METH_FASTCALL`` builtin function whose machine code does that work itself, as
numba's wrappers do: it reads each array's data pointer from the ndarray object (numpy's
ABI: the field after the object header, which every compiled numpy extension reads),
converts integers with ``PyLong_AsLongLong``, passes the arguments bound at build time
(the model buffers) as constants, and releases the GIL around the kernel as ctypes does.

Python builds whose object layout differs (free-threaded or debug CPython, PyPy) are
detected by probing an array; there :func:`kernel_entry` falls back to the ctypes
function.
"""

from __future__ import annotations

import ctypes
import functools
import platform
from typing import Any, Callable, Sequence

import llvmlite.binding as llvm
import llvmlite.ir as lir
import numpy as np

from ...lir import ir

_METH_FASTCALL = 0x80
_PTR = lir.IntType(8).as_pointer()
_I64 = lir.IntType(64)
_INT_TYPES = {ir.BOOL: lir.IntType(1), ir.I8: lir.IntType(8), ir.I32: lir.IntType(32),
              ir.I64: _I64}


class _MethodDef(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("meth", ctypes.c_void_p),
                ("flags", ctypes.c_int), ("doc", ctypes.c_char_p)]


@functools.cache
def _layout() -> tuple[int, int] | None:
    """(offset of ``ob_type``, offset of an ndarray's data pointer) in this process's
    objects, when they are CPython's standard layout; else None."""
    # Only CPython's id() is an address; free-threaded and debug builds have wider
    # object headers.
    if platform.python_implementation() != "CPython" or object.__basicsize__ != 16:
        return None
    probe = np.zeros((3, 2))
    base = id(probe)
    if ctypes.c_void_p.from_address(base + 8).value != id(np.ndarray) or \
            ctypes.c_void_p.from_address(base + 16).value != probe.ctypes.data:
        return None
    return 8, 16


def _function(name: str) -> int:
    return ctypes.cast(getattr(ctypes.pythonapi, name), ctypes.c_void_p).value


def _call(builder: lir.IRBuilder, address: int, ret: lir.Type, args: Sequence[Any]) -> Any:
    fn_type = lir.FunctionType(ret, [a.type for a in args])
    callee = builder.inttoptr(_I64(address), fn_type.as_pointer())
    return builder.call(callee, args)


def _module(free: Sequence[ir.Buffer | ir.Var], bound: Sequence[int], kernel: int,
            layout: tuple[int, int]) -> lir.Module:
    """``entry(self, args, nargs)``: check ``nargs``, unpack ``free``, call, return None."""
    type_offset, data_offset = layout
    module = lir.Module("entry")
    fn = lir.Function(module, lir.FunctionType(_PTR, [_PTR, _PTR.as_pointer(), _I64]),
                      "entry")
    _, args, nargs = fn.args
    builder = lir.IRBuilder(fn.append_basic_block("start"))
    fail = fn.append_basic_block("fail")
    text = f"kernel entry: expected {len(free)} arguments, ndarrays and ints\0".encode()
    message = lir.GlobalVariable(module, lir.ArrayType(lir.IntType(8), len(text)), "message")
    message.initializer = lir.Constant(message.value_type, bytearray(text))
    message.global_constant = True

    def check(ok: Any) -> None:
        go = fn.append_basic_block("go")
        builder.cbranch(ok, go, fail)
        builder.position_at_end(go)

    def field(obj: Any, offset: int) -> Any:
        at = builder.gep(obj, [_I64(offset)])
        return builder.load(builder.bitcast(at, _PTR.as_pointer()))

    check(builder.icmp_signed("==", nargs, _I64(len(free))))
    values = []
    for i, p in enumerate(free):
        obj = builder.load(builder.gep(args, [_I64(i)]))
        if isinstance(p, ir.Buffer):
            ndarray = builder.inttoptr(_I64(id(np.ndarray)), _PTR)
            check(builder.icmp_unsigned("==", field(obj, type_offset), ndarray))
            values.append(field(obj, data_offset))
        else:
            value = _call(builder, _function("PyLong_AsLongLong"), _I64, [obj])
            error = _call(builder, _function("PyErr_Occurred"), _PTR, [])
            check(builder.icmp_unsigned("==", error, lir.Constant(_PTR, None)))
            values.append(builder.trunc(value, _INT_TYPES[p.dtype])
                          if p.dtype != ir.I64 else value)
    values += [builder.inttoptr(_I64(address), _PTR) for address in bound]
    state = _call(builder, _function("PyEval_SaveThread"), _PTR, [])
    _call(builder, kernel, lir.VoidType(), values)
    _call(builder, _function("PyEval_RestoreThread"), lir.VoidType(), [state])
    none = builder.inttoptr(_I64(id(None)), _PTR)
    _call(builder, _function("Py_IncRef"), lir.VoidType(), [none])
    builder.ret(none)

    builder.position_at_end(fail)
    error = _call(builder, _function("PyErr_Occurred"), _PTR, [])
    raised = fn.append_basic_block("raised")
    unset = fn.append_basic_block("unset")
    builder.cbranch(builder.icmp_unsigned("==", error, lir.Constant(_PTR, None)),
                    unset, raised)
    builder.position_at_end(unset)
    type_error = ctypes.c_void_p.in_dll(ctypes.pythonapi, "PyExc_TypeError").value
    _call(builder, _function("PyErr_SetString"), lir.VoidType(),
          [builder.inttoptr(_I64(type_error), _PTR), builder.bitcast(message, _PTR)])
    builder.branch(raised)
    builder.position_at_end(raised)
    builder.ret(lir.Constant(_PTR, None))
    return module


def _builtin(module: lir.Module, keep: Any) -> Callable:
    """The builtin running ``module``'s ``entry``.

    Its ``self`` is a tuple of what must outlive it: the method table, which the builtin
    reads even while it is being freed, and the engines of its code. A tuple, because
    the garbage collector never clears one: an instance's attributes it may clear while
    the builtin still points at them.
    """
    # Each engine owns its target machine: this one gets its own. Level 0: a few calls
    # and loads gain nothing from optimising, and code generation takes 3x less time.
    machine = llvm.Target.from_triple(llvm.get_process_triple()).create_target_machine(
        opt=0, jit=True)
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(str(module)), machine)
    engine.finalize_object()
    method = _MethodDef(b"kernel_entry", engine.get_function_address("entry"),
                        _METH_FASTCALL, None)
    new = ctypes.pythonapi.PyCFunction_NewEx
    new.restype = ctypes.py_object
    new.argtypes = [ctypes.c_void_p, ctypes.py_object, ctypes.c_void_p]
    return new(ctypes.addressof(method), (method, engine, keep), None)


def _address(array: np.ndarray) -> int:
    """The address of an array's data: through the buffer protocol when the array is
    writable (0.6 µs), else ``ndarray.ctypes`` (2 µs)."""
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(array))
    except (TypeError, ValueError):
        return array.ctypes.data


def kernel_entry(params: Sequence[ir.Buffer | ir.Var], function: Callable, address: int,
                 bound: Sequence[int], keep: Any = None) -> Callable:
    """A callable running the kernel at ``address`` (parameters ``params``; ``function``
    is its ctypes callable) with Python arguments for its leading parameters (ndarrays
    for buffers, which the caller has checked for dtype and size; ints for scalars)
    followed by the addresses ``bound``.

    The builtin described above where this Python's object layout is the one probed
    for, else a Python function calling ``function``. ``keep`` lives as long as the
    builtin (the engine owning the kernel's code).
    """
    free = params[:len(params) - len(bound)]
    layout = _layout()
    if layout is None:
        buffers = [isinstance(p, ir.Buffer) for p in free]

        def call(*args: Any) -> None:
            if len(args) != len(buffers) or any(
                    b and type(a) is not np.ndarray for a, b in zip(args, buffers)):
                raise TypeError(f"kernel entry: expected {len(buffers)} arguments, "
                                "ndarrays and ints")
            try:
                function(*[_address(a) if b else a for a, b in zip(args, buffers)], *bound)
            except ctypes.ArgumentError as exc:
                raise TypeError(f"kernel entry: {exc}") from None
        return call
    return _builtin(_module(free, bound, address, layout), keep)
