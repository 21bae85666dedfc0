"""A Python builtin that calls a compiled kernel: small calls without ctypes' costs.

A ctypes call converts each argument through Python objects, which for a kernel's dozen
arguments costs more than the kernel's own walk of one row through 100 trees, and more
again to take the arrays' addresses in Python (docs/ARCHITECTURE.md "Calling a kernel
from Python" has the figures). The entry built here is
a ``METH_FASTCALL`` builtin function whose machine code does that work itself, as
numba's wrappers do: it reads each array's data pointer from the ndarray object (numpy's
ABI: the field after the object header, which every compiled numpy extension reads),
converts integers with ``PyLong_AsLongLong``, passes the arguments bound at build time
(the model buffers) as constants, and releases the GIL around the kernel as ctypes does.

An entry built with a :class:`RowsLayout` also checks its first argument, the rows, as
the predictor's Python did, faster: a C-contiguous, aligned 2-D
array of the model's input dtype, as many rows as the second argument says and one
column a feature. Rows that fit run and the entry returns True; any other array runs
nothing and returns False, and the caller converts it (or names what is wrong with it).
For a float32 layout, a few float64 rows (``NARROW_VALUES`` values) fit too: the entry
rounds them to float32 itself, as the caller's conversion would.
Calls of fewer rows than the layout's ``hold_gil_below`` keep the GIL, as numpy keeps it
for short loops: releasing and taking it back costs a tenth of a one-row call through
100 trees, and lets no other thread do much in between.

Python builds whose object layout differs (free-threaded or debug CPython, PyPy) are
detected by probing an array; there :func:`kernel_entry` falls back to the ctypes
function, checking the rows in Python.

:func:`quick_predict` builds a second builtin over such an entry, for a predictor's
common call (one 2-D ndarray of a few rows, no other argument): it allocates the result
and runs the entry in machine code. :func:`predict_method` is the ``predict`` method
that calls it, and hands every other call, unchanged, to the Python method.
"""

from __future__ import annotations

import ctypes
import functools
import platform
import sys
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Sequence

import llvmlite.binding as llvm
import llvmlite.ir as lir
import numpy as np

from ...lir import ir
from ...lir.lower import WIDE_ROWS, takes_float64_rows

_METH_FASTCALL, _METH_KEYWORDS = 0x80, 0x2
# The flag a vectorcall's argument count may carry (PY_VECTORCALL_ARGUMENTS_OFFSET).
_COUNT_BITS = (1 << 63) - 1
_PTR = lir.IntType(8).as_pointer()
_I64 = lir.IntType(64)
_INT_TYPES = {ir.BOOL: lir.IntType(1), ir.I8: lir.IntType(8), ir.I32: lir.IntType(32),
              ir.I64: _I64}


# numpy's ndarray flags (ndarraytypes.h): the kernel reads rows as C-ordered and aligned.
_C_CONTIGUOUS, _ALIGNED = 0x1, 0x100
# float64 rows of at most this many values, for a kernel reading float32, are rounded by
# the entry itself (16 KB of stack): a one-row call otherwise pays ~2 µs in Python for a
# ~1 µs kernel. At this size the entry's loop (optimisation level 0) and as_rows' astype
# cost the same (docs/ARCHITECTURE.md "Calling a kernel from Python").
NARROW_VALUES = 4096


@dataclass(frozen=True)
class RowsLayout:
    """What an entry's first argument must be: rows of ``n_features`` columns in
    ``dtype`` (see the module's docstring)."""

    n_features: int
    dtype: np.dtype
    hold_gil_below: int = 0  # fewer rows keep the GIL (the builtin; ctypes releases it)

    def fits(self, rows: np.ndarray, n_rows: int, dtype: np.dtype | None = None) -> bool:
        """Python's form of the entry's own check, for rows of ``dtype`` (default the
        layout's; float64 rows, which the builtin rounds, do not fit a float32 layout
        here: the caller converts them, unless the kernel reads them itself)."""
        flags = rows.flags
        return rows.shape == (n_rows, self.n_features) \
            and rows.dtype.num == (dtype or self.dtype).num \
            and rows.dtype.byteorder == "=" and flags.c_contiguous and flags.aligned


