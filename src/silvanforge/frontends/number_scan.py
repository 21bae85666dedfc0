"""A native scanner for runs of decimal numbers, exact or silent.

numpy reads a list of numbers in text (``numpy.fromstring``) through Python's correctly
rounded ``dtoa``, ~150-180 ns a number here: half the load time of a 10,000-tree XGBoost
JSON model (36 million numbers). This scanner, compiled once a process with llvmlite,
reads a number in ~10-20 ns when the number can be read exactly the fast way (Clinger's
fast path): at most 18 significant digits with a value below 2**53, times or divided by
a power of ten up to 10**22. Both factors are then exact doubles, and one IEEE multiply
or divide rounds their exact product or quotient correctly, so the result is the double
``dtoa`` gives. XGBoost writes float32 values in their shortest form (9 digits at most)
and integers, which qualify at the magnitudes models hold (1e-13 to 1e21);
LightGBM's 17-digit doubles mostly do not.

The scanner answers for a whole list or not at all: any number outside the fast path,
any byte outside the grammar below, returns nothing, and the caller parses the list the
exact slow way (which also names what is wrong). Grammar: numbers ``-?D+(.D+)?([eE][-+]?D+)?``
(leading zeros allowed, as numpy reads them), separated by ``,`` with spaces, tabs or
line ends around it, or by exactly one space. It reads only inside the text and writes
only the ``cap`` slots it is given.

:func:`json_lists` runs the same reader over a whole JSON document in one pass
(``lists`` in the IR): it skips strings, finds each object member whose value is a list
of number characters, and reads the list into one buffer of values, so that a document
of 100,000 lists costs one native call per 8 MB instead of a Python call per list.

>>> scan("1,-2.5e3, 0", ",").tolist()
[1.0, -2500.0, 0.0]
>>> scan("0.1 3", " ").tolist()
[0.1, 3.0]
>>> scan("0.12345678901234567", ",") is None       # 17 digits: the exact slow way
True
"""

from __future__ import annotations

import ctypes
import functools
import threading
from typing import Any, Callable, Iterable

import llvmlite.binding as llvm
import numpy as np

from .. import cores

# Powers of ten that are exact doubles (5**22 < 2**53).
_EXACT_POWERS = 22
_SEPARATORS = {",": b",", " ": b" "}

