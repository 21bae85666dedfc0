"""The exceptions SilvanForge raises for anything a user can get wrong.

Every error is a :class:`SilvanForgeError`, itself a :class:`ValueError`, so callers that
already catch ``ValueError`` around model loading or prediction keep working.
"""

from __future__ import annotations

from typing import Any


class SilvanForgeError(ValueError):
    """Base class of every error SilvanForge raises on bad models or bad inputs."""


class ModelFormatError(SilvanForgeError):
    """A model file or object is malformed: unparsable, truncated, or inconsistent.

    The message names the file (when there is one) and, where it applies, the tree and
    the node at fault.
    """


class UnsupportedModelError(SilvanForgeError):
    """A well-formed model uses something SilvanForge does not handle (e.g. gblinear)."""


class ContributionsError(UnsupportedModelError):
    """A model cannot give SHAP contributions (``output="contribs"``): it has no node
    covers (ONNX models carry none) or it has linear leaves."""


class InputError(SilvanForgeError):
    """Prediction input has the wrong shape, width or type."""


class BackendError(SilvanForgeError):
    """A backend cannot compile or load a kernel: invalid LIR for this target (e.g. a
    parallel loop assigning a variable declared outside it), or object code built for a
    CPU feature this machine lacks."""


class SilvanForgeWarning(UserWarning):
    """Something works, but not as asked (e.g. parallel loops run serially because no
    OpenMP runtime was found)."""


class ScheduleError(SilvanForgeError):
    """A schedule is invalid: the message names the directive (and line) and the reason."""


class TilingError(SilvanForgeError):
    """A tiling is invalid (seed 000 §3.4: a partition of the internal nodes into connected,
    maximal tiles of at most the tile size) or asks for an unsupported tile size."""


class CompileForbiddenError(SilvanForgeError):
    """Code would be compiled in a process whose environment says ``SILVANFORGE_COMPILE=forbid``
    (a worker meant to run a predictor compiled elsewhere, never to build one)."""


class MissingDependencyError(SilvanForgeError, ImportError):
    """An optional library needed for this source (e.g. ``onnx``) is not installed."""


def version_of(module: Any) -> tuple[int, int]:
    """An imported library's (major, minor) version; a part that is not a number reads
    as 0.

    >>> import numpy; version_of(numpy) >= (1, 23)
    True
    """
    return tuple(int(p) if p.isdigit() else 0  # type: ignore[return-value]
                 for p in module.__version__.split(".")[:2])


def require(module: str, extra: str):
    """Import an optional dependency or raise :class:`MissingDependencyError`.

    >>> np = require("numpy", "dev")
    """
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependencyError(
            f"{module!r} is needed here but is not installed; "
            f"install it with: pip install 'silvanforge[{extra}]'"
        ) from exc
