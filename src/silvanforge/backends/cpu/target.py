"""What machine code is built for: the host CPU, an x86-64 psABI level, or a CPU LLVM names.

A :class:`Target` is an LLVM triple, CPU name and feature string. The host's lists every
feature LLVM detects; a psABI level's lists the features the x86-64 psABI gives that
level, so whether its code runs on a machine is a subset test; any other CPU name has no
feature string (LLVM derives the features from the name, and llvmlite cannot tell them).
"""

from __future__ import annotations

import functools
import re
import subprocess
import sys
from dataclasses import dataclass, replace

import llvmlite.binding as llvm

from ...errors import BackendError

# The x86-64 psABI's microarchitecture levels, each with the CPU features it adds to the
# level before, by LLVM's names (bmi: BMI1, sahf: LAHF-SAHF, cx16: CMPXCHG16B, xsave:
# OSXSAVE). The baseline's FPU, OSFXSR and SCE are left out: LLVM reports none of them
# for a host, so a target requiring them would run nowhere.
PSABI_LEVELS: dict[str, tuple[str, ...]] = {
    "x86-64": ("cmov", "cx8", "fxsr", "mmx", "sse", "sse2"),
    "x86-64-v2": ("cx16", "popcnt", "sahf", "sse3", "sse4.1", "sse4.2", "ssse3"),
    "x86-64-v3": ("avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe", "xsave"),
    "x86-64-v4": ("avx512bw", "avx512cd", "avx512dq", "avx512f", "avx512vl"),
}
# CPU names whose code runs on any CPU of its architecture.
_GENERIC = ("", "generic")
# LLVM lists the CPUs and features it knows for a target when asked for the CPU "help",
# on stderr; an unknown CPU name only makes it print a warning there and build generic
# code. llvmlite returns neither, so a child process asks and this one reads its stderr.
_ASK_HELP = ("import sys, llvmlite.binding as llvm; llvm.initialize_all_targets(); "
             "llvm.Target.from_triple(sys.argv[1]).create_target_machine(cpu='help')")
_HELP_SECTION = re.compile(r"Available (CPUs|features) for this target:\n\n((?:  .*\n)*)")


