"""Node covers as TreeSHAP reads them: the share of a node's training weight that each
child received, the probability of a branch when its feature is unknown.

Both the reference TreeSHAP (:func:`silvanforge.reference.contributions`) and the
compiled one (:mod:`silvanforge.representations.contribs_tables`) start here, so the two
agree on the edge cases: the share is ``cover[child] / cover[parent]`` (the libraries
divide by the parent's own cover, not by the sum of its children's), and a parent whose
cover is 0 gives its children a share of 0 (the libraries divide by zero there).

>>> fractions = edge_fractions(forest)                   # doctest: +SKIP
"""

from __future__ import annotations

import numpy as np

from ..errors import ContributionsError
from .forest import Forest


def require_contributions(forest: Forest) -> np.ndarray:
    """The forest's covers, or :class:`ContributionsError` saying why it has no SHAP
    contributions.

    >>> require_contributions(silvanforge.load("model.onnx"))   # doctest: +SKIP
    Traceback (most recent call last):
    ContributionsError: SHAP contributions need node covers ...
    """
    if forest.cover is None:
        raise ContributionsError(
            f"SHAP contributions need node covers (the training weight that reached each "
            f"node), and this model from {forest.source or 'its source'} has none: load "
            f"the model from XGBoost, LightGBM or scikit-learn (ONNX models carry no "
            f"covers)")
    if forest.linear is not None:
        raise ContributionsError("SHAP contributions of linear-leaf trees (LightGBM "
                                 "linear_tree) are not supported")
    return forest.cover


def parents(forest: Forest) -> np.ndarray:
    """Per node: the global index of its parent, -1 for roots.

    >>> parents(forest)[forest.tree_offsets[:-1]]           # doctest: +SKIP
    array([-1, -1, ...])
    """
    base = np.repeat(forest.tree_offsets[:-1], forest.tree_sizes)
    internal = np.flatnonzero(~forest.is_leaf)
    parent = np.full(forest.n_nodes, -1, dtype=np.int64)
    parent[forest.left[internal] + base[internal]] = internal
    parent[forest.right[internal] + base[internal]] = internal
    return parent


def edge_fractions(forest: Forest) -> np.ndarray:
    """Per node: ``cover[node] / cover[parent]`` (1 at roots, 0 under a parent of cover
    0); :class:`ContributionsError` when the forest has no covers."""
    cover = require_contributions(forest)
    parent = parents(forest)
    above = np.where(parent >= 0, cover[np.maximum(parent, 0)], 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(parent < 0, 1.0, np.where(above > 0, cover / above, 0.0))


def tree_scales(forest: Forest) -> np.ndarray:
    """(n_trees, leaf_width): the factor of each tree's leaf values in the margin (the
    reciprocal of its output's tree count when the margin averages the trees, else 1).

    >>> tree_scales(random_forest_of_100_trees)[0]          # doctest: +SKIP
    array([0.01])
    """
    width = forest.leaf_width
    outputs = forest.tree_output[:, None] + np.arange(width)[None, :]
    if not (forest.average and forest.average_in_margin):
        return np.ones(outputs.shape)
    return 1.0 / np.maximum(forest.trees_per_output(), 1)[outputs]
