"""LLVM IR as text, built fast: the part of ``llvmlite.ir``'s interface the kernel
renderer uses (types, constants, functions, basic blocks, an instruction builder).

Why not ``llvmlite.ir`` itself: it builds an object per instruction and operand and prints
them one by one, and a 1000-tree forest emitted as code is ~450,000 instructions. Here an
instruction is one formatted string appended to its block, and a value is its type and
its name: a fraction of the time (docs/ARCHITECTURE.md "Compiling big kernels"). LLVM parses and verifies the text, so a mistake
here is an error at compile time, never wrong code.

Pointers are typed (``double*``), as llvmlite prints them: every LLVM that llvmlite >= 0.44
links parses them. LLVM 15 (llvmlite 0.44) keeps them typed, and there an access must go
through a pointer to the very type it loads or stores: a vector access casts its element
pointer first (:meth:`IRBuilder.pointer_to`). LLVM 17 and later read every pointer as the
opaque ``ptr``, and the cast is a no-op.

>>> m = Module("m")
>>> f = Function(m, FunctionType(VoidType(), [DoubleType().as_pointer()]), "twice")
>>> b = IRBuilder(f.append_basic_block("entry"))
>>> x = b.load(f.args[0])
>>> b.store(b.binary("fadd", x, x), f.args[0])
>>> b.ret_void()
>>> print(str(m).split("define", 1)[1].strip())
void @"twice"(double* %".0")
{
.entry0:
  %".1" = load double, double* %".0"
  %".2" = fadd double %".1", %".1"
  store double %".2", double* %".0"
  ret void
}
"""

from __future__ import annotations

import struct
from contextlib import contextmanager
from typing import Any, Iterator, Sequence


# ---- types ----------------------------------------------------------------------------

class Type:
    """An LLVM type; equal when its text is."""

    text = ""

    def __str__(self) -> str:
        return self.text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Type) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)

    def as_pointer(self) -> "PointerType":
        pointer = self.__dict__.get("_pointer")  # made once: every address asks for it
        if pointer is None:
            pointer = self._pointer = PointerType(self)
        return pointer


class VoidType(Type):
    text = "void"


class IntType(Type):
    def __init__(self, width: int) -> None:
        self.width = width
        self.text = f"i{width}"


class FloatType(Type):
    text = "float"


class DoubleType(Type):
    text = "double"


class PointerType(Type):
    def __init__(self, pointee: Type) -> None:
        self.pointee = pointee
        self.text = f"{pointee.text}*"


class ArrayType(Type):
    def __init__(self, element: Type, count: int) -> None:
        self.element, self.count = element, count
        self.text = f"[{count} x {element.text}]"


class VectorType(Type):
    def __init__(self, element: Type, count: int) -> None:
        self.element, self.count = element, count
        self.text = f"<{count} x {element.text}>"


class LiteralStructType(Type):
    def __init__(self, elements: Sequence[Type]) -> None:
        self.elements = tuple(elements)
        self.text = "{" + ", ".join(e.text for e in self.elements) + "}"


class FunctionType(Type):
    def __init__(self, return_type: Type, args: Sequence[Type]) -> None:
        self.return_type, self.args = return_type, tuple(args)
        self.text = f"{return_type.text} ({', '.join(a.text for a in self.args)})"


_I1 = IntType(1)
_BYTES = {"i1": 1, "i8": 1, "i32": 4, "i64": 8, "float": 4, "double": 8}


# ---- values ---------------------------------------------------------------------------

class Value:
    """A typed operand: ``ref`` is how an instruction names it."""

    __slots__ = ("type", "ref")

    def __init__(self, type_: Type, ref: str) -> None:
        self.type, self.ref = type_, ref

    def __str__(self) -> str:
        return f"{self.type.text} {self.ref}"


# The integer operations with a right identity, and that identity as a constant's text.
_IDENTITY = {"add": "0", "sub": "0", "or": "0", "xor": "0", "shl": "0", "lshr": "0",
             "ashr": "0", "mul": "1", "sdiv": "1", "udiv": "1"}


