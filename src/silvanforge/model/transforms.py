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


def _isolation_score(margin: np.ndarray, params: dict) -> np.ndarray:
    # scikit-learn's IsolationForest: the margin is the mean path length; c is the
    # average path length of a tree grown on max_samples_ rows (0 for one row, where
    # sklearn fixes the ratio at 1). offset=offset_ gives decision_function, 0 gives
    # score_samples.
    c = float(params["c"])
    ratio = margin / c if c != 0 else np.ones_like(margin)
    return -(2.0 ** -ratio) - float(params.get("offset", 0.0))


def _isolation_label(margin: np.ndarray, params: dict) -> np.ndarray:
    # IsolationForest.predict: -1 (outlier) where decision_function < 0, else +1.
    return np.where(_isolation_score(margin, params) < 0, -1.0, 1.0)


def _onnx_probit(margin: np.ndarray, params: dict) -> np.ndarray:
    # onnxruntime's PROBIT is sqrt(2) * erfinv(2p - 1) with its own float32 erfinv: the
    # Winitzki approximation with a = 0.147 (onnxruntime ml_common.h, ErfInv). Every step
    # is float32 there, so it is here; p outside (0, 1) gives NaN or inf there too.
    f = np.float32
    x = f(2) * margin.astype(f) - f(1)
    with np.errstate(all="ignore"):
        sign = np.where(x < 0, f(-1), f(1))
        x = (f(1) - x) * (f(1) + x)
        log = np.log(x)
        v = f(2) / (f(np.pi) * f(0.147)) + f(0.5) * log
        v2 = f(1) / f(0.147) * log
        v3 = -v + np.sqrt(v * v - v2)
        return (f(np.sqrt(2)) * (sign * np.sqrt(v3))).astype(np.float64)


def _onnx_softmax_zero(margin: np.ndarray, params: dict) -> np.ndarray:
    # onnxruntime's SOFTMAX_ZERO: scores within 1e-7 of zero (tested in float32) stay out of
    # the sum and come out as score * exp(-max), i.e. (nearly) zero; an all-zero row is 0/0.
    vmax = margin.max(axis=1, keepdims=True)
    counted = np.abs(margin.astype(np.float32)) > np.float32(1e-7)
    with np.errstate(all="ignore"):
        e = np.where(counted, np.exp(margin - vmax), margin * np.exp(-vmax))
        return e / np.where(counted, e, 0.0).sum(axis=1, keepdims=True)


def _onnx_binary_logistic(margin: np.ndarray, params: dict) -> np.ndarray:
    # onnxruntime's binary classifier with one score column s: [1 - sigmoid(s), sigmoid(s)],
    # where the margin (what it outputs without post-transform) holds s in column 1.
    p = _sigmoid(margin[:, 1:2], params)
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
    "isolation_score": _isolation_score,
    "isolation_label": _isolation_label,
    "onnx_probit": _onnx_probit,
    "onnx_softmax_zero": _onnx_softmax_zero,
    "onnx_binary_logistic": _onnx_binary_logistic,
}


def apply(name: str, params: dict, margin: np.ndarray) -> np.ndarray:
    """Apply the named transform to a (rows, n_outputs) float64 margin."""
    return TRANSFORMS[name](margin, params)