@dataclass(frozen=True)
class Target:
    """What machine code was built for: LLVM triple, CPU name, ``+feat,-feat`` string."""

    triple: str
    cpu: str
    features: str

    @classmethod
    def host(cls) -> "Target":
        """The machine this process runs on.

        >>> Target.host().triple == llvm.get_process_triple()
        True
        """
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        return cls(llvm.get_process_triple(), llvm.get_host_cpu_name(),
                   llvm.get_host_cpu_features().flatten())

    @classmethod
    def named(cls, cpu: str, triple: str | None = None) -> "Target":
        """The CPU LLVM calls ``cpu`` on ``triple`` (default: this machine's
        architecture): ``"native"`` is :meth:`host`; an x86-64 psABI level
        (``"x86-64"``, ``"x86-64-v2"`` .. ``"-v4"``) comes with its features
        (:data:`PSABI_LEVELS`); another name LLVM knows for the triple
        (``"skylake-avx512"``, ``"znver4"``, ``"neoverse-n1"`` for ``aarch64-linux-gnu``)
        with none. Raises :class:`BackendError` for a name LLVM does not know, and for
        ``"native"`` with another architecture's triple.

        >>> Target.named("native") == Target.host()
        True
        >>> Target.named("generic", "aarch64-linux-gnu")
        Target(triple='aarch64-linux-gnu', cpu='generic', features='')
        """
        host = cls.host()
        triple = triple or host.triple
        foreign = triple.split("-")[0] != host.triple.split("-")[0]
        if cpu == "native":
            if foreign:
                raise BackendError(f"CPU 'native' is this machine's ({host.triple}); "
                                   f"name a CPU of {triple} (e.g. 'generic')")
            return cls.host() if triple == host.triple else replace(host, triple=triple)
        if cpu not in llvm_help(triple)["CPUs"]:
            raise BackendError(f"unknown CPU {cpu!r}: LLVM knows no such CPU for "
                               f"{triple} (\"native\" is this machine's)")
        features = ",".join("+" + f for f in psabi_features(cpu))
        return cls(triple, cpu, features)

    def enabled(self) -> set[str]:
        """The CPU features this target turns on.

        >>> sorted(Target("x", "cpu", "+avx,-avx512f,+sse2").enabled())
        ['avx', 'sse2']
        """
        return {f[1:] for f in self.features.split(",") if f.startswith("+")}

    def vector_bits(self) -> int:
        """The width of the vectors this target permutes by a vector of lanes: 512 with
        AVX-512, 256 with AVX2, else 0.

        >>> [Target("x", "cpu", f).vector_bits() for f in ("+avx2,+avx512f", "+avx2", "")]
        [512, 256, 0]
        """
        enabled = self.enabled()
        return 512 if "avx512f" in enabled else 256 if "avx2" in enabled else 0

    def mismatch(self, host: "Target") -> str | None:
        """Why code built for this target cannot run on ``host`` (a :meth:`host`), or
        None where it can: the host must have the architecture and every feature the
        target enables. A CPU named without features (:meth:`named`) has features only
        LLVM knows: its code runs only on a host LLVM gives the same name. Refusing
        a CPU that has them costs a recompile; running code on one that lacks one is
        an illegal instruction.

        >>> x86 = "x86_64-unknown-linux-gnu"
        >>> built = Target(x86, "haswell", "+avx2,+fma")
        >>> built.mismatch(Target(x86, "znver4", "+avx2,+avx,+fma"))
        >>> built.mismatch(Target(x86, "sandybridge", "+avx,-avx2,-fma"))
        'was built for CPU haswell with features this CPU (sandybridge) lacks: avx2, fma'
        >>> [Target(x86, "haswell", "").runs_on(Target(x86, cpu, "+avx2,+avx,+fma"))
        ...  for cpu in ("haswell", "znver4")]
        [True, False]
        """
        if self.triple.split("-")[0] != host.triple.split("-")[0]:
            return f"was built for {self.triple}; this machine is {host.triple}"
        required = self.enabled() | set(psabi_features(self.cpu))
        if not required and self.cpu not in _GENERIC and self.cpu != host.cpu:
            return (f"was built for CPU {self.cpu}, whose features LLVM does not tell: it "
                    f"runs only on that CPU, and this one is {host.cpu}")
        missing = required - host.enabled()
        if missing:
            return (f"was built for CPU {self.cpu} with features this CPU ({host.cpu}) "
                    "lacks: " + ", ".join(sorted(missing)))
        return None

    def runs_on(self, host: "Target") -> bool:
        """Whether code built for this target runs on ``host`` (:meth:`mismatch`)."""
        return self.mismatch(host) is None

    def machine(self, opt: int = 2) -> llvm.TargetMachine:
        """An LLVM target machine generating code for this target at level ``opt``."""
        return llvm.Target.from_triple(self.triple).create_target_machine(
            cpu=self.cpu, features=self.features, opt=opt, jit=True)


def psabi_features(level: str) -> list[str]:
    """The CPU features of an x86-64 psABI level (a level includes those below it);
    none for another CPU name.

    >>> psabi_features("x86-64-v2")[-3:]
    ['sse4.1', 'sse4.2', 'ssse3']
    """
    if level not in PSABI_LEVELS:
        return []
    names = list(PSABI_LEVELS)
    return [f for below in names[:names.index(level) + 1] for f in PSABI_LEVELS[below]]


@functools.cache
def llvm_help(triple: str) -> dict[str, frozenset[str]]:
    """The names LLVM knows for ``triple``: ``"CPUs"`` and ``"features"``.

    >>> "generic" in llvm_help(llvm.get_process_triple())["CPUs"]
    True
    """
    try:
        done = subprocess.run([sys.executable, "-c", _ASK_HELP, triple], timeout=60,
                              capture_output=True, text=True)
    except (OSError, subprocess.SubprocessError) as exc:
        raise BackendError(f"cannot ask LLVM which CPUs it knows: {exc}") from None
    sections = {kind: frozenset(line.split()[0] for line in lines.splitlines())
                for kind, lines in _HELP_SECTION.findall(done.stderr)}
    if not sections.get("CPUs"):
        raise BackendError(f"cannot ask LLVM which CPUs it knows for {triple}: "
                           f"{done.stderr.strip()[-500:]}")
    return sections