class Constant(Value):
    """A constant of an integer or floating type; floats print as their float64 bits
    (an ``f32`` first rounded to float32, as LLVM requires)."""

    __slots__ = ()

    def __init__(self, type_: Type, value: float | int) -> None:
        # By the type's text: a type's equality is Python code, and trees as code make
        # a constant for every node.
        text = type_.text
        if text == "double" or text == "float":
            value = float(value)
            if text == "float":
                value = struct.unpack("f", struct.pack("f", value))[0]
            ref = "0x%016x" % struct.unpack("Q", struct.pack("d", value))[0]
        elif text == "i1":
            ref = "true" if value else "false"
        else:
            ref = str(int(value))
        self.type, self.ref = type_, ref


def splat(value: Value, count: int) -> Value:
    """A constant vector of ``count`` copies of the constant ``value``."""
    lanes = ", ".join([f"{value.type.text} {value.ref}"] * count)
    return Value(VectorType(value.type, count), f"<{lanes}>")


class Argument(Value):
    __slots__ = ("attributes",)

    def __init__(self, type_: Type, ref: str) -> None:
        super().__init__(type_, ref)
        self.attributes: list[str] = []

    @property
    def name(self) -> str:
        return self.ref[2:-1]

    @name.setter
    def name(self, name: str) -> None:
        self.ref = _local(name)

    def add_attribute(self, attribute: str) -> None:
        self.attributes.append(attribute)


def _local(name: str) -> str:
    return '%"' + name + '"'


class Block:
    """A basic block: its label and its instructions, as text."""

    __slots__ = ("function", "name", "lines", "terminated")

    def __init__(self, function: "Function", name: str) -> None:
        self.function, self.name = function, name
        self.lines: list[str] = []
        self.terminated = False

    @property
    def ref(self) -> str:
        return _local(self.name)


class Module:
    """Functions (definitions and declarations); ``str`` is the module's text."""

    def __init__(self, name: str = "") -> None:
        self.name, self.triple, self.data_layout = name, "", ""
        self.globals: dict[str, Function] = {}
        self._unique: dict[str, int] = {}

    def get_global(self, name: str) -> "Function":
        return self.globals[name]

    def get_unique_name(self, name: str) -> str:
        n = self._unique.get(name, 0)
        self._unique[name] = n + 1
        unique = name if n == 0 else f"{name}.{n}"
        return unique if unique not in self.globals else self.get_unique_name(name)

    def __str__(self) -> str:
        return self._text(list(self.globals.values()))

    def _text(self, functions: list["Function"]) -> str:
        head = [f'; ModuleID = "{self.name}"', f'target triple = "{self.triple}"',
                f'target datalayout = "{self.data_layout}"', ""]
        return "\n".join(head + [str(f) for f in functions]) + "\n"

    def detach(self, functions: Sequence["Function"]) -> str:
        """A module of text defining ``functions`` (exported: without internal linkage)
        and declaring what they use; here they become declarations. The pieces of a big
        kernel are compiled as such modules, in parallel (:mod:`.build`).

        >>> m = Module()
        >>> piece = Function(m, FunctionType(VoidType(), []), "piece")
        >>> piece.linkage = "internal"
        >>> IRBuilder(piece.append_basic_block("entry")).ret_void()
        >>> main = Function(m, FunctionType(VoidType(), []), "main")
        >>> b = IRBuilder(main.append_basic_block("entry"))
        >>> _ = b.call(piece, [])
        >>> b.ret_void()
        >>> text = m.detach([piece])
        >>> 'define void @"piece"()' in text, 'declare void @"piece"()' in str(m)
        (True, True)
        """
        names = {f.name for f in functions}
        used = {u.name: u for f in functions for u in f.uses.values() if u.name not in names}
        for u in used.values():
            if u.blocks:  # defined here, called from there
                u.linkage = ""
        text = "\n".join([self._text([]), *(u.declaration() for u in used.values()),
                          *(f.text(exported=True) for f in functions)])
        for f in functions:
            f.blocks = []
        return text