# Typed pointers, as backends/cpu/llvmtext.py writes them: LLVM 15 (llvmlite 0.44) parses
# no other, later LLVMs read them as opaque ``ptr``.
_IR = r"""
@p10 = private unnamed_addr constant [23 x double] [POWERS]

define internal i32 @peek(i8* %s, i64 %len, i64* %i) alwaysinline {
  %at = load i64, i64* %i
  %in = icmp ult i64 %at, %len
  br i1 %in, label %read, label %end
read:
  %p = getelementptr i8, i8* %s, i64 %at
  %c = load i8, i8* %p
  %c32 = zext i8 %c to i32
  ret i32 %c32
end:
  ret i32 -1
}

define internal void @advance(i64* %i) alwaysinline {
  %at = load i64, i64* %i
  %next = add i64 %at, 1
  store i64 %next, i64* %i
  ret void
}

; One more mantissa digit: leading zeros are not significant.
define internal void @digit(i32 %d, i64* %m, i64* %sig) alwaysinline {
  %old = load i64, i64* %m
  %d64 = zext i32 %d to i64
  %zero = or i64 %old, %d64
  %lead = icmp eq i64 %zero, 0
  br i1 %lead, label %done, label %count
count:
  %t = mul i64 %old, 10
  %new = add i64 %t, %d64
  store i64 %new, i64* %m
  %k = load i64, i64* %sig
  %k1 = add i64 %k, 1
  store i64 %k1, i64* %sig
  br label %done
done:
  ret void
}

; The mantissa digits from %i on, into %m and %sig; returns how many there were.
define internal i64 @digit_run(i8* %s, i64 %len, i64* %i, i64* %m, i64* %sig) alwaysinline {
entry:
  br label %look
look:
  %n = phi i64 [ 0, %entry ], [ %n1, %one ]
  %c = call i32 @peek(i8* %s, i64 %len, i64* %i)
  %d = sub i32 %c, 48
  %isd = icmp ult i32 %d, 10
  br i1 %isd, label %one, label %done
one:
  call void @digit(i32 %d, i64* %m, i64* %sig)
  call void @advance(i64* %i)
  %n1 = add i64 %n, 1
  br label %look
done:
  ret i64 %n
}

; Skips blanks from %i on; returns the character after them (-1 at the end).
define internal i32 @after_blanks(i8* %s, i64 %len, i64* %i) alwaysinline {
entry:
  br label %look
look:
  %c = call i32 @peek(i8* %s, i64 %len, i64* %i)
  %b = call i1 @blank(i32 %c)
  br i1 %b, label %skip, label %done
skip:
  call void @advance(i64* %i)
  br label %look
done:
  ret i32 %c
}

define i64 @scan(i8* noalias %s, i64 %len, i64 %comma, double* noalias %out, i64 %cap) {
entry:
  %i = alloca i64
  %count = alloca i64
  %m = alloca i64
  %sig = alloca i64
  %frac = alloca i64
  %exp = alloca i64
  %edigits = alloca i64
  %neg = alloca i1
  %eneg = alloca i1
  store i64 0, i64* %i
  store i64 0, i64* %count
  br label %number

number:
  %c0 = load i64, i64* %count
  %full = icmp uge i64 %c0, %cap
  br i1 %full, label %fail, label %start
start:
  store i64 0, i64* %m
  store i64 0, i64* %sig
  store i64 0, i64* %frac
  store i64 0, i64* %exp
  store i64 0, i64* %edigits
  store i1 false, i1* %neg
  store i1 false, i1* %eneg
  %ch = call i32 @peek(i8* %s, i64 %len, i64* %i)
  %minus = icmp eq i32 %ch, 45
  br i1 %minus, label %negative, label %int
negative:
  store i1 true, i1* %neg
  call void @advance(i64* %i)
  br label %int

int:
  %nint = call i64 @digit_run(i8* %s, i64 %len, i64* %i, i64* %m, i64* %sig)
  %noint = icmp eq i64 %nint, 0
  br i1 %noint, label %fail, label %pointchar
pointchar:
  %cp = call i32 @peek(i8* %s, i64 %len, i64* %i)
  %isdot = icmp eq i32 %cp, 46
  br i1 %isdot, label %dot, label %exponent
dot:
  call void @advance(i64* %i)
  %nfrac = call i64 @digit_run(i8* %s, i64 %len, i64* %i, i64* %m, i64* %sig)
  store i64 %nfrac, i64* %frac
  %nofrac = icmp eq i64 %nfrac, 0
  br i1 %nofrac, label %fail, label %exponent

exponent:
  %ce = call i32 @peek(i8* %s, i64 %len, i64* %i)
  %lower = icmp eq i32 %ce, 101
  %upper = icmp eq i32 %ce, 69
  %ise = or i1 %lower, %upper
  br i1 %ise, label %esign, label %value
esign:
  call void @advance(i64* %i)
  %cs = call i32 @peek(i8* %s, i64 %len, i64* %i)
  %eminus = icmp eq i32 %cs, 45
  %eplus = icmp eq i32 %cs, 43
  store i1 %eminus, i1* %eneg
  %signed = or i1 %eminus, %eplus
  br i1 %signed, label %eskip, label %edigit
eskip:
  call void @advance(i64* %i)
  br label %edigit
edigit:
  %cd = call i32 @peek(i8* %s, i64 %len, i64* %i)
  %dd = sub i32 %cd, 48
  %isdd = icmp ult i32 %dd, 10
  br i1 %isdd, label %eone, label %eend
eone:
  %e = load i64, i64* %exp
  %e10 = mul i64 %e, 10
  %dd64 = zext i32 %dd to i64
  %enew = add i64 %e10, %dd64
  ; saturate: any exponent past this is outside the fast path (or makes zero of zero)
  %ebig = icmp ugt i64 %enew, 100000
  %ekeep = select i1 %ebig, i64 100000, i64 %enew
  store i64 %ekeep, i64* %exp
  %ed = load i64, i64* %edigits
  %ed1 = add i64 %ed, 1
  store i64 %ed1, i64* %edigits
  call void @advance(i64* %i)
  br label %edigit
eend:
  %edn = load i64, i64* %edigits
  %noe = icmp eq i64 %edn, 0
  br i1 %noe, label %fail, label %value

value:
  %mv = load i64, i64* %m
  %iszero = icmp eq i64 %mv, 0
  br i1 %iszero, label %zero, label %nonzero
zero:
  br label %signs
nonzero:
  %sv = load i64, i64* %sig
  %shortm = icmp ule i64 %sv, 18
  %smallm = icmp ule i64 %mv, 9007199254740992
  %exactm = and i1 %shortm, %smallm
  br i1 %exactm, label %scale, label %fail
scale:
  %ev = load i64, i64* %exp
  %en = load i1, i1* %eneg
  %evneg = sub i64 0, %ev
  %es = select i1 %en, i64 %evneg, i64 %ev
  %fv = load i64, i64* %frac
  %power = sub i64 %es, %fv
  %md = uitofp i64 %mv to double
  %up = icmp sge i64 %power, 0
  br i1 %up, label %times, label %divide
times:
  %upok = icmp sle i64 %power, POWER_MAX
  br i1 %upok, label %timesok, label %fail
timesok:
  %tp = getelementptr [23 x double], [23 x double]* @p10, i64 0, i64 %power
  %tv = load double, double* %tp
  %prod = fmul double %md, %tv
  br label %signs
divide:
  %down = sub i64 0, %power
  %downok = icmp sle i64 %down, POWER_MAX
  br i1 %downok, label %divideok, label %fail
divideok:
  %dp = getelementptr [23 x double], [23 x double]* @p10, i64 0, i64 %down
  %dv = load double, double* %dp
  %quot = fdiv double %md, %dv
  br label %signs

signs:
  %abs = phi double [ 0.0, %zero ], [ %prod, %timesok ], [ %quot, %divideok ]
  %nv = load i1, i1* %neg
  %minusv = fneg double %abs
  %v = select i1 %nv, double %minusv, double %abs
  %k = load i64, i64* %count
  %slot = getelementptr double, double* %out, i64 %k
  store double %v, double* %slot
  %k1 = add i64 %k, 1
  store i64 %k1, i64* %count
  %cn = call i32 @peek(i8* %s, i64 %len, i64* %i)
  %end = icmp eq i32 %cn, -1
  br i1 %end, label %done, label %separator
separator:
  %bycomma = icmp ne i64 %comma, 0
  br i1 %bycomma, label %before, label %space
space:
  %issp = icmp eq i32 %cn, 32
  br i1 %issp, label %spaced, label %fail
spaced:
  call void @advance(i64* %i)
  br label %number
before:
  %cb = call i32 @after_blanks(i8* %s, i64 %len, i64* %i)
  %iscomma = icmp eq i32 %cb, 44
  br i1 %iscomma, label %aftercomma, label %fail
aftercomma:
  call void @advance(i64* %i)
  %ca = call i32 @after_blanks(i8* %s, i64 %len, i64* %i)
  br label %number

done:
  %total = load i64, i64* %count
  ret i64 %total
fail:
  ret i64 -1
}

; JSON text from state[0] on, until %stop (checked between tokens) or its end: each
; object member's value that is a list of number characters becomes a span of %spans,
; 6 words: the colon's index, the index after the ']', where its values start in
; %out, how many (-1: the fast path did not read them all; -2: its member's name is
; one of %skip's, so it was not read), and the list's inside [from, to) without
; blanks. state[1], state[2]: values and spans used; state[3], state[4]: where the
; last string's text starts and ends (a member's name, at its colon). %skip: names,
; each a length byte then its bytes, ended by a 0 byte. Returns -1 when %out or
; %spans are full, state[0] at that list's colon, so that a call with more room
; goes on from there.
define i64 @lists(i8* noalias %s, i64 %len, i64 %stop, double* noalias %out, i64 %cap,
                  i64* noalias %spans, i64 %maxspans, i64* noalias %state,
                  i8* noalias %skip) {
entry:
  %i = alloca i64
  %j = alloca i64
  %ks = alloca i64
  %ke = alloca i64
  %p0 = load i64, i64* %state
  store i64 %p0, i64* %i
  %ksp = getelementptr i64, i64* %state, i64 3
  %kep = getelementptr i64, i64* %state, i64 4
  %ks0 = load i64, i64* %ksp
  store i64 %ks0, i64* %ks
  %ke0 = load i64, i64* %kep
  store i64 %ke0, i64* %ke
  br label %top
top:
  %at = load i64, i64* %i
  %past = icmp uge i64 %at, %stop
  br i1 %past, label %pause, label %char
char:
  %c = call i32 @peek(i8* %s, i64 %len, i64* %i)
  %eof = icmp eq i32 %c, -1
  br i1 %eof, label %pause, label %what
what:
  call void @advance(i64* %i)
  %isq = icmp eq i32 %c, 34
  br i1 %isq, label %strstart, label %notq
strstart:
  %sfrom = load i64, i64* %i
  store i64 %sfrom, i64* %ks
  br label %instr
notq:
  %isc = icmp eq i32 %c, 58
  br i1 %isc, label %colon, label %top

instr:
  %sc = call i32 @peek(i8* %s, i64 %len, i64* %i)
  %send = icmp eq i32 %sc, -1
  br i1 %send, label %pause, label %sch
sch:
  call void @advance(i64* %i)
  %sq = icmp eq i32 %sc, 34
  br i1 %sq, label %strend, label %sesc
strend:
  %safter = load i64, i64* %i
  %sto = sub i64 %safter, 1
  store i64 %sto, i64* %ke
  br label %top
sesc:
  %sb = icmp eq i32 %sc, 92
  br i1 %sb, label %skipone, label %instr
skipone:
  call void @advance(i64* %i)
  br label %instr

colon:
  %cb = call i32 @after_blanks(i8* %s, i64 %len, i64* %i)
  %isb = icmp eq i32 %cb, 91
  br i1 %isb, label %open, label %top
open:
  call void @advance(i64* %i)
  %bstart = load i64, i64* %i
  br label %body
body:
  %commas = phi i64 [ 0, %open ], [ %commas1, %bnext ]
  %bc = call i32 @peek(i8* %s, i64 %len, i64* %i)
  %bclose = icmp eq i32 %bc, 93
  br i1 %bclose, label %close, label %bchar
bchar:
  %d = sub i32 %bc, 48
  %isdig = icmp ult i32 %d, 10
  %ism = icmp eq i32 %bc, 45
  %isp = icmp eq i32 %bc, 43
  %isdot = icmp eq i32 %bc, 46
  %ise = icmp eq i32 %bc, 101
  %isE = icmp eq i32 %bc, 69
  %iscomma = icmp eq i32 %bc, 44
  %isblank = call i1 @blank(i32 %bc)
  %o1 = or i1 %isdig, %ism
  %o2 = or i1 %isp, %isdot
  %o3 = or i1 %ise, %isE
  %o4 = or i1 %iscomma, %isblank
  %o5 = or i1 %o1, %o2
  %o6 = or i1 %o3, %o4
  %inlist = or i1 %o5, %o6
  br i1 %inlist, label %bnext, label %top
bnext:
  %ci = zext i1 %iscomma to i64
  %commas1 = add i64 %commas, %ci
  call void @advance(i64* %i)
  br label %body
close:
  %bend = load i64, i64* %i
  call void @advance(i64* %i)
  %empty = icmp eq i64 %bend, %bstart
  br i1 %empty, label %top, label %lstrip
lstrip:
  ; the inside's first blank-free byte: the blanks skipped as within a list, the
  ; inside's end taken for the text's
  store i64 %bstart, i64* %j
  %lc = call i32 @after_blanks(i8* %s, i64 %bend, i64* %j)
  %from = load i64, i64* %j
  br label %rlook
rlook:
  %r = phi i64 [ %bend, %lstrip ], [ %r1, %rskip ]
  %rin = icmp ugt i64 %r, %from
  br i1 %rin, label %rchar, label %record
rchar:
  %r1 = sub i64 %r, 1
  %rp = getelementptr i8, i8* %s, i64 %r1
  %rc = load i8, i8* %rp
  %rc32 = zext i8 %rc to i32
  %rb = call i1 @blank(i32 %rc32)
  br i1 %rb, label %rskip, label %record
rskip:
  br label %rlook
record:
  %to = phi i64 [ %r, %rlook ], [ %r, %rchar ]
  %usedp = getelementptr i64, i64* %state, i64 1
  %used = load i64, i64* %usedp
  %nsp = getelementptr i64, i64* %state, i64 2
  %nspan = load i64, i64* %nsp
  %need = add i64 %commas, 1
  %room = sub i64 %cap, %used
  %fits = icmp ule i64 %need, %room
  %spanroom = icmp ult i64 %nspan, %maxspans
  %canrecord = and i1 %fits, %spanroom
  br i1 %canrecord, label %named, label %full
named:
  %kfrom = load i64, i64* %ks
  %kto = load i64, i64* %ke
  %skipped = call i1 @named(i8* %s, i64 %kfrom, i64 %kto, i8* %skip)
  br i1 %skipped, label %written, label %read
read:
  %body0 = getelementptr i8, i8* %s, i64 %from
  %blen = sub i64 %to, %from
  %dest = getelementptr double, double* %out, i64 %used
  %got = call i64 @scan(i8* %body0, i64 %blen, i64 1, double* %dest, i64 %need)
  %all = icmp eq i64 %got, %need
  %readcount = select i1 %all, i64 %need, i64 -1
  %readtaken = select i1 %all, i64 %need, i64 0
  br label %written
written:
  %count = phi i64 [ -2, %named ], [ %readcount, %read ]
  %taken = phi i64 [ 0, %named ], [ %readtaken, %read ]
  %base = mul i64 %nspan, 6
  %w0 = getelementptr i64, i64* %spans, i64 %base
  store i64 %at, i64* %w0
  %b1 = add i64 %base, 1
  %w1 = getelementptr i64, i64* %spans, i64 %b1
  %after = load i64, i64* %i
  store i64 %after, i64* %w1
  %b2 = add i64 %base, 2
  %w2 = getelementptr i64, i64* %spans, i64 %b2
  store i64 %used, i64* %w2
  %b3 = add i64 %base, 3
  %w3 = getelementptr i64, i64* %spans, i64 %b3
  store i64 %count, i64* %w3
  %b4 = add i64 %base, 4
  %w4 = getelementptr i64, i64* %spans, i64 %b4
  store i64 %from, i64* %w4
  %b5 = add i64 %base, 5
  %w5 = getelementptr i64, i64* %spans, i64 %b5
  store i64 %to, i64* %w5
  %used1 = add i64 %used, %taken
  store i64 %used1, i64* %usedp
  %nspan1 = add i64 %nspan, 1
  store i64 %nspan1, i64* %nsp
  br label %top

pause:
  %pos = load i64, i64* %i
  br label %save
full:
  br label %save
save:
  ; where the next call goes on (a full list: its colon), and the last string's bounds
  %resume = phi i64 [ %pos, %pause ], [ %at, %full ]
  %answer = phi i64 [ 0, %pause ], [ -1, %full ]
  store i64 %resume, i64* %state
  %kssave = load i64, i64* %ks
  store i64 %kssave, i64* %ksp
  %kesave = load i64, i64* %ke
  store i64 %kesave, i64* %kep
  ret i64 %answer
}

; Whether s[%from:%to] is one of the names in %names (each a length byte then its
; bytes, ended by a 0 byte).
define internal i1 @named(i8* %s, i64 %from, i64 %to, i8* %names) {
entry:
  %want = sub i64 %to, %from
  br label %name
name:
  %at = phi i64 [ 0, %entry ], [ %next, %other ]
  %lp = getelementptr i8, i8* %names, i64 %at
  %l8 = load i8, i8* %lp
  %l = zext i8 %l8 to i64
  %last = icmp eq i64 %l, 0
  br i1 %last, label %no, label %length
length:
  %first = add i64 %at, 1
  %next = add i64 %first, %l
  %same = icmp eq i64 %l, %want
  br i1 %same, label %bytes, label %other
bytes:
  %k = phi i64 [ 0, %length ], [ %k1, %match ]
  %done = icmp eq i64 %k, %l
  br i1 %done, label %yes, label %byte
byte:
  %sk = add i64 %from, %k
  %ap = getelementptr i8, i8* %s, i64 %sk
  %a = load i8, i8* %ap
  %nk = add i64 %first, %k
  %bp = getelementptr i8, i8* %names, i64 %nk
  %b = load i8, i8* %bp
  %eq = icmp eq i8 %a, %b
  br i1 %eq, label %match, label %other
match:
  %k1 = add i64 %k, 1
  br label %bytes
other:
  br label %name
yes:
  ret i1 true
no:
  ret i1 false
}

define internal i1 @blank(i32 %c) alwaysinline {
  %sp = icmp eq i32 %c, 32
  %tab = icmp eq i32 %c, 9
  %lf = icmp eq i32 %c, 10
  %cr = icmp eq i32 %c, 13
  %a = or i1 %sp, %tab
  %b = or i1 %lf, %cr
  %r = or i1 %a, %b
  ret i1 %r
}
"""


