"""A plan's kernels as an ahead-of-time shared library with a C header (docs/DEPLOY.md).

One LLVM module holds everything the library runs: the plan's kernels (the main one and
the small-batch one, rendered as :func:`~silvanforge.backends.cpu.render_kernel` renders
them for the JIT, renamed and made internal), the model buffers as constant globals
(what the in-process entry binds as addresses), and the C functions of the header,
generated here as LLVM IR too, so no C compiler is needed to produce ``NAME.o``. A C
function does what :meth:`Predictor.predict <silvanforge.Predictor.predict>` does: it
converts the rows to the model's input dtype (a ``malloc``'d copy when they differ, but
float64 rows of a big call for a main kernel that rounds them in its row copy),
zeroes ``out``, picks the small-batch kernel for small calls, sizes the threads to the
rows, allocates the privatized buffers with ``calloc`` (per call: every function is
re-entrant), and the kernel finishes the rows itself (:mod:`silvanforge.lir.finish`).
Forests whose post-transform the kernel lacks are refused.

The module is built as one position-independent object file (no parallel split) and
linked with the system C compiler when one is found and the triple is this machine's;
else the object file and the header are written with the command that links them.

Outputs: :data:`ENTRIES` lists the C functions a library exports, one per output and
input dtype. An output the predict kernel finishes (a :mod:`~silvanforge.lir.finish`
mode) is one line there; an output with kernels of its own is a :class:`Kernels` set
of its own in the module (the leaf output: the leaf plan's kernels, ``NAME.leaf_*``),
with its entries here and its columns in :func:`metadata`; the contributions output
is another (the TreeSHAP kernel of :mod:`silvanforge.representations.contribs` and its
tables, ``NAME.contribs_*``).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Collection, Sequence

import llvmlite.binding as llvm
import numpy as np

from ..backends.cpu import Target, render_kernel
from ..backends.cpu import build
from ..backends.cpu.freevars import walk_stmts
from ..backends.cpu.llvm import llvm_type
from ..errors import BackendError, InputError, UnsupportedModelError
from ..lir import finish as kernel_finish, ir, lower as lir_lower
from ..lir.lower import takes_float64_rows
from ..model import leaf_ids
from ..model.cover import require_contributions
from ..model.forest import Forest
from ..plan import Plan
from ..plan.plan import MAX_JOBS, checked_jobs
from ..representations import REGISTRY
from ..representations import contribs
from ..representations.pair import lower_schedules
from ..version import __version__

# The metadata's layout; the loader refuses others (silvanforge.export.loader).
FORMAT_VERSION = 1
# Return codes of the C functions.
OK, INVALID_ARGUMENT, OUT_OF_MEMORY = 0, 1, 2
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_INPUT_TYPES = {np.dtype(np.float32): ("float", 4), np.dtype(np.float64): ("double", 8)}
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Entry:
    """One C function ``int NAME_<suffix>(const <input> *rows, int64_t n_rows,
    <out> *out)`` computing ``output``: "value" and "margin" (float64, from the predict
    kernels), "leaf" (int32 leaf ids, from the leaf kernels) and "contribs" (float64
    SHAP values, from the contributions kernel), these two when exported."""

    suffix: str
    output: str
    input: np.dtype
    doc: str

    @property
    def out_type(self) -> str:
        return "int32_t" if self.output == "leaf" else "double"


ENTRIES = (
    Entry("predict", "value", np.dtype(np.float64), "the library's value"),
    Entry("predict_margin", "margin", np.dtype(np.float64), "the margin"),
    Entry("predict_f32", "value", np.dtype(np.float32), "the value, from float32 rows"),
    Entry("predict_leaf", "leaf", np.dtype(np.float64),
          "the leaf each row reaches in each tree (model order), numbered as the library "
          "numbers it: n_rows x N_TREES ids"),
    Entry("predict_contribs", "contribs", np.dtype(np.float64),
          "SHAP contributions: n_rows x N_OUTPUTS x (N_FEATURES + 1) values (the "
          "features', then the expected value)"),
    Entry("predict_contribs_f32", "contribs", np.dtype(np.float32),
          "the contributions, from float32 rows"),
)
# The outputs an exported library has only when asked for (each with kernels of its own).
OPTIONAL_OUTPUTS = ("leaf", "contribs")


@dataclass(frozen=True)
class Kernels:
    """A plan with what its kernels read: its representation and model buffers
    (``runtime.base``), and its (MIR, LIR) kernels when already lowered (else lowered
    here). A library holds one for the predict kernels, one for the leaf output's and
    one for the contributions' (:func:`contribution_kernels`)."""

    plan: Plan
    representation: Any
    arrays: Sequence[np.ndarray]
    lowered: Sequence[tuple[Any, ir.Kernel]] | None = None

    def kernels(self) -> Sequence[tuple[Any, ir.Kernel]]:
        """The (MIR, LIR) kernels of the plan's schedules (main, then small-batch)."""
        if self.lowered is not None:
            return self.lowered
        return lower_schedules(self.plan.forest, self.plan.schedules, self.representation,
                               self.plan.vector_lanes)