class _Offsets(NamedTuple):
    """Where this process's objects keep what the entry reads (bytes from the start)."""

    ob_type: int
    data: int
    nd: int
    dimensions: int
    descr: int
    flags: int
    type_num: int  # these two in the array's dtype (PyArray_Descr)
    byteorder: int


class _MethodDef(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("meth", ctypes.c_void_p),
                ("flags", ctypes.c_int), ("doc", ctypes.c_char_p)]


@functools.cache
def _layout() -> _Offsets | None:
    """The offsets of ``ob_type`` and of an ndarray's fields in this process's objects,
    when they are CPython's standard layout and numpy's (the same in numpy 1 and 2);
    else None."""
    # Only CPython's id() is an address; free-threaded and debug builds have wider
    # object headers.
    if platform.python_implementation() != "CPython" or object.__basicsize__ != 16:
        return None
    offsets = _Offsets(ob_type=8, data=16, nd=24, dimensions=32, descr=56, flags=64,
                       type_num=28, byteorder=26)

    def read(obj: Any, offset: int, ctype: Any) -> Any:
        return ctype.from_address(id(obj) + offset).value

    probe = np.zeros((3, 2), np.float32)
    dims = read(probe, offsets.dimensions, ctypes.c_void_p)
    # A transposed view differs from the probe in exactly the flags the entry tests.
    fits = [read(a, offsets.flags, ctypes.c_int) & (_C_CONTIGUOUS | _ALIGNED)
            for a in (probe, probe.T)]
    if read(probe, offsets.ob_type, ctypes.c_void_p) != id(np.ndarray) or \
            read(probe, offsets.data, ctypes.c_void_p) != probe.ctypes.data or \
            read(probe, offsets.nd, ctypes.c_int) != 2 or \
            (ctypes.c_ssize_t * 2).from_address(dims)[:] != [3, 2] or \
            read(probe, offsets.descr, ctypes.c_void_p) != id(probe.dtype) or \
            fits != [_C_CONTIGUOUS | _ALIGNED, _ALIGNED] or \
            read(probe.dtype, offsets.type_num, ctypes.c_int) != probe.dtype.num or \
            [read(np.dtype(order + "f4"), offsets.byteorder, ctypes.c_char)
             for order in "=>"] != [b"=", b">"]:
        return None
    return offsets


def _function(name: str) -> int:
    return ctypes.cast(getattr(ctypes.pythonapi, name), ctypes.c_void_p).value


def _call(builder: lir.IRBuilder, address: int | lir.Value, ret: lir.Type,
          args: Sequence[Any]) -> Any:
    """A call of the function at ``address`` (a constant, or an i64 value)."""
    fn_type = lir.FunctionType(ret, [a.type for a in args])
    callee = builder.inttoptr(_I64(address) if isinstance(address, int) else address,
                              fn_type.as_pointer())
    return builder.call(callee, args)


