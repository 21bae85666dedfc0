"""The mask representation: every split of a tree tested at once, the leaf found by bits.

A walk down a skewed tree (LightGBM's 31 leaves: depth 9-11, likely paths of 3-5 nodes)
is a chain of dependent steps, and as branches (the ``code`` representation) it is a
chain of hard-to-predict jumps: both engines that walk, ours and lleaves, spent 25-45
cycles a tree on such models. Here a tree of at most 63 internal nodes is evaluated
without a walk and without a branch (the idea of QuickScorer's bit vectors, Lucchese et
al., SIGIR 2015, done with vector compares):

1. the row's values at every node's feature are one permute of the row (a row of up to
   16 float32 or 8 float64 values is one register; wider ones are permuted from several,
   or gathered), compared with the node thresholds as a vector (:func:`decision.go_left`
   itself, lane-wise: operators, missing rules, default directions and category masks
   per node, so the tests are the table layouts' by construction);
2. the outcomes become the bits of an integer (bit ``i``: node ``i`` sends the row left);
3. leaf ``j`` is reached when the bits of the nodes on its path (``path[j]``) are its
   turns there (``turn[j]``, the bit set where the path goes left): one vector ``and``
   and compare over the leaves, exactly one lane matches, and its index is a count of
   trailing zeros.

Each tree takes a fixed stride of ``W`` lanes (16, 32 or 64: the smallest that holds the
forest's largest tree, internal nodes and leaves) in every table: ``mask_feature``,
``mask_threshold`` (and ``mask_flags`` and category fields where the forest needs them),
``mask_path`` and ``mask_turn`` (integers of ``W`` bits, 32 for ``W`` of 16), and
``mask_leaf``, the sparse layout's handle of each leaf lane. Padding lanes test feature
0 and belong to no path; a padding leaf has path 0 and turn 1, so it never matches.
Tree indices need not be constants (the walk reads tables), so kernels stay small and
compile fast whatever the forest's size. The sparse layout underneath keeps the table
interface and the leaves (linear and vector leaves included).

>>> rep = MaskRepresentation(forest)                                   # doctest: +SKIP
>>> rep.lanes                                                           # doctest: +SKIP
32
"""

from __future__ import annotations

import numpy as np

from ..errors import UnsupportedModelError
from ..lir import ir
from ..model.forest import MISSING_NAN, MISSING_NONE, OP_LE, OP_LT, Forest
from . import decision
from .base import FeatureLoader, register
from .sparse import SparseRepresentation

# The widest tree stride: 64 lanes hold 63 internal nodes and their 64 leaves.
MAX_LANES = 64


