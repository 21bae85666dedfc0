"""The Forest's optional per-node arrays (``cover``, ``source_id``): validated, carried
through reordering, saved and loaded."""

import numpy as np
import pytest

from silvanforge.errors import ModelFormatError
from silvanforge.hir.probability import permute_trees
from silvanforge.model import serialize
from silvanforge.model.builder import Tree, build_forest


def _forest(cover=True, source_id=True):
    trees = [Tree(left=[1, -1, -1], right=[2, -1, -1], feature=[0, 0, 0],
                  threshold=[0.5, 0, 0], leaf_value=[0, 1.0 + t, 2.0 + t],
                  cover=[10.0 + t, 4.0, 6.0 + t] if cover else None,
                  source_id=[0, 7 + t, 9] if source_id else None) for t in range(2)]
    return build_forest(trees, n_features=1, n_outputs=1)


def test_absent_unless_every_tree_has_it():
    assert _forest(cover=False, source_id=False).cover is None
    trees = [Tree(left=[-1], right=[-1], feature=[0], threshold=[0], leaf_value=[1.0],
                  cover=[1.0]), Tree(left=[-1], right=[-1], feature=[0], threshold=[0],
                                     leaf_value=[1.0])]
    assert build_forest(trees, n_features=1, n_outputs=1).cover is None


def test_checked():
    with pytest.raises(ModelFormatError, match="cover"):
        _forest().replace(cover=np.array([1.0, -1.0, 1.0, 1.0, 1.0, 1.0]))
    with pytest.raises(ModelFormatError, match="source_id"):
        _forest().replace(source_id=np.arange(5))
    with pytest.raises(ModelFormatError, match="source node id"):
        _forest().replace(source_id=np.array([0, 1, 2, 0, -1, 2]))
    with pytest.raises(ModelFormatError, match="2 cover values for 3 nodes"):
        build_forest([Tree(left=[1, -1, -1], right=[2, -1, -1], feature=0,
                           threshold=[0.5, 0, 0], leaf_value=[0, 1, 2], cover=[1, 2])],
                     n_features=1, n_outputs=1)


def test_carried_by_reordering_and_saving():
    f = _forest()
    p = permute_trees(f, np.array([1, 0]))
    assert p.cover.tolist() == [11.0, 4.0, 7.0, 10.0, 4.0, 6.0]
    assert p.source_id.tolist() == [0, 8, 9, 0, 7, 9]
    back = serialize.from_arrays(*serialize.to_arrays(f))
    assert np.array_equal(back.cover, f.cover) and np.array_equal(back.source_id, f.source_id)
    bare = serialize.from_arrays(*serialize.to_arrays(_forest(False, False)))
    assert bare.cover is None and bare.source_id is None
