"""Tile shapes and the lookup table that turns a tile's comparison bits into an exit.

A tile of size ``n`` is a connected piece of a tree with ``n`` nodes; its *shape* is that
piece as a binary tree of indistinguishable nodes (seed 000 §3.3). There are Catalan(n)
shapes: 1, 2, 5, 14, 42, 132, 429, 1430 for n = 1..8.

Conventions (seed 000 §3.5-§3.7), relied on by every later stage:

- Nodes inside a tile are numbered in level order, left to right within a level.
- A shape has ``n + 1`` exits (edges leaving the tile), numbered left to right.
- Comparison bits are packed with node 0's outcome in the most significant of the ``n``
  bits; bit 1 means the predicate holds, i.e. go left.
- Shape ids are stable: shapes are sorted by their *preorder left-size sequence* (for
  every node in preorder, the number of nodes in its left subtree), in descending
  lexicographic order. Equivalently: larger left subtrees first, then by the left
  subtree's id, then by the right subtree's id. Shape 0 is the left chain, the last shape
  the right chain, and shape ``i`` mirrors shape ``count - 1 - i``. For n = 3 the order is
  left chain, left-right zigzag, balanced, right-left zigzag, right chain.

>>> s = tile_shapes(3)
>>> s.count, s.children[2].tolist()          # shape 2 is the balanced one
(5, [[1, 2], [-1, -1], [-1, -1]])
>>> int(s.lut[0, 0b110])                      # left chain, node 2 false: second exit
1
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType
from typing import Mapping, Optional

import numpy as np

from ..errors import TilingError

MAX_TILE_SIZE = 8

# A shape as nested (left, right) pairs; None is an exit.
_Nested = Optional[tuple]


@dataclass(frozen=True, eq=False)
class TileShapes:
    """Every shape of one tile size, as arrays indexed by shape id (read-only).

    ``children[s, i, side]`` (side 0 = left, 1 = right) is the level-order index of node
    ``i``'s child inside the tile, or -1 where that edge leaves the tile;
    ``exits[s, i, side]`` is the exit index of that edge, or -1 where it stays inside.
    ``lut[s, bits]`` is the exit a walk takes for comparison outcome ``bits``.
    ``ids`` maps ``children[s].tobytes()`` back to ``s``.
    """

    size: int
    children: np.ndarray  # (count, size, 2) int8
    exits: np.ndarray     # (count, size, 2) int8
    lut: np.ndarray       # (count, 2**size) int8
    ids: Mapping[bytes, int]

    @property
    def count(self) -> int:
        return len(self.children)

    def shape_id(self, children: np.ndarray) -> int:
        """The id of the shape whose level-order child table is ``children`` ((size, 2)).

        >>> tile_shapes(2).shape_id(np.array([[-1, 1], [-1, -1]]))
        1
        """
        return self.ids[np.asarray(children, dtype=np.int8).tobytes()]


@lru_cache(maxsize=None)
def tile_shapes(size: int) -> TileShapes:
    """The shapes and LUT of tile size ``size`` (1..8); computed once, then cached.

    >>> [tile_shapes(n).count for n in range(1, 9)]
    [1, 2, 5, 14, 42, 132, 429, 1430]
    """
    if not isinstance(size, (int, np.integer)) or not 1 <= size <= MAX_TILE_SIZE:
        raise TilingError(f"tile size must be an integer in 1..{MAX_TILE_SIZE}, not {size!r}")
    size = int(size)
    tables = [_level_order(shape, size) for shape in _nested_shapes(size)]
    children = _frozen(np.array([c for c, _ in tables], dtype=np.int8))
    exits = _frozen(np.array([e for _, e in tables], dtype=np.int8))
    ids = MappingProxyType({c.tobytes(): s for s, c in enumerate(children)})
    return TileShapes(size, children, exits, _frozen(_lut(children, exits)), ids)


@lru_cache(maxsize=None)
def _nested_shapes(n: int) -> tuple[_Nested, ...]:
    """All shapes with ``n`` nodes in id order (see the module docstring)."""
    if n == 0:
        return (None,)
    return tuple((left, right) for k in range(n - 1, -1, -1)
                 for left in _nested_shapes(k) for right in _nested_shapes(n - 1 - k))


def _level_order(shape: _Nested, size: int) -> tuple[list, list]:
    """(children, exits) tables of a nested shape: level-order nodes, in-order exits."""
    # Subtrees may be the very same tuple object, so nodes are told apart by position.
    children: list[list[int]] = []
    queue = deque([shape])
    while queue:
        node = queue.popleft()
        row = []
        for sub in node:
            if sub is None:
                row.append(-1)
            else:
                queue.append(sub)
                row.append(len(children) + len(queue))
        children.append(row)
    exits = [[-1, -1] for _ in range(size)]
    count = 0

    def number_exits(i: int) -> None:  # in-order: an exit's rank among exits, left to right
        nonlocal count
        for side in (0, 1):
            if children[i][side] >= 0:
                number_exits(children[i][side])
            else:
                exits[i][side] = count
                count += 1

    number_exits(0)
    return children, exits


def _lut(children: np.ndarray, exits: np.ndarray) -> np.ndarray:
    """Walk every shape on every outcome at once; a path in a tile has at most n nodes."""
    count, n, _ = children.shape
    bits = np.arange(1 << n)[None, :]
    shape = np.arange(count)[:, None]
    node = np.zeros((count, 1 << n), dtype=np.int64)
    result = np.full((count, 1 << n), -1, dtype=np.int8)
    for _ in range(n):
        side = 1 - ((bits >> (n - 1 - node)) & 1)  # bit 1 = go left = side 0
        out = exits[shape, node, side]
        result = np.where(result < 0, out, result)
        node = np.where(result < 0, children[shape, node, side], node)
    assert (result >= 0).all()
    return result


def _frozen(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a