@register
class MaskRepresentation(SparseRepresentation):
    """Trees as vectors of splits and leaf paths over the sparse layout's leaves."""

    name = "mask"

    def __init__(self, forest: Forest, precision: str = "float64") -> None:
        super().__init__(forest, precision)
        internal = _splits(forest)
        largest = int(internal.max(initial=0))
        if largest >= MAX_LANES:
            t = int(np.argmax(internal))
            raise UnsupportedModelError(
                f"tree {t} has {largest} internal nodes; the 'mask' representation holds "
                f"trees of up to {MAX_LANES - 1} (use 'code' or 'sparse')")
        self.lanes = next(w for w in (16, 32, 64) if largest < w)
        self.bits_type = ir.I64 if self.lanes == 64 else ir.I32
        nodes, path, turn, leaf = _tree_lanes(forest, self.lanes)
        handle = np.zeros(forest.n_nodes, dtype=np.int64)
        _, leaf_nodes = self.slot_nodes
        handle[leaf_nodes[::-1]] = self.n_internal_slots + np.arange(len(leaf_nodes))[::-1]
        # As the signed integers of the bits' type: LIR constants are two's complement.
        unsigned, signed = (np.uint64, np.int64) if self.lanes == 64 else (np.uint32, np.int32)
        fields = decision.node_arrays(forest, self.spec, nodes, leaf_bit=False)
        fields.pop("cat_bitset", None)  # the sparse layout's serves both
        fields.update(
            path=path.astype(unsigned).view(signed), turn=turn.astype(unsigned).view(signed),
            leaf=np.where(leaf >= 0, handle[np.maximum(leaf, 0)],
                          self.n_internal_slots).astype(np.int32))
        # Numeric splits of one operator whose missing values go one way per node: the
        # row is read from two copies, its NaNs filled with -inf in the first (which
        # then passes the test) and kept in the second (which then fails it); each
        # node lane reads the copy its missing values' direction picks, so the test is
        # one compare (the general test spends a NaN test, a select and a blend more).
        width = _copy_width(forest, self.spec)
        slots = _slots(forest, self.spec, nodes, fields["threshold"], width) \
            if width else None
        self.copy_width = width if slots is not None else 0
        if slots is not None:
            fields["slot"] = slots
        trees = (np.arange(forest.n_trees + 1, dtype=np.int64) * self.lanes,
                 forest.n_trees * self.lanes)
        self._add({"mask_" + name: array for name, array in fields.items()}, trees)

    def walk_code(self, tree: ir.Expr, node: ir.Var, feature_value: FeatureLoader,
                  row: dict | None = None) -> list[ir.Stmt]:
        """Statements leaving in ``node`` the lane of tree ``tree``'s reached leaf
        (``tree * lanes + leaf lane``, what :meth:`code_leaf_value` reads). The row's
        values are one :class:`~silvanforge.lir.ir.Lookup` of the row when
        ``feature_value`` offers ``window`` (a :class:`~.base.RowValues`), else a gather."""
        lanes, bits_type = self.lanes, self.bits_type
        at = ir.BinOp("mul", tree, ir.i64(lanes))

        def read(field: str) -> ir.Expr:
            return ir.VectorLoad(self._buffer("mask_" + field), at, lanes)

        code: list[ir.Stmt] = []
        window = getattr(feature_value, "window", None)
        if self.copy_width and window is not None:
            left = self._copies_test(code, node.name, window, read("slot"),
                                     read("threshold"))
        else:
            loads = decision.NodeLoads(
                feature=read("feature"), threshold=read("threshold"),
                flags=read("flags") if self._has("mask_flags") else None,
                cat_offset=read("cat_offset") if self._has("mask_cat_offset") else None,
                cat_words=read("cat_words") if self._has("mask_cat_words") else None,
                cat_bitset=self._buffer("cat_bitset") if self._has("cat_bitset") else None)
            left = decision.go_left(self.spec, loads, window or feature_value)
        bits = ir.Var(node.name + "_bits", bits_type)
        reached = ir.Cmp("eq", ir.BinOp("and", bits, read("path")), read("turn"))
        leaf = ir.Math("cttz", ir.LaneBits(reached, bits_type))
        return code + [ir.Declare(bits, ir.LaneBits(left, bits_type)),
                       ir.Assign(node, ir.BinOp("add", at, ir.Cast(leaf, ir.I64)))]

    def _copies_test(self, code: list[ir.Stmt], stem: str, window, slots: ir.Expr,
                     thresholds: ir.Expr) -> ir.Expr:
        """The nodes' outcomes read from the row's two copies (see ``copy_width``)."""
        F, width = self.spec.compare, self.copy_width
        row = window(ir.Iota(width))
        if row.dtype != F:
            row = ir.Cast(row, F)
        copies = ir.Buffer(stem + "_row", F, size=2 * width)
        code += [ir.LocalArray(copies),
                 ir.Store(copies, ir.i64(0),
                          ir.Select(ir.IsNaN(row), ir.Const(-np.inf, F), row)),
                 ir.Store(copies, ir.i64(width), row)]
        x = ir.Lookup(copies, ir.i64(0), slots, 2 * width)
        return ir.Cmp(_COMPARE[self.spec.ops[0]], x, thresholds)

    def code_leaf_value(self, tree: ir.Expr, node: ir.Expr, k: int,
                        feature_value: FeatureLoader) -> ir.Expr:
        handle = ir.Cast(self._load("mask_leaf", node), ir.I64)
        return self.leaf_value(tree, handle, k, feature_value)


