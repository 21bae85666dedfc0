"""Per-row cost of silvanforge.dask / .spark / .ray against local ``predict``.

The same rows (higgs.test.csv's features, repeated to ``--rows``) are cut into
partitions of each ``--partition`` size; the local number is one ``predict`` call on one
partition (the work a worker does for it), the engine numbers a whole job's wall time
over all rows, on 2 worker processes of 1 thread each, with the rows already in the
engine (persisted / cached / materialized), so that the transport of inputs is not
counted but the return of results is.

    python benchmarks/engines.py --model ../shared/models/higgs.json \\
        --rows ../shared/models/higgs.test.csv --out benchmarks/results-engines

Prints and writes ``results.md``: medians of ``--repeat`` runs, ns per row.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import numpy as np
import pandas as pd

import silvanforge
from contribs import cpu_name  # a sibling script (benchmarks/ is the script's path)

WORKERS = 2


def _median_ns_per_row(run, rows: int, repeat: int) -> float:
    run()  # warm: the predictor reaches the workers, code and caches are hot
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times) / rows * 1e9


def local(predictor, frame: pd.DataFrame, size: int, repeat: int) -> float:
    part = np.ascontiguousarray(frame.to_numpy()[:size], dtype=np.float32)
    return _median_ns_per_row(lambda: predictor.predict(part), size, repeat)


def dask_times(predictor, frame: pd.DataFrame, sizes: list[int], repeat: int) -> dict:
    import dask.dataframe as dd
    from dask.distributed import Client, LocalCluster, wait

    import silvanforge.dask

    out = {}
    with LocalCluster(n_workers=WORKERS, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        for size in sizes:
            data = client.persist(dd.from_pandas(frame, chunksize=size))
            wait(data)

            def run():
                wait(client.persist(silvanforge.dask.predict(predictor, data)))
            out[size] = _median_ns_per_row(run, len(frame), repeat)
    return out


def spark_times(predictor, frame: pd.DataFrame, sizes: list[int], repeat: int) -> dict:
    from pyspark.sql import SparkSession

    import silvanforge.spark

    spark = (SparkSession.builder.master(f"local[{WORKERS}]").config("spark.ui.enabled", "false")
             .config("spark.sql.execution.arrow.pyspark.enabled", "true")
             .config("spark.sql.execution.arrow.maxRecordsPerBatch", "1000000")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    out = {}
    try:
        for size in sizes:
            df = spark.createDataFrame(frame).repartition(max(1, len(frame) // size)).cache()
            df.count()

            def run():
                silvanforge.spark.predict(predictor, df).write.format("noop") \
                    .mode("overwrite").save()
            out[size] = _median_ns_per_row(run, len(frame), repeat)
            df.unpersist()
    finally:
        spark.stop()
    return out


def ray_times(predictor, frame: pd.DataFrame, sizes: list[int], repeat: int) -> dict:
    import ray

    import silvanforge.ray

    ray.init(num_cpus=WORKERS, include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    out = {}
    try:
        for size in sizes:
            ds = ray.data.from_pandas(frame).repartition(max(1, len(frame) // size)) \
                .materialize()

            def run():
                silvanforge.ray.predict(predictor, ds).materialize()
            out[size] = _median_ns_per_row(run, len(frame), repeat)
    finally:
        ray.shutdown()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--rows", required=True, help="CSV: feature columns, then the label")
    parser.add_argument("--total", type=int, default=200_000, help="rows of a job")
    parser.add_argument("--partition", type=int, nargs="+", default=[10_000, 50_000])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--engines", nargs="+", default=["dask", "spark", "ray"])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results-engines"))
    args = parser.parse_args()

    predictor = silvanforge.compile(args.model, n_jobs=1)
    features = np.loadtxt(args.rows, delimiter=",")[:, :-1]
    rows = np.resize(features, (args.total, features.shape[1])).astype(np.float32)
    frame = pd.DataFrame(rows, columns=[f"f{i}" for i in range(rows.shape[1])])
    results = {"local, 1 thread": {s: local(predictor, frame, s, args.repeat)
                                   for s in args.partition}}
    for engine in args.engines:
        results[f"{engine}, {WORKERS} workers x 1 thread"] = \
            globals()[f"{engine}_times"](predictor, frame, args.partition, args.repeat)
    header = "| | " + " | ".join(f"{s:,} rows a partition" for s in args.partition) + " |"
    lines = [f"{Path(args.model).name}, {predictor.forest.n_trees} trees, "
             f"{args.total:,} rows a job; {cpu_name()}, {os.cpu_count()} CPUs; "
             f"median of {args.repeat}, ns a row (engines: job wall time / rows)", "",
             header, "|" + "---|" * (len(args.partition) + 1)]
    lines += [f"| {name} | " + " | ".join(f"{v[s]:.0f}" for s in args.partition) + " |"
              for name, v in results.items()]
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.md").write_text(text)


if __name__ == "__main__":
    main()
