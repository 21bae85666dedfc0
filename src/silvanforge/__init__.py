"""SilvanForge: a compiler for decision-forest inference.

>>> import silvanforge
>>> forest = silvanforge.load("model.json")                     # doctest: +SKIP
>>> silvanforge.reference.predict(forest, X)                    # doctest: +SKIP
"""

import logging

from . import reference
from .errors import (CompileForbiddenError, InputError, MissingDependencyError, ModelFormatError,
                     SilvanForgeError, UnsupportedModelError)
from .frontends import load
from .model import Forest
from .plan import Profile, profile
from .runtime import Predictor, compile, load_predictor
from .tune import Configuration, tune
from .version import __version__

# The package's log (compile phases and times at INFO, IR sizes at DEBUG) is silent until
# the application configures logging; `silvanforge -v` does (cli.py).
logging.getLogger(__name__).addHandler(logging.NullHandler())

__all__ = ["load", "compile", "tune", "Configuration", "load_predictor", "Predictor",
           "profile", "Profile", "Forest", "reference", "SilvanForgeError", "ModelFormatError",
           "UnsupportedModelError", "InputError", "CompileForbiddenError", "MissingDependencyError", "__version__"]
