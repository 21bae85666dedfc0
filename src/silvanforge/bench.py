"""Benchmark SilvanForge against the other forest-inference engines on the same rows.

The shared machinery of ``benchmarks/run.py`` and ``silvanforge bench``: one adapter per
engine (:class:`Engine`), the correctness check against :func:`silvanforge.reference.predict`
that runs before any timing, interleaved median timing, and the Markdown table.

Every engine that cannot run (library not installed, model format it cannot read, a
converter that fails) is reported as skipped with its reason, never left out silently.

>>> import numpy as np, silvanforge
>>> from silvanforge import bench
>>> case = bench.case_from_file("model.json")                      # doctest: +SKIP
>>> results = bench.run([case], bench.default_engines(), batches=[1, 1024], threads=[1])  # doctest: +SKIP
>>> print(bench.markdown(results))                                 # doctest: +SKIP
"""

from __future__ import annotations

import importlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

# Idle OpenMP threads must sleep, not spin: engines take turns within a round, and one
# engine's spinning pool would steal the cores of the next (set before any runtime loads).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402

from . import reference  # noqa: E402
from .frontends import detect_format, load  # noqa: E402
from .model.forest import Forest  # noqa: E402

# Relative tolerance of the correctness check on float32 rows (the brief of issue 5); the
# absolute floor covers outputs near zero, where float32 accumulation differs from float64.
RTOL = 1e-5
ATOL = 1e-6
# One timing sample runs an engine this long at least (tiny batches loop many times), so
# that timer resolution and call overhead jitter do not dominate.
MIN_SAMPLE_S = 2e-3
# A timing loop takes up to this many distinct batches in turn: one small batch repeated
# lets the CPU's branch predictors learn its rows' paths, which flatters branchy code
# (every engine's; nyc-taxi-like as code, 1 thread, ns/row on one batch repeated vs 64
# distinct ones: 389 vs 983 at 64 rows, 780 vs 948 at 256, 865 vs 908 at 4096).
MAX_BATCHES = 64
MIB = 1 << 20


class EngineSkipped(Exception):
    """An engine cannot run on this case; the message is the reason shown in the report."""


@dataclass
class Case:
    """One model to benchmark, with every form the engines may need.

    ``forest`` is SilvanForge's model and the source of the reference predictions;
    ``booster`` the training library's own object (``xgboost.Booster`` or
    ``lightgbm.Booster``); ``estimator`` a scikit-learn-API object (for converters and
    Hummingbird); ``path`` the model file when there is one (lleaves needs a LightGBM text
    file); ``onnx`` serialized ONNX bytes when the model came as ONNX. ``rows`` are float32
    and at least as many as the largest batch: every engine sees the same rows.
    """

    name: str
    forest: Forest
    rows: np.ndarray
    library: str  # "xgboost", "lightgbm", "sklearn" or "onnx"
    booster: Any = None
    estimator: Any = None
    path: str | None = None
    onnx: bytes | None = None
    note: str = ""


class Loaded:
    """An engine's model, ready to predict with a given number of threads."""

    def predict(self, X: np.ndarray, threads: int) -> np.ndarray:
        raise NotImplementedError

    def timer(self, X: np.ndarray | list[np.ndarray], threads: int) -> Callable[[int], float]:
        """A function running ``loops`` predictions and returning the seconds taken: of
        ``X``, or of each batch of a list of them in turn.

        Engines in another process override it to time on their side of the pipe.
        """
        batches = X if isinstance(X, list) else [X]
        done = 0  # predictions so far: each sample goes on with the next batch

        def run(loops: int) -> float:
            nonlocal done
            k = len(batches)
            start = time.perf_counter()
            for i in range(done, done + loops):
                self.predict(batches[i % k], threads)
            seconds = time.perf_counter() - start
            done += loops
            return seconds
        return run

    def close(self) -> None:
        """Release processes or files the engine holds."""