# Held while the scanner is built: two threads' first loads built one each, and the
# engine of the one not cached was freed under the other's running code (a crash).
_SCANNER_LOCK = threading.Lock()


def _scanner() -> tuple[Any, Any, Any]:
    """The compiled ``scan`` and ``lists`` (and the engine owning their code), built on
    first use, once."""
    with _SCANNER_LOCK:
        return _build_scanner()


@functools.cache
def _build_scanner() -> tuple[Any, Any, Any]:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    powers = ", ".join(f"double 1.0e{k}" for k in range(_EXACT_POWERS + 1))
    text = _IR.replace("POWERS", powers).replace("POWER_MAX", str(_EXACT_POWERS))
    machine = llvm.Target.from_triple(llvm.get_process_triple()).create_target_machine(
        opt=2, jit=True)
    module = llvm.parse_assembly(text)
    module.verify()
    passes = llvm.create_pass_builder(machine, llvm.create_pipeline_tuning_options(
        speed_level=2))
    passes.getModulePassManager().run(module, passes)
    engine = llvm.create_mcjit_compiler(module, machine)
    engine.finalize_object()
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    scan_kind = ctypes.CFUNCTYPE(i64, ctypes.c_char_p, i64, i64, ptr, i64)
    lists_kind = ctypes.CFUNCTYPE(i64, ctypes.c_char_p, i64, i64, ptr, i64, ptr, i64, ptr,
                                  ctypes.c_char_p)
    return (scan_kind(engine.get_function_address("scan")),
            lists_kind(engine.get_function_address("lists")), engine)


