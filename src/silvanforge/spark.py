"""Predict a Spark DataFrame with a compiled predictor, on Spark's executors.

The predictor's bytes are a Spark broadcast (sent to each executor once, read once by
each Python worker); each Python worker process loads the predictor once
(:mod:`silvanforge.shipping`) and never compiles it. Rows travel as Arrow batches
through ``mapInPandas``.

>>> import silvanforge, silvanforge.spark
>>> predictor = silvanforge.compile("model.json")                    # doctest: +SKIP
>>> scored = silvanforge.spark.predict(predictor, spark.read.parquet("rows/"))  # doctest: +SKIP
>>> scored.select("id", "prediction").show()                         # doctest: +SKIP
"""

from __future__ import annotations

import functools
from typing import Any, Iterator

from . import shipping
from .errors import InputError, require
from .runtime import Predictor


def predict(predictor: Predictor, df: Any, output: str = "value",
            column: str = "prediction") -> Any:
    """``df`` with a column ``column`` added: a double, or an array of doubles for a
    model of several outputs (multiclass probabilities, multi-target values).

    The model's features are the DataFrame's columns of the same names (every column,
    for a model that knows only generic names); the other columns pass through.

    >>> silvanforge.spark.predict(predictor, df, output="margin", column="score")  # doctest: +SKIP
    """
    types = require("pyspark.sql.types", "spark")
    if column in df.columns:
        raise InputError(f"the DataFrame already has a column {column!r}: name another one "
                         f"with column=")
    features = shipping.feature_columns(predictor, df.columns)
    width = shipping.output_width(predictor, output)
    digest, data = shipping.package(predictor)
    broadcast = df.sparkSession.sparkContext.broadcast(data)
    kind = types.DoubleType() if width is None else types.ArrayType(types.DoubleType(),
                                                                     False)
    schema = types.StructType(df.schema.fields + [types.StructField(column, kind, False)])
    run = functools.partial(_predict_batches, digest, broadcast, output, features, column)
    return df.mapInPandas(run, schema)


def _predict_batches(digest: str, broadcast: Any, output: str, features: list[str],
                     column: str, batches: Iterator[Any]) -> Iterator[Any]:
    predictor = shipping.loaded(digest, lambda: broadcast.value)
    for batch in batches:
        values = predictor.predict(batch[features], output)
        yield batch.assign(**{column: list(values) if values.ndim > 1 else values})