class _Calls(Loaded):
    """A Loaded built from a function ``(X, threads) -> predictions``."""

    def __init__(self, fn: Callable[[np.ndarray, int], Any], cleanup: Any = None):
        self._fn = fn
        self._cleanup = cleanup

    def predict(self, X: np.ndarray, threads: int) -> np.ndarray:
        return np.asarray(self._fn(X, threads))

    def close(self) -> None:
        if self._cleanup is not None:
            self._cleanup.cleanup()


class Engine:
    """Adapter base: ``name``, the module it needs, and ``prepare`` (compile/convert).

    ``prepare`` raises :class:`EngineSkipped` when the engine cannot take this case.
    """

    name = ""
    module = ""
    extra = ""  # silvanforge's extra that installs ``module``, when one does
    # False for an engine in a process of its own: tracemalloc cannot see its memory.
    in_process = True

    def missing(self) -> str | None:
        """Why this engine cannot run at all here, or None when it can."""
        try:
            importlib.import_module(self.module)
        except Exception as exc:  # an ImportError, or a broken install raising anything
            how = f"; pip install 'silvanforge[{self.extra}]'" if self.extra else ""
            return f"{self.module} is not importable ({type(exc).__name__}: {exc}){how}"
        return None

    def prepare(self, case: Case, threads: Sequence[int]) -> Loaded:
        raise NotImplementedError


def _need(value: Any, what: str) -> Any:
    if value is None:
        raise EngineSkipped(f"needs {what}")
    return value


class SilvanForgeEngine(Engine):
    """This SilvanForge with its defaults, or with ``compile`` keywords ``options`` (e.g.
    ``cpu="x86-64-v3"``, ``representation="code"``) as engine ``silvanforge@VALUE,...``."""

    module = "silvanforge"

    def __init__(self, **options: str) -> None:
        self.options = options
        self.name = "silvanforge" + ("@" + ",".join(options.values()) if options else "")

    def prepare(self, case: Case, threads: Sequence[int]) -> Loaded:
        from .runtime import compile as sf_compile

        predictor = sf_compile(case.forest, n_jobs=max(threads), **self.options)
        return _Calls(lambda X, t: predictor.predict(X, n_jobs=t))


class XGBoostEngine(Engine):
    name, module, extra = "xgboost", "xgboost", "xgboost"

    def prepare(self, case: Case, threads: Sequence[int]) -> Loaded:
        booster = _need(case.booster if case.library == "xgboost" else None,
                        "an XGBoost model")
        # One copy per thread count: changing nthread between calls would reconfigure.
        copies = {}
        for t in threads:
            copies[t] = booster.copy()
            copies[t].set_param({"nthread": t})
        return _Calls(lambda X, t: copies[t].inplace_predict(X))


class LightGBMEngine(Engine):
    name, module, extra = "lightgbm", "lightgbm", "lightgbm"

    def prepare(self, case: Case, threads: Sequence[int]) -> Loaded:
        booster = _need(case.booster if case.library == "lightgbm" else None,
                        "a LightGBM model")
        return _Calls(lambda X, t: booster.predict(X, num_threads=t))


def _to_onnx(case: Case) -> bytes:
    if case.onnx is not None:
        return case.onnx
    n = case.forest.n_features
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            if case.library == "sklearn":
                from skl2onnx import to_onnx

                classifier = hasattr(case.estimator, "predict_proba")
                model = to_onnx(case.estimator, case.rows[:1],
                                options={"zipmap": False} if classifier else None)
            else:
                import onnxmltools
                from onnxmltools.convert.common.data_types import FloatTensorType

                source = case.estimator if case.estimator is not None else case.booster
                types = [("X", FloatTensorType([None, n]))]
                if case.library == "xgboost":
                    model = onnxmltools.convert_xgboost(source, initial_types=types)
                else:
                    model = onnxmltools.convert_lightgbm(source, initial_types=types,
                                                         zipmap=False)
        except Exception as exc:  # converters lag behind the libraries: a reason, not a crash
            raise EngineSkipped(f"conversion to ONNX failed: {type(exc).__name__}: "
                                f"{str(exc)[:160]}") from None
    return model.SerializeToString()