# Model files from this size on have the scanner built while they are read (prepare):
# building it takes ~0.07 s, reading a 185 MB file ~0.12 s.
PREPARE_BYTES = 1 << 22


def prepare() -> threading.Thread | None:
    """Build the scanner in a thread of its own, if not built yet (LLVM's work and a
    file's read both run without the GIL): the thread, for the caller to join before it
    returns (no thread of a load outlives it: a fork meanwhile would copy the scanner's
    lock held)."""
    if _build_scanner.cache_info().currsize:
        return None
    thread = threading.Thread(target=_scanner, daemon=True)
    thread.start()
    return thread


def scan(text: str, sep: str) -> np.ndarray | None:
    """float64 values of ``text`` (numbers separated by ``sep``, "," or " ", no
    leading or trailing blanks) when every number is read exactly the fast way, else
    None (see the module's docstring)."""
    try:
        data = text.encode("ascii")
    except UnicodeEncodeError:
        return None
    cap = data.count(_SEPARATORS[sep]) + 1
    out = np.empty(cap)
    function = _scanner()[0]
    read = function(data, len(data), sep == ",", out.ctypes.data, cap)
    return out if read == cap else None


# A span's count for a list of a member named in ``skip`` (:func:`json_lists`).
SKIPPED = -2
# Bytes of JSON text ``json_lists`` reads a call (a progress step: ~40 ms here).
_CHUNK = 1 << 23


