"""The common machinery of the table layouts: named numpy arrays → LIR buffers and loads.

Each layout (array, reorg, sparse) decides which node sits in which slot and how a
handle moves to a child; the split fields, the decision and the leaves are the same for
all, so they live here once.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Callable

import numpy as np

from ..lir import ir
from ..model.forest import Forest
from . import decision, leaves
from .base import FeatureLoader, Representation

_LIR_TYPES = {np.dtype(np.int8): ir.I8, np.dtype(np.int32): ir.I32,
              np.dtype(np.int64): ir.I64, np.dtype(np.float32): ir.F32,
              np.dtype(np.float64): ir.F64}
PREFIX = "model_"
# Tables indexed through another table (a node's category words, a leaf's coefficients),
# not by slot: never part of one tree.
INDIRECT = frozenset({"cat_bitset", "lin_feature", "lin_coeff"})

# Tables start on a cache line, so that a vector walk's windows (16 four-byte slots, from
# a tree's level 4 on in the array layout's vector form) lie in one line each
# (docs/ARCHITECTURE.md "Local arrays on a cache line").
TABLE_ALIGN = 64


def on_a_line(array: np.ndarray) -> np.ndarray:
    """``array`` (contiguous) if it starts on a :data:`TABLE_ALIGN` boundary, else a
    copy that does.

    >>> on_a_line(np.arange(5, dtype=np.int32)).ctypes.data % TABLE_ALIGN
    0
    """
    if array.ctypes.data % TABLE_ALIGN == 0 or array.nbytes == 0:
        return array
    raw = np.empty(array.nbytes + TABLE_ALIGN, np.uint8)
    skip = -raw.ctypes.data % TABLE_ALIGN
    out = raw[skip:skip + array.nbytes].view(array.dtype).reshape(array.shape)
    out[...] = array
    return out


class TableRepresentation(Representation):
    """A representation whose buffers are flat arrays, one per field (struct of arrays).

    Subclasses build their layout in ``__init__`` with :meth:`_add` and implement the
    walking methods; node handles index the node tables directly, and
    :meth:`_leaf_slot` maps a leaf handle to its row of the leaf tables. Buffers are
    named ``prefix`` + field (a plan's second layout sets its own prefix, so the two
    layouts' buffers never share a name: :mod:`.pair`).
    """

    prefix = PREFIX

    def __init__(self, forest: Forest, precision: str = "float64") -> None:
        super().__init__(forest, precision)
        self.spec = decision.DecisionSpec.of(forest, precision)
        self._types: dict[str, np.dtype] = {}  # every buffer's, in signature order
        self._arrays: dict[str, np.ndarray] = {}
        self._parts: dict[str, np.ndarray] = {}
        self._later: Callable[[], list[tuple[dict[str, np.ndarray],
                                            tuple[np.ndarray, int] | None]]] | None = None

    def _add(self, arrays: dict[str, np.ndarray],
             trees: tuple[np.ndarray, int] | None = None) -> None:
        """Add model buffers. ``trees`` = (where each tree's slots start, n_trees + 1
        values; the slots in all) when the arrays' rows are slots stored tree after tree
        (but the :data:`INDIRECT` ones)."""
        for field, array in arrays.items():
            array = on_a_line(np.ascontiguousarray(array))
            array.flags.writeable = False
            self._types.setdefault(self.prefix + field, array.dtype)
            self._arrays[self.prefix + field] = array
            if trees is not None and field not in INDIRECT:
                starts, slots = trees
                self._parts[self.prefix + field] = starts * (array.size // max(slots, 1))

    def _add_later(self, types: dict[str, np.dtype],
                   fill: Callable[[], list[tuple[dict[str, np.ndarray],
                                                 tuple[np.ndarray, int] | None]]]) -> None:
        """Model buffers of these ``types``, made by ``fill`` (``_add``'s arguments, a
        call each) when first asked for: a kernel needs only their types, so a big
        forest's tables can fill while its kernels build (a compile asks for them then:
        0.39 s of a 10,000-tree model's 0.8 s compile; docs/ARCHITECTURE.md "Loading big
        models")."""
        self._types.update({self.prefix + field: np.dtype(t) for field, t in types.items()})
        self._later = fill

    def _filled(self) -> None:
        """Make the tables :meth:`_add_later` promised, if not made yet."""
        if self._later is not None:
            for arrays, trees in self._later():
                self._add(arrays, trees)
            self._later = None
            made = {name: self._arrays[name].dtype for name in self._types}
            if made != self._types:
                raise RuntimeError(f"{self.name}: tables filled as {made}, promised as "
                                   f"{self._types}")  # a bug of the layout's

    def tree_parts(self) -> dict[str, np.ndarray] | None:
        self._filled()
        return dict(self._parts) or None

    @property
    def buffers(self) -> dict[str, np.ndarray]:
        self._filled()
        return {name: self._arrays[name] for name in self._types}

    @property
    def params(self) -> list[ir.Buffer]:
        return [self._buffer(name[len(self.prefix):]) for name in self._types]

    def _buffer(self, field: str) -> ir.Buffer:
        return ir.Buffer(self.prefix + field, _LIR_TYPES[self._types[self.prefix + field]],
                         readonly=True)

    def _load(self, field: str, index: ir.Expr) -> ir.Expr:
        return ir.Load(self._buffer(field), index)

    def _has(self, field: str) -> bool:
        return self.prefix + field in self._types

    # ---- shared tree operations ----------------------------------------------------------
    def step(self, tree: ir.Expr, node: ir.Expr, feature_value: FeatureLoader) -> ir.Expr:
        return self.child(tree, node, self.go_left(tree, node, feature_value))

    def child(self, tree: ir.Expr, node: ir.Expr, left: ir.Expr) -> ir.Expr:
        """The handle of ``node``'s left child when ``left`` holds, else its right (each
        layout of single nodes says where children live; a tiled layout overrides
        :meth:`step` instead)."""
        raise NotImplementedError

    def go_left(self, tree: ir.Expr, node: ir.Expr, feature_value: FeatureLoader) -> ir.Expr:
        """i1: whether a row goes left at the split in node slot ``node``."""
        return decision.go_left(self.spec, self.node_loads(
            lambda field: self._load(field, node)), feature_value)

    def node_loads(self, read: Callable[[str], ir.Expr]) -> decision.NodeLoads:
        """The split fields of one node, each table this layout has read by
        ``read(field)`` (a load of a slot, or a vector walk's lookup)."""
        def optional(field: str) -> ir.Expr | None:
            return read(field) if self._has(field) else None

        return decision.NodeLoads(
            feature=read("feature"), threshold=read("threshold"), flags=optional("flags"),
            cat_offset=optional("cat_offset"), cat_words=optional("cat_words"),
            cat_bitset=self._buffer("cat_bitset") if self._has("cat_bitset") else None)

    def leaf_value(self, tree: ir.Expr, node: ir.Expr, k: int,
                   feature_value: FeatureLoader) -> ir.Expr:
        return leaves.leaf_value(self.forest, self._load, self._leaf_slot(tree, node), k,
                                 feature_value)

    def cache_trees(self, start: ir.Expr, stop: ir.Expr) -> list[ir.Stmt]:
        """Prefetch the first node slot of each tree in ``start:stop`` (split fields)."""
        t = ir.Var(f"{self.name}_cached_tree", ir.I64)
        slot = self._first_slot(t)
        return [ir.For(t, start, stop, ir.i64(1), [
            ir.Prefetch(self._buffer(field), slot) for field in ("feature", "threshold")])]

    def _first_slot(self, tree: ir.Expr) -> ir.Expr:
        """The node-table index where tree ``tree`` starts."""
        return self.root(tree)

    @abstractmethod
    def _leaf_slot(self, tree: ir.Expr, node: ir.Expr) -> ir.Expr:
        """The leaf-table row of leaf handle ``node``."""


class ConsecutiveTrees(TableRepresentation):
    """Layouts storing each tree's slots from ``tree_start[t]`` on, with every walk of
    tree ``t`` taking exactly ``depths[t]`` steps (leaves pushed down)."""

    def _add_trees(self, tree_start: np.ndarray, depths: np.ndarray) -> None:
        self._add({"tree_start": tree_start})
        self._uniform = int(depths[0]) if np.all(depths == depths[0]) else None
        if self._uniform is None:
            self._add({"tree_depth": depths.astype(np.int32)})

    def root(self, tree: ir.Expr) -> ir.Expr:
        return self._load("tree_start", tree)

    def walk_depth(self, tree: ir.Expr) -> ir.Expr:
        if self._uniform is not None:
            return ir.i64(self._uniform)
        return ir.Cast(self._load("tree_depth", tree), ir.I64)
