"""Predict a Ray Dataset with a compiled predictor, on Ray's workers.

The predictor's bytes go into Ray's object store once (``ray.put``; workers on a node
read them from its shared memory); each worker process loads the predictor once
(:mod:`silvanforge.shipping`) and never compiles it. Batches are Arrow tables, read
without pandas.

>>> import ray, silvanforge, silvanforge.ray                # doctest: +SKIP
>>> predictor = silvanforge.compile("model.json")                    # doctest: +SKIP
>>> scored = silvanforge.ray.predict(predictor, ray.data.read_parquet("rows/"))  # doctest: +SKIP
>>> scored.take(3)                                                   # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import shipping
from .errors import InputError, require
from .runtime import Predictor


def predict(predictor: Predictor, dataset: Any, output: str = "value",
            column: str = "prediction") -> Any:
    """``dataset`` with a column ``column`` added (``map_batches``, lazily, as Ray Data
    does): a double, or a fixed-size list of doubles for a model of several outputs.

    The model's features are the columns of the same names (every column, for a model
    that knows only generic names); the other columns pass through.

    >>> silvanforge.ray.predict(predictor, ds, output="margin").to_pandas()  # doctest: +SKIP
    """
    ray = require("ray", "ray")
    names = list(dataset.schema().names)
    if column in names:
        raise InputError(f"the Dataset already has a column {column!r}: name another one "
                         f"with column=")
    features = shipping.feature_columns(predictor, names)
    digest, data = shipping.package(predictor)
    # In a list, so that Ray hands the task the reference, not the bytes: a worker
    # that already holds the predictor never fetches them.
    refs = [ray.put(data)]
    return dataset.map_batches(
        _predict_table, batch_format="pyarrow",
        fn_kwargs={"digest": digest, "refs": refs, "output": output,
                   "features": features, "column": column})


def _predict_table(batch: Any, digest: str, refs: list, output: str,
                   features: list[str], column: str) -> Any:
    import pyarrow as pa
    import ray

    predictor = shipping.loaded(digest, lambda: ray.get(refs[0]))
    values = predictor.predict(batch.select(features), output)
    if values.ndim == 1:
        return batch.append_column(column, pa.array(values))
    flat = pa.array(np.ascontiguousarray(values).reshape(-1))
    return batch.append_column(column, pa.FixedSizeListArray.from_arrays(flat,
                                                                         values.shape[1]))
