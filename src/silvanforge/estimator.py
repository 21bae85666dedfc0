"""``compile_estimator``: a compiled stand-in for a fitted XGBoost, LightGBM or
scikit-learn estimator, with the estimator's own inference methods.

The stand-in holds one :class:`~silvanforge.Predictor` and answers ``predict`` (class
labels for classifiers), ``predict_proba``, ``decision_function`` and ``apply`` where the
estimator has them, from the predictor's value, margin and leaf outputs, plus
``classes_``, ``n_features_in_`` and ``feature_names_in_``. It pickles with its machine
code (:meth:`Predictor.to_bytes`): unpickling compiles nothing.

>>> import silvanforge
>>> fast = silvanforge.compile_estimator(fitted_classifier)      # doctest: +SKIP
>>> fast.predict(X)                                              # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import UnsupportedModelError
from .runtime import compile
from .runtime.predictor import Predictor

# scikit-learn's boosted classifiers label a binary row from its margin, and differ at 0
# (GradientBoosting: ``>= 0``, HistGradientBoosting: ``> 0``); every other classifier
# takes the argmax of its probabilities (a tie: the first class).
_MARGIN_LABELS = {"GradientBoostingClassifier": np.greater_equal,
                  "HistGradientBoostingClassifier": np.greater}
_METHODS = ("predict_proba", "decision_function", "apply")


class _IfTheSourceHasIt:
    """A method the stand-in has only when its source estimator has it: otherwise an
    AttributeError, so ``hasattr`` answers as it would for the source."""

    def __init__(self, method: Any) -> None:
        self.method = method
        self.__doc__ = method.__doc__

    def __get__(self, obj: Any, cls: type) -> Any:
        if obj is None:
            return self.method
        if self.method.__name__ not in obj._methods:
            raise AttributeError(f"{obj.estimator_type} has no {self.method.__name__}")
        return self.method.__get__(obj, cls)


class CompiledEstimator:
    """The compiled inference of a fitted estimator (see :func:`compile_estimator`).

    ``predictor`` is the compiled model; the methods the source estimator lacks raise
    ``AttributeError`` as they would on it.
    """

    def __init__(self, predictor: Predictor, source: Any) -> None:
        self.predictor = predictor
        self.estimator_type = type(source).__name__
        self.n_features_in_ = int(source.n_features_in_)
        names = getattr(source, "feature_names_in_", None)
        if names is not None:
            self.feature_names_in_ = np.asarray(names, dtype=object)
        self._classifier = hasattr(source, "classes_") and hasattr(source, "predict_proba")
        if self._classifier:
            self.classes_ = np.asarray(source.classes_)
        self._methods = frozenset(m for m in _METHODS if callable(getattr(source, m, None)))

    def predict(self, X: Any) -> np.ndarray:
        """The estimator's ``predict``: class labels for a classifier, else its value."""
        if not self._classifier:
            return self.predictor.predict(X)
        rule = _MARGIN_LABELS.get(self.estimator_type)
        if rule is None:
            index = np.argmax(self.predict_proba(X), axis=1)
        else:
            margin = self.predictor.predict(X, output="margin")
            index = rule(margin, 0).astype(int) if margin.ndim == 1 else \
                np.argmax(margin, axis=1)
        return self.classes_[index]

    @_IfTheSourceHasIt
    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities, (rows, classes)."""
        proba = self.predictor.predict(X)
        return np.column_stack([1.0 - proba, proba]) if proba.ndim == 1 else proba

    @_IfTheSourceHasIt
    def decision_function(self, X: Any) -> np.ndarray:
        """The margin (raw score), shaped as the estimator's."""
        return self.predictor.predict(X, output="margin")

    @_IfTheSourceHasIt
    def apply(self, X: Any) -> np.ndarray:
        """The leaf each row reaches in each tree, numbered and shaped as the estimator's
        ``apply`` (int32)."""
        return self.predictor.predict(X, output="leaf")

    def __repr__(self) -> str:
        return f"<CompiledEstimator of a {self.estimator_type}: {self.predictor!r}>"


def compile_estimator(estimator: Any, **compile_options: Any) -> CompiledEstimator:
    """Compile a fitted estimator into a :class:`CompiledEstimator` with its inference
    methods. ``compile_options`` are :func:`silvanforge.compile`'s (``n_jobs``,
    ``iteration_range``, ...; a CPU target).

    Supported: XGBClassifier/XGBRegressor/XGBRanker, LGBMClassifier/LGBMRegressor/
    LGBMRanker, and scikit-learn's RandomForest*, ExtraTrees*, GradientBoosting* and
    HistGradientBoosting* (HistGradientBoosting has no ``apply``: leaf ids are
    ``compiled.predictor.predict(X, output="leaf")``).

    >>> fast = compile_estimator(XGBClassifier().fit(X, y), n_jobs=1)   # doctest: +SKIP
    >>> fast.predict_proba(X)                                           # doctest: +SKIP
    """
    if not hasattr(estimator, "n_features_in_") or not hasattr(estimator, "predict"):
        raise UnsupportedModelError(
            f"compile_estimator takes a fitted scikit-learn-style estimator, not a "
            f"{type(estimator).__name__}; use silvanforge.compile for boosters and files")
    predictor = compile(estimator, **compile_options)
    if not isinstance(predictor, Predictor):
        raise UnsupportedModelError("compile_estimator builds CPU predictors (target 'cpu')")
    return CompiledEstimator(predictor, estimator)
