"""The registry of representations, and the interface they implement
(:class:`~silvanforge.lir.representation.Representation`, defined with the LIR it emits).

A representation carries its own policy as class attributes (which targets it runs on,
when the planner picks it by default, its default schedule): adding one touches this
folder and nothing else.
"""

from __future__ import annotations

from ..lir.representation import FeatureLoader, Representation, RowValues

__all__ = ["REGISTRY", "register", "Representation", "RowValues", "FeatureLoader"]

REGISTRY: dict[str, type[Representation]] = {}


def register(cls: type[Representation]) -> type[Representation]:
    """Class decorator: make a representation available by its ``name``."""
    REGISTRY[cls.name] = cls
    return cls
