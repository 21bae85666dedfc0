"""The Dask, Spark and Ray helpers on real engines: a LocalCluster of worker processes,
Spark ``local[2]``, Ray started here. Workers run with ``SILVANFORGE_COMPILE=forbid``, so
a compile there fails the test; each worker process loads the predictor once, whatever
the number of partitions; results equal the local predictor's.

CI must run these: there a missing engine (or Java, for Spark) is a failure; elsewhere
(no ``CI`` in the environment) a skip with the reason printed. One small cluster or
session an engine, for the module, and one test an engine (so that parallel test workers
never start an engine twice).
"""

from __future__ import annotations

import importlib
import os
import shutil
import sys
import warnings

import numpy as np
import pytest

import silvanforge
from silvanforge import shipping
from silvanforge.errors import InputError

from util import assert_parity, unavailable

pd = pytest.importorskip("pandas", reason="pandas is part of the dev extra")
xgb = pytest.importorskip("xgboost", reason="xgboost is part of the dev extra")
warnings.filterwarnings("ignore", category=UserWarning, module="xgboost")
FORBID = {"SILVANFORGE_COMPILE": "forbid"}
NAMES = ["a", "b", "c", "d"]


def _unavailable(reason: str) -> None:
    unavailable(reason, "the engine tests")


def _engine(module: str, extra: str):
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        _unavailable(f"{module} is not installed (pip install 'silvanforge[{extra}]'): {exc}")


