"""Representations: how trees live in memory, as plug-ins registered by name.

>>> from silvanforge.representations import REGISTRY
>>> sorted(REGISTRY)
['array', 'reorg', 'sparse']
"""

from . import array, reorg, sparse  # noqa: F401  (importing registers them)
from .base import REGISTRY, Representation, register

__all__ = ["REGISTRY", "Representation", "register"]