class Function(Value):
    """A function of a module: a declaration until a block is appended."""

    __slots__ = ("module", "name", "ftype", "args", "blocks", "linkage", "attributes",
                 "uses", "loops", "combine", "cold", "_names", "_next")

    def __init__(self, module: Module, ftype: FunctionType, name: str) -> None:
        super().__init__(ftype.as_pointer(), '@"' + name + '"')
        self.module, self.name, self.ftype = module, name, ftype
        self.args = [Argument(t, _local(f".{k}")) for k, t in enumerate(ftype.args)]
        self.blocks: list[Block] = []
        self.linkage, self.attributes = "", set()
        self.uses: dict[str, Function] = {}  # functions it calls or passes
        self.loops = False  # whether it holds a loop (the renderer says)
        # whether it holds code that InstCombine improves (the renderer says; trees as
        # code are rendered in the form it gives them: see llvm._s_BranchTree)
        self.combine = False
        self.cold = False  # whether it seldom runs (the renderer's ir.Cold blocks)
        self._names: dict[str, int] = {}
        self._next = len(self.args) - 1  # temporaries follow the arguments
        module.globals[name] = self

    @property
    def instructions(self) -> int:
        return sum(len(b.lines) for b in self.blocks)

    @property
    def is_declaration(self) -> bool:
        return not self.blocks

    def append_basic_block(self, name: str = "bb") -> Block:
        # Labels share the function's namespace with values: a leading "." and a letter
        # keep them apart from parameters (identifiers) and temporaries (".N").
        n = self._names.get(name, 0)
        self._names[name] = n + 1
        block = Block(self, f".{name}{n}")
        self.blocks.append(block)
        return block

    def temporary(self) -> str:
        """A new local name for an instruction's result."""
        self._next += 1
        return '%".' + str(self._next) + '"'

    def __str__(self) -> str:
        return self.text()

    def declaration(self) -> str:
        """Its declaration, with its parameters' attributes (a piece built in another
        module keeps telling its callers that it captures no pointer)."""
        args = ", ".join(" ".join([a.type.text, *a.attributes]) for a in self.args)
        return f"declare {self.ftype.return_type.text} {self.ref}({args})\n"

    def text(self, exported: bool = False) -> str:
        """The definition (``exported``: without internal linkage), or the declaration
        of a function without blocks."""
        if self.is_declaration:
            return self.declaration()
        ret = self.ftype.return_type.text
        args = ", ".join(" ".join([a.type.text, *a.attributes, a.ref]) for a in self.args)
        linkage = self.linkage + " " if self.linkage and not exported else ""
        attrs = "".join(" " + a for a in sorted(self.attributes))
        body = "\n".join(f"{b.name}:\n" + "\n".join(b.lines) for b in self.blocks)
        return f"define {linkage}{ret} {self.ref}({args}){attrs}\n{{\n{body}\n}}\n"


# ---- instructions ---------------------------------------------------------------------

_ICMP_SIGNED = {"<": "slt", "<=": "sle", ">": "sgt", ">=": "sge", "==": "eq", "!=": "ne"}
_ICMP_UNSIGNED = {"<": "ult", "<=": "ule", ">": "ugt", ">=": "uge", "==": "eq", "!=": "ne"}
_FCMP_ORDERED = {"<": "olt", "<=": "ole", ">": "ogt", ">=": "oge", "==": "oeq", "!=": "one"}
_FCMP_UNORDERED = {"<": "ult", "<=": "ule", ">": "ugt", ">=": "uge", "==": "ueq",
                   "!=": "une", "uno": "uno"}


_UNSET = object()


