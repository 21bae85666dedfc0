"""Linear TreeSHAP's tables: what the compiled contributions kernel reads of a forest.

The kernel (:mod:`.contribs`) computes path-dependent TreeSHAP in the form of Linear
TreeSHAP (Bifet et al., "Linear TreeShap", NeurIPS 2022): the Shapley weight of a leaf
path's element ``i`` is ``W_i = integral over [0, 1] of prod_{j != i} ((1 - t) z_j
+ t o_j) dt`` (a Beta integral per subset size), a polynomial of degree below the path's
number of distinct features ``d``, so a Gauss-Legendre rule of ``ceil(d / 2)`` points
gives it exactly. With ``P(t)`` the product over all of a path's elements, a row's
contribution of the edge into node ``c`` (parent feature ``f``, merged fractions
``z_c``, ``o_c``) is ``sum_q (o_c - z_c) w_q / ((1 - t_q) z_c + t_q o_c) * U_q(c)``,
where ``U_q(c)`` sums ``v_l P_l(t_q)`` over the leaves below ``c`` whose path meets ``f``
no more: one pass down the tree multiplies the factors, one pass up sums them (``S(c)``,
over every leaf below ``c``). As the contribution is linear in ``U``, a node ``m`` that
tests ``f`` again takes its own sum ``S(m)`` back out of the edge above it that tested
``f`` (``U(c) = S(c) - sum of S(m)`` over the nearest such ``m`` below ``c``): each
step of the pass up adds three terms to its feature's column.

Per tree, nodes are numbered breadth first (parents before children); per node ``c``:

Per internal node (a *step*), ``step_prev``: the node below the nearest edge above it
whose parent tests the same feature (-1 when none), where the row's ``o`` of that
feature so far is stored, and whose sum excludes this node's. Per node ``c``:

* ``ratio`` (3 x lanes): the factor ``P`` gains from the edge into ``c``, indexed by
  ``o_prev + o_c`` (``o_c`` is 1 only where ``o_prev`` is): the new merged factor over the one it replaces (the leaf value
  folded in at leaves, so that ``P`` at a leaf is already ``v P``);
* ``coeff`` (2 x lanes): ``(o - z_c) w_q / ((1 - t_q) z_c + t_q o)`` for ``o_c = o``;

The root has no edge: its ratios and coefficients are 0, so a step without ``prev``
reads the root's coefficients and takes nothing back out.

Where a factor is 0 (a zero cover) the ratios and coefficients are 0: the product they
would multiply is already 0, and ``o - z`` is 0 with it.

>>> tables = build_tables(forest)                    # doctest: +SKIP
>>> tables.lanes, tables.max_nodes                   # doctest: +SKIP
(4, 511)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..model import cover
from ..model.forest import Forest


@dataclass(frozen=True)
class ContribTables:
    """The arrays of :func:`build_tables` (module docstring). A *unit* is one output
    column of one tree that has splits (vector-leaf trees give one unit an output)."""

    lanes: int              # quadrature points, padded to the vector width
    max_nodes: int          # the most nodes of a unit (scratch per row)
    unit_steps: np.ndarray  # (units + 1,) int64: a unit's internal nodes in `step_*`
    unit_nodes: np.ndarray  # (units + 1,) int64: a unit's first slot in per-node tables
    step_global: np.ndarray  # global node of each step (its split fields)
    step_node: np.ndarray   # int32 tree-local BFS number of the step's node (its
    #                         children are 2i + 1 and 2i + 2 for the i-th step of a unit)
    step_target: np.ndarray  # int32 output * (n_features + 1) + feature
    step_prev: np.ndarray   # int32 BFS number below the last edge of its feature, or -1
    ratio: np.ndarray       # float64 (slots * 3 * lanes)
    coeff: np.ndarray       # float64 (slots * 2 * lanes)
    bias: np.ndarray        # (n_outputs,) the expected value column

    # Threads' shares of the kernel's scratch buffers lie at least a page (4 KB) apart,
    # whole pages each: hardware prefetchers stay within a page, so one thread's never
    # pulls in lines the other writes. Packed end to end, or 128 bytes apart, two
    # threads ran 1.16-1.18x one; 4 KB apart 1.79x, in the same process
    # (docs/ARCHITECTURE.md "Contributions (TreeSHAP)").
    @property
    def scratch_stride(self) -> int:
        """float64 values of ``scratch`` each thread owns (``max_nodes * lanes``, padded)."""
        return _pages(self.max_nodes * self.lanes * 8) // 8

    @property
    def ones_stride(self) -> int:
        """int32 values of ``ones`` each thread owns (``max_nodes``, padded)."""
        return _pages(self.max_nodes * 4) // 4


def _pages(size: int) -> int:
    """Bytes of the whole 4 KB pages holding ``size`` bytes and one page more."""
    return (-(-size // 4096) + 1) * 4096


@dataclass
class _Tree:
    """One tree in breadth-first order, with what every unit of it shares."""

    nodes: np.ndarray     # global node ids by BFS number
    left: np.ndarray      # BFS numbers of children (-1 at leaves)
    right: np.ndarray
    prev: np.ndarray      # per node: `step_prev` of its parent (-1 at the root)
    z: np.ndarray         # merged zero fraction of the edge into each node
    z_prev: np.ndarray    # ... of the edge at `prev` (1 when none)
    reach: np.ndarray     # product of all fractions from the root
    depth: int            # the most distinct features on a path


def build_tables(forest: Forest) -> ContribTables:
    """The tables of the contributions kernel for ``forest``
    (:class:`~silvanforge.errors.ContributionsError` when it has no covers)."""
    fractions = cover.edge_fractions(forest)
    scales = cover.tree_scales(forest)
    is_leaf = forest.is_leaf
    trees = [_bfs(forest, t, fractions, is_leaf) for t in range(forest.n_trees)]
    q = max([(t.depth + 1) // 2 for t in trees] + [1])
    lanes = 2 if q <= 2 else 4 if q <= 4 else -(-q // 4) * 4
    x, w = np.polynomial.legendre.leggauss(q)
    t_q = np.full(lanes, 0.5)
    w_q = np.zeros(lanes)
    t_q[:q], w_q[:q] = (x + 1) / 2, w / 2

    bias = forest.base_score.astype(np.float64).copy()
    parts: dict[str, list] = {k: [] for k in (
        "step_global", "step_node", "step_target", "step_prev",
        "ratio", "coeff")}
    unit_steps, unit_nodes = [0], [0]
    width = forest.n_features + 1
    for t, tree in enumerate(trees):
        leaf = tree.left < 0
        for k in range(forest.leaf_width):
            value = forest.leaf_value[tree.nodes, k] * scales[t, k]
            output = int(forest.tree_output[t]) + k
            bias[output] += float(np.sum(np.where(leaf, value * tree.reach, 0.0)))
            if leaf.all():
                continue  # a single leaf adds only to the expected value
            internal = np.flatnonzero(~leaf)
            parts["step_global"].append(tree.nodes[internal])
            parts["step_node"].append(internal)
            parts["step_target"].append(output * width + forest.feature[tree.nodes[internal]])
            parts["step_prev"].append(tree.prev[tree.left[internal]])
            ratio, coeff = _factors(tree, np.where(leaf, value, 1.0), t_q, w_q)
            parts["ratio"].append(ratio.reshape(-1))
            parts["coeff"].append(coeff.reshape(-1))
            unit_steps.append(unit_steps[-1] + len(internal))
            unit_nodes.append(unit_nodes[-1] + len(tree.nodes))

    def cat(name: str, dtype: type) -> np.ndarray:
        return np.concatenate([np.asarray(p, dtype=dtype) for p in parts[name]]) \
            if parts[name] else np.zeros(0, dtype=dtype)

    return ContribTables(
        lanes=lanes, max_nodes=max(np.diff(unit_nodes), default=1),
        unit_steps=np.asarray(unit_steps, np.int64), unit_nodes=np.asarray(unit_nodes, np.int64),
        step_global=cat("step_global", np.int64), step_node=cat("step_node", np.int32),
        step_target=cat("step_target", np.int32), step_prev=cat("step_prev", np.int32),
        ratio=cat("ratio", np.float64), coeff=cat("coeff", np.float64), bias=bias)


def _bfs(forest: Forest, t: int, fractions: np.ndarray, is_leaf: np.ndarray) -> _Tree:
    """Tree ``t`` breadth first, with each node's feature history along its path: level
    by level in numpy (a Python loop over the nodes of a deep forest took seconds)."""
    span = forest.tree(t)
    left, right = forest.left[span].astype(np.int64), forest.right[span].astype(np.int64)
    feature, leaf, frac = forest.feature[span], is_leaf[span], fractions[span]
    size = len(left)
    parent = np.full(size, -1, dtype=np.int64)
    internal = np.flatnonzero(~leaf)
    parent[left[internal]], parent[right[internal]] = internal, internal
    levels = [np.zeros(1, dtype=np.int64)]
    while True:
        split = levels[-1][~leaf[levels[-1]]]
        if not len(split):
            break
        # Left then right child of each node in order: the i-th internal node's
        # children are numbered 2i + 1 and 2i + 2.
        levels.append(np.stack([left[split], right[split]], axis=1).reshape(-1))
    # Per internal node: the node below the nearest edge above it whose parent tests
    # its feature (-1 when none), found by climbing all nodes one level at a time.
    prev = np.full(size, -1, dtype=np.int64)
    below, above = np.arange(size), parent.copy()
    climbing = internal
    while len(climbing):
        up = above[climbing]
        has_up = up >= 0
        same = has_up & (feature[np.maximum(up, 0)] == feature[climbing])
        prev[climbing[same]] = below[climbing[same]]
        climbing = climbing[has_up & ~same]
        below[climbing], above[climbing] = above[climbing], parent[above[climbing]]
    # Down the levels: merged zero fractions, products of fractions, distinct features.
    edge_prev = np.full(size, -1, dtype=np.int64)  # `prev` of each node's parent
    z, z_prev, reach = np.ones(size), np.ones(size), np.ones(size)
    distinct = np.zeros(size, dtype=np.int64)
    for level in levels[1:]:
        p = parent[level]
        pp = prev[p]
        edge_prev[level] = pp
        z_prev[level] = np.where(pp >= 0, z[np.maximum(pp, 0)], 1.0)
        z[level] = z_prev[level] * frac[level]
        reach[level] = reach[p] * frac[level]
        distinct[level] = distinct[p] + (pp < 0)
    order = np.concatenate(levels)
    number = np.empty(size, dtype=np.int64)
    number[order] = np.arange(size)

    def numbered(local: np.ndarray) -> np.ndarray:
        return np.where(local >= 0, number[np.maximum(local, 0)], -1)

    return _Tree(span.start + order, numbered(np.where(leaf, -1, left)[order]),
                 numbered(np.where(leaf, -1, right)[order]), numbered(edge_prev[order]),
                 z[order], z_prev[order], reach[order], int(distinct[leaf].max()))


def _factors(tree: _Tree, value: np.ndarray, t: np.ndarray,
             w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(nodes, 3, lanes) ratios and (nodes, 2, lanes) coefficients (module docstring);
    ``value`` multiplies the ratios (leaf values at leaves, 1 elsewhere)."""
    z, z_prev = tree.z[:, None], tree.z_prev[:, None]
    has_prev = (tree.prev >= 0)[:, None]

    def factor(zz: np.ndarray, o: float) -> np.ndarray:
        return (1.0 - t) * zz + t * o

    def divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(b != 0, a / np.where(b != 0, b, 1.0), 0.0)

    ratio = np.zeros((len(z), 3, len(t)))
    ratio[:, 0] = np.where(has_prev, divide(factor(z, 0.0), factor(z_prev, 0.0)), 0.0)
    for o in (0, 1):
        ratio[:, 1 + o] = divide(factor(z, o), np.where(has_prev, factor(z_prev, 1.0), 1.0))
    ratio *= value[:, None, None]
    coeff = np.stack([divide((o - z) * w, factor(z, o)) for o in (0.0, 1.0)], axis=1)
    ratio[0], coeff[0] = 0.0, 0.0  # the root has no edge
    return ratio, coeff
