"""A compiled predictor on an engine's worker processes (Dask, Spark, Ray).

The driver saves the predictor once (:meth:`~silvanforge.Predictor.to_bytes`: model,
plan and machine code) and names it by the SHA-256 of those bytes; the engine's own
broadcast carries the bytes to each worker once; each worker process loads them once,
the first time a partition asks, and keeps the predictor by that digest for every later
partition. Loading trusts the code (the driver built it: a saved predictor is a
program) and so never compiles on a worker of the same CPU features; with
``SILVANFORGE_COMPILE=forbid`` on the workers, a load that would compile is an error
instead of a hidden cost.

>>> import silvanforge
>>> predictor = silvanforge.compile("model.json")          # doctest: +SKIP
>>> digest, data = package(predictor)                      # doctest: +SKIP
>>> loaded(digest, lambda: data) is predictor              # doctest: +SKIP
True
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from typing import Callable, Sequence

import numpy as np

from .errors import InputError
from .model.tables import generic
from .runtime import Predictor

# Predictors a process keeps by digest; more are dropped oldest first (a long-lived
# worker that served many models would otherwise keep them all).
KEEP = 8
_loaded: OrderedDict[str, Predictor] = OrderedDict()
_lock = threading.Lock()  # a Dask worker runs partitions on several threads
_loads = 0


def package(predictor: Predictor) -> tuple[str, bytes]:
    """The predictor's saved bytes and their SHA-256 (hex), the name workers know it by.

    The driver's own process keeps ``predictor`` under that name, so a partition
    computed there (Dask's synchronous scheduler, Ray's local tasks) loads nothing.
    """
    if not isinstance(predictor, Predictor):
        raise InputError(f"the engines take a CPU Predictor (silvanforge.compile(model)), "
                         f"not {type(predictor).__name__}")
    data = predictor.to_bytes()
    digest = hashlib.sha256(data).hexdigest()
    _keep(digest, predictor)
    return digest, data


def _keep(digest: str, predictor: Predictor) -> None:
    with _lock:
        _loaded[digest] = predictor
        _loaded.move_to_end(digest)
        while len(_loaded) > KEEP:
            _loaded.popitem(last=False)


def loaded(digest: str, fetch: Callable[[], bytes]) -> Predictor:
    """The predictor named ``digest`` in this process: loaded from ``fetch()`` (the
    engine's broadcast value) the first time only."""
    global _loads
    predictor = _loaded.get(digest)
    if predictor is not None:
        return predictor
    with _lock:  # one load a process, whatever the number of threads asking
        predictor = _loaded.get(digest)
        if predictor is None:
            data = fetch()
            if hashlib.sha256(data).hexdigest() != digest:
                raise InputError("the predictor's bytes on this worker do not match their "
                                 "digest")
            predictor = Predictor.from_bytes(data, trust_code=True)
            _loads += 1
    _keep(digest, predictor)
    return predictor


def load_count() -> int:
    """How many predictors this process has loaded from bytes (tests check one a
    worker)."""
    return _loads


def feature_columns(predictor: Predictor, names: Sequence[str]) -> list[str]:
    """The columns of a table that hold the model's features: those named like the
    model's features (a table may carry ids and labels besides), or every column for
    a model that knows only generic names.

    >>> from types import SimpleNamespace as NS
    >>> feature_columns(NS(forest=NS(feature_names=("b", "a"))), ["id", "a", "b"])
    ['b', 'a']
    >>> feature_columns(NS(forest=NS(feature_names=None, n_features=2)), ["x", "y"])
    ['x', 'y']
    """
    model = predictor.forest.feature_names
    if generic(model):
        if len(names) != predictor.forest.n_features:
            raise InputError(f"the model knows its {predictor.forest.n_features} features "
                             f"only by position, and the table has {len(names)} columns: "
                             f"select the feature columns, in the training order")
        return list(names)
    missing = [n for n in model if n not in set(names)]
    if missing:
        raise InputError(f"the table lacks the model's features {missing[:8]}"
                         f"{' and more' if len(missing) > 8 else ''}")
    return list(model)


def output_width(predictor: Predictor, output: str) -> int | None:
    """None when ``output`` is one number a row, else the numbers a row."""
    empty = np.zeros((0, predictor.n_features), dtype=predictor.forest.input_dtype)
    shape = predictor.predict(empty, output).shape
    return None if len(shape) == 1 else int(shape[1])