@pytest.fixture(scope="module")
def case():
    """A regressor and a 3-class classifier on named columns, compiled here, and rows
    whose columns come in another order, with an id the models do not know."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, 4))
    train = pd.DataFrame(X, columns=NAMES)
    regressor = xgb.XGBRegressor(n_estimators=6, max_depth=3).fit(train, X[:, 0] + X[:, 1])
    classes = (X[:, 2] > 0).astype(int) + (X[:, 3] > 0.5)
    classifier = xgb.XGBClassifier(n_estimators=4, max_depth=3).fit(train, classes)
    rows = train.assign(id=np.arange(len(train)))[["id", "d", "c", "b", "a"]]
    return {"regressor": silvanforge.compile(regressor, n_jobs=1),
            "classifier": silvanforge.compile(classifier, n_jobs=1),
            "rows": rows, "X": X}


def _worker_env() -> dict:
    # The workers import this checkout's silvanforge, as this process does.
    path = os.environ.get("PYTHONPATH")
    return {**FORBID, **({"PYTHONPATH": path} if path else {})}


# ---- Dask --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def dask_client():
    distributed = _engine("dask.distributed", "dask")
    _engine("dask.dataframe", "dask")
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                  dashboard_address=None, env=_worker_env()) as cluster, \
            distributed.Client(cluster) as client:
        yield client


def test_dask_dataframe_and_array(case, dask_client):
    import dask.array as da
    import dask.dataframe as dd
    import silvanforge.dask

    regressor, classifier, X = case["regressor"], case["classifier"], case["X"]
    frame = dd.from_pandas(case["rows"], npartitions=6)
    series = silvanforge.dask.predict(regressor, frame)
    assert series.npartitions == 6
    result = series.compute()
    assert result.index.equals(case["rows"].index)
    assert_parity(result.to_numpy(), regressor.predict(X), "dask Series")
    probabilities = silvanforge.dask.predict(classifier, frame).compute()
    assert_parity(probabilities.to_numpy(), classifier.predict(X), "dask DataFrame")
    array = da.from_array(X, chunks=(100, 2))
    assert_parity(silvanforge.dask.predict(regressor, array, output="margin").compute(),
                  regressor.predict(X, output="margin"), "dask Array")
    assert_parity(silvanforge.dask.predict(classifier, array).compute(),
                  classifier.predict(X), "dask Array, 3 outputs")
    # Two predictors, each loaded once a worker (6 partitions, 2 processes, 4 calls).
    assert set(dask_client.run(shipping.load_count).values()) <= {1, 2}
    assert sum(dask_client.run(shipping.load_count).values()) <= 4
    settings = dask_client.run(lambda: os.environ.get("SILVANFORGE_COMPILE"))
    assert set(settings.values()) == {"forbid"}
    with pytest.raises(InputError, match="lacks the model's features"):
        silvanforge.dask.predict(regressor, dd.from_pandas(case["rows"].drop(columns=["c"]),
                                                           npartitions=2))


# ---- Spark -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def spark():
    sql = _engine("pyspark.sql", "spark")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        _unavailable("Spark needs a Java runtime (apt-get install default-jre-headless)")
    # Spark's Python workers run PYSPARK_PYTHON, by default (before pyspark 4) the
    # `python3` on PATH, which need not be this interpreter with SilvanForge installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = sql.SparkSession.builder.master("local[2]").appName("silvanforge-tests")
    # 6 partitions from createDataFrame (no shuffle) for 2 cores: a process gets several.
    for key, value in {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2",
                       "spark.default.parallelism": "6",
                       "spark.sql.execution.arrow.pyspark.enabled": "true",
                       **{f"spark.executorEnv.{k}": v for k, v in _worker_env().items()},
                       }.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def test_spark_adds_a_prediction_column(case, spark):
    import silvanforge.spark

    regressor, classifier, X = case["regressor"], case["classifier"], case["X"]
    df = spark.createDataFrame(case["rows"])
    assert df.rdd.getNumPartitions() == 6
    scored = silvanforge.spark.predict(classifier, silvanforge.spark.predict(regressor, df),
                                       column="p")
    assert scored.columns == ["id", "d", "c", "b", "a", "prediction", "p"]
    result = scored.toPandas().sort_values("id")
    assert_parity(result.prediction.to_numpy(), regressor.predict(X), "spark")
    assert_parity(np.stack(result.p.to_numpy()), classifier.predict(X), "spark 3 outputs")
    # Reported by Python workers after predicting: 6 partitions, and no process loaded
    # a predictor more than once (2 predictors; a process that reports but did not
    # predict says 0).
    report = scored.mapInPandas(
        lambda batches: (pd.DataFrame({"pid": [os.getpid()], "loads": [shipping.load_count()],
                                       "env": [os.environ.get("SILVANFORGE_COMPILE")]})
                         for _ in batches), "pid long, loads long, env string").toPandas()
    assert report.loads.max() <= 2 and set(report.env) == {"forbid"}
    with pytest.raises(InputError, match="already has a column 'id'"):
        silvanforge.spark.predict(regressor, df, column="id")


# ---- Ray ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ray_data():
    ray = _engine("ray", "ray")
    data = _engine("ray.data", "ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             object_store_memory=80 * 2**20, runtime_env={"env_vars": _worker_env()})
    data.DataContext.get_current().enable_progress_bars = False
    yield data
    ray.shutdown()


def test_ray_map_batches(case, ray_data):
    import pyarrow as pa
    import silvanforge.ray

    regressor, classifier, X = case["regressor"], case["classifier"], case["X"]
    dataset = ray_data.from_arrow(pa.Table.from_pandas(case["rows"])).repartition(6)

    def report(batch):
        return pa.table({"loads": [shipping.load_count()],
                         "env": [os.environ.get("SILVANFORGE_COMPILE")]})

    scored = silvanforge.ray.predict(regressor, dataset)
    result = scored.to_pandas().sort_values("id")
    assert_parity(result.prediction.to_numpy(), regressor.predict(X), "ray")
    loads = scored.map_batches(report, batch_format="pyarrow").to_pandas()
    assert set(loads.loads) == {1} and set(loads.env) == {"forbid"}
    probabilities = silvanforge.ray.predict(classifier, dataset).to_pandas().sort_values("id")
    assert_parity(np.stack(probabilities.prediction.to_numpy()), classifier.predict(X),
                  "ray 3 outputs")


def test_without_the_optional_packages(tmp_path):
    """The base install imports every module, reads dicts of arrays, and the engines'
    helpers name the extra to install."""
    import subprocess
    import sys

    code = """
import sys
BLOCK = {"pandas", "polars", "pyarrow", "scipy", "dask", "distributed", "pyspark", "ray"}


class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCK:
            raise ModuleNotFoundError("blocked", name=name)


sys.meta_path.insert(0, Block())
import numpy as np, silvanforge, silvanforge.shipping
from silvanforge import reference
forest = silvanforge.load(sys.argv[1])
reference.predict(forest, {f"f{i}": np.zeros(2) for i in range(forest.n_features)})
for engine in ("dask", "spark", "ray"):
    try:
        getattr(silvanforge, engine).predict(None, None)
    except silvanforge.MissingDependencyError as exc:
        assert f"silvanforge[{engine}]" in str(exc), exc
    else:
        raise AssertionError(engine)
"""
    model = os.path.join(os.path.dirname(silvanforge.__file__), "examples",
                         "xgboost_classifier.json")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", code, model], capture_output=True, text=True,
                          env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
