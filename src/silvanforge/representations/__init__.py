"""Representations: how trees live in memory, as plug-ins registered by name.

>>> from silvanforge.representations import REGISTRY
>>> sorted(REGISTRY)
['array', 'code', 'mask', 'reorg', 'sparse']
"""

from . import array, code, mask, reorg, sparse  # noqa: F401  (importing registers them)
from .base import REGISTRY, Representation, register

__all__ = ["REGISTRY", "Representation", "register"]
