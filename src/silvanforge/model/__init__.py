"""The in-memory model: :class:`Forest`, its builder, its transforms and input rules."""

from .builder import Tree, build_forest
from .forest import (MISSING_NAN, MISSING_NONE, MISSING_ZERO, OP_CAT, OP_EQ, OP_LE, OP_LT,
                     Forest, LinearLeaves)

__all__ = ["Forest", "LinearLeaves", "Tree", "build_forest", "OP_LT", "OP_LE", "OP_EQ",
           "OP_CAT", "MISSING_NAN", "MISSING_ZERO", "MISSING_NONE"]
