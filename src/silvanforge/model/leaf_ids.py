"""Leaf output: the leaf each row reaches in each tree, numbered and shaped as the source
library numbers and shapes it (XGBoost and LightGBM ``pred_leaf``, scikit-learn
``apply``, ONNX node ids).

Compiled code computes it as a prediction of a derived forest (:func:`leaf_id_forest`):
the same trees, each leaf's value its id, each tree writing a column of its own. The
ids are whole numbers below 2^31, exact in the float64 sums, and exact in a float32 leaf
table only up to 2^24 (``representations/leaves.py`` keeps float64 tables unless every
value is a float32 exactly), so no precision setting rounds them.

>>> ids = leaf_ids.shaped(forest, reference_leaf_ids)          # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import UnsupportedModelError
from .forest import Forest


def source_ids(forest: Forest) -> np.ndarray:
    """Per node, the number the library's leaf output gives it: ``forest.source_id``, or
    for a forest built by hand (no ``source``) the tree-local node index.

    >>> source_ids(forest)[forest.is_leaf]                         # doctest: +SKIP
    """
    if forest.source_id is not None:
        return forest.source_id
    if forest.source:
        raise UnsupportedModelError(
            f"this {forest.source} forest has no source node ids (it was saved by an older "
            "SilvanForge): load the model again for leaf output")
    return np.arange(forest.n_nodes) - np.repeat(forest.tree_offsets[:-1], forest.tree_sizes)


def leaf_id_forest(forest: Forest, columns: Any = None) -> Forest:
    """The forest whose prediction is the leaf ids: tree ``t`` adds its reached leaf's
    source id to output ``columns[t]`` (default ``t``), one output a tree; no base score,
    averaging, transform or linear leaves.

    >>> leaf_id_forest(forest).n_outputs == forest.n_trees         # doctest: +SKIP
    True
    """
    ids = np.where(forest.is_leaf, source_ids(forest), 0).astype(np.float64)
    columns = np.arange(forest.n_trees) if columns is None else np.asarray(columns)
    return forest.replace(
        leaf_value=ids[:, None], tree_output=columns, n_outputs=forest.n_trees,
        base_score=np.zeros(forest.n_trees), average=False, average_in_margin=True,
        post_transform="identity", transform_params={}, flat_output=False, linear=None,
        class_labels=None, objective="leaf ids")


def shaped(forest: Forest, ids: np.ndarray) -> np.ndarray:
    """(rows, trees) leaf ids, in tree order, as the library's int32 result: (rows,
    trees), 1-D for one tree with ``leaf_layout`` "trees_1d", or (rows, rounds,
    trees_per_round) for "rounds".

    >>> shaped(forest, np.zeros((5, forest.n_trees))).dtype        # doctest: +SKIP
    dtype('int32')
    """
    ids = ids.astype(np.int32)
    if forest.leaf_layout == "rounds":
        return ids.reshape(len(ids), forest.n_rounds, forest.trees_per_round)
    if forest.leaf_layout == "trees_1d" and forest.n_trees == 1:
        return ids[:, 0]
    return ids