def json_lists(data: bytes, step: Callable[[int], None] = lambda n: None,
               skip: Iterable[str] = ()) -> tuple[np.ndarray, np.ndarray]:
    """The lists of numbers that are object members' values in JSON ``data``, read in
    one pass that skips strings: ``(values, spans)``, a span a list, a row of 6: the
    index of its member's ``:``, the index after its ``]``, where its values start in
    ``values`` and how many (-1: a number outside the fast path, or blanks alone: the
    caller reads ``data[from:to]`` the exact way; -2: a member named in ``skip``, whose
    numbers are not read), and ``from, to``, the list's inside without blanks. A list
    with anything else in it (other tokens, other blanks) is left out, for
    ``json.loads``. ``step(n)`` is told of every ``n`` bytes read.

    >>> values, spans = json_lists(b'{"a": [1, 2.5], "b": "[3]", "c": [[1]]}')
    >>> values.tolist(), spans.tolist()
    ([1.0, 2.5], [[4, 14, 0, 2, 7, 13]])
    >>> json_lists(b'{"a": [1, 2.5], "b": [3]}', skip=["a"])[1][:, 3].tolist()
    [-2, 1]
    """
    parts = json_list_parts(data, step, skip)
    if len(parts) == 1:
        return parts[0]
    (first, head), (second, tail) = parts
    tail = tail.copy()
    tail[:, 2] += len(first)
    return np.concatenate([first, second]), np.concatenate([head, tail])


