"""SilvanForge: a compiler for decision-forest inference.

>>> import silvanforge
>>> forest = silvanforge.load("model.json")                     # doctest: +SKIP
>>> silvanforge.reference.predict(forest, X)                    # doctest: +SKIP
"""

from . import reference
from .errors import (InputError, MissingDependencyError, ModelFormatError,
                     SilvanForgeError, UnsupportedModelError)
from .frontends import load
from .model import Forest
from .runtime.layout import Profile, profile
from .runtime.predictor import Predictor, compile, load_predictor
from .tune import Configuration, tune

__version__ = "0.1.0"

__all__ = ["load", "compile", "tune", "Configuration", "load_predictor", "Predictor",
           "profile", "Profile", "Forest", "reference", "SilvanForgeError", "ModelFormatError",
           "UnsupportedModelError", "InputError", "MissingDependencyError", "__version__"]
