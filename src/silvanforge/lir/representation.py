"""The representation interface (seed 001; seed 002 §7): how trees live in memory.

It lives with the LIR it emits, below the representations themselves
(:mod:`silvanforge.representations` holds the layouts and their registry), so the
lowering that calls it never imports a level above its own.

A representation owns the model buffers (numpy arrays it builds from a Forest) and emits
the LIR that reads them. The lowering of MIR walks to LIR uses only this interface, so a
new layout is a new subclass registered by name, and the same code serves every backend.

Node handles are i64 LIR values whose meaning belongs to the representation (a global
node index, an index into a level-ordered array, ...). The kernel's row values are
provided by the caller of :meth:`step` as a function from a feature index (i64 LIR
expression) to the row's value of that feature, as a float LIR expression of the
compiled input precision.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable, ClassVar

import numpy as np

from . import ir
from ..model.forest import Forest
from ..schedule import Schedule, named
from ..schedule.schedule import VECTOR_LANES

FeatureLoader = Callable[[ir.Expr], ir.Expr]


@dataclass(frozen=True)
class RowValues:
    """The loader of one row's values in the kernel's row buffer ``rows`` (the row starts
    at element ``offset``): called with a feature index, the value of that feature;
    :meth:`window` reads many features at once (a representation that reads a row at a
    vector of features asks for it where it is offered)."""

    rows: ir.Buffer
    offset: ir.Expr
    n_features: int
    # Where the representation's prepared form of this row starts (see
    # Representation.prepare_row), when the kernel prepared it: (local array, offset).
    prepared: tuple[ir.Buffer, ir.Expr] | None = None

    def __call__(self, feature: ir.Expr) -> ir.Expr:
        if feature.dtype != ir.I64:
            feature = ir.Cast(feature, ir.I64)
        return ir.Load(self.rows, ir.BinOp("add", self.offset, feature))

    def window(self, features: ir.Expr) -> ir.Expr:
        """The row's values at the vector of feature indices ``features``."""
        return ir.Lookup(self.rows, self.offset, features, self.n_features)