def _module(free: Sequence[ir.Buffer | ir.Var], bound: Sequence[int], kernel: int,
            offsets: _Offsets, rows: RowsLayout | None, wide: bool) -> lir.Module:
    """``entry(self, args, nargs)``: check ``nargs``, unpack ``free``, check the rows
    when ``rows`` says how, call, return True (False for rows that do not fit). A
    ``wide`` kernel (:func:`kernel_entry`) gets float64 rows as they are, and which they
    are, after ``free``."""
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

    out = _Out(builder, fn, fail)
    field, give, check = out.field, out.give, out.check

    check(builder.icmp_signed("==", nargs, _I64(len(free))))
    values, objects = [], []
    for i, p in enumerate(free):
        obj = builder.load(builder.gep(args, [_I64(i)]))
        objects.append(obj)
        if isinstance(p, ir.Buffer):
            check(builder.icmp_unsigned("==", field(obj, offsets.ob_type),
                                        out.obj(np.ndarray)))
            values.append(field(obj, offsets.data))
        else:
            value = _call(builder, _function("PyLong_AsLongLong"), _I64, [obj])
            error = _call(builder, _function("PyErr_Occurred"), _PTR, [])
            check(builder.icmp_unsigned("==", error, out.null))
            values.append(builder.trunc(value, _INT_TYPES[p.dtype])
                          if p.dtype != ir.I64 else value)
    if rows is not None:
        unfit = fn.append_basic_block("unfit")
        i32 = lir.IntType(32)
        table, n_rows = objects[0], values[1]
        check(builder.icmp_signed("==", field(table, offsets.nd, i32), i32(2)), unfit)
        dims = builder.bitcast(field(table, offsets.dimensions), _I64.as_pointer())
        check(builder.icmp_signed("==", builder.load(dims), n_rows), unfit)
        columns = builder.load(builder.gep(dims, [_I64(1)]))
        check(builder.icmp_signed("==", columns, _I64(rows.n_features)), unfit)
        wanted = _C_CONTIGUOUS | _ALIGNED
        flags = builder.and_(field(table, offsets.flags, i32), i32(wanted))
        check(builder.icmp_signed("==", flags, i32(wanted)), unfit)
        descr = field(table, offsets.descr)
        order = field(descr, offsets.byteorder, lir.IntType(8))
        check(builder.icmp_signed("==", order, lir.IntType(8)(ord("="))), unfit)
        kind = field(descr, offsets.type_num, i32)
        if wide:
            is_f64 = builder.icmp_signed("==", kind, i32(np.dtype(np.float64).num))
            check(builder.or_(is_f64, builder.icmp_signed("==", kind, i32(rows.dtype.num))),
                  unfit)
            values += [values[0], builder.zext(is_f64, _I64)]
        elif rows.dtype == np.float32:
            values[0] = _narrowed(out, kind, values[0], n_rows, rows, unfit)
        else:
            check(builder.icmp_signed("==", kind, i32(rows.dtype.num)), unfit)
    values += [builder.inttoptr(_I64(address), _PTR) for address in bound]
    if rows is not None and rows.hold_gil_below > 0:
        held, released = fn.append_basic_block("held"), fn.append_basic_block("released")
        builder.cbranch(builder.icmp_signed("<", values[1], _I64(rows.hold_gil_below)),
                        held, released)
        builder.position_at_end(held)
        _call(builder, kernel, lir.VoidType(), values)
        give(True)
        builder.position_at_end(released)
    state = _call(builder, _function("PyEval_SaveThread"), _PTR, [])
    _call(builder, kernel, lir.VoidType(), values)
    _call(builder, _function("PyEval_RestoreThread"), lir.VoidType(), [state])
    give(True)
    if rows is not None:
        builder.position_at_end(unfit)
        give(False)

    builder.position_at_end(fail)
    error = _call(builder, _function("PyErr_Occurred"), _PTR, [])
    raised = fn.append_basic_block("raised")
    unset = fn.append_basic_block("unset")
    builder.cbranch(builder.icmp_unsigned("==", error, out.null),
                    unset, raised)
    builder.position_at_end(unset)
    type_error = ctypes.c_void_p.in_dll(ctypes.pythonapi, "PyExc_TypeError").value
    _call(builder, _function("PyErr_SetString"), lir.VoidType(),
          [builder.inttoptr(_I64(type_error), _PTR), builder.bitcast(message, _PTR)])
    builder.branch(raised)
    builder.position_at_end(raised)
    builder.ret(out.null)
    return module


