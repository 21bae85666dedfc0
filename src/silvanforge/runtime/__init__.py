"""The runtime: compile(), Predictor, persistence."""

from .predictor import Predictor, compile, load_predictor

__all__ = ["Predictor", "compile", "load_predictor"]