class Representation(ABC):
    """Model buffers plus the LIR for every tree operation a walk needs."""

    name: ClassVar[str]
    # Whether walk_code emits each tree's own code, for a constant tree index: a variable
    # index jumps to the code of its tree (a switch, see lir.lower), so schedules that
    # make tree indices constants (unrolled tree loops) suit such a representation best,
    # and the tuner pairs it with those only.
    constant_trees: ClassVar[bool] = False
    # Whether walks may read a prepared form of their row (see prepared_row): schedules
    # running a tree over a block of rows then cache the block (``cache`` directive).
    prepares_rows: ClassVar[bool] = False

    # ---- policy: what the planner reads (docs/ARCHITECTURE.md "Default choices") ----
    # The kinds of device whose targets run this layout ("cpu", "gpu"), and those where
    # the planner picks it when the user names no representation.
    devices: ClassVar[tuple[str, ...]] = ("cpu", "gpu")
    default_devices: ClassVar[tuple[str, ...]] = ("cpu", "gpu")
    # Where the planner tries it among the defaults (lowest first, the first that
    # :meth:`suits` the forest wins); None: only when named.
    default_rank: ClassVar[int | None] = None
    # Whether its walks take rows as the lanes of vectors (``vectorize``: it implements
    # ``vector_walk`` or ``vector_walk_groups`` or both, the latter taken for groups of
    # one tree, and ``vector_leaf_value``), and whether
    # those walks need trees of one depth (its constructor then takes ``depth``, the
    # depth every tree is padded to).
    vector_walks: ClassVar[bool] = False
    vector_depth: ClassVar[bool] = False
    # The LLVM optimisation level its CPU kernels are built at, and whether with LLVM's
    # fast instruction selector (the one level 0 uses).
    llvm_opt: ClassVar[int] = 2
    llvm_fast_isel: ClassVar[bool] = False

    @classmethod
    def suits(cls, forest: Forest, precision: str, cpu_features: frozenset[str]) -> bool:
        """Whether the planner picks this layout for ``forest`` (at ``precision``, on a
        CPU with ``cpu_features``; empty for GPUs) when the user names none."""
        return True

    @classmethod
    def default_schedule(cls, forest: Forest, precision: str,
                         cpu_features: frozenset[str]) -> Schedule:
        """The schedule the planner gives this layout when the user names none."""
        return named("default", forest.n_trees)

    @classmethod
    def small_batch_schedule(cls, forest: Forest, precision: str,
                             cpu_features: frozenset[str]) -> Schedule | None:
        """The schedule of a second kernel for batches of a few rows, beside the default
        one, where it pays for its compile time (None: the default kernel serves them)."""
        return named("small_batch", forest.n_trees)

    @classmethod
    def vector_lanes(cls, forest: Forest, cpu_features: frozenset[str]) -> int:
        """The rows a vector walk of this layout takes at once on a CPU with
        ``cpu_features`` (the plan's ``vector_lanes``): 16, a register of float32 lanes
        with AVX-512 (and LLVM's gathers elsewhere)."""
        return VECTOR_LANES

    @classmethod
    def small_batch_layout(cls, forest: Forest, precision: str,
                           cpu_features: frozenset[str]) -> tuple[str, int] | None:
        """Another layout's name when a few rows are faster walked through it, with the
        most rows it serves; the plan then has two layouts (docs/ARCHITECTURE.md "Two
        layouts in one plan"). None: this one walks every batch."""
        return None

    def __init__(self, forest: Forest, precision: str = "float64") -> None:
        self.forest = forest
        self.precision = precision

    # ---- buffers -----------------------------------------------------------------------
    @property
    @abstractmethod
    def buffers(self) -> dict[str, np.ndarray]:
        """Model buffers by name: C-contiguous numpy arrays the kernel receives, in the
        order of :attr:`params`."""

    @property
    @abstractmethod
    def params(self) -> list[ir.Buffer]:
        """The LIR buffer parameters (read-only) matching :attr:`buffers`."""

    # ---- walking -----------------------------------------------------------------------
    @abstractmethod
    def root(self, tree: ir.Expr) -> ir.Expr:
        """The handle of tree ``tree``'s root (``tree`` is an i64 tree index)."""

    @abstractmethod
    def is_leaf(self, tree: ir.Expr, node: ir.Expr) -> ir.Expr:
        """i1: whether ``node`` is a leaf."""

    @abstractmethod
    def step(self, tree: ir.Expr, node: ir.Expr, feature_value: FeatureLoader) -> ir.Expr:
        """The handle a row moves to from non-leaf ``node`` in one step of a walk: a
        node's child (exact split semantics of :mod:`silvanforge.model.forest`: missing
        values, operators, categories) or, in a tiled layout, a tile's exit."""

    @abstractmethod
    def leaf_value(self, tree: ir.Expr, node: ir.Expr, k: int,
                   feature_value: FeatureLoader) -> ir.Expr:
        """f64: component ``k`` of leaf ``node``'s value (linear leaves evaluated)."""

    def walk_depth(self, tree: ir.Expr) -> ir.Expr | None:
        """i64: the number of steps from the root to every leaf of tree ``tree``, when the
        layout puts all of a tree's leaves at one depth; None when depths vary.

        A walk of known depth needs no leaf tests: it takes exactly that many steps."""
        return None

    def shortest_walks(self) -> np.ndarray:
        """Per tree, the steps from its root to its nearest leaf ((n_trees,) int64): the
        most steps a walk may take without leaf tests (``peelWalk``). Single-node layouts
        take at least a leaf's depth in steps (a hop adds one)."""
        return self.forest.shallowest_leaves

    def walk_code(self, tree: ir.Expr, node: ir.Var, feature_value: FeatureLoader,
                  row: dict | None = None) -> list[ir.Stmt] | None:
        """Statements that walk tree ``tree`` as code and leave the reached leaf in
        ``node`` (what :meth:`code_leaf_value` reads), for a representation that emits
        trees as code; None (the default) for layouts walked step by step through
        :meth:`go_left` and :meth:`child`.

        ``row``: a dict the walks of one row share (given with a ``"stem"`` that names
        its variables; the walks add what they use), for values computed once per row
        rather than once per tree; :meth:`row_preamble` declares them, before those
        walks."""
        return None

    def row_preamble(self, row: dict, feature_value: FeatureLoader) -> list[ir.Stmt]:
        """The declarations of what walks given the cache ``row`` use (see
        :meth:`walk_code`)."""
        return []

    def lane_columns(self) -> tuple[int, ir.DType] | None:
        """(columns, their type) of each row in a block's transposed copy for vector
        walks (``cache`` on a vectorized loop), when the walks read a form of the row
        prepared for them (:meth:`lane_column_stores`); None (the default): the row's
        features as they are."""
        return None

    def lane_column_stores(self, feature_value: FeatureLoader,
                           store: Callable[[int, ir.Expr], ir.Stmt],
                           stem: str) -> list[ir.Stmt]:
        """Statements storing the columns (:meth:`lane_columns`) of the row
        ``feature_value`` reads, each through ``store(column, value)``; ``stem`` names
        their variables."""
        raise NotImplementedError(f"representation {self.name!r} prepares no columns")

    def prepared_row(self) -> tuple[int, ir.DType] | None:
        """(elements, their type) of the form of a row that :meth:`walk_code` reads,
        when it reads one prepared from the row (the mask's copies): a kernel that
        caches a block of rows (``cache`` on a batch loop) prepares each row of it once
        (:meth:`prepare_row`), not once per tree, and hands the walks its place in
        :attr:`RowValues.prepared`. None (the default): walks read the row itself."""
        return None

    def prepare_row(self, feature_value: FeatureLoader, out: ir.Buffer,
                    at: ir.Expr) -> list[ir.Stmt]:
        """Statements storing the prepared form of the row ``feature_value`` reads at
        ``out[at:]`` (see :meth:`prepared_row`)."""
        raise NotImplementedError(f"representation {self.name!r} prepares no rows")

    def code_leaf_value(self, tree: ir.Expr, node: ir.Expr, k: int,
                        feature_value: FeatureLoader) -> ir.Expr:
        """f64: component ``k`` of the leaf that :meth:`walk_code` left in ``node``
        (by default a handle, read as :meth:`leaf_value` reads one)."""
        return self.leaf_value(tree, node, k, feature_value)

    def cache_trees(self, start: ir.Expr, stop: ir.Expr) -> list[ir.Stmt]:
        """Statements that bring trees ``start:stop`` close (prefetch on CPUs)."""
        return []

    def tree_parts(self) -> dict[str, np.ndarray] | None:
        """For each model buffer that stores trees one after another: the element index
        where each tree's part starts (``n_trees + 1`` values, the last one past the
        last tree's), so that trees ``a:b`` are elements ``[p[a], p[b])`` (what a GPU
        block copies into shared memory to cache a chunk of trees). Buffers not listed
        are read where they are. None (the default) when the layout does not keep trees
        apart."""
        return None
