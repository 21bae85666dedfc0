"""SilvanForge: a compiler for decision-forest inference.

>>> import silvanforge
>>> forest = silvanforge.load("model.json")                     # doctest: +SKIP
>>> silvanforge.reference.predict(forest, X)                    # doctest: +SKIP
"""

import logging

from . import reference
from .export import load_library
from .errors import (CompileForbiddenError, InputError, MissingDependencyError, ModelFormatError,
                     SilvanForgeError, UnsupportedModelError)
from .frontends import load
from .model import Forest
from .plan import Profile, profile
from .estimator import CompiledEstimator, compile_estimator
from .runtime import Predictor, compile, load_predictor
from .tune import Configuration, tune
from .version import __version__

# The package's log (compile phases and times at INFO, IR sizes at DEBUG) is silent until
# the application configures logging; `silvanforge -v` does (cli.py).
logging.getLogger(__name__).addHandler(logging.NullHandler())

# The engines' helpers import on first use (``silvanforge.dask.predict``), so that the
# base install never imports Dask, Spark or Ray.
_ENGINES = ("dask", "spark", "ray")


def __getattr__(name: str):
    if name in _ENGINES:
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["load", "compile", "compile_estimator", "CompiledEstimator", "tune", "Configuration",
           "load_predictor", "Predictor", "load_library",
           "profile", "Profile", "Forest", "reference", "SilvanForgeError", "ModelFormatError",
           "UnsupportedModelError", "InputError", "CompileForbiddenError", "MissingDependencyError",
           "__version__"]