class ONNXRuntimeEngine(Engine):
    name, module = "onnxruntime", "onnxruntime"

    def prepare(self, case: Case, threads: Sequence[int]) -> Loaded:
        import onnxruntime as ort

        data = _to_onnx(case)
        sessions = {}
        for t in threads:
            options = ort.SessionOptions()
            options.intra_op_num_threads = t
            options.inter_op_num_threads = 1
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            sessions[t] = ort.InferenceSession(data, options,
                                               providers=["CPUExecutionProvider"])
        name = sessions[threads[0]].get_inputs()[0].name
        # Classifiers answer (label, probabilities): the last output is the scores.
        return _Calls(lambda X, t: sessions[t].run(None, {name: X})[-1])


class TL2cgenEngine(Engine):
    name, module = "tl2cgen", "tl2cgen"

    def prepare(self, case: Case, threads: Sequence[int]) -> Loaded:
        import tl2cgen
        import treelite

        if case.library == "xgboost":
            model = treelite.frontend.from_xgboost(_need(case.booster, "an XGBoost Booster"))
        elif case.library == "lightgbm":
            model = treelite.frontend.from_lightgbm(_need(case.booster, "a LightGBM Booster"))
        elif case.library == "sklearn":
            model = treelite.sklearn.import_model(case.estimator)
        else:
            raise EngineSkipped(f"treelite cannot import {case.library} models")
        folder = tempfile.TemporaryDirectory(prefix="sf-tl2cgen-")
        lib = os.path.join(folder.name, "model.so")
        tl2cgen.export_lib(model, toolchain="gcc", libpath=lib,
                           params={"parallel_comp": max(1, os.cpu_count() or 1)})
        predictors = {t: tl2cgen.Predictor(lib, nthread=t) for t in threads}
        return _Calls(lambda X, t: predictors[t].predict(tl2cgen.DMatrix(X)), folder)


class HummingbirdEngine(Engine):
    name, module = "hummingbird", "hummingbird.ml"

    def prepare(self, case: Case, threads: Sequence[int]) -> Loaded:
        import hummingbird.ml
        import torch

        estimator = _need(case.estimator, "a scikit-learn-API model object")
        model = hummingbird.ml.convert(estimator, "torch")
        method = model.predict_proba if hasattr(estimator, "predict_proba") else model.predict

        def predict(X: np.ndarray, t: int) -> np.ndarray:
            torch.set_num_threads(t)
            return method(X)
        return _Calls(predict)


# Runs an engine in a process of its own (lleaves in its own virtualenv, as it pins an
# older llvmlite than SilvanForge's; another SilvanForge checkout): builds the model of
# sys.argv[1] with the code that replaces {load} (setting ``model``, whose ``predict``
# takes ``n_jobs``), then answers one JSON command per line, timing on its own side.
_WORKER = r"""
import json, sys, time
import numpy as np
start = time.perf_counter()
{load}
print(json.dumps({"compile_s": time.perf_counter() - start}), flush=True)
batches, done = None, 0
for line in sys.stdin:
    cmd = json.loads(line)
    if cmd["op"] == "load":
        batches = list(np.load(cmd["path"]))  # float32 like every engine: lleaves converts
        reply, done = {}, 0
    elif cmd["op"] == "predict":
        np.save(cmd["path"], model.predict(batches[0], n_jobs=cmd["threads"]))
        reply = {}
    else:
        k = len(batches)
        start = time.perf_counter()
        for i in range(done, done + cmd["loops"]):
            model.predict(batches[i % k], n_jobs=cmd["threads"])
        reply = {"seconds": time.perf_counter() - start}
        done += cmd["loops"]
    print(json.dumps(reply), flush=True)
"""