def _narrowed(out: "_Out", kind: Any, data: Any, n_rows: Any, rows: RowsLayout,
              unfit: Any) -> Any:
    """The float32 rows the kernel reads: ``data`` itself when the array is float32;
    float64 rows of at most ``NARROW_VALUES`` values rounded into a buffer on the stack
    (``fptrunc``: round to nearest, infinities beyond float32's range, as numpy's
    ``astype`` that :func:`~silvanforge.model.inputs.as_rows` runs for the others);
    anything else is ``unfit``."""
    builder, fn = out.builder, out.fn
    i32 = lir.IntType(32)
    f32, f64 = lir.FloatType(), lir.DoubleType()
    # At the function's start, so that the buffer is one fixed frame, not a growing stack.
    with builder.goto_entry_block():
        buffer = builder.alloca(f32, NARROW_VALUES, name="narrowed")
        as_rows = builder.bitcast(buffer, _PTR)
    same = builder.block
    wide = fn.append_basic_block("wide")
    done = fn.append_basic_block("rows")
    builder.cbranch(builder.icmp_signed("==", kind, i32(rows.dtype.num)), done, wide)
    builder.position_at_end(wide)
    out.check(builder.icmp_signed("==", kind, i32(np.dtype(np.float64).num)), unfit)
    count = builder.mul(n_rows, _I64(rows.n_features))
    out.check(builder.icmp_unsigned("<=", count, _I64(NARROW_VALUES)), unfit)
    source = builder.bitcast(data, f64.as_pointer())
    loop = out.each(count, lambda i: builder.store(builder.fptrunc(
        builder.load(builder.gep(source, [i])), f32), builder.gep(buffer, [i])), done)
    builder.position_at_end(done)
    narrowed = builder.phi(_PTR)
    narrowed.add_incoming(data, same)
    narrowed.add_incoming(as_rows, loop)
    return narrowed