def contribution_kernels(plan: Plan) -> Kernels:
    """The contributions output's kernel for ``plan``'s forest, with its tables and
    model buffers; ContributionsError for a forest without SHAP contributions (no covers,
    linear leaves).

    >>> write_library(predict, "out", contribs=contribution_kernels(plan))  # doctest: +SKIP
    """
    require_contributions(plan.forest)
    tables, arrays, lir = contribs.build(plan.forest)
    return Kernels(plan, tables, list(arrays.values()), [(None, lir)])


@dataclass(frozen=True)
class Exported:
    """What :func:`write_library` wrote: the header, and the library (None when it could
    not be linked here) or else the object file and the command that links it."""

    header: Path
    library: Path | None
    object: Path | None
    link_command: str
    target: Target

    def __str__(self) -> str:
        if self.library is not None:
            return f"wrote {self.library} and {self.header} ({self.target.triple}, " \
                   f"CPU {self.target.cpu})"
        return (f"wrote {self.object} and {self.header} ({self.target.triple}, CPU "
                f"{self.target.cpu}); link them with: {self.link_command}")


def check_name(name: str) -> str:
    """``name`` when it is a C identifier (the prefix of every symbol), else InputError.

    >>> check_name("higgs")
    'higgs'
    """
    if not isinstance(name, str) or not _NAME.match(name):
        raise InputError(f"the library's name must be a C identifier (letters, digits, "
                         f"_; not first a digit), not {name!r}")
    return name


def name_of(path: str | os.PathLike) -> str:
    """A library name from a model's file name: its stem up to the first dot, as a C
    identifier.

    >>> name_of("models/nyc_taxi.lgb.txt"), name_of("2-class.json")
    ('nyc_taxi', '_2_class')
    """
    stem = re.sub(r"\W", "_", Path(path).name.split(".")[0]) or "model"
    return "_" + stem if stem[0].isdigit() else stem


def write_library(predict: Kernels, directory: str | os.PathLike, name: str = "model",
                  target: Target | None = None, threads: int = 0,
                  leaf: Kernels | None = None, contribs: Kernels | None = None) -> Exported:
    """Write ``directory/libNAME.so`` and ``directory/NAME.h`` for the plan of
    ``predict`` (see the module docstring), built for ``target`` (default: the plan's
    CPU on this machine); with ``leaf`` (the plan's ``leaf_plan()``), the leaf output's
    ``NAME_predict_leaf`` too; with ``contribs`` (:func:`contribution_kernels`),
    ``NAME_predict_contribs`` and ``NAME_predict_contribs_f32``. ``threads``: the
    threads a call uses until ``NAME_set_num_threads`` (0: the OpenMP runtime's
    default).

    >>> write_library(Kernels(plan, rep, arrays), "out", "higgs")  # doctest: +SKIP
    """
    name = check_name(name)
    plan = predict.plan
    forest = plan.forest
    if plan.target != "cpu":
        raise InputError(f"a library runs on the CPU; the plan is for {plan.target!r}")
    modes = kernel_finish.modes(forest)
    if modes["value"] == kernel_finish.SCORE:
        raise UnsupportedModelError(
            f"the forest's post-transform {forest.post_transform!r} is applied by numpy, "
            "not by the kernel: an exported library cannot compute it (use the "
            "Predictor, or export a model with another objective)")
    target = target or Target.named(plan.cpu or "native")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    header = directory / f"{name}.h"
    threads = checked_jobs(threads, "threads") if threads else 0
    swap = _big_endian(target.triple) == np.little_endian  # globals in its byte order
    sets = [_Set.of(tag, k, name, swap) for tag, k in (
        ("", predict), ("leaf_", leaf), ("contribs_", contribs)) if k is not None]
    extra = [s.tag[:-1] for s in sets[1:]]
    text = _module_text(sets, name, target, threads)
    try:
        layout = REGISTRY[plan.representation]
        obj, _ = build.build(text, target.triple, target.cpu, target.features,
                             layout.llvm_opt, pic=True, keep_ir=False,
                             fast_isel=layout.llvm_fast_isel)
    except build.BuildError as exc:
        raise BackendError(f"library {name}: invalid LLVM IR: {exc}") from None
    header.write_text(header_text(forest, name, target, threads, extra))
    library = directory / f"lib{name}.so"
    foreign = _foreign(target.triple)
    cc = None if foreign else compiler()
    if cc is None:
        path = directory / f"{name}.o"
        path.write_bytes(obj)
        prefix = f"{target.triple}-gcc" if foreign else "cc"
        return Exported(header, None, path, link_command(prefix, library, path, obj), target)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{name}.o"
        path.write_bytes(obj)
        command = link_command(cc, library, path, obj)
        done = subprocess.run(shlex.split(command), capture_output=True, text=True)
    if done.returncode != 0:
        kept = directory / f"{name}.o"
        kept.write_bytes(obj)
        raise BackendError(f"linking {library} failed: {done.stderr.strip()[-2000:]} (wrote "
                           f"{kept} and {header}; link them with: "
                           f"{link_command(cc, library, kept, obj)})")
    log.info("exported %s (%d bytes of object code)", library, len(obj))
    return Exported(header, library, None, command, target)