class _WorkerProcess(Loaded):
    """An engine in its own process (:data:`_WORKER` with ``load``), run by ``python``
    with ``env`` added to this process's environment."""

    def __init__(self, python: str, model_path: str, load: str,
                 env: Mapping[str, str] | None = None):
        self._dir = tempfile.TemporaryDirectory(prefix="sf-worker-")
        script = os.path.join(self._dir.name, "worker.py")
        with open(script, "w") as fh:
            fh.write(_WORKER.replace("{load}", load))
        self._proc = subprocess.Popen([python, script, model_path], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True,
                                      env={**os.environ, **(env or {})})
        self.compile_s = self._read()["compile_s"]
        self._loaded: int | None = None

    def _read(self) -> dict:
        line = self._proc.stdout.readline()
        if not line:
            status = self._proc.wait(timeout=30)
            raise EngineSkipped(f"the worker process exited with status {status} (its "
                                f"error is printed above)")
        return json.loads(line)

    def _ask(self, **cmd: Any) -> dict:
        self._proc.stdin.write(json.dumps(cmd) + "\n")
        self._proc.stdin.flush()
        return self._read()

    def _load(self, X: np.ndarray | list[np.ndarray]) -> None:
        """Send the worker ``X``, or a list of batches (stacked) to take in turn."""
        if self._loaded != id(X):
            path = os.path.join(self._dir.name, "rows.npy")
            np.save(path, np.stack(X) if isinstance(X, list) else X[None])
            self._ask(op="load", path=path)
            self._loaded = id(X)

    def predict(self, X: np.ndarray, threads: int) -> np.ndarray:
        self._load(X)
        path = os.path.join(self._dir.name, "out.npy")
        self._ask(op="predict", path=path, threads=threads)
        return np.load(path)

    def timer(self, X: np.ndarray | list[np.ndarray], threads: int) -> Callable[[int], float]:
        def run(loops: int) -> float:
            self._load(X)
            return self._ask(op="time", loops=loops, threads=threads)["seconds"]
        return run

    def close(self) -> None:
        self._proc.stdin.close()
        self._proc.wait(timeout=30)
        self._dir.cleanup()


class LleavesEngine(Engine):
    """lleaves, run by the python of a virtualenv given by ``venv`` (None: skipped)."""

    name, module = "lleaves", "lleaves"
    in_process = False

    def __init__(self, venv: str | None = None):
        self.venv = venv

    def _python(self) -> str:
        return os.path.join(self.venv or "", "bin", "python")

    def missing(self) -> str | None:
        if not self.venv:
            return "no lleaves virtualenv given (--lleaves-venv DIR)"
        probe = subprocess.run([self._python(), "-c", "import lleaves"],
                               capture_output=True, text=True)
        if probe.returncode:
            return (f"{self._python()} cannot import lleaves: "
                    f"{(probe.stderr.strip().splitlines() or ['?'])[-1]}")
        return None

    def prepare(self, case: Case, threads: Sequence[int]) -> Loaded:
        if case.library != "lightgbm" or case.path is None:
            raise EngineSkipped("lleaves reads LightGBM text model files only")
        return _WorkerProcess(self._python(), case.path, "import lleaves\n"
                              "model = lleaves.Model(model_file=sys.argv[1])\n"
                              "model.compile()")


class CheckoutEngine(Engine):
    """SilvanForge from another source tree (``src``: its ``src`` folder), in a process of
    its own with this Python: an earlier version timed in alternation with this one,
    compiled with its defaults (``silvanforge.compile(path, n_jobs=...)``)."""

    module = "silvanforge"
    in_process = False

    def __init__(self, src: str, label: str):
        self.src, self.name = os.path.abspath(src), f"silvanforge@{label}"

    def missing(self) -> str | None:
        found = os.path.isfile(os.path.join(self.src, "silvanforge", "__init__.py"))
        return None if found else f"{self.src} holds no silvanforge package"

    def prepare(self, case: Case, threads: Sequence[int]) -> Loaded:
        if case.path is None:
            raise EngineSkipped("a checkout's worker reads model files only")
        return _WorkerProcess(sys.executable, case.path, "import silvanforge\n"
                              f"model = silvanforge.compile(sys.argv[1], n_jobs={max(threads)})",
                              {"PYTHONPATH": self.src})