def _machine_code(module: lir.Module) -> tuple[Any, int]:
    """(the engine holding ``module``'s code, the address of its ``entry``)."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    # Each engine owns its target machine: this one gets its own. Level 0: a few calls
    # and loads gain nothing from optimising, and code generation takes 3x less time.
    machine = llvm.Target.from_triple(llvm.get_process_triple()).create_target_machine(
        opt=0, jit=True)
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(str(module)), machine)
    engine.finalize_object()
    return engine, engine.get_function_address("entry")


def _builtin(module: lir.Module, keep: Any, name: bytes = b"kernel_entry") -> Callable:
    """The builtin running ``module``'s ``entry``.

    Its ``self`` is a tuple of what must outlive it: the method table, which the builtin
    reads even while it is being freed, and the engines of its code. A tuple, because
    the garbage collector never clears one: an instance's attributes it may clear while
    the builtin still points at them.
    """
    engine, address = _machine_code(module)
    method = _MethodDef(name, address, _METH_FASTCALL, None)
    new = ctypes.pythonapi.PyCFunction_NewEx
    new.restype = ctypes.py_object
    new.argtypes = [ctypes.c_void_p, ctypes.py_object, ctypes.c_void_p]
    return new(ctypes.addressof(method), (method, engine, keep), None)


def _address(array: np.ndarray) -> int:
    """The address of an array's data: through the buffer protocol when the array is
    writable (the faster way), else ``ndarray.ctypes``."""
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(array))
    except (TypeError, ValueError):
        return array.ctypes.data


def kernel_entry(params: Sequence[ir.Buffer | ir.Var], function: Callable, address: int,
                 bound: Sequence[int], keep: Any = None,
                 rows: RowsLayout | None = None) -> Callable:
    """A callable running the kernel at ``address`` (parameters ``params``; ``function``
    is its ctypes callable) with Python arguments for its leading parameters (ndarrays
    for buffers, which the caller has checked for dtype and size, but for the rows
    when ``rows`` is given; ints for scalars) followed by the addresses ``bound``.
    It returns True when the kernel ran, False for rows that do not fit ``rows``. A
    kernel reading float64 rows too (:func:`~silvanforge.lir.lower.takes_float64_rows`)
    takes them as they are, its last two free parameters passed by the entry, not the
    caller.

    The builtin described above where this Python's object layout is the one probed
    for, else a Python function calling ``function``. ``keep`` lives as long as the
    builtin (the engine owning the kernel's code).
    """
    free = params[:len(params) - len(bound)]
    if rows is not None and (not isinstance(free[0], ir.Buffer) or free[1].dtype != ir.I64):
        raise ValueError("a rows check needs rows and their count as the first parameters")
    wide = rows is not None and takes_float64_rows(free)
    if wide:
        if tuple(p.name for p in free[-2:]) != WIDE_ROWS:
            raise ValueError("a kernel of float64 rows too needs their parameters as its "
                             "last before the bound ones")
        free = free[:-2]
    layout = _layout()
    if layout is None:
        buffers = [isinstance(p, ir.Buffer) for p in free]

        def call(*args: Any) -> bool:
            if len(args) != len(buffers) or any(
                    b and type(a) is not np.ndarray for a, b in zip(args, buffers)):
                raise TypeError(f"kernel entry: expected {len(buffers)} arguments, "
                                "ndarrays and ints")
            extra: list[int] = []
            if rows is not None:
                is_f64 = wide and rows.fits(args[0], args[1], np.dtype(np.float64))
                if not (is_f64 or rows.fits(args[0], args[1])):
                    return False
                if wide:
                    extra = [_address(args[0]), int(is_f64)]
            try:
                function(*[_address(a) if b else a for a, b in zip(args, buffers)], *extra,
                         *bound)
            except ctypes.ArgumentError as exc:
                raise TypeError(f"kernel entry: {exc}") from None
            return True
        return call
    return _builtin(_module(free, bound, address, layout, rows, wide), (keep, rows))


def quick_predict(entry: Callable, zeros: Callable, max_rows: int, finish: int,
                  keep: Any, width: int | None = None,
                  more: tuple[Callable, int] | None = None) -> Callable | None:
    """A builtin ``quick(X)`` that runs a predictor's common call itself: for ``X`` an
    ndarray of 2 dimensions and 1 to ``max_rows`` rows, ``result = zeros(n)`` (or
    ``zeros((n, width))``), then ``entry(X, n, result, 1, finish)`` (a
    :func:`kernel_entry` builtin checking the rest), and ``result`` when the entry ran;
    with ``more``, (another entry, its most rows), the same through that entry for
    more rows than ``max_rows``, up to its own; NotImplemented for anything else (the
    caller's general path takes it). None where an entry is not a builtin (the ctypes
    fallback). ``keep`` lives as long as the builtin; the builtin holds no predictor
    (:func:`predict_method` finds it on one).
    """
    offsets = _layout()
    entries = [entry] + ([more[0]] if more is not None else [])
    if offsets is None or not all(isinstance(getattr(e, "__self__", None), tuple)
                                  for e in entries):
        return None
    top = max_rows if more is None else more[1]
    module = lir.Module("quick")
    fn = lir.Function(module, lir.FunctionType(_PTR, [_PTR, _PTR.as_pointer(), _I64]),
                      "entry")
    _, args, nargs = fn.args
    builder = lir.IRBuilder(fn.append_basic_block("start"))
    with builder.goto_entry_block():
        argv = builder.alloca(_PTR, 5, name="argv")
    other = fn.append_basic_block("other")
    i32 = lir.IntType(32)
    out = _Out(builder, fn, other)
    check = out.check

    check(builder.icmp_signed("==", nargs, _I64(1)))
    rows = builder.load(args)
    check(builder.icmp_unsigned("==", out.field(rows, offsets.ob_type), out.obj(np.ndarray)))
    check(builder.icmp_signed("==", out.field(rows, offsets.nd, i32), i32(2)))
    n = builder.load(builder.bitcast(out.field(rows, offsets.dimensions),
                                     _I64.as_pointer()))
    # 1 <= n <= top as one unsigned compare: n - 1 < top.
    check(builder.icmp_unsigned("<", builder.sub(n, _I64(1)), _I64(top)))
    count = _call(builder, _function("PyLong_FromSsize_t"), _PTR, [n])
    out.fail_if_null(count)
    shape = count
    if width is not None:  # the tuple (n, width); it takes a reference to each
        shape = _call(builder, _function("PyTuple_New"), _PTR, [_I64(2)])
        out.fail_if_null(shape, count)
        for i, item in enumerate((count, out.obj(width))):
            _call(builder, _function("Py_IncRef"), lir.VoidType(), [item])
            _call(builder, _function("PyTuple_SetItem"), i32, [shape, _I64(i), item])
    builder.store(shape, argv)
    result = _call(builder, _function("PyObject_Vectorcall"), _PTR,
                   [out.obj(zeros), argv, _I64(1), out.null])
    if width is not None:
        out.release(shape)
    out.fail_if_null(result, count)
    for i, value in enumerate((rows, count, result, out.obj(1), out.obj(finish))):
        builder.store(value, builder.gep(argv, [_I64(i)]))
    address, this = _I64(entry.__self__[0].meth), out.obj(entry.__self__)
    if more is not None:  # the first entry up to max_rows, else the second
        few = builder.icmp_unsigned("<=", n, _I64(max_rows))
        address = builder.select(few, address, _I64(more[0].__self__[0].meth))
        this = builder.select(few, this, out.obj(more[0].__self__))
    ran = _call(builder, address, _PTR, [this, argv, _I64(5)])
    out.release(count)
    out.fail_if_null(ran, result)
    out.release(ran)
    out.leave_if(builder.icmp_unsigned("!=", ran, out.obj(True)), other, result)
    builder.ret(result)
    builder.position_at_end(other)
    out.give(NotImplemented)
    return _builtin(module, (*entries, zeros, finish, width, keep), b"quick")


def predict_method(owner: type, max_jobs: int, doc: str) -> Any | None:
    """``owner.predict(X, output="value", n_jobs=None)`` in machine code (a method
    descriptor: ``obj.predict(X)`` passes ``obj`` without a bound method, as for a
    Python function). A call that the Python method's first lines would send to the
    small kernel (``output``, if given, the very string ``"value"``; ``n_jobs``, if given,
    None or an int from 1 to ``max_jobs``; positional or keyword) calls ``obj._quick``
    (a :func:`quick_predict` builtin, or None) with ``X`` and returns the result unless
    that is NotImplemented; every other call, and those, go to ``obj._predict`` (the
    Python method) with the same arguments. ``doc`` (a signature line, ``--``, the text)
    is its docstring. None where the builtin entry is not built (:func:`kernel_entry`).

    Python's own method costs ~0.3 µs a call, a third of a one-row walk through 100
    trees (docs/ARCHITECTURE.md "Calling a kernel from Python"); an instance attribute
    holding a builtin that holds its instance would be a reference cycle, freed only
    by the garbage collector.
    """
    offsets = _layout()
    if offsets is None:
        return None
    module = lir.Module("dispatch")
    fn = lir.Function(module, lir.FunctionType(
        _PTR, [_PTR, _PTR.as_pointer(), _I64, _PTR]), "entry")
    this, args, nargsf, kwnames = fn.args
    builder = lir.IRBuilder(fn.append_basic_block("start"))
    with builder.goto_entry_block():
        overflow = builder.alloca(lir.IntType(32), name="overflow")
    slow = fn.append_basic_block("general")
    out = _Out(builder, fn, slow)
    check = out.check
    names = {n: sys.intern(n) for n in ("_quick", "_predict", "output", "n_jobs", "value")}
    nargs = builder.and_(nargsf, _I64(_COUNT_BITS))

    def when(condition: Any, then: Callable[[], None]) -> None:
        """``then()``'s code (checks) where ``condition`` holds."""
        yes, after = fn.append_basic_block("when"), fn.append_basic_block("after")
        builder.cbranch(condition, yes, after)
        builder.position_at_end(yes)
        then()
        builder.branch(after)
        builder.position_at_end(after)

    def output_ok(value: Any) -> None:
        check(builder.icmp_unsigned("==", value, out.obj(names["value"])))

    def jobs_ok(value: Any) -> None:  # None, or an int (not a bool) in 1..max_jobs
        def number() -> None:
            check(builder.icmp_unsigned("==", out.field(value, offsets.ob_type), out.obj(int)))
            jobs = _call(builder, _function("PyLong_AsLongLongAndOverflow"), _I64,
                         [value, overflow])
            check(builder.icmp_signed("==", builder.load(overflow), lir.IntType(32)(0)))
            check(builder.icmp_unsigned("<", builder.sub(jobs, _I64(1)), _I64(max_jobs)))
        when(builder.icmp_unsigned("!=", value, out.obj(None)), number)

    # The keywords' count (kwnames is NULL without any).
    start = builder.block
    named, counted = fn.append_basic_block("named"), fn.append_basic_block("counted")
    builder.cbranch(builder.icmp_unsigned("==", kwnames, out.null), counted, named)
    builder.position_at_end(named)
    size = _call(builder, _function("PyTuple_Size"), _I64, [kwnames])
    builder.branch(counted)
    builder.position_at_end(counted)
    keywords = builder.phi(_I64)
    keywords.add_incoming(_I64(0), start)
    keywords.add_incoming(size, named)
    total = builder.add(nargs, keywords)

    # X, then output and n_jobs by position or by keyword (a parameter given both ways is
    # the Python method's TypeError), at most 3 in all.
    check(builder.icmp_unsigned("<", builder.sub(nargs, _I64(1)), _I64(3)))
    check(builder.icmp_unsigned("<=", total, _I64(3)))
    when(builder.icmp_signed(">=", nargs, _I64(2)),
         lambda: output_ok(builder.load(builder.gep(args, [_I64(1)]))))
    when(builder.icmp_signed(">=", nargs, _I64(3)),
         lambda: jobs_ok(builder.load(builder.gep(args, [_I64(2)]))))
    for k in range(2):
        def keyword(k: int = k) -> None:
            name = _call(builder, _function("PyTuple_GetItem"), _PTR, [kwnames, _I64(k)])
            value = builder.load(builder.gep(args, [builder.add(nargs, _I64(k))]))
            is_output = builder.icmp_unsigned("==", name, out.obj(names["output"]))
            as_output, other = fn.append_basic_block("output"), fn.append_basic_block("other")
            after = fn.append_basic_block("keyword_done")
            builder.cbranch(is_output, as_output, other)
            builder.position_at_end(as_output)
            check(builder.icmp_signed("<", nargs, _I64(2)))
            output_ok(value)
            builder.branch(after)
            builder.position_at_end(other)
            check(builder.icmp_unsigned("==", name, out.obj(names["n_jobs"])))
            check(builder.icmp_signed("<", nargs, _I64(3)))
            jobs_ok(value)
            builder.branch(after)
            builder.position_at_end(after)
        when(builder.icmp_signed(">", keywords, _I64(k)), keyword)
    quick = _call(builder, _function("PyObject_GetAttr"), _PTR,
                  [this, out.obj(names["_quick"])])
    found, missing = fn.append_basic_block("found"), fn.append_basic_block("missing")
    builder.cbranch(builder.icmp_unsigned("==", quick, out.null), missing, found)
    builder.position_at_end(missing)
    _call(builder, _function("PyErr_Clear"), lir.VoidType(), [])
    builder.branch(slow)
    builder.position_at_end(found)
    out.leave_if(builder.icmp_unsigned("==", quick, out.obj(None)), slow, quick)
    result = _call(builder, _function("PyObject_Vectorcall"), _PTR,
                   [quick, args, _I64(1), out.null])
    out.release(quick)
    out.leave_if(builder.icmp_unsigned("==", result, out.obj(NotImplemented)), slow, result)
    builder.ret(result)  # a prediction, or NULL: its error raised

    # obj._predict(*args, **kwargs): the arguments after the instance, on the stack.
    builder.position_at_end(slow)
    stack = builder.alloca(_PTR, builder.add(total, _I64(1)), name="stack")
    builder.store(this, stack)
    call = fn.append_basic_block("call")
    out.each(total, lambda i: builder.store(builder.load(builder.gep(args, [i])),
                                            builder.gep(stack, [builder.add(i, _I64(1))])),
             call)
    builder.position_at_end(call)
    builder.ret(_call(builder, _function("PyObject_VectorcallMethod"), _PTR,
                      [out.obj(names["_predict"]), stack, builder.add(nargs, _I64(1)),
                       kwnames]))

    engine, address = _machine_code(module)
    method = _MethodDef(b"predict", address, _METH_FASTCALL | _METH_KEYWORDS, doc.encode())
    new = ctypes.pythonapi.PyDescr_NewMethod
    new.restype = ctypes.py_object
    new.argtypes = [ctypes.py_object, ctypes.c_void_p]
    descriptor = new(owner, ctypes.addressof(method))
    # The method table and its code live as long as the process, as a C extension's
    # static table does: a bound `predictor.predict` points at the table, not at the
    # class, and may outlive the clearing of modules at exit. One reference is never
    # given back.
    ctypes.pythonapi.Py_IncRef(ctypes.py_object((method, engine, names)))
    return descriptor


class _Out:
    """Helpers of the builtins' code: objects as constants, fields, references, and
    checks that leave for block ``otherwise`` (the entry's refusal)."""

    def __init__(self, builder: lir.IRBuilder, fn: lir.Function, otherwise: Any) -> None:
        self.builder, self.fn, self.otherwise = builder, fn, otherwise
        self.null = lir.Constant(_PTR, None)

    def check(self, ok: Any, otherwise: Any = None) -> None:
        """Go on where ``ok`` holds, else to block ``otherwise`` (default: the one
        given at construction)."""
        go = self.fn.append_basic_block("go")
        self.builder.cbranch(ok, go, self.otherwise if otherwise is None else otherwise)
        self.builder.position_at_end(go)

    def obj(self, value: object) -> Any:
        """``value`` (which outlives the code) as a constant pointer."""
        return self.builder.inttoptr(_I64(id(value)), _PTR)

    def field(self, of: Any, offset: int, kind: lir.Type = _PTR) -> Any:
        at = self.builder.gep(of, [_I64(offset)])
        return self.builder.load(self.builder.bitcast(at, kind.as_pointer()))

    def release(self, value: Any) -> None:
        _call(self.builder, _function("Py_DecRef"), lir.VoidType(), [value])

    def give(self, value: object) -> None:
        """Return a new reference to ``value``."""
        _call(self.builder, _function("Py_IncRef"), lir.VoidType(), [self.obj(value)])
        self.builder.ret(self.obj(value))

    def each(self, count: Any, body: Callable[[Any], None], after: Any) -> Any:
        """A loop running ``body(i)`` for ``i`` from 0 to ``count - 1`` (i64), then going
        to block ``after``; returns its head, the block ``after`` is entered from."""
        builder = self.builder
        head, step = self.fn.append_basic_block("loop"), self.fn.append_basic_block("step")
        start = builder.block
        builder.branch(head)
        builder.position_at_end(head)
        i = builder.phi(_I64)
        i.add_incoming(_I64(0), start)
        builder.cbranch(builder.icmp_unsigned("<", i, count), step, after)
        builder.position_at_end(step)
        body(i)
        i.add_incoming(builder.add(i, _I64(1)), builder.block)
        builder.branch(head)
        return head

    def leave_if(self, condition: Any, target: Any, *held: Any) -> None:
        """Where ``condition`` holds, release ``held`` and go to block ``target``; go on
        where it does not."""
        leave = self.fn.append_basic_block("leave")
        go = self.fn.append_basic_block("go")
        self.builder.cbranch(condition, leave, go)
        self.builder.position_at_end(leave)
        for h in held:
            self.release(h)
        self.builder.branch(target)
        self.builder.position_at_end(go)

    def fail_if_null(self, value: Any, *held: Any) -> None:
        """Return NULL (the error raised) when ``value`` is NULL, releasing ``held``."""
        raised = self.fn.append_basic_block("raised")
        go = self.fn.append_basic_block("go")
        self.builder.cbranch(self.builder.icmp_unsigned("==", value, self.null), raised, go)
        self.builder.position_at_end(raised)
        for h in held:
            self.release(h)
        self.builder.ret(self.null)
        self.builder.position_at_end(go)