def link_command(cc: str, library: Path, obj_path: Path, obj: bytes) -> str:
    """The shell command linking ``obj`` (written at ``obj_path``) into ``library`` with
    the C compiler ``cc``: OpenMP's runtime only when the code calls it.

    >>> link_command("cc", Path("out/libm1.so"), Path("m1.o"), b"")
    'cc -shared -o out/libm1.so -Wl,-soname,libm1.so m1.o -lm'
    """
    openmp = ["-fopenmp"] if b"GOMP_parallel" in obj else []
    return shlex.join([*shlex.split(cc), "-shared", "-o", str(library),
                       f"-Wl,-soname,{library.name}", str(obj_path), *openmp, "-lm"])


def _foreign(triple: str) -> bool:
    """Whether ``triple`` names another architecture or system than this machine's
    (then the object file is not linked here).

    >>> _foreign(llvm.get_process_triple()), _foreign("x86_64-pc-windows-msvc")
    (False, True)
    """
    return _system(triple) != _system(llvm.get_process_triple())


def _system(triple: str) -> tuple[str, str]:
    """A triple's architecture and operating system (its vendor may be left out)."""
    parts = triple.lower().split("-")
    return parts[0], next((p for p in parts[1:] if p.startswith(_SYSTEMS)), "")


_SYSTEMS = ("linux", "windows", "win32", "darwin", "macos", "ios", "freebsd", "netbsd",
            "openbsd", "none", "wasi", "elf", "uefi")


def _big_endian(triple: str) -> bool:
    """Whether ``triple``'s data is big-endian (its data layout starts with "E")."""
    if not _foreign(triple):
        return not np.little_endian
    llvm.initialize_all_targets()
    machine = llvm.Target.from_triple(triple).create_target_machine()
    return str(machine.target_data).startswith("E")


def compiler() -> str | None:
    """The C compiler that links libraries: ``$CC``, else ``cc``, ``gcc`` or ``clang``
    on the PATH; None without one.

    >>> compiler()                                             # doctest: +SKIP
    'cc'
    """
    for candidate in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if candidate and shutil.which(candidate.split()[0]):
            return candidate
    return None


# ---- the header ------------------------------------------------------------------------

def header_text(forest: Forest, name: str, target: Target, threads: int = 0,
                extra: Collection[str] = ()) -> str:
    """The C header of library ``name``: everything a C program needs to call it
    (``extra``: the :data:`OPTIONAL_OUTPUTS` it has).

    >>> print(header_text(forest, "higgs", Target.host()))     # doctest: +SKIP
    """
    default = f"{threads} (set at export)" if threads else "0"
    up = name.upper()
    lines = [
        f"/* {name}.h: a decision forest compiled by SilvanForge {__version__}.",
        f" * Built for {target.triple}, CPU {target.cpu}: run it only on CPUs with that "
        "CPU's features.",
        " *",
        f" * Rows are row-major, n_rows x {name}_N_FEATURES values; NaN is a missing "
        "value; categorical",
        " * features take their category codes as numbers. `out` receives n_rows x "
        f"{name}_N_OUTPUTS values.",
        " * Each function returns 0 on success, else an error code that "
        f"{name}_last_error() explains.",
        " * Every function may be called from many threads at once. */",
        f"#ifndef SILVANFORGE_{up}_H",
        f"#define SILVANFORGE_{up}_H",
        "",
        "#include <stdint.h>",
        "",
        "#ifdef __cplusplus",
        'extern "C" {',
        "#endif",
        "",
        f"#define {name}_N_FEATURES {forest.n_features}",
        f"#define {name}_N_OUTPUTS {forest.n_outputs}",
        *([f"#define {name}_N_TREES {forest.n_trees}"] if "leaf" in extra else []),
        f"#define {name}_OK {OK}",
        f"#define {name}_INVALID_ARGUMENT {INVALID_ARGUMENT}",
        f"#define {name}_OUT_OF_MEMORY {OUT_OF_MEMORY}",
        "",
    ]
    for e in _entries(extra):
        ctype = _INPUT_TYPES[e.input][0]
        lines += [f"/* {e.doc}. */", f"int {name}_{e.suffix}(const {ctype} *rows, "
                                     f"int64_t n_rows, {e.out_type} *out);"]
    lines += [
        "/* The threads a call may use: n > 0, or 0 for the OpenMP runtime's default",
        f" * (OMP_NUM_THREADS, else every CPU); until set: {default}. Calls of few rows "
        "use fewer. */",
        f"void {name}_set_num_threads(int n);",
        "/* Why this thread's last failed call failed (\"\" before any failure). */",
        f"const char *{name}_last_error(void);",
        "/* What silvanforge.load_library reads: a JSON object describing the library. */",
        f"const char *{name}_metadata(void);",
        "",
        "#ifdef __cplusplus",
        "}",
        "#endif",
        f"#endif /* SILVANFORGE_{up}_H */",
        "",
    ]
    return "\n".join(lines)