def default_engines(lleaves_venv: str | None = None) -> list[Engine]:
    """Every engine adapter, SilvanForge first.

    >>> [e.name for e in default_engines()][:3]
    ['silvanforge', 'xgboost', 'lightgbm']
    """
    return [SilvanForgeEngine(), XGBoostEngine(), LightGBMEngine(), ONNXRuntimeEngine(),
            TL2cgenEngine(), HummingbirdEngine(), LleavesEngine(lleaves_venv)]


def compare(got: Any, expected: np.ndarray, rtol: float = RTOL,
            atol: float = ATOL) -> tuple[bool, float]:
    """Whether an engine's output matches the reference, and the largest absolute error.

    Outputs are compared as (rows, columns); a two-column binary-probability output
    matches a one-column one by its second column.

    >>> compare(np.array([0.5, 1.0]), np.array([0.5, 1.0]))
    (True, 0.0)
    >>> compare(np.array([[0.6, 0.4]]), np.array([0.4]))
    (True, 0.0)
    >>> compare(np.array([0.5]), np.array([0.501]))[0]
    False
    """
    expected = np.asarray(expected, np.float64).reshape(len(expected), -1)
    got = np.asarray(got, np.float64).reshape(len(expected), -1)
    if got.shape[1] != expected.shape[1] and {got.shape[1], expected.shape[1]} == {1, 2}:
        got, expected = got[:, -1:], expected[:, -1:]
    if got.shape != expected.shape:
        return False, float("inf")
    error = float(np.max(np.abs(got - expected), initial=0.0))
    return bool(np.allclose(got, expected, rtol=rtol, atol=atol)), error


def _loops_for(run: Callable[[int], float], min_s: float) -> int:
    """How many predictions one timing sample needs to last ``min_s``."""
    loops = 1
    while True:
        elapsed = run(loops)
        if elapsed >= min_s or loops >= 1 << 20:
            return loops
        loops = min(loops * max(2, int(min_s / max(elapsed, 1e-7) * 1.2)), 1 << 20)


def interleaved_medians(timers: Mapping[str, Callable[[int], float]], rounds: int = 7,
                        repeat: int = 3, min_s: float = MIN_SAMPLE_S) -> dict[str, float]:
    """Median seconds per call of each timer, over ``rounds`` interleaved rounds.

    Within a round the engines take turns (the starting engine rotates), each keeping the
    best of ``repeat`` samples, so that a noisy moment on a shared machine hits all of
    them alike instead of one.

    >>> t = interleaved_medians({"a": lambda n: 0.002 * n, "b": lambda n: 0.004 * n}, 3, 1)
    >>> round(t["a"], 6), round(t["b"], 6)
    (0.002, 0.004)
    """
    names = list(timers)
    loops = {name: _loops_for(timers[name], min_s) for name in names}
    samples: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            best = min(timers[name](loops[name]) for _ in range(repeat))
            samples[name].append(best / loops[name])
    return {name: statistics.median(values) for name, values in samples.items()}


def _rss_mib() -> float:
    # ru_maxrss is KiB on Linux, bytes on macOS.
    scale = 1 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / MIB


def _measured(fn: Callable[[], Any], traced: bool = True
              ) -> tuple[Any, float, float | None, float]:
    """fn(), its seconds, its tracemalloc peak (MiB; None where not ``traced``, and then
    its seconds untraced) and its growth of the RSS high-water."""
    rss = _rss_mib()
    if traced:
        tracemalloc.start()
    start = time.perf_counter()
    try:
        value = fn()
        seconds = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1] / MIB if traced else None
    finally:
        if traced:
            tracemalloc.stop()
    return value, seconds, peak, _rss_mib() - rss


