"""The split decision, emitted once for every representation.

A representation stores per-node fields (feature, threshold, packed flags, category set)
in whatever layout it likes and hands :func:`go_left` the LIR loads of one node's fields;
this module turns them into the exact test of :mod:`silvanforge.model.forest`. The test
is specialised at compile time on what the forest uses (:class:`DecisionSpec`): a forest
with only ``<``, NaN-missing and no categories gets ``isnan(x) ? dl : x < t`` and never
loads the flags.

Precision ``"float32"`` (float32 inputs only) stores float32 thresholds rounded per
operator so that every comparison of a float32 input gives the float64 answer:
``x <= t ⟺ x <= round_down(t)``, ``x < t ⟺ x < round_up(t)``, and ``x == t`` only when
``t`` is a float32 (else the stored threshold is NaN, which equals nothing).

A categorical split whose set holds only categories below the threshold's width (64 in
float64, 32 in float32) keeps the set in its threshold slot, as the bits of a mask
(:attr:`DecisionSpec.category_mask`, chosen when every categorical split qualifies): the
test then loads nothing beyond the node's threshold. Larger sets live in a bitset buffer
reached through per-node offsets, three more loads per step (docs/ARCHITECTURE.md has the
measurement).
"""

from __future__ import annotations

from dataclasses import dataclass
import numpy as np

from ..errors import SilvanForgeError
from ..lir import ir
from ..model.forest import (MISSING_NAN, MISSING_NONE, MISSING_ZERO, OP_CAT, OP_EQ,
                            OP_LE, OP_LT, ZERO_THRESHOLD, Forest)
from .base import FeatureLoader

# Packed per-node flags (one i8): operator, missing rule, default direction, leaf bit.
OP_SHIFT, MISSING_SHIFT, DEFAULT_LEFT_BIT, LEAF_BIT = 0, 2, 4, 5
PRECISIONS = {"float64": ir.F64, "float32": ir.F32}
_INPUT = {np.dtype(np.float32): ir.F32, np.dtype(np.float64): ir.F64}
_COMPARE = {OP_LT: "lt", OP_LE: "le", OP_EQ: "eq"}
# For x, t not NaN: not (x >= t) is x < t, not (x > t) is x <= t.
_NEGATED = {"lt": "ge", "le": "gt"}


@dataclass(frozen=True)
class DecisionSpec:
    """What the split test of a forest must handle, decided at compile time.

    >>> spec = DecisionSpec.of(forest, "float64")           # doctest: +SKIP
    >>> spec.ops, spec.needs_flags                           # doctest: +SKIP
    ((0,), False)
    """

    ops: tuple[int, ...]          # operators of internal nodes, sorted
    missing: tuple[int, ...]      # missing rules of internal nodes, sorted
    default_left: bool | None     # the one default direction, None when nodes differ
    category_rule: str
    negative_category: str
    beyond_category: str
    compare: ir.DType             # threshold and comparison type
    input: ir.DType               # type of the row values the kernel receives
    # Category sets as masks in the threshold's bits (every set fits), not in a bitset.
    category_mask: bool = False

    @classmethod
    def of(cls, forest: Forest, precision: str) -> "DecisionSpec":
        if precision not in PRECISIONS:
            raise SilvanForgeError(f"precision must be one of {sorted(PRECISIONS)}, "
                                   f"not {precision!r}")
        if precision == "float32" and forest.input_dtype != np.float32:
            raise SilvanForgeError(
                "precision 'float32' needs a model that compares float32 inputs; this one "
                f"compares {forest.input_dtype} (its thresholds would not stay exact)")
        internal = ~forest.is_leaf
        defaults = np.unique(forest.default_left[internal])
        compare = PRECISIONS[precision]
        # A mask holds no node's bitset size, which "beyond" is measured by.
        masks = forest.beyond_category == "not_in_set" and \
            _sets_fit(forest, internal, compare.bits)
        return cls(
            ops=tuple(np.unique(forest.split_op[internal]).tolist()) or (OP_LT,),
            missing=tuple(np.unique(forest.missing[internal]).tolist()) or (MISSING_NAN,),
            default_left=bool(defaults[0]) if len(defaults) == 1 else
            (False if len(defaults) == 0 else None),
            category_rule=forest.category_rule,
            negative_category=forest.negative_category,
            beyond_category=forest.beyond_category,
            compare=compare,
            input=_INPUT[forest.input_dtype],
            category_mask=masks)

    @property
    def mask_type(self) -> ir.DType:
        """The integer type of category masks (the threshold's width)."""
        return _MASK[self.compare]

    @property
    def has_categorical(self) -> bool:
        return OP_CAT in self.ops

    @property
    def needs_flags(self) -> bool:
        """Whether the test reads the packed flags (operator, rule or direction vary)."""
        return len(self.ops) > 1 or len(self.missing) > 1 or self.default_left is None


