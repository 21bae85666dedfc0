"""Post-transforms: margin (raw sum of trees plus base score) → the library's value.

Each transform is data on the Forest (a name and a dict of parameters); this table is the
one place that gives the names meaning, for the reference evaluator and later for the
compiled code. A transform takes the margin as a float64 array of shape (rows, n_outputs)
and returns a float64 array of shape (rows, m); m may differ from n_outputs (``argmax``
returns one column, ``sigmoid_pair`` two).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

Transform = Callable[[np.ndarray, dict], np.ndarray]


def _sigmoid(margin: np.ndarray, params: dict) -> np.ndarray:
    alpha = float(params.get("alpha", 1.0))
    # exp of a large positive number overflows to inf, and 1/(1+inf) is exactly 0: the
    # limit, so the warning is noise.
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-alpha * margin))


def _softmax(margin: np.ndarray, params: dict) -> np.ndarray:
    shifted = margin - margin.max(axis=1, keepdims=True)
    e = np.exp(shifted)
    return e / e.sum(axis=1, keepdims=True)


def _exp(margin: np.ndarray, params: dict) -> np.ndarray:
    with np.errstate(over="ignore"):
        return np.exp(margin)


def _hinge(margin: np.ndarray, params: dict) -> np.ndarray:
    return (margin > 0).astype(np.float64)


def _argmax(margin: np.ndarray, params: dict) -> np.ndarray:
    # np.argmax returns the first maximum, as XGBoost's multi:softmax does.
    return np.argmax(margin, axis=1).astype(np.float64)[:, None]


def _signed_square(margin: np.ndarray, params: dict) -> np.ndarray:
    return np.sign(margin) * margin * margin


def _log1p_exp(margin: np.ndarray, params: dict) -> np.ndarray:
    with np.errstate(over="ignore"):
        return np.log1p(np.exp(margin))


def _sigmoid_pair(margin: np.ndarray, params: dict) -> np.ndarray:
    p = _sigmoid(margin[:, :1], params)
    return np.hstack([1.0 - p, p])


TRANSFORMS: dict[str, Transform] = {
    "identity": lambda margin, params: margin,
    "sigmoid": _sigmoid,
    "softmax": _softmax,
    "exp": _exp,
    "hinge": _hinge,
    "argmax": _argmax,
    "signed_square": _signed_square,
    "log1p_exp": _log1p_exp,
    "sigmoid_pair": _sigmoid_pair,
}


def apply(name: str, params: dict, margin: np.ndarray) -> np.ndarray:
    """Apply the named transform to a (rows, n_outputs) float64 margin."""
    return TRANSFORMS[name](margin, params)