def metadata(forest: Forest, name: str, target: Target,
             extra: Collection[str] = ()) -> dict[str, Any]:
    """The JSON object ``NAME_metadata()`` returns (silvanforge.load_library's input).

    >>> metadata(forest, "higgs", Target.host())["outputs"]     # doctest: +SKIP
    {'value': {'function': 'higgs_predict', 'columns': 1}, 'margin': {...}}
    """
    # Each output's float64-rows function, its columns and (leaf ids) type and shape
    # after the rows, as the Predictor shapes it.
    outputs: dict[str, dict[str, Any]] = {}
    for e in _entries(extra):
        if e.input == np.dtype(np.float64):
            outputs.setdefault(e.output, {"function": f"{name}_{e.suffix}",
                                          "columns": forest.n_outputs})
    if "leaf" in extra:
        one = leaf_ids.shaped(forest, np.zeros((1, forest.n_trees)))
        outputs["leaf"].update(columns=forest.n_trees, dtype="int32",
                               shape=list(one.shape[1:]))
    if "contribs" in extra:
        shape = [forest.n_outputs] * (forest.n_outputs > 1) + [forest.n_features + 1]
        outputs["contribs"].update(columns=int(np.prod(shape)), shape=shape)
    labels = forest.class_labels
    return {"format": FORMAT_VERSION, "silvanforge": __version__, "name": name,
            "n_features": forest.n_features, "n_outputs": forest.n_outputs,
            "flat_output": bool(forest.flat_output),
            "post_transform": forest.post_transform,
            "transform_params": dict(forest.transform_params),
            "input_dtype": np.dtype(forest.input_dtype).name,
            "feature_names": list(forest.feature_names) if forest.feature_names else None,
            "class_labels": None if labels is None else np.asarray(labels).tolist(),
            "objective": forest.objective, "source": forest.source,
            "outputs": outputs, "target": [target.triple, target.cpu, target.features]}


# ---- the LLVM module -------------------------------------------------------------------

def _entries(extra: Collection[str]) -> list[Entry]:
    """The C functions of a library (an optional output's only with its kernels)."""
    return [e for e in ENTRIES if e.output not in OPTIONAL_OUTPUTS or e.output in extra]


@dataclass
class _Set:
    """One plan's kernels in the module: renamed ``NAME.<tag>kernelI``, their MIR (for
    the privatized buffers' sizes), representation (the contributions' tables: their
    scratch sizes) and their model globals ``NAME.<tag>modelI``."""

    tag: str
    plan: Plan
    representation: Any
    lowered: Sequence[tuple[Any, ir.Kernel]]
    kernels: list[ir.Kernel]
    model: list[tuple[str, bytes]]

    @classmethod
    def of(cls, tag: str, k: Kernels, name: str, swap: bool) -> "_Set":
        """``k`` lowered (when it is not yet) and named for library ``name``; its model
        buffers byte-swapped when ``swap`` (a target of the other byte order)."""
        lowered = k.kernels()
        renamed = [replace(lir, name=f"{name}.{tag}kernel{i}")
                   for i, (_, lir) in enumerate(lowered)]
        arrays = [a.astype(a.dtype.newbyteorder("S")) if swap else a for a in k.arrays]
        model = [(f'@"{name}.{tag}model{i}"', np.ascontiguousarray(a).tobytes())
                 for i, a in enumerate(arrays)]
        return cls(tag, k.plan, k.representation, lowered, renamed, model)

    def mir(self, kernel: ir.Kernel) -> Any:
        """The MIR function ``kernel`` was lowered from."""
        return {k.name: fn for k, (fn, _) in zip(self.kernels, self.lowered)}[kernel.name]


def _module_text(sets: Sequence[_Set], name: str, target: Target, threads: int = 0) -> str:
    """One module: the kernels (internal, ``noinline``: one copy, called as the JIT
    calls it) and the wrappers."""
    module = None
    for s in sets:
        for kernel in s.kernels:
            module = render_kernel(kernel, target, module=module, signed=False)
            fn = module.get_global(kernel.name)
            fn.linkage = "internal"
            fn.attributes.add("noinline")
    assert module is not None  # a plan has a kernel
    wrapper = _Wrapper(sets, name, target, threads)
    return str(module) + wrapper.text(set(module.globals))