def _prepared(engine: Engine, case: Case, threads: Sequence[int]) -> tuple[Loaded, dict]:
    """``engine`` prepared for ``case``, and what that took: ``compile_s`` and
    ``prepare_rss_growth_mib`` of that prepare, untraced (tracemalloc slowed SilvanForge's
    Python rendering of trees as code 2.7x: mtpl2 8.2 s against 3.0), and
    ``prepare_peak_mib``, the tracemalloc peak of a second prepare, or None for an engine
    in a process of its own (whose allocations tracemalloc does not see)."""
    model, seconds, peak, growth = _measured(lambda: engine.prepare(case, threads),
                                             traced=False)
    if engine.in_process:
        again, _, peak, _ = _measured(lambda: engine.prepare(case, threads))
        again.close()
    return model, {"compile_s": getattr(model, "compile_s", seconds),
                   "prepare_peak_mib": peak, "prepare_rss_growth_mib": growth}


def nodes_visited(forest: Forest, X: np.ndarray, sample: int = 512) -> float:
    """Mean internal nodes visited per row (over all trees), on the first ``sample`` rows.

    >>> bench.nodes_visited(silvanforge.load("model.json"), rows)  # doctest: +SKIP
    7.93
    """
    leaf = reference.leaves(forest, X[:sample]) + forest.tree_offsets[:-1]
    return float(forest.node_depth[leaf].sum(axis=1).mean())


def _info(case: Case) -> dict:
    f = case.forest
    return {"trees": f.n_trees, "internal_nodes": int(f.n_internal),
            "features": f.n_features, "outputs": f.n_outputs, "library": case.library,
            "max_depth": f.max_depth, "nodes_visited_per_row": nodes_visited(f, case.rows),
            "note": case.note}


def run(cases: Sequence[Case], engines: Sequence[Engine], batches: Sequence[int],
        threads: Sequence[int], rounds: int = 7, repeat: int = 3,
        min_s: float = MIN_SAMPLE_S, log: Callable[[str], None] = print) -> dict:
    """Check, then time, every engine on every case, batch size and thread count.

    Returns a JSON-ready dict: ``rows`` (one per model, batch, threads and engine, with
    ``status`` "ok", "mismatch" or "error"), ``skipped`` (model, engine, reason),
    ``models`` (shape facts) and ``settings``. Timings are medians of interleaved runs;
    ``ratio_to_best_peer`` is time over the fastest engine other than SilvanForge (any
    ``silvanforge@...`` engine is SilvanForge too).
    Memory: ``prepare_peak_mib`` and ``predict_peak_mib`` are tracemalloc peaks (Python
    and numpy allocations only; the prepare's from a second prepare, so that the timed
    one runs untraced: :func:`_prepared`), ``prepare_rss_growth_mib`` the growth of the
    process's RSS high-water mark (getrusage) while preparing, which sees native
    allocations but only once they exceed the earlier peak.
    """
    threads = [t for t in threads if t >= 1]
    result: dict = {"settings": {"batches": list(batches), "threads": list(threads),
                                 "rounds": rounds, "repeat": repeat, "rtol": RTOL,
                                 "distinct_batches": MAX_BATCHES,
                                 "atol": ATOL, "cpus": os.cpu_count(),
                                 "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
                                 "memory": "tracemalloc peak; RSS high-water growth "
                                           "(getrusage)"},
                    "models": {}, "rows": [], "skipped": []}
    usable = []
    for engine in engines:
        reason = engine.missing()
        if reason:
            result["skipped"].append({"model": "*", "engine": engine.name, "reason": reason})
            log(f"skip {engine.name}: {reason}")
        else:
            usable.append(engine)
    for case in cases:
        result["models"][case.name] = info = _info(case)
        log(f"{case.name}: {info['trees']} trees, {info['features']} features")
        loaded: dict[str, Loaded] = {}
        prep: dict[str, dict] = {}
        for engine in usable:
            try:
                model, prep[engine.name] = _prepared(engine, case, threads)
            except EngineSkipped as exc:
                result["skipped"].append({"model": case.name, "engine": engine.name,
                                          "reason": str(exc)})
                log(f"  skip {engine.name}: {exc}")
                continue
            except Exception as exc:  # an engine failing on a model is a result to report
                result["skipped"].append({"model": case.name, "engine": engine.name,
                                          "reason": f"failed to prepare: "
                                                    f"{type(exc).__name__}: {exc}"[:300]})
                log(f"  {engine.name} failed to prepare: {exc}")
                continue
            loaded[engine.name] = model
        try:
            expected_all = reference.predict(case.forest, case.rows[:max(batches)])
            for batch in batches:
                Xs = distinct_batches(case.rows, batch)
                for t in threads:
                    result["rows"] += _measure_point(case, info, loaded, prep, Xs,
                                                     expected_all[:batch], t, rounds,
                                                     repeat, min_s)
                    log("  " + _progress(result["rows"][-len(loaded):]))
        finally:
            for model in loaded.values():
                model.close()
    return result