def one_compare(forest: Forest, precision: str) -> bool:
    """Whether ``forest`` fits the mask representation with every split test one vector
    compare (the row's two copies): trees of at most 63 internal nodes, one numeric
    operator, missing values NaN-or-none, at most 32 features (what ``compile`` makes
    this representation's default for, on AVX-512 CPUs)."""
    if forest.n_trees == 0 or int(_splits(forest).max()) >= MAX_LANES:
        return False
    spec = decision.DecisionSpec.of(forest, precision)
    width = _copy_width(forest, spec)
    if not width:
        return False
    nodes = np.flatnonzero(~forest.is_leaf)
    return _slots(forest, spec, nodes, decision.thresholds(forest, spec, nodes),
                  width) is not None


def _splits(forest: Forest) -> np.ndarray:
    """The number of internal nodes of each tree."""
    return np.add.reduceat((~forest.is_leaf).astype(np.int64), forest.tree_offsets[:-1])


_COMPARE = {OP_LT: "lt", OP_LE: "le"}
# The widest row the two copies serve (more would permute from too many registers).
MAX_COPY_WIDTH = 32


def _copy_width(forest: Forest, spec: decision.DecisionSpec) -> int:
    """The lanes of each copy of a row (a whole number of 512-bit registers holding
    every feature), or 0 when the forest's tests are not one compare of a row value
    whose NaN goes one way per node."""
    if len(spec.ops) != 1 or spec.ops[0] not in _COMPARE \
            or not set(spec.missing) <= {MISSING_NAN, MISSING_NONE}:
        return 0
    per = 512 // spec.compare.bits
    width = max(per, -(-forest.n_features // per) * per)
    return width if width <= MAX_COPY_WIDTH else 0


def _slots(forest: Forest, spec: decision.DecisionSpec, nodes: np.ndarray,
           thresholds: np.ndarray, width: int) -> np.ndarray | None:
    """Per node lane, where the row's value at its feature sits in the two copies: the
    first (NaN read as -inf) when a missing value goes left there, else the second. A
    NaN read as 0 (missing rule "none") goes where 0 goes. None when some node sends
    NaN left but would send -inf right (``x < -inf``)."""
    real = nodes >= 0
    n = np.maximum(nodes, 0)
    t = thresholds.astype(np.float64)
    zero_left = (0.0 < t) if spec.ops[0] == OP_LT else (0.0 <= t)
    left = np.where(forest.missing[n] == MISSING_NONE, zero_left, forest.default_left[n])
    if spec.ops[0] == OP_LT and np.any(real & left & (t == -np.inf)):
        return None
    return np.where(real, forest.feature[n] + np.where(left, 0, width), 0).astype(np.int32)


def _tree_lanes(forest: Forest, lanes: int
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per tree, ``lanes`` entries each: (global node of each internal lane, -1 for
    padding; each leaf lane's path bits; its turn bits; its global leaf node, -1 for
    padding). Internal nodes take lanes in the order of their global index, leaves in
    depth-first order, left subtrees first."""
    n = forest.n_trees * lanes
    nodes = np.full(n, -1, dtype=np.int64)
    leaf = np.full(n, -1, dtype=np.int64)
    path = np.zeros(n, dtype=np.uint64)
    turn = np.ones(n, dtype=np.uint64)  # padding leaves never match
    left, right, is_leaf = forest.left.tolist(), forest.right.tolist(), forest.is_leaf.tolist()
    for t in range(forest.n_trees):
        base, stop = int(forest.tree_offsets[t]), int(forest.tree_offsets[t + 1])
        lane_of: dict[int, int] = {}
        leaf_lane = 0
        for g in range(base, stop):
            if not is_leaf[g]:
                lane_of[g] = len(lane_of)
                nodes[t * lanes + lane_of[g]] = g
        # (node, its path's bits, its turns) from the root down.
        stack = [(base, 0, 0)]
        while stack:
            g, bits, turns = stack.pop()
            if is_leaf[g]:
                at = t * lanes + leaf_lane
                leaf[at], path[at], turn[at] = g, bits, turns
                leaf_lane += 1
                continue
            bit = 1 << lane_of[g]
            stack.append((base + right[g], bits | bit, turns))
            stack.append((base + left[g], bits | bit, turns | bit))
    return nodes, path, turn, leaf