def _json_value(value: Any) -> Any:
    """A numpy scalar or array in the metadata as JSON; anything else as its text."""
    return value.tolist() if isinstance(value, (np.generic, np.ndarray)) else str(value)


def _c_string(data: bytes) -> str:
    """``data`` as an LLVM ``c"..."`` body (every byte escaped, built by numpy: model
    buffers may be megabytes)."""
    if not data:
        return ""
    digits = np.frombuffer(data.hex().encode(), dtype=np.uint8).reshape(-1, 2)
    text = np.empty((len(data), 3), dtype=np.uint8)
    text[:, 0] = ord("\\")
    text[:, 1:] = digits
    return text.tobytes().decode()


def _global(ref: str, data: bytes, linkage: str = "internal") -> str:
    init = f'c"{_c_string(data)}"' if data else "zeroinitializer"
    return f"{ref} = {linkage} constant [{len(data)} x i8] {init}, align 64"


class _Wrapper:
    """The wrapper module's text: the model globals and the C functions."""

    def __init__(self, sets: Sequence[_Set], name: str, target: Target,
                 threads: int = 0) -> None:
        self.sets = {s.tag: s for s in sets}
        self.name, self.target, self.threads = name, target, threads
        self.forest = sets[0].plan.forest
        self.input = np.dtype(self.forest.input_dtype)
        self.lines: list[str] = []
        self.parallel = any(isinstance(st, ir.For) and st.parallel for s in sets
                            for k in s.kernels for st in walk_stmts(k.body))
        self.strings: dict[str, str] = {}
        self.counter = 0

    def text(self, declared: Collection[str] = ()) -> str:
        """The module text after a module declaring or defining ``declared``."""
        n, lines = self.name, self.lines
        extra = [tag[:-1] for tag in self.sets if tag]
        lines += [_global(ref, data) for s in self.sets.values() for ref, data in s.model]
        meta = json.dumps(metadata(self.forest, n, self.target, extra),
                          default=_json_value).encode() + b"\0"
        lines.append(_global(f"@{n}_metadata_json", meta, linkage=""))
        lines += [f'@"{n}.threads" = internal global i32 {self.threads}, align 4',
                  f'@"{n}.error" = internal thread_local global i8* null, align 8']
        c_functions = {"malloc": "i8* @malloc(i64)", "calloc": "i8* @calloc(i64, i64)",
                       "free": "void @free(i8*)", "memset": "i8* @memset(i8*, i32, i64)"}
        if self.parallel:
            c_functions["omp_get_max_threads"] = "i32 @omp_get_max_threads()"
        lines += [f"declare {d}" for f, d in c_functions.items() if f not in declared]
        lines += [
            f"define i8* @{n}_metadata() {{",
            f"  ret i8* getelementptr ([{len(meta)} x i8], [{len(meta)} x i8]* "
            f"@{n}_metadata_json, i64 0, i64 0)", "}",
            f"define i8* @{n}_last_error() {{",
            f'  %e = load i8*, i8** @"{n}.error"',
            "  %none = icmp eq i8* %e, null",
            f"  %s = select i1 %none, i8* {self.string('')}, i8* %e",
            "  ret i8* %s", "}",
            f"define void @{n}_set_num_threads(i32 %n) {{",
            f"  %big = icmp sgt i32 %n, {MAX_JOBS}",
            f"  %t = select i1 %big, i32 {MAX_JOBS}, i32 %n",
            f'  store atomic i32 %t, i32* @"{n}.threads" monotonic, align 4',
            "  ret void", "}",
            f'define internal i32 @"{n}.fail"(i8* %message, i32 %code) noinline cold {{',
            f'  store i8* %message, i8** @"{n}.error"',
            "  ret i32 %code", "}"]
        for s in self.sets.values():
            self.call_function(s)
        for entry in _entries(extra):
            self.entry(entry)
        return "\n".join(lines) + "\n"

    def string(self, text: str) -> str:
        """A constant expression pointing to the C string ``text``."""
        if text not in self.strings:
            data = text.encode() + b"\0"
            ref = f'@"{self.name}.s{len(self.strings)}"'
            self.lines.insert(0, f"{ref} = private unnamed_addr constant [{len(data)} x i8] "
                                 f'c"{_c_string(data)}"')
            self.strings[text] = f"getelementptr ([{len(data)} x i8], [{len(data)} x i8]* " \
                                 f"{ref}, i64 0, i64 0)"
        return self.strings[text]

    def param_types(self, kernel: ir.Kernel) -> list[str]:
        return [f"{llvm_type(p.dtype)}{'*' if isinstance(p, ir.Buffer) else ''}"
                for p in kernel.params]

    def fail(self, out: list[str], message: str, code: int) -> None:
        self.counter += 1
        out += [f"  %fail{self.counter} = call i32 @\"{self.name}.fail\"(i8* "
                f"{self.string(message)}, i32 {code})", f"  ret i32 %fail{self.counter}"]

    def call_function(self, s: _Set) -> None:
        """``NAME.<tag>call(rows, n, out, finish)``: rows in the kernels' input dtype,
        n > 0; what :meth:`Predictor.predict` does around its kernel call (the
        contributions': what ``Contributions.__call__`` does; ``finish`` unused)."""
        rows_t = _INPUT_TYPES[self.input][0]
        zeroed = [f"  %bytes = mul i64 %n, {8 * self.columns(s)}",
                  "  %out8 = bitcast double* %out to i8*",
                  "  call i8* @memset(i8* %out8, i32 0, i64 %bytes)"]
        out = [f'define internal i32 @"{self.name}.{s.tag}call"({rows_t}* %rows, i64 %n, '
               "double* %out, i64 %finish) noinline {", *zeroed]
        if s.tag == "contribs_":  # per-thread scratch: products and one-fractions
            t = s.representation
            out += self.thread_count(True, contribs.ROWS_PER_THREAD)
            out += self.kernel_call(s, s.kernels[0], 0, "main", [
                ("%threads", t.scratch_stride, "double", 8),
                ("%threads", t.ones_stride, "i32", 4)], finish=False)
            out.append("}")
            self.lines += out
            return
        main, small = s.kernels[0], s.kernels[1] if len(s.kernels) > 1 else None
        if small is not None:
            out += [f"  %small = icmp sle i64 %n, {s.plan.small_batch}",
                    "  br i1 %small, label %small_kernel, label %main_kernel",
                    "small_kernel:"]
            out += self.kernel_call(s, small, 1, "small")
            out.append("main_kernel:")
        out += self.thread_count(s.plan.sized_threads, s.plan.rows_per_thread)
        out += self.kernel_call(s, main, 0, "main")
        out.append("}")
        if takes_float64_rows(main.params):
            # ``NAME.<tag>call64``: float64 rows for the main kernel, which rounds them
            # in its row copy (no converted copy of the rows first).
            out += [f'define internal i32 @"{self.name}.{s.tag}call64"(double* %rows, '
                    "i64 %n, double* %out, i64 %finish) noinline {", *zeroed]
            out += self.thread_count(s.plan.sized_threads, s.plan.rows_per_thread)
            out += self.kernel_call(s, main, 0, "main", wide=True)
            out.append("}")
        self.lines += out

    def thread_count(self, sized: bool, rows_per_thread: int) -> list[str]:
        """``%threads``: the threads set, else OpenMP's default; when ``sized`` (a
        schedule of SilvanForge's, the contributions), at most one a ``rows_per_thread``
        rows."""
        if not self.parallel:
            return ["  %threads = add i64 1, 0"]
        out = [f'  %set = load atomic i32, i32* @"{self.name}.threads" monotonic, align 4',
               "  %unset = icmp sle i32 %set, 0",
               "  %default = call i32 @omp_get_max_threads()",
               "  %chosen = select i1 %unset, i32 %default, i32 %set",
               "  %wanted = sext i32 %chosen to i64"]
        if not sized:
            return out + ["  %threads = add i64 %wanted, 0"]
        return out + [f"  %per = sdiv i64 %n, {rows_per_thread}",
                      "  %none = icmp slt i64 %per, 1",
                      "  %cap = select i1 %none, i64 1, i64 %per",
                      "  %over = icmp sgt i64 %wanted, %cap",
                      "  %threads = select i1 %over, i64 %cap, i64 %wanted"]

    def kernel_call(self, s: _Set, kernel: ir.Kernel, threads: int, tag: str,
                    scratch: Sequence[tuple[str | None, int, str, int]] | None = None,
                    finish: bool = True, wide: bool = False) -> list[str]:
        """Allocate the kernel's scratch buffers (``scratch``: each one's count as
        (a multiplier or None, a constant, element type, element size); by default the
        predict kernels' privatized buffers), call it, free them, return. ``wide``:
        ``%rows`` are float64 rows the kernel rounds itself
        (:func:`~silvanforge.lir.lower.takes_float64_rows`)."""
        out: list[str] = []
        if scratch is None:
            scratch = [("%n" if per_row else None, const, "double", 8)
                       for per_row, const in self.scratch(s, kernel)]
        rows_t = _INPUT_TYPES[self.input][0]
        if wide:  # the same address for both row parameters, as the Python entry passes
            out.append(f"  %{tag}.rows = bitcast double* %rows to {rows_t}*")
        args = [f"{rows_t}* %{tag}.rows" if wide else f"{rows_t}* %rows", "i64 %n",
                "double* %out"]
        for i, (per, const, elem_t, size) in enumerate(scratch):
            count = f"%{tag}.count{i}"
            out.append(f"  {count} = mul i64 {per}, {const}" if per
                       else f"  {count} = add i64 0, {const}")
            out += [f"  %{tag}.raw{i} = call i8* @calloc(i64 {count}, i64 {size})",
                    f"  %{tag}.buf{i} = bitcast i8* %{tag}.raw{i} to {elem_t}*"]
            args.append(f"{elem_t}* %{tag}.buf{i}")
        args += [f"i64 {'%threads' if threads == 0 else threads}"]
        args += ["i64 %finish"] if finish else []
        if takes_float64_rows(kernel.params):
            args += ["double* %rows", "i64 1"] if wide else ["double* null", "i64 0"]
        types = self.param_types(kernel)[len(args):]
        args += [f"{t} bitcast ([{len(data)} x i8]* {ref} to {t})"
                 for t, (ref, data) in zip(types, s.model)]
        if scratch:
            checks = [f"  %{tag}.null{i} = icmp eq i8* %{tag}.raw{i}, null"
                      for i in range(len(scratch))]
            any_null = f"%{tag}.null0"
            for i in range(1, len(scratch)):
                checks.append(f"  %{tag}.any{i} = or i1 {any_null}, %{tag}.null{i}")
                any_null = f"%{tag}.any{i}"
            out += checks + [f"  br i1 {any_null}, label %{tag}.nomem, label %{tag}.run",
                             f"{tag}.nomem:"]
            out += [f"  call void @free(i8* %{tag}.raw{i})" for i in range(len(scratch))]
            self.fail(out, "out of memory (scratch buffers)", OUT_OF_MEMORY)
            out.append(f"{tag}.run:")
        out.append(f'  call void @"{kernel.name}"({", ".join(args)})')
        out += [f"  call void @free(i8* %{tag}.raw{i})" for i in range(len(scratch))]
        out.append(f"  ret i32 {OK}")
        return out

    def scratch(self, s: _Set, kernel: ir.Kernel) -> list[tuple[bool, int]]:
        """Each privatized buffer's size: (whether per row, doubles in all or a row)."""
        fn, K = s.mir(kernel), s.plan.forest.n_outputs
        sizes: list[tuple[bool, int]] = []
        for one, two in zip(lir_lower.scratch_shapes(fn, 1, K),
                            lir_lower.scratch_shapes(fn, 2, K)):
            a, b = int(np.prod(one)), int(np.prod(two))
            if b not in (a, 2 * a):
                raise BackendError(f"kernel {kernel.name}: a privatized buffer of shape "
                                   f"{one} for one row grows faster than the rows")
            sizes.append((b != a, a))
        return sizes

    def columns(self, s: _Set) -> int:
        """The float64 numbers a row of ``s``'s kernels writes."""
        f = s.plan.forest
        return f.n_outputs * (f.n_features + 1) if s.tag == "contribs_" else f.n_outputs

    def entry(self, e: Entry) -> None:
        """``NAME_<suffix>``: check the arguments, convert the rows when their dtype is
        not the kernels', call ``NAME.call`` (leaf ids: ``NAME.leaf_call`` into a
        float64 buffer, converted to int32; contributions: ``NAME.contribs_call``);
        float64 rows of more than a small call go as they are to ``NAME.call64`` or
        ``NAME.leaf_call64`` where the main kernel rounds them itself."""
        n, F = self.name, self.forest.n_features
        leaf = e.output == "leaf"
        s = self.sets[e.output + "_" if e.output in OPTIONAL_OUTPUTS else ""]
        columns = self.columns(s)
        given_t, given_size = _INPUT_TYPES[e.input]
        rows_t, rows_size = _INPUT_TYPES[self.input]
        out_t = "i32" if leaf else "double"
        finish = kernel_finish.modes(self.forest).get(e.output, kernel_finish.MARGIN)
        # The most rows whose bytes (rows, out) an i64 counts.
        limit = (1 << 62) // max(1, F * 8, columns * 8)
        out = [f"define i32 @{n}_{e.suffix}({given_t}* %rows, i64 %n, {out_t}* %out) {{",
               "  %negative = icmp slt i64 %n, 0",
               "  br i1 %negative, label %bad_n, label %counted", "bad_n:"]
        self.fail(out, "n_rows is negative", INVALID_ARGUMENT)
        out += ["counted:", f"  %huge = icmp sgt i64 %n, {limit}",
                "  br i1 %huge, label %bad_size, label %sized", "bad_size:"]
        self.fail(out, "n_rows is too large", INVALID_ARGUMENT)
        out += ["sized:", "  %empty = icmp eq i64 %n, 0",
                "  br i1 %empty, label %done, label %some", "done:", f"  ret i32 {OK}",
                "some:", f"  %no_rows = icmp eq {given_t}* %rows, null",
                f"  %no_out = icmp eq {out_t}* %out, null",
                "  %null = or i1 %no_rows, %no_out",
                "  br i1 %null, label %bad_pointer, label %valid", "bad_pointer:"]
        self.fail(out, "rows or out is NULL", INVALID_ARGUMENT)
        out.append("valid:")
        if e.input != self.input and takes_float64_rows(s.kernels[0].params):
            # The main kernel takes float64 rows itself; a small call's kernel does not.
            small = s.plan.small_batch if len(s.kernels) > 1 else 0
            out += [f"  %direct = icmp sgt i64 %n, {small}",
                    "  br i1 %direct, label %wide_rows, label %narrow_rows", "wide_rows:"]
            self.run(out, s, "wide", "double* %rows", "call64", leaf, [], finish)
            out.append("narrow_rows:")
        rows, frees = "%rows", []
        if e.input != self.input:
            convert = "fptrunc" if given_size > rows_size else "fpext"
            out += [f"  %count = mul i64 %n, {F}",
                    f"  %bytes = mul i64 %count, {rows_size}",
                    "  %raw = call i8* @malloc(i64 %bytes)",
                    "  %no_memory = icmp eq i8* %raw, null",
                    "  br i1 %no_memory, label %nomem, label %start", "nomem:"]
            self.fail(out, "out of memory (converted rows)", OUT_OF_MEMORY)
            out += ["start:", f"  %copy = bitcast i8* %raw to {rows_t}*",
                    "  %any = icmp sgt i64 %count, 0",
                    "  br i1 %any, label %loop, label %converted",
                    "loop:", "  %i = phi i64 [0, %start], [%next, %loop]",
                    f"  %from = getelementptr {given_t}, {given_t}* %rows, i64 %i",
                    f"  %v = load {given_t}, {given_t}* %from",
                    f"  %c = {convert} {given_t} %v to {rows_t}",
                    f"  %to = getelementptr {rows_t}, {rows_t}* %copy, i64 %i",
                    f"  store {rows_t} %c, {rows_t}* %to",
                    "  %next = add i64 %i, 1",
                    "  %more = icmp slt i64 %next, %count",
                    "  br i1 %more, label %loop, label %converted", "converted:"]
            rows, frees = "%copy", ["%raw"]
        self.run(out, s, "given", f"{rows_t}* {rows}", "call", leaf, frees, finish)
        out.append("}")
        self.lines += out

    def run(self, out: list[str], s: _Set, tag: str, rows: str, call: str, leaf: bool,
            frees: list[str], finish: int) -> None:
        """Call ``NAME.<set tag><call>`` on ``rows`` (a typed LLVM operand) into
        ``%out`` and return its status, freeing ``frees`` (leaf ids: into a float64
        buffer first, converted to int32). ``tag`` keeps the values and labels of
        one such call apart from another's in the same function."""
        v, at = f"%{tag}.", f"{tag}."  # this call's values and labels
        result, columns = "%out", self.columns(s)
        if leaf:
            out += [f"  {v}cells = mul i64 %n, {columns}",
                    f"  {v}sums_bytes = mul i64 {v}cells, 8",
                    f"  {v}sums_raw = call i8* @malloc(i64 {v}sums_bytes)",
                    f"  {v}no_sums = icmp eq i8* {v}sums_raw, null",
                    f"  br i1 {v}no_sums, label %{at}sums_nomem, label %{at}sums_ok",
                    f"{at}sums_nomem:"]
            out += [f"  call void @free(i8* {f})" for f in frees]
            self.fail(out, "out of memory (leaf sums)", OUT_OF_MEMORY)
            out += [f"{at}sums_ok:", f"  {v}sums = bitcast i8* {v}sums_raw to double*"]
            result, frees = f"{v}sums", frees + [f"{v}sums_raw"]
        out.append(f'  {v}r = call i32 @"{self.name}.{s.tag}{call}"({rows}, i64 %n, '
                   f"double* {result}, i64 {finish})")
        if leaf:  # the ids are whole float64 numbers below 2^31: exact as int32
            out += [f"  {v}ran = icmp eq i32 {v}r, 0",
                    f"  br i1 {v}ran, label %{at}ids, label %{at}finished",
                    f"{at}ids:",
                    f"  {v}j = phi i64 [0, %{at}sums_ok], [{v}j_next, %{at}ids]",
                    f"  {v}id_at = getelementptr double, double* {result}, i64 {v}j",
                    f"  {v}id = load double, double* {v}id_at",
                    f"  {v}id32 = fptosi double {v}id to i32",
                    f"  {v}out_at = getelementptr i32, i32* %out, i64 {v}j",
                    f"  store i32 {v}id32, i32* {v}out_at",
                    f"  {v}j_next = add i64 {v}j, 1",
                    f"  {v}more = icmp slt i64 {v}j_next, {v}cells",
                    f"  br i1 {v}more, label %{at}ids, label %{at}finished",
                    f"{at}finished:"]
        out += [f"  call void @free(i8* {f})" for f in frees]
        out.append(f"  ret i32 {v}r")