def distinct_batches(rows: np.ndarray, batch: int) -> list[np.ndarray]:
    """Up to ``MAX_BATCHES`` C-contiguous batches of ``batch`` different rows each (one
    when ``rows`` has too few).

    >>> [b.tolist() for b in distinct_batches(np.arange(5.0)[:, None], 2)]
    [[[0.0], [1.0]], [[2.0], [3.0]]]
    """
    k = max(1, min(MAX_BATCHES, len(rows) // batch))
    return [np.ascontiguousarray(rows[i * batch:(i + 1) * batch]) for i in range(k)]


def _measure_point(case: Case, info: dict, loaded: Mapping[str, Loaded],
                   prep: Mapping[str, dict], Xs: list[np.ndarray], expected: np.ndarray,
                   threads: int, rounds: int, repeat: int, min_s: float) -> list[dict]:
    """Check every engine on the first of ``Xs``, then time each over all of them."""
    X = Xs[0]
    rows, timers = [], {}
    for name, model in loaded.items():
        row = {"model": case.name, "batch": len(X), "threads": threads, "engine": name,
               **prep[name]}
        try:
            got, _, peak, _ = _measured(lambda: model.predict(X, threads))
            ok, error = compare(got, expected)
            row.update(status="ok" if ok else "mismatch",
                       max_abs_error=error if np.isfinite(error) else None,
                       predict_peak_mib=peak)
            if ok:
                timers[name] = model.timer(Xs, threads)
        except Exception as exc:  # reported in the table instead of a time
            row.update(status="error", reason=f"{type(exc).__name__}: {exc}"[:300])
        rows.append(row)
    times = interleaved_medians(timers, rounds, repeat, min_s) if timers else {}
    # Ours: this build, others built for other CPUs, other checkouts (silvanforge@...).
    peers = [s for name, s in times.items() if not name.startswith("silvanforge")]
    best_peer = min(peers) if peers else None
    for row in rows:
        s = times.get(row["engine"])
        if s is None:
            continue
        row["ns_per_row"] = s / len(X) * 1e9
        row["ns_per_node"] = row["ns_per_row"] / max(info["nodes_visited_per_row"], 1e-9)
        row["ratio_to_best_peer"] = s / best_peer if best_peer else None
    return rows


def _progress(rows: list[dict]) -> str:
    if not rows:
        return ""
    head = f"batch {rows[0]['batch']} threads {rows[0]['threads']}:"
    return head + ", ".join(f" {r['engine']} " + (f"{r['ns_per_row']:.0f} ns/row"
                                                  if "ns_per_row" in r else r["status"])
                            for r in rows)


def _cell(row: dict) -> str:
    if row["status"] == "mismatch":
        error = row["max_abs_error"]
        return "MISMATCH (" + (f"max err {error:.2g})" if error is not None else "shape)")
    if row["status"] == "error":
        return "ERROR"
    return f"{row['ns_per_row']:.1f}"


def markdown(result: dict) -> str:
    """The results as Markdown: per model, a table of ns/row per batch, threads, engine.

    Each cell is ns/row and, in brackets, the time ratio to the best peer (below 1 is
    faster than every other engine); a mismatch shows instead of a time.
    """
    out = []
    for model, info in result["models"].items():
        rows = [r for r in result["rows"] if r["model"] == model]
        engines = list(dict.fromkeys(r["engine"] for r in rows))
        out.append(f"### {model}\n\n{info['trees']} trees, {info['internal_nodes']} internal "
                   f"nodes, {info['features']} features, {info['outputs']} output(s), "
                   f"{info['nodes_visited_per_row']:.0f} nodes visited per row"
                   + (f"; {info['note']}" if info.get("note") else "") + ".\n")
        if engines:
            out.append("ns/row (time ratio to the best peer; SilvanForge's ns per node "
                       "visited)\n")
            out.append("| batch | threads | " + " | ".join(engines) + " |")
            out.append("|---:|---:|" + "---:|" * len(engines))
            points = dict.fromkeys((r["batch"], r["threads"]) for r in rows)
            for batch, t in points:
                cells = []
                for engine in engines:
                    row = next((r for r in rows if (r["batch"], r["threads"], r["engine"])
                                == (batch, t, engine)), None)
                    text = _cell(row) if row else "-"
                    if row and row.get("ratio_to_best_peer") is not None:
                        text += f" ({row['ratio_to_best_peer']:.2f}"
                        text += (f"; {row['ns_per_node']:.2f} ns/node)"
                                 if engine == "silvanforge" else ")")
                    cells.append(text)
                out.append(f"| {batch} | {t} | " + " | ".join(cells) + " |")
            out.append("\nprepare (compile/convert) time and peak memory (tracemalloc / "
                       "RSS high-water growth)\n")
            out.append("| engine | seconds | tracemalloc MiB | RSS growth MiB |")
            out.append("|---|---:|---:|---:|")
            for engine in engines:
                r = next(r for r in rows if r["engine"] == engine)
                peak = r["prepare_peak_mib"]
                out.append(f"| {engine} | {r['compile_s']:.2f} | "
                           f"{'-' if peak is None else f'{peak:.1f}'} "
                           f"| {r['prepare_rss_growth_mib']:.1f} |")
        out.append("")
    if result["skipped"]:
        out.append("### Skipped\n\n| model | engine | reason |\n|---|---|---|")
        out += [f"| {s['model']} | {s['engine']} | {s['reason'].replace('|', '/')} |"
                for s in result["skipped"]]
    return "\n".join(out) + "\n"


def case_from_file(path: str, rows: np.ndarray | None = None, n_rows: int = 65536,
                   seed: int = 0) -> Case:
    """A benchmark case for a user's model file, with ``rows`` or random ones.

    Random rows are drawn per feature around the model's own thresholds, so that trees
    take both branches. Wider rows (e.g. a trailing label column) are cut to the model's
    features; fewer rows than ``n_rows`` are repeated.
    """
    forest = load(path)
    with open(path, "rb") as fh:
        library = detect_format(fh.read(4096))
    if rows is None:
        rows = random_rows(forest, n_rows, seed)
    rows = np.asarray(rows, np.float32)[:, :forest.n_features]
    reps = -(-n_rows // len(rows))
    rows = np.ascontiguousarray(np.tile(rows, (reps, 1))[:n_rows])
    booster = onnx = None
    if library in ("xgboost", "lightgbm"):
        # Without the training library its engine is listed as skipped (Engine.missing)
        # and the others still run: the base install benchmarks SilvanForge alone.
        try:
            module = importlib.import_module(library)
        except ImportError:
            module = None
        if module is not None:
            booster = module.Booster(model_file=path)
    else:
        with open(path, "rb") as fh:
            onnx = fh.read()
    return Case(os.path.basename(path), forest, rows, library, booster=booster, path=path,
                onnx=onnx)


def random_rows(forest: Forest, n: int, seed: int = 0) -> np.ndarray:
    """Rows whose every feature is drawn from the thresholds the model splits it on."""
    rng = np.random.default_rng(seed)
    internal = ~forest.is_leaf
    X = rng.normal(size=(n, forest.n_features)).astype(np.float32)
    for j in range(forest.n_features):
        cuts = forest.threshold[internal & (forest.feature == j)]
        cuts = cuts[np.isfinite(cuts)]
        if len(cuts):
            X[:, j] = rng.choice(cuts, n) + rng.normal(scale=1e-3 + cuts.std() * 0.05, size=n)
    return X