_MASK = {ir.F64: ir.I64, ir.F32: ir.I32}


def _sets_fit(forest: Forest, internal: np.ndarray, bits: int) -> bool:
    """Whether some split is categorical and every category set holds only categories
    below ``bits``."""
    cat = np.flatnonzero(internal & (forest.split_op == OP_CAT))
    if len(cat) == 0:
        return False
    kept = bits // 32
    for node in cat[forest.cat_words[cat] > kept]:
        start = int(forest.cat_offset[node])
        if forest.cat_bitset[start + kept:start + int(forest.cat_words[node])].any():
            return False
    return True


def category_masks(forest: Forest, nodes: np.ndarray, bits: int) -> np.ndarray:
    """The category set of each global node in ``nodes`` as an unsigned ``bits``-bit mask
    of its categories below ``bits`` (0 for other nodes and padding)."""
    masks = np.zeros(len(nodes), dtype=np.uint64)
    real = nodes >= 0
    n = np.maximum(nodes, 0)
    cat = real & (forest.split_op[n] == OP_CAT) & ~forest.is_leaf[n]
    for word in range(bits // 32):
        has = cat & (forest.cat_words[n] > word)
        at = np.where(has, forest.cat_offset[n] + word, 0)
        words = forest.cat_bitset[at].astype(np.uint64) if len(forest.cat_bitset) \
            else np.zeros(len(nodes), dtype=np.uint64)
        masks |= np.where(has, words, 0).astype(np.uint64) << np.uint64(32 * word)
    return masks.astype(np.uint32) if bits == 32 else masks


# ---- node fields as numpy arrays ----------------------------------------------------

def round_down_f32(t: np.ndarray) -> np.ndarray:
    """The largest float32 <= each float64 ``t`` (-inf below the float32 range)."""
    with np.errstate(over="ignore"):
        near = np.asarray(t, dtype=np.float64).astype(np.float32)
        return np.where(near.astype(np.float64) > t,
                        np.nextafter(near, np.float32(-np.inf)), near)


def round_up_f32(t: np.ndarray) -> np.ndarray:
    """The smallest float32 >= each float64 ``t`` (+inf above the float32 range)."""
    with np.errstate(over="ignore"):
        near = np.asarray(t, dtype=np.float64).astype(np.float32)
        return np.where(near.astype(np.float64) < t,
                        np.nextafter(near, np.float32(np.inf)), near)


def thresholds(forest: Forest, spec: DecisionSpec, nodes: np.ndarray) -> np.ndarray:
    """Thresholds of global ``nodes`` (-1: padding, stored as 0) in the compare type
    (a leaf's is whatever its fields give: no walk compares it)."""
    real = nodes >= 0
    t = np.where(real, forest.threshold[np.maximum(nodes, 0)], 0.0)
    if spec.compare == ir.F64:
        return t
    op = np.where(real, forest.split_op[np.maximum(nodes, 0)], OP_CAT)
    # Each operator's rounding, computed only where the spec has the operator (one
    # pass, not three, for the usual forest of one operator).
    rounding = {OP_LT: round_up_f32, OP_LE: round_down_f32, OP_EQ: _exact_f32}
    present = [o for o in (OP_LT, OP_LE, OP_EQ) if o in spec.ops]
    if not present:
        return np.zeros(len(nodes), dtype=np.float32)
    return np.select([op == o for o in present], [rounding[o](t) for o in present],
                     np.float32(0)).astype(np.float32)


def _exact_f32(t: np.ndarray) -> np.ndarray:
    """Each float64 ``t`` as float32 where that is exact, else NaN (an equality no
    float32 value meets)."""
    with np.errstate(over="ignore"):
        return np.where(t.astype(np.float32).astype(np.float64) == t,
                        t.astype(np.float32), np.float32(np.nan))


def node_fields(forest: Forest, spec: DecisionSpec, *, leaf_bit: bool
                ) -> dict[str, np.dtype]:
    """The split fields :func:`node_arrays` makes, and their types: known before any
    table is filled (a layout's kernel is lowered while its tables fill).

    ``flags`` is present when the test needs it or ``leaf_bit`` is asked for (layouts that
    tell leaves by a flag); category fields only for forests with categorical splits
    whose sets are not masks.
    """
    fields = {"feature": np.dtype(np.int32),
              "threshold": np.dtype(np.float32 if spec.compare == ir.F32 else np.float64)}
    if spec.needs_flags or leaf_bit:
        fields["flags"] = np.dtype(np.int8)
    if spec.has_categorical and not spec.category_mask:
        if len(forest.cat_bitset) >= 2**31 - 1:
            raise SilvanForgeError("category bitsets of 2^31 words or more are not "
                                   "supported")
        fields.update(dict.fromkeys(("cat_offset", "cat_words", "cat_bitset"),
                                    np.dtype(np.int32)))
    return fields


def node_arrays(forest: Forest, spec: DecisionSpec, nodes: np.ndarray, *,
                leaf_bit: bool) -> dict[str, np.ndarray]:
    """The per-slot split fields for global ``nodes`` (-1 marks padding): those of
    :func:`node_fields`.

    Each field is computed for the split slots alone and put into zeros: padded layouts
    are mostly dummy and leaf slots (100 LightGBM trees of 63 leaves and depth 16 in
    ``reorg``: 13 million slots, 6200 splits; 1.2 s when every field was computed for
    every slot).
    """
    fields = node_fields(forest, spec, leaf_bit=leaf_bit)
    real = nodes >= 0
    leaf = real & forest.is_leaf[np.maximum(nodes, 0)]
    at = np.flatnonzero(real & ~leaf)
    split = nodes[at]
    threshold = np.zeros(len(nodes), dtype=fields["threshold"])
    threshold[at] = thresholds(forest, spec, split)
    cat = forest.split_op[split] == OP_CAT
    if spec.category_mask:
        # The mask's bits, not its value: a view, never a conversion (which could quiet
        # a mask that reads as a signalling NaN).
        bits = threshold.view(np.uint32 if spec.compare == ir.F32 else np.uint64)
        bits[at[cat]] = category_masks(forest, split[cat], spec.compare.bits)
    feature = np.zeros(len(nodes), dtype=np.int32)
    feature[at] = forest.feature[split]
    arrays = {"feature": feature, "threshold": threshold}
    if "flags" in fields:
        flags = (leaf.astype(np.int32) << LEAF_BIT).astype(np.int8)
        flags[at] = (forest.split_op[split].astype(np.int32) << OP_SHIFT
                     | forest.missing[split].astype(np.int32) << MISSING_SHIFT
                     | forest.default_left[split].astype(np.int32) << DEFAULT_LEFT_BIT)
        arrays["flags"] = flags
    if "cat_bitset" in fields:
        for field in ("cat_offset", "cat_words"):
            column = np.zeros(len(nodes), dtype=np.int32)
            column[at[cat]] = getattr(forest, field)[split[cat]]
            arrays[field] = column
        # One zero word at the end: the word load of a value outside every set reads
        # cat_offset + 0, in bounds even for an empty set at the end of the storage.
        arrays["cat_bitset"] = np.concatenate(
            [forest.cat_bitset, [0]]).astype(np.uint32).view(np.int32)
    return arrays


# ---- emission -----------------------------------------------------------------------

@dataclass(frozen=True)
class NodeLoads:
    """LIR loads of one node's fields; those the spec does not need are never emitted.
    ``cat_mask`` (an integer of the spec's mask type) defaults to the threshold's bits."""

    feature: ir.Expr
    threshold: ir.Expr
    flags: ir.Expr | None = None
    cat_offset: ir.Expr | None = None
    cat_words: ir.Expr | None = None
    cat_bitset: ir.Buffer | None = None
    cat_mask: ir.Expr | None = None
    cat_operand: "CategoryOperand | None" = None  # the row value's, computed beforehand


@dataclass(frozen=True)
class CategoryOperand:
    """A row value as the operand of mask category tests: ``bit``, of the mask type, is
    ``1 << category`` for a valid category and 0 otherwise (negative, NaN, too large,
    not an integer under the exact rule); ``negative`` is the category rule's negative
    test. A test is then one ``and`` with the node's mask, so code that tests one value
    at many nodes computes this once (:mod:`.code`)."""

    bit: ir.Expr
    negative: ir.Expr


def category_operand(spec: DecisionSpec, x: ir.Expr) -> CategoryOperand:
    """The operand of mask category tests for value ``x`` (of the compare type)."""
    F, M = spec.compare, spec.mask_type
    c, negative, valid = _category(spec, x, ir.Const(float(F.bits), F))
    shift = ir.Cast(ir.Select(valid, c, ir.Const(0.0, F)), M)
    bit = ir.Select(valid, ir.BinOp("shl", ir.Const(1, M), shift), ir.Const(0, M))
    return CategoryOperand(bit, negative)


# Coded category operands give a NaN and a negative value bits of their own, the two
# top bits of the mask's integer type, so that with coded masks a categorical node's
# whole test, missing and negative values included, is one ``and``: what tests of many
# nodes at once need, where the missing direction varies from node to node (:mod:`.mask`).
def coded_bits(mask: ir.DType) -> tuple[int, int]:
    """(the NaN bit, the negative bit) of coded operands and masks of type ``mask``."""
    return mask.bits - 1, mask.bits - 2


def coded_category_operand(spec: DecisionSpec, x: ir.Expr,
                           mask: ir.DType | None = None) -> ir.Expr:
    """The coded operand of value ``x`` (of the compare type), an integer of type
    ``mask`` (default: the spec's mask type): ``1 << category`` for a valid category
    below the two reserved bits, the NaN bit for a NaN, the negative bit for a value
    negative under the category rule, else 0."""
    F, M = spec.compare, mask or spec.mask_type
    nan_bit, negative_bit = coded_bits(M)
    c, negative, valid = _category(spec, x, ir.Const(float(negative_bit), F))
    shift = ir.Cast(ir.Select(valid, c, ir.Const(0.0, F)), M)
    # The NaN bit is the sign bit: as a constant, the negative number of its bits.
    other = ir.Select(ir.IsNaN(x), ir.Const(-(1 << nan_bit), M), ir.Select(
        negative, ir.Const(1 << negative_bit, M), ir.Const(0, M)))
    return ir.Select(valid, ir.BinOp("shl", ir.Const(1, M), shift), other)


def coded_category_masks(forest: Forest, spec: DecisionSpec, nodes: np.ndarray,
                         mask: ir.DType | None = None) -> np.ndarray | None:
    """The coded mask of each global node in ``nodes`` (0 for numeric nodes and
    padding; unsigned, of the width of ``mask``, default the spec's mask type): the
    node's set, the NaN bit where a NaN goes left, the negative bit where a negative
    value does. With the coded operand of a row's value, ``operand & mask != 0`` is
    :func:`go_left` at every categorical node. None when some categorical node has the
    "zero" missing rule (a zero would be missing or category 0 by its magnitude) or a
    set holding a reserved bit or beyond."""
    if not spec.category_mask:
        return None
    real = nodes >= 0
    n = np.maximum(nodes, 0)
    cat = real & (forest.split_op[n] == OP_CAT) & ~forest.is_leaf[n]
    if np.any(cat & (forest.missing[n] == MISSING_ZERO)):
        return None
    bits = (mask or spec.mask_type).bits
    # Every set lies below the threshold's width (category_mask): read them all.
    masks = category_masks(forest, nodes, spec.compare.bits).astype(np.uint64)
    nan_bit, negative_bit = coded_bits(mask or spec.mask_type)
    if np.any(masks >> np.uint64(negative_bit)):
        return None
    default = forest.default_left[n]
    # A NaN is missing (its default direction) except under rule "none", where it is 0.
    nan_left = np.where(forest.missing[n] == MISSING_NONE, masks & np.uint64(1) != 0, default)
    negative_left = default & (spec.negative_category == "missing")
    masks |= (nan_left.astype(np.uint64) << np.uint64(nan_bit)
              | negative_left.astype(np.uint64) << np.uint64(negative_bit))
    return np.where(cat, masks, 0).astype(np.uint32 if bits == 32 else np.uint64)


def _category(spec: DecisionSpec, x: ir.Expr,
              limit: ir.Expr) -> tuple[ir.Expr, ir.Expr, ir.Expr]:
    """(category as a float, negative under the category rule, valid below ``limit``)."""
    zero = ir.Const(0.0, spec.compare)
    c = ir.Math("trunc", x)
    negative = ir.Cmp("lt", c if spec.category_rule == "truncate" else x, zero)
    # Ordered compares: a NaN or an infinity fails `c < limit`, so no isfinite needed.
    valid = _and(ir.Not(negative), ir.Cmp("lt", c, limit))
    if spec.category_rule == "exact":
        valid = _and(valid, ir.Cmp("eq", c, x))
    return c, negative, valid


def _and(a: ir.Expr, b: ir.Expr) -> ir.Expr:
    if isinstance(a, ir.Const):
        return b if a.value else a
    if isinstance(b, ir.Const):
        return a if b.value else b
    return ir.BinOp("and", a, b)


def _or(a: ir.Expr, b: ir.Expr) -> ir.Expr:
    if isinstance(a, ir.Const):
        return a if a.value else b
    if isinstance(b, ir.Const):
        return b if b.value else a
    return ir.BinOp("or", a, b)


def _field(flags: ir.Expr, shift: int, mask: int) -> ir.Expr:
    """Bits ``shift .. shift+log2(mask+1)`` of the i8 flags, as an i32."""
    wide = ir.Cast(flags, ir.I32)
    return ir.BinOp("and", ir.BinOp("lshr", wide, ir.Const(shift, ir.I32)),
                    ir.Const(mask, ir.I32))


def _dispatch(selector: ir.Expr | None, cases: dict[int, ir.Expr]) -> ir.Expr:
    """``cases[selector]``: the only case when there is one, else a chain of selects."""
    keys = sorted(cases)
    result = cases[keys[-1]]
    for key in reversed(keys[:-1]):
        assert selector is not None
        result = ir.Select(ir.Cmp("eq", selector, ir.Const(key, ir.I32)), cases[key], result)
    return result


def is_leaf_flag(flags: ir.Expr) -> ir.Expr:
    """i1: the leaf bit of loaded flags."""
    return ir.Cmp("ne", _field(flags, LEAF_BIT, 1), ir.Const(0, ir.I32))


def go_left(spec: DecisionSpec, loads: NodeLoads, feature_value: FeatureLoader) -> ir.Expr:
    """i1: whether a row goes left at the node whose fields are ``loads``.

    >>> go_left(spec, NodeLoads(feature=f, threshold=t), lambda i: row_value(i))  # doctest: +SKIP
    """
    F = spec.compare
    feature = loads.feature  # a constant one (trees as code) is an i64 already
    x = feature_value(feature if type(feature) is ir.Const and feature.dtype == ir.I64
                      else ir.Cast(feature, ir.I64))
    if x.dtype != F:
        x = ir.Cast(x, F)
    multi_op = len(spec.ops) > 1
    op = _field(loads.flags, OP_SHIFT, 3) if multi_op else None
    rule = _field(loads.flags, MISSING_SHIFT, 3) if len(spec.missing) > 1 else None
    nan = ir.IsNaN(x)
    # Only MISSING_NONE compares a NaN (as 0); under the other rules a NaN is missing and
    # its value is never looked at, so one replacement serves every rule.
    xv = ir.Select(nan, ir.Const(0.0, F), x) if MISSING_NONE in spec.missing else x

    def missing_by(r: int) -> ir.Expr:  # built for the spec's rules only (one, as code)
        if r == MISSING_NAN:
            return nan
        if r == MISSING_ZERO:
            return _or(nan, ir.Cmp("le", ir.Math("fabs", x), ir.Const(ZERO_THRESHOLD, F)))
        return ir.Const(False, ir.BOOL)
    missing = _dispatch(rule, {r: missing_by(r) for r in spec.missing})

    holds_by_op: dict[int, ir.Expr] = {
        o: ir.Cmp(_COMPARE[o], xv, loads.threshold) for o in spec.ops if o != OP_CAT}
    if spec.has_categorical:
        in_set, negative, beyond = _category_test(spec, loads, xv)
        holds_by_op[OP_CAT] = in_set
        is_cat = ir.Cmp("eq", op, ir.Const(OP_CAT, ir.I32)) if multi_op \
            else ir.Const(True, ir.BOOL)
        if spec.negative_category == "missing":
            missing = _or(missing, _and(is_cat, negative))
        if beyond is not None:
            missing = _or(missing, _and(is_cat, beyond))
    holds = _dispatch(op, holds_by_op)

    if isinstance(missing, ir.Const) and not missing.value:
        return holds
    if spec.default_left is None:
        default = ir.Cmp("ne", _field(loads.flags, DEFAULT_LEFT_BIT, 1), ir.Const(0, ir.I32))
    else:
        default = ir.Const(spec.default_left, ir.BOOL)
    if spec.ops == (OP_CAT,) and set(spec.missing) == {MISSING_NAN} \
            and isinstance(default, ir.Const) and not default.value:
        # Missing here is a NaN (or a negative value), never a valid category, so never
        # in a set: the set test alone already sends it right.
        return holds
    if missing == nan and isinstance(default, ir.Const) and isinstance(holds, ir.Cmp) \
            and holds.op in _NEGATED:
        # An ordered compare is already false for a NaN, and the negation of the
        # opposite compare already true: the NaN test costs nothing (two fewer
        # instructions on each step of a walk).
        return holds if not default.value else \
            ir.Not(ir.Cmp(_NEGATED[holds.op], holds.a, holds.b))
    return ir.Select(missing, default, holds)


def _category_test(spec: DecisionSpec, loads: NodeLoads,
                   x: ir.Expr) -> tuple[ir.Expr, ir.Expr, ir.Expr | None]:
    """(in the node's set, negative under the category rule, at or beyond the node's
    bitset where ``beyond_category`` is "missing", else None) for value ``x``; the
    first is false whenever the value is not a valid category."""
    if spec.category_mask:
        M = spec.mask_type
        mask = loads.cat_mask if loads.cat_mask is not None else \
            ir.Bitcast(loads.threshold, M)
        operand = loads.cat_operand or category_operand(spec, x)
        return (ir.Cmp("ne", ir.BinOp("and", operand.bit, mask), ir.Const(0, M)),
                operand.negative, None)
    F = spec.compare
    limit = ir.Cast(ir.BinOp("mul", loads.cat_words, ir.Const(32, ir.I32)), F)
    c, negative, valid = _category(spec, x, limit)
    # Cast only a value known to fit; invalid values read word 0 of the set, in bounds.
    category = ir.Cast(ir.Select(valid, c, ir.Const(0.0, F)), ir.I64)
    word = ir.Load(loads.cat_bitset, ir.BinOp(
        "add", ir.Cast(loads.cat_offset, ir.I64),
        ir.BinOp("lshr", category, ir.Const(5, ir.I64))))
    bit = ir.BinOp("and", ir.BinOp("lshr", word, ir.Cast(
        ir.BinOp("and", category, ir.Const(31, ir.I64)), ir.I32)), ir.Const(1, ir.I32))
    beyond = _and(ir.Not(negative), ir.Not(ir.Cmp("lt", c, limit))) \
        if spec.beyond_category == "missing" else None
    return _and(valid, ir.Cmp("ne", bit, ir.Const(0, ir.I32))), negative, beyond