class Scopes:
    """Nested scopes over one dict: a key set in a scope is seen from the scopes inside
    it until its scope ends, which drops it (or gives back the value an outer scope set).
    A lookup is one dict access however deep the nesting (trees as code nest ~30 blocks,
    and a stack of dicts was searched scope by scope).

    >>> s = Scopes(); s.set("x", 1); s.push(); s.set("x", 2); s.set("y", 3)
    >>> s.get("x"), s.get("y")
    (2, 3)
    >>> s.pop(); s.get("x"), s.get("y")
    (1, None)
    """

    __slots__ = ("_map", "_undo")

    def __init__(self) -> None:
        self._map: dict = {}
        self._undo: list[list[tuple]] = [[]]

    def get(self, key: object) -> Any:
        return self._map.get(key)

    def set(self, key: object, value: object) -> None:
        self._undo[-1].append((key, self._map.get(key, _UNSET)))
        self._map[key] = value

    def push(self) -> None:
        self._undo.append([])

    def pop(self) -> None:
        for key, old in reversed(self._undo.pop()):
            if old is _UNSET:
                del self._map[key]
            else:
                self._map[key] = old


class IRBuilder:
    """Appends instructions at the end of one block at a time.

    ``known``, when set, maps the text of pure instructions to their values, in
    :class:`Scopes`: an instruction whose text is known is not emitted again (the
    renderer opens a scope per block of structured code, so a known value dominates
    where it is reused). Trees as code read the same row value and compute the same
    address at many nodes of a path: LLVM would merge them, after parsing and
    optimising each copy.
    """

    def __init__(self, block: Block, known: Scopes | None = None) -> None:
        self.known = known
        self.position_at_end(block)

    def position_at_end(self, block: Block) -> None:
        self.block, self.function, self._lines = block, block.function, block.lines

    def _value(self, type_: Type, text: str) -> Value:
        name = self.function.temporary()
        self._lines.append(f"  {name} = {text}")
        return Value(type_, name)

    def _pure(self, type_: Type, text: str) -> Value:
        """The value of a side-effect-free instruction: a known one, or a new one."""
        known = self.known
        if known is None:
            return self._value(type_, text)
        value = known.get(text)
        if value is None:
            value = self._value(type_, text)
            known.set(text, value)
        return value

    def _terminate(self, text: str) -> None:
        self._lines.append("  " + text)
        self.block.terminated = True

    # memory
    def alloca(self, type_: Type, name: str = "", align: int = 0) -> Value:
        at = f", align {align}" if align else ""
        return self._value(type_.as_pointer(), f"alloca {type_.text}{at}")

    def load(self, ptr: Value, invariant: bool = False) -> Value:
        """``*ptr``; ``invariant``: nothing writes there while the function runs."""
        pointee = ptr.type.pointee  # type: ignore[attr-defined]
        emit = self._pure if invariant else self._value
        return emit(pointee, f"load {pointee.text}, {ptr.type.text} {ptr.ref}")

    def pointer_to(self, ptr: Value, type_: Type) -> Value:
        """``ptr`` as a pointer to ``type_`` (a vector of its elements, say)."""
        if ptr.type.pointee == type_:  # type: ignore[attr-defined]
            return ptr
        return self.convert("bitcast", ptr, type_.as_pointer())

    def store(self, value: Value, ptr: Value, align: int = 0) -> None:
        ptr = self.pointer_to(ptr, value.type)
        at = f", align {align}" if align else ""
        self._lines.append(f"  store {value.type.text} {value.ref}, {ptr.type.text} "
                           f"{ptr.ref}{at}")

    def load_vector(self, ptr: Value, count: int, invariant: bool = False) -> Value:
        """``count`` consecutive elements from ``ptr`` as a vector, aligned as one
        element is."""
        element = ptr.type.pointee  # type: ignore[attr-defined]
        vty = VectorType(element, count)
        ptr = self.pointer_to(ptr, vty)
        emit = self._pure if invariant else self._value
        return emit(vty, f"load {vty.text}, {ptr.type.text} {ptr.ref}, "
                         f"align {_BYTES[element.text]}")

    def element(self, ptr: Value, index: int) -> Value:
        """``gep(ptr, [i64 index])`` for a constant ``index`` (a tree's thresholds)."""
        return self._element(ptr, f"i64 {index}")

    def _element(self, ptr: Value, index: str) -> Value:
        """The address of element ``index`` (its operand's text) of ``ptr``."""
        pointee = ptr.type.pointee  # type: ignore[attr-defined]
        return self._pure(pointee.as_pointer(), f"getelementptr {pointee.text}, "
                                                 f"{ptr.type.text} {ptr.ref}, {index}")

    def gep(self, ptr: Value, indices: Sequence[Value]) -> Value:
        pointee = ptr.type.pointee  # type: ignore[attr-defined]
        if len(indices) == 1 and not isinstance(indices[0].type, VectorType):
            i = indices[0]  # an element's address: most of them, so said first
            return self._element(ptr, f"{i.type.text} {i.ref}")
        result = pointee
        for index in indices[1:]:
            result = (result.elements[int(index.ref)] if isinstance(result, LiteralStructType)
                      else result.element)  # type: ignore[attr-defined]
        operands = ", ".join(f"{i.type.text} {i.ref}" for i in indices)
        lanes = [i.type.count for i in indices if isinstance(i.type, VectorType)]
        if lanes:  # one address per lane
            return self._pure(VectorType(result.as_pointer(), lanes[0]),
                              f"getelementptr {pointee.text}, {ptr.type.text} {ptr.ref}, "
                              f"{operands}")
        return self._pure(result.as_pointer(), f"getelementptr {pointee.text}, "
                                                f"{ptr.type.text} {ptr.ref}, {operands}")

    def atomic_rmw(self, op: str, ptr: Value, value: Value, ordering: str) -> Value:
        return self._value(value.type, f"atomicrmw {op} {ptr.type.text} {ptr.ref}, "
                                       f"{value.type.text} {value.ref} {ordering}")

    # arithmetic
    def binary(self, op: str, a: Value, b: Value) -> Value:
        """``op`` (an LLVM opcode: ``add``, ``fmul``, ``sdiv``, ...) on ``a`` and ``b``;
        ``a`` itself where ``b`` is an integer operation's identity (an index ``i * 1 +
        0``: the fast instruction selector emits them where InstCombine does not run)."""
        if isinstance(b, Constant) and b.ref == _IDENTITY.get(op):
            return a
        return self._pure(a.type, f"{op} {a.type.text} {a.ref}, {b.ref}")

    def not_(self, a: Value) -> Value:
        scalar = a.type.element if isinstance(a.type, VectorType) else a.type
        ones = Constant(scalar, -1 if scalar != _I1 else 1)
        return self.binary("xor", a, ones if scalar is a.type
                           else splat(ones, a.type.count))  # type: ignore[attr-defined]

    def _compare(self, kind: str, table: dict[str, str], op: str, a: Value,
                 b: Value) -> Value:
        result = VectorType(_I1, a.type.count) if isinstance(a.type, VectorType) else _I1
        return self._pure(result, f"{kind} {table[op]} {a.type.text} {a.ref}, {b.ref}")

    def icmp_signed(self, op: str, a: Value, b: Value) -> Value:
        return self._compare("icmp", _ICMP_SIGNED, op, a, b)

    def icmp_unsigned(self, op: str, a: Value, b: Value) -> Value:
        return self._compare("icmp", _ICMP_UNSIGNED, op, a, b)

    def fcmp_ordered(self, op: str, a: Value, b: Value) -> Value:
        return self._compare("fcmp", _FCMP_ORDERED, op, a, b)

    def fcmp_unordered(self, op: str, a: Value, b: Value) -> Value:
        return self._compare("fcmp", _FCMP_UNORDERED, op, a, b)

    def select(self, cond: Value, a: Value, b: Value) -> Value:
        """``a`` where ``cond`` else ``b``; ``a`` itself where both are the same value
        (two leaves of a tree with one value)."""
        if a.ref == b.ref:
            return a
        return self._pure(a.type, f"select {cond.type.text} {cond.ref}, {a.type.text} {a.ref}, "
                                  f"{b.type.text} {b.ref}")

    # conversions
    def convert(self, op: str, a: Value, to: Type) -> Value:
        """``a`` converted to ``to`` by ``op`` (``sext``, ``fptosi``, ``bitcast``, ...)."""
        return self._pure(to, f"{op} {a.type.text} {a.ref} to {to.text}")

    # vectors
    def extract(self, vector: Value, lane: int) -> Value:
        return self._pure(vector.type.element,  # type: ignore[attr-defined]
                          f"extractelement {vector.type.text} {vector.ref}, i32 {lane}")

    def insert(self, vector: Value, value: Value, lane: int) -> Value:
        return self._pure(vector.type, f"insertelement {vector.type.text} {vector.ref}, "
                                       f"{value.type.text} {value.ref}, i32 {lane}")

    def shuffle(self, a: Value, b: Value, lanes: Sequence[int]) -> Value:
        """The vector of lanes ``lanes`` of ``a`` and ``b`` concatenated (constant)."""
        vty = VectorType(a.type.element, len(lanes))  # type: ignore[attr-defined]
        mask = ", ".join(f"i32 {i}" for i in lanes)
        return self._pure(vty, f"shufflevector {a.type.text} {a.ref}, {b.type.text} "
                               f"{b.ref}, <{len(lanes)} x i32> <{mask}>")

    def broadcast(self, value: Value, count: int) -> Value:
        """A vector of ``count`` copies of ``value`` (insert, then shuffle lane 0)."""
        vty = VectorType(value.type, count)
        one = self._pure(vty, f"insertelement {vty.text} poison, {value.type.text} "
                              f"{value.ref}, i32 0")
        return self._pure(vty, f"shufflevector {vty.text} {one.ref}, {vty.text} poison, "
                               f"<{count} x i32> zeroinitializer")

    # calls and control flow
    def call(self, fn: Function, args: Sequence[Value], pure: bool = False) -> Value | None:
        """``fn(*args)``; ``pure``: it has no side effects (a math intrinsic), so a known
        call with the same arguments is reused."""
        uses = self.function.uses
        uses[fn.name] = fn
        for a in args:
            if isinstance(a, Function):
                uses[a.name] = a
        ret = fn.ftype.return_type
        text = f"call {ret.text} {fn.ref}({', '.join(f'{a.type.text} {a.ref}' for a in args)})"
        if isinstance(ret, VoidType):
            self._lines.append("  " + text)
            return None
        return (self._pure if pure else self._value)(ret, text)

    def branch(self, target: Block) -> None:
        self._terminate(f"br label {target.ref}")

    def cbranch(self, cond: Value, then: Block, orelse: Block) -> None:
        self._terminate(f"br i1 {cond.ref}, label {then.ref}, label {orelse.ref}")

    def switch(self, value: Value, default: Block, cases: Sequence[tuple[int, Block]]) -> None:
        """Jump to the block of the case equal to integer ``value``, else to ``default``."""
        ty = value.type.text
        table = " ".join(f"{ty} {case}, label {block.ref}" for case, block in cases)
        self._terminate(f"switch {ty} {value.ref}, label {default.ref} [{table}]")

    def ret_void(self) -> None:
        self._terminate("ret void")

    @contextmanager
    def if_else(self, cond: Value):  # type: ignore[no-untyped-def]
        """``with b.if_else(c) as (then, orelse):``, each arm a context of its own."""
        then, orelse, end = (self.function.append_basic_block(name)
                             for name in ("if", "else", "endif"))
        self.cbranch(cond, then, orelse)
        yield self._arm(then, end), self._arm(orelse, end)
        self.position_at_end(end)

    @contextmanager
    def _arm(self, block: Block, end: Block) -> Iterator[None]:
        self.position_at_end(block)
        if self.known is not None:
            self.known.push()  # what an arm computes does not dominate the other
        yield
        if self.known is not None:
            self.known.pop()
        if not self.block.terminated:
            self.branch(end)

