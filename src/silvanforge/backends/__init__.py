"""The compile targets, one registry: each names the backend package that builds for it,
the kind of device it runs on, and the extra that installs what it needs.

The planner reads a target's ``device`` (a representation says which devices it runs
on), the runtime picks the predictor by it; backends load lazily, so importing
SilvanForge never pulls in a toolchain it does not use.

>>> target_info("opencl")
TargetInfo(name='opencl', device='gpu', backend='silvanforge.backends.gpu', extra='opencl')
>>> sorted(TARGETS)
['cpu', 'cuda', 'opencl']
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InputError


@dataclass(frozen=True)
class TargetInfo:
    """A compile target: ``device`` "cpu" (machine code for a CPU, through LLVM) or
    "gpu" (kernel source, compiled by the GPU's runtime); ``extra`` is the pip extra
    whose packages it needs (None: the base install)."""

    name: str
    device: str
    backend: str
    extra: str | None = None


TARGETS = {t.name: t for t in (
    TargetInfo("cpu", "cpu", "silvanforge.backends.cpu"),
    TargetInfo("opencl", "gpu", "silvanforge.backends.gpu", "opencl"),
    TargetInfo("cuda", "gpu", "silvanforge.backends.gpu", "cuda"),
)}


def target_info(name: str) -> TargetInfo:
    """The target registered as ``name``; an unknown name is an :class:`InputError`."""
    info = TARGETS.get(name) if isinstance(name, str) else None
    if info is None:
        raise InputError(f"unknown target {name!r}; choose from "
                         + ", ".join(repr(t) for t in sorted(TARGETS)))
    return info
