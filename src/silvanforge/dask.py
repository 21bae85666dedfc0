"""Predict a Dask DataFrame or Array with a compiled predictor, on Dask's workers.

The predictor's bytes are one task of the graph, named by their content, so each
worker fetches them once and every partition on it shares them; each worker process
loads the predictor once (:mod:`silvanforge.shipping`) and never compiles it.

>>> import dask.dataframe as dd, silvanforge, silvanforge.dask   # doctest: +SKIP
>>> predictor = silvanforge.compile("model.json")                    # doctest: +SKIP
>>> frame = dd.read_parquet("rows/")                                 # doctest: +SKIP
>>> silvanforge.dask.predict(predictor, frame).compute()             # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import shipping
from .errors import InputError, require
from .runtime import Predictor


def predict(predictor: Predictor, data: Any, output: str = "value") -> Any:
    """Predictions for a Dask DataFrame (a Series, or a DataFrame of one column an
    output, with the same partitions and index) or a Dask Array of rows (an Array with
    the same row chunks).

    A DataFrame's columns are matched to the model's features by name; columns the
    model does not name (ids, labels) are left out.

    >>> silvanforge.dask.predict(predictor, frame, output="margin")      # doctest: +SKIP
    """
    dask = require("dask", "dask")
    width = shipping.output_width(predictor, output)
    digest, data_bytes = shipping.package(predictor)
    # pure=True: the key is the bytes' hash, so one key (one transfer a worker) however
    # many times the same predictor is used.
    shipped = dask.delayed(data_bytes, pure=True)
    if _is_array(data):
        return _predict_array(data, predictor, digest, shipped, output, width)
    if not hasattr(data, "map_partitions"):
        raise InputError(f"silvanforge.dask.predict takes a Dask DataFrame or Array, not "
                         f"{type(data).__name__}")
    pd = require("pandas", "dask")
    features = shipping.feature_columns(predictor, list(data.columns))
    if width is None:
        meta = pd.Series(np.zeros(0), name="prediction")
    else:
        meta = pd.DataFrame(np.zeros((0, width)), columns=list(range(width)))
    return data[features].map_partitions(_predict_frame, digest, shipped, output, meta=meta)


def _is_array(data: Any) -> bool:
    return type(data).__module__.startswith("dask.array")


def _predict_array(data: Any, predictor: Predictor, digest: str, shipped: Any,
                   output: str, width: int | None) -> Any:
    if data.ndim != 2 or data.shape[1] != predictor.n_features:
        raise InputError(f"the Dask Array must be 2-D with {predictor.n_features} columns; "
                         f"got shape {data.shape}")
    rows = data.rechunk({1: -1})  # a block holds whole rows
    if width is None:
        return rows.map_blocks(_predict_block, digest, shipped, output, drop_axis=1,
                               dtype=np.float64, meta=np.zeros(0))
    return rows.map_blocks(_predict_block, digest, shipped, output, dtype=np.float64,
                           chunks=(rows.chunks[0], (width,)), meta=np.zeros((0, 0)))


def _predict_block(block: np.ndarray, digest: str, data_bytes: bytes,
                   output: str) -> np.ndarray:
    return shipping.loaded(digest, lambda: data_bytes).predict(block, output)


def _predict_frame(frame: Any, digest: str, data_bytes: bytes, output: str) -> Any:
    import pandas as pd

    values = _predict_block(frame, digest, data_bytes, output)
    if values.ndim == 1:
        return pd.Series(values, index=frame.index, name="prediction")
    return pd.DataFrame(values, index=frame.index)
