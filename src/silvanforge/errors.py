"""The exceptions SilvanForge raises for anything a user can get wrong.

Every error is a :class:`SilvanForgeError`, itself a :class:`ValueError`, so callers that
already catch ``ValueError`` around model loading or prediction keep working.
"""

from __future__ import annotations


class SilvanForgeError(ValueError):
    """Base class of every error SilvanForge raises on bad models or bad inputs."""


class ModelFormatError(SilvanForgeError):
    """A model file or object is malformed: unparsable, truncated, or inconsistent.

    The message names the file (when there is one) and, where it applies, the tree and
    the node at fault.
    """


class UnsupportedModelError(SilvanForgeError):
    """A well-formed model uses something SilvanForge does not handle (e.g. gblinear)."""


class InputError(SilvanForgeError):
    """Prediction input has the wrong shape, width or type."""


class MissingDependencyError(SilvanForgeError, ImportError):
    """An optional library needed for this source (e.g. ``onnx``) is not installed."""


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