def json_list_parts(data: bytes, step: Callable[[int], None] = lambda n: None,
                    skip: Iterable[str] = ()) -> list[tuple[np.ndarray, np.ndarray]]:
    """:func:`json_lists`' answer in parts: ``(values, spans)`` of consecutive stretches
    of ``data``, each span's values in its own part's. A document of at least
    :data:`PARALLEL_BYTES` is read in two halves at once where two cores are free
    (0.43 -> 0.25 s for a 185 MB model; docs/ARCHITECTURE.md "Loading big models"): the
    second half starts at a member's name after a list (``], "``), and is kept only if
    the first half's pass, stopped there, stops exactly there; else (the bytes were
    inside a string) the first pass reads on alone."""
    names = _names(skip)
    split = _split_point(data) if len(data) >= PARALLEL_BYTES and cores.usable() > 1 \
        else None
    if split is None:
        first = _Pass(data, names, 0, len(data) // 8)
        first.read(len(data), step)
        return [first.answer()]
    first = _Pass(data, names, 0, split // 8)
    second = _Pass(data, names, split, (len(data) - split) // 8)
    helper = threading.Thread(target=second.read_apart, args=(len(data),), daemon=True)
    helper.start()
    try:
        first.read(split, step)
    finally:
        helper.join()
    if first.at() == split:
        if second.error is not None:
            raise second.error
        step(len(data) - split)
        return [first.answer(), second.answer()]
    first.read(len(data), step)
    return [first.answer()]


# Documents from this size on are read in two halves at once (json_list_parts).
PARALLEL_BYTES = 1 << 24


def _split_point(data: bytes) -> int | None:
    """Where the second half of ``data`` starts: the quote of a member's name after a
    list, from the middle on (``],"`` or with blanks after the comma), if one of the
    first few looks so."""
    at = len(data) // 2
    for _ in range(64):
        at = data.find(b"],", at)
        if at < 0:
            return None
        at += 2
        name = len(data[at:at + 64]) - len(data[at:at + 64].lstrip())
        if data[at + name:at + name + 1] == b'"':
            return at + name
    return None


class _Pass:
    """The scanner's pass over a stretch of a document, from ``start``, its buffers
    grown as needed: first room for ``room`` values and a list every 1 KiB (counting
    them first took a pass of its own, 0.17 s of a 185 MB model's load; pages not
    written are never touched)."""

    def __init__(self, data: bytes, names: bytes, start: int, room: int) -> None:
        self.data, self.names = data, names
        self.values = np.empty(room + 16)
        self.spans = np.empty((room // 128 + 16, 6), dtype=np.int64)
        # position, values used, spans used, the last string's start and end
        self.state = np.zeros(5, dtype=np.int64)
        self.state[0] = start
        self.error: BaseException | None = None  # of read_apart

    def read(self, stop: int, step: Callable[[int], None] = lambda n: None) -> None:
        """Read on until the first token boundary at ``stop`` or after it."""
        function = _scanner()[1]
        data, state = self.data, self.state
        while state[0] < stop:
            before = int(state[0])
            if function(data, len(data), min(before + _CHUNK, stop), self.values.ctypes.data,
                        len(self.values), self.spans.ctypes.data, len(self.spans),
                        state.ctypes.data, self.names) < 0:
                if state[2] == len(self.spans):
                    self.spans = _grown(self.spans, int(state[2]))
                else:  # the list's values did not fit: again, if twice the room is short
                    self.values = _grown(self.values, int(state[1]))
            step(int(state[0]) - before)

    def read_apart(self, stop: int) -> None:
        """:meth:`read`, in a thread of its own: what it raises is kept in ``error``."""
        try:
            self.read(stop)
        except BaseException as exc:  # noqa: BLE001 - raised by the caller
            self.error = exc

    def at(self) -> int:
        return int(self.state[0])

    def answer(self) -> tuple[np.ndarray, np.ndarray]:
        return self.values[:self.state[1]], self.spans[:self.state[2]]


def _names(skip: Iterable[str]) -> bytes:
    """Member names as the scanner takes them: each a length byte then its bytes, then
    a 0 byte."""
    table = b""
    for name in skip:
        raw = name.encode()
        if not 0 < len(raw) < 256:
            raise ValueError(f"a name to skip must take 1 to 255 bytes: {name!r}")
        table += bytes([len(raw)]) + raw
    return table + b"\0"


def _grown(buffer: np.ndarray, used: int) -> np.ndarray:
    """``buffer``'s first ``used`` rows in a buffer twice as long."""
    bigger = np.empty((2 * len(buffer),) + buffer.shape[1:], dtype=buffer.dtype)
    bigger[:used] = buffer[:used]
    return bigger
