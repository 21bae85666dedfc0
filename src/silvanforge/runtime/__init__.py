"""The runtime: compile(), the CPU and GPU predictors, persistence."""

from .compile import compile, export
from .predictor import Predictor, load_predictor

__all__ = ["Predictor", "compile", "export", "load_predictor"]
