"""Issue 26: whatever the caller, the file or the cache gives, SilvanForge raises its own
errors (never crashes, hangs or runs code it was not told to trust)."""

from __future__ import annotations

import io
import json
import multiprocessing
import os
import subprocess
import sys
import threading
import time
import warnings
import zipfile

import numpy as np
import pytest

import silvanforge
from silvanforge.backends.cpu import build, jit
from silvanforge.errors import (InputError, ModelFormatError, SilvanForgeWarning,
                               UnsupportedModelError)
from silvanforge.model import serialize
from silvanforge.plan import cache
from silvanforge.plan.configuration import Configuration
from silvanforge.plan.plan import MAX_JOBS
from silvanforge.runtime.predictor import _DIGEST, Predictor, _digest, _npy

from test_forest import forest_of, stump


@pytest.fixture(scope="module")
def forest():
    trees = [stump(feature=k % 3, threshold=0.1 * k, values=(k, -k)) for k in range(1, 6)]
    return forest_of(*trees, n_features=3, base_score=0.5, post_transform="sigmoid")


@pytest.fixture(scope="module")
def rows():
    return np.random.default_rng(0).normal(size=(300, 3)).astype(np.float32)


# ---- n_jobs ------------------------------------------------------------------------------

# 100,000 threads crashed the process (explicit schedule), 2**31 aborted it in libgomp;
# the rest were taken silently.
BAD_JOBS = [0, -1, MAX_JOBS + 1, 100_000, 2**31, "2", 1.5, 2.0, True, np.bool_(True), None]


@pytest.mark.parametrize("n_jobs", BAD_JOBS[:-1], ids=repr)
def test_predict_refuses_bad_n_jobs(forest, rows, n_jobs):
    predictor = silvanforge.compile(forest, schedule="xgboost", n_jobs=1)
    with pytest.raises(InputError, match=f"n_jobs must be an int from 1 to {MAX_JOBS}, "
                                         f"not {repr(n_jobs)[:8]}"):
        predictor.predict(rows, n_jobs=n_jobs)


@pytest.mark.parametrize("n_jobs", [n for n in BAD_JOBS if n is not None], ids=repr)
def test_compile_refuses_bad_n_jobs(forest, n_jobs):
    with pytest.raises(InputError, match="n_jobs must be an int"):
        silvanforge.compile(forest, schedule="xgboost", n_jobs=n_jobs)


@pytest.mark.parametrize("n_jobs", ["2", 1.5, True, 2**31])
def test_tune_and_auto_refuse_bad_n_jobs(forest, rows, n_jobs):
    """The tuner and the cache lookup of schedule="auto" take the same check (a string
    reached the cache key's int() as a raw ValueError)."""
    with pytest.raises(InputError, match="n_jobs must be an int"):
        silvanforge.tune(forest, rows, n_jobs=n_jobs, use_cache=False, progress=False)
    with pytest.raises(InputError, match="n_jobs must be an int"):
        silvanforge.compile(forest, schedule="auto", n_jobs=n_jobs)


def test_good_n_jobs(forest, rows):
    """numpy's ints are ints; the bound itself runs (threads an explicit schedule asks
    for are all started)."""
    predictor = silvanforge.compile(forest, schedule="xgboost", n_jobs=np.int64(2))
    assert predictor.plan.n_jobs == 2 and type(predictor.plan.n_jobs) is int
    expected = silvanforge.reference.predict(forest, rows)
    np.testing.assert_allclose(predictor.predict(rows, n_jobs=np.int32(MAX_JOBS)), expected,
                               rtol=1e-12)


def test_saved_plan_n_jobs_is_checked(forest):
    """A file's thread count is the file's error (ModelFormatError), not the caller's."""
    from silvanforge.plan.plan import Plan

    plan = silvanforge.compile(forest, schedule="xgboost", n_jobs=1).plan.to_json()
    for bad in (2**31, "2", True, 0):
        with pytest.raises(ModelFormatError, match=f"plan's n_jobs .* not {bad!r}"):
            Plan.from_json(forest, {**plan, "n_jobs": bad})


def test_saved_plan_second_layout_is_checked(forest):
    """A second layout must be a known one with a small-batch schedule to walk."""
    from silvanforge.plan.plan import Plan

    plan = silvanforge.compile(forest, schedule="xgboost", n_jobs=1).plan.to_json()
    for bad in ({"small_representation": "nope", "small_schedule": "reorder(tree, batch)"},
                {"small_representation": "code", "small_schedule": None},
                {"small_representation": 3}):
        with pytest.raises(ModelFormatError, match="small_representation"):
            Plan.from_json(forest, {**plan, **bad})


# ---- saved predictors --------------------------------------------------------------------

def _members(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return {name: z.read(name) for name in z.namelist()}


def _archive(members: dict[str, bytes], redigest: bool) -> bytes:
    """A saved predictor of ``members``, its digest made to match them (as whoever
    writes a file can) when ``redigest``."""
    if redigest:
        members = {**members, _DIGEST: _npy(np.frombuffer(_digest(members), np.uint8))}
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, content in members.items():
            z.writestr(name, content)
    return buf.getvalue()


def _header(members: dict[str, bytes], **changes) -> dict[str, bytes]:
    header = serialize.loads_meta(np.load(io.BytesIO(members["header.npy"])))
    return {**members, "header.npy": _npy(serialize.dumps_meta({**header, **changes}))}


@pytest.fixture(scope="module")
def saved(forest):
    return silvanforge.compile(forest, n_jobs=1).to_bytes()


def _garbage_code(members: dict[str, bytes]) -> dict[str, bytes]:
    """Every object file replaced by bytes that are no program (a file from elsewhere
    may hold anything)."""
    return {k: _npy(np.full(64, 0x0F, np.uint8)) if k.startswith("object_code_") else v
            for k, v in members.items()}


def test_a_changed_member_fails_the_digest(saved):
    with pytest.raises(ModelFormatError, match="digest does not match"):
        Predictor.from_bytes(_archive(_garbage_code(_members(saved)), redigest=False))
    no_digest = {k: v for k, v in _members(saved).items() if k != _DIGEST}
    with pytest.raises(ModelFormatError, match="no digest"):
        Predictor.from_bytes(_archive(no_digest, redigest=False))


@pytest.mark.parametrize("cut", [0, 3, 100, -200, -1])
def test_a_truncated_file_is_a_format_error(saved, tmp_path, cut):
    path = tmp_path / "cut.sfp"
    path.write_bytes(saved[:cut])
    with pytest.raises(ModelFormatError, match="cut.sfp"):
        silvanforge.load_predictor(path)


@pytest.mark.parametrize("fmt", [True, 5.0, "5", None, 0, 8])
def test_format_must_be_an_int_this_version_knows(saved, fmt):
    data = _archive(_header(_members(saved), format=fmt), redigest=True)
    with pytest.raises(ModelFormatError, match=f"format {fmt!r} is not"):
        Predictor.from_bytes(data)


def test_untrusted_code_is_never_run(forest, saved, tmp_path, rows):
    """trust_code=False rebuilds the kernels from the model data: code that is no
    program (with a digest that matches it) is not loaded, and the predictions hold."""
    path = tmp_path / "foreign.sfp"
    path.write_bytes(_archive(_garbage_code(_members(saved)), redigest=True))
    predictor = silvanforge.load_predictor(path, trust_code=False)
    assert predictor.kernel.llvm_ir  # compiled here, not reloaded (it keeps no IR)
    expected = silvanforge.reference.predict(forest, rows)
    np.testing.assert_allclose(predictor.predict(rows), expected, rtol=1e-12)
    again = Predictor.from_bytes(path.read_bytes(), trust_code=False)
    np.testing.assert_allclose(again.predict(rows), expected, rtol=1e-12)
    (tmp_path / "own.sfp").write_bytes(saved)
    trusted = silvanforge.load_predictor(tmp_path / "own.sfp")
    assert trusted.kernel.llvm_ir is None  # the default trusts the code: reloaded as is


def test_compressed_members_are_refused(saved):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, content in _members(saved).items():
            z.writestr(name, content)
    with pytest.raises(ModelFormatError, match="compressed members"):
        Predictor.from_bytes(buf.getvalue())


# ---- fork --------------------------------------------------------------------------------

def _predict_in_child(predictor, rows, queue) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = [predictor.predict(rows, n_jobs=2) for _ in range(2)]
    queue.put((results, [str(w.message) for w in caught
                         if issubclass(w.category, SilvanForgeWarning)]))


@pytest.mark.skipif(not hasattr(os, "register_at_fork"), reason="no fork")
def test_a_child_forked_after_threaded_predictions_predicts(forest, rows):
    """OpenMP's threads do not survive fork: the child's own multithreaded predict hung.
    It now runs on one thread and says so once; a hang fails here, after the timeout."""
    predictor = silvanforge.compile(forest, schedule="xgboost", n_jobs=2)
    expected = predictor.predict(rows)  # two threads: the parent's pool exists
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_predict_in_child, args=(predictor, rows, queue))
    child.start()
    try:
        results, messages = queue.get(timeout=60)
    finally:
        child.join(10)
        if child.is_alive():
            child.kill()
    assert child.exitcode == 0
    for result in results:
        np.testing.assert_array_equal(result, expected)
    assert len(messages) == 1 and "forked after multithreaded predictions" in messages[0]
    np.testing.assert_array_equal(predictor.predict(rows, n_jobs=2), expected)  # parent


_EXIT_AFTER_THREADS = """
import ctypes, numpy as np, silvanforge
from silvanforge.model.builder import Tree, build_forest
trees = [Tree(left=[1, -1, -1], right=[2, -1, -1], feature=[k % 3, 0, 0],
              threshold=[0.1 * k, 0, 0], leaf_value=[0.0, k, -k]) for k in range(1, 40)]
forest = build_forest(trees, n_features=3, n_outputs=1)
predictor = silvanforge.compile(forest, n_jobs=2, schedule="tile(batch, b0, b1, 64)\\n"
                                "parallel(b0)")
rows = np.random.default_rng(0).normal(size=(4096, 3))
for _ in range(20):
    predictor.predict(rows)
ctypes.CDLL(None).exit(0)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's exit handlers")
def test_c_exit_right_after_threaded_predictions_is_clean():
    """C's exit() right after a parallel predict (libFuzzer ends so; so may a C host):
    LLVM's static destructors dlclosed the OpenMP runtime while its threads still spun
    in it, a SIGSEGV every time (the predictor fuzz harness's deaths at exit). The
    runtime is now opened never to be unloaded (backends/cpu/openmp.py)."""
    for _ in range(3):
        # Threads that spin between parallel calls (libgomp's default, forced here).
        done = subprocess.run([sys.executable, "-c", _EXIT_AFTER_THREADS], timeout=120,
                              capture_output=True, text=True,
                              env={**os.environ, "OMP_WAIT_POLICY": "ACTIVE"})
        assert done.returncode == 0, done.stderr[-2000:]


# ---- the tuning cache --------------------------------------------------------------------

def _good_configuration() -> dict:
    return Configuration("reorder(tree, batch)", "sparse", 1).to_json()


BAD_CACHES = {
    "a list": [],
    "entries not a list": {"entries": 5},
    "an entry not an object": {"entries": [5]},
    "a key not an object": {"entries": [{"key": 3, "configuration": {}}]},
    "no configuration": "KEY",
    "configuration not an object": ("KEY", "fast"),
    "empty configuration": ("KEY", {}),
    "schedule not text": ("KEY", {**_good_configuration(), "schedule": 7}),
    "huge n_jobs": ("KEY", {**_good_configuration(), "n_jobs": 2**31}),
    "n_jobs as text": ("KEY", {**_good_configuration(), "n_jobs": "2"}),
    "n_jobs true": ("KEY", {**_good_configuration(), "n_jobs": True}),
    "unknown field": ("KEY", {**_good_configuration(), "speed": 1}),
    "unknown option": ("KEY", {**_good_configuration(), "options": {"turbo": True}}),
    "option of the wrong type": ("KEY", {**_good_configuration(),
                                        "options": {"tile_size": "4"}}),
    "walk not a list": ("KEY", {**_good_configuration(), "point": {"walk": 3}}),
    "seconds as text": ("KEY", {**_good_configuration(), "seconds": "1"}),
}


@pytest.mark.parametrize("name", BAD_CACHES)
def test_a_bad_cache_entry_is_skipped_with_a_warning(forest, tmp_path, monkeypatch, name):
    """compile(schedule="auto") raised raw AttributeError, KeyError, TypeError or
    ValueError on a cache of the wrong shape; now the entry is skipped and the default
    plan built. The bad entries carry this model's key, so they would be used."""
    monkeypatch.setenv("SILVANFORGE_CACHE_DIR", str(tmp_path))
    key = cache.cache_key(forest, 0, 1)
    content = BAD_CACHES[name]
    if content == "KEY":
        content = {"entries": [{"key": key}]}
    elif isinstance(content, tuple):
        content = {"entries": [{"key": key, "configuration": content[1]}]}
    (tmp_path / cache.FILE_NAME).write_text(json.dumps(content))
    with pytest.warns(SilvanForgeWarning, match="tuning cache"):
        predictor = silvanforge.compile(forest, schedule="auto", n_jobs=1)
    assert predictor.plan == silvanforge.compile(forest, n_jobs=1).plan


def test_valid_entries_beside_bad_ones_are_used(forest, tmp_path, monkeypatch):
    monkeypatch.setenv("SILVANFORGE_CACHE_DIR", str(tmp_path))
    key = cache.cache_key(forest, 0, 1)
    good = {**_good_configuration(), "schedule": "one_tree_at_a_time"}
    (tmp_path / cache.FILE_NAME).write_text(json.dumps({"entries": [
        {"key": key, "configuration": good}, {"key": key, "configuration": {"n_jobs": 0}},
        "junk"]}))
    with pytest.warns(SilvanForgeWarning, match="skipped 2 invalid entries"):
        predictor = silvanforge.compile(forest, schedule="auto", n_jobs=1)
    assert predictor.plan.representation == "sparse"
    with pytest.warns(SilvanForgeWarning):  # a store keeps only the valid entries
        cache.store({"model": "other"}, good)
    assert len(json.loads((tmp_path / cache.FILE_NAME).read_text())["entries"]) == 2


def _store_many(writer: int, count: int, barrier) -> None:
    barrier.wait()
    for i in range(count):
        cache.store({"writer": writer, "i": i}, _good_configuration())


@pytest.mark.skipif(not hasattr(os, "register_at_fork"), reason="no fork")
def test_concurrent_writers_lose_no_entry(tmp_path, monkeypatch):
    monkeypatch.setenv("SILVANFORGE_CACHE_DIR", str(tmp_path))
    writers, count = 6, 15
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(writers)
    processes = [context.Process(target=_store_many, args=(w, count, barrier))
                 for w in range(writers)]
    for p in processes:
        p.start()
    for p in processes:
        p.join(120)
        assert p.exitcode == 0
    keys = {(e["key"]["writer"], e["key"]["i"])
            for e in json.loads((tmp_path / cache.FILE_NAME).read_text())["entries"]}
    assert keys == {(w, i) for w in range(writers) for i in range(count)}


# ---- deep trees --------------------------------------------------------------------------

def _lightgbm_chain(depth: int) -> str:
    """A LightGBM model of one tree, a chain ``depth`` splits deep (LightGBM grows leaf
    by leaf: nothing bounds its depth but the leaves)."""
    from test_lightgbm import _model_text

    left = [str(i + 1) for i in range(depth - 1)] + [str(~(depth - 1))]
    right = [str(~i) for i in range(depth - 1)] + [str(~depth)]
    tree = {"num_leaves": str(depth + 1), "num_cat": "0",
            "split_feature": " ".join(["0"] * depth),
            "threshold": " ".join(str(float(i)) for i in range(depth)),
            "decision_type": " ".join(["2"] * depth), "left_child": " ".join(left),
            "right_child": " ".join(right),
            "leaf_value": " ".join(str(float(i)) for i in range(depth + 1)),
            "is_linear": "0", "shrinkage": "1"}
    return _model_text([tree], 1, 1, "regression")


@pytest.mark.parametrize("representation", ["reorg", "array"])
def test_a_too_deep_chain_for_level_order_layouts(tmp_path, representation):
    """Padded to 2^15001 - 1 slots, a number Python refuses to print: the message said so
    with a raw ValueError. The limit is named instead."""
    path = tmp_path / "chain.txt"
    path.write_text(_lightgbm_chain(15_000))
    forest = silvanforge.load(path)
    assert forest.max_depth == 15_000
    with pytest.raises(UnsupportedModelError, match=r"at least 2\^15000 node slots \(more "
                                                    r"than MAX_SLOTS = 16777216\)"):
        silvanforge.compile(forest, representation=representation, n_jobs=1)


def test_validation_is_linear_in_nodes(tmp_path):
    """Each level of the depth walk recomputed every node's children: a 100,000-deep
    chain (2.4 MB of LightGBM text) took 49 s to load; now well under a second (the
    bound leaves room for a loaded machine)."""
    path = tmp_path / "chain.txt"
    path.write_text(_lightgbm_chain(100_000))
    start = time.perf_counter()
    forest = silvanforge.load(path)
    assert time.perf_counter() - start < 8
    assert forest.max_depth == 100_000


# ---- sizes proportional to the file ------------------------------------------------------

@pytest.fixture(scope="module")
def xgboost_json(tmp_path_factory) -> dict:
    xgb = pytest.importorskip("xgboost")
    X = np.random.default_rng(0).normal(size=(50, 3))
    booster = xgb.train({"max_depth": 2}, xgb.DMatrix(X, label=X[:, 0]), 2)
    path = tmp_path_factory.mktemp("xgb") / "model.json"
    booster.save_model(str(path))
    return json.loads(path.read_text())


@pytest.mark.parametrize("num_class", [5000, 2**31 - 1])
def test_a_class_count_the_file_cannot_back_is_refused(xgboost_json, tmp_path, num_class):
    """A 4 KB file with num_class 2^31 - 1 made load allocate 16 GB (the base score of
    every class); outputs beyond the file's trees and base scores are refused first."""
    model = json.loads(json.dumps(xgboost_json))
    model["learner"]["learner_model_param"]["num_class"] = str(num_class)
    path = tmp_path / "classes.json"
    path.write_text(json.dumps(model))
    with pytest.raises(ModelFormatError, match=f"{num_class} outputs, but the model gives "
                                               "only 3 values"):
        silvanforge.load(path)


def test_outputs_only_the_base_score_gives_are_allowed_up_to_the_bound():
    from silvanforge.model.builder import MAX_UNBACKED_OUTPUTS, build_forest

    forest = build_forest([stump()], n_features=1, n_outputs=MAX_UNBACKED_OUTPUTS)
    assert forest.n_outputs == MAX_UNBACKED_OUTPUTS
    with pytest.raises(ModelFormatError, match="1025 outputs"):
        build_forest([stump()], n_features=1, n_outputs=MAX_UNBACKED_OUTPUTS + 1)
    many = build_forest([stump(output=k) for k in range(2000)], n_features=1,
                        n_outputs=2000)  # every output written by a tree
    assert many.n_outputs == 2000


def _categorical_chain(n_nodes: int, category: int):
    from silvanforge.model.builder import Tree

    # A chain of categorical splits, each on the set {category}: node k's children are
    # node k + 1 (the last one a leaf) and the leaf n_nodes + 1 + k.
    n = 2 * n_nodes + 1
    leaf = [-1] * (n_nodes + 1)
    return Tree(left=list(range(1, n_nodes + 1)) + leaf,
                right=[n_nodes + 1 + k for k in range(n_nodes)] + leaf,
                feature=0, threshold=[0.0] * n, leaf_value=[float(k) for k in range(n)],
                categories={k: [category] for k in range(n_nodes)})


def test_category_bitsets_the_file_cannot_back_are_refused():
    """Nodes naming category 2^24 - 1 asked for 2 MB of bitset each (a 3 KB XGBoost
    file: 6 MB); beyond 16 MB more than the listed categories can back, load refuses
    before allocating."""
    from silvanforge.model.builder import build_forest
    from silvanforge.model.forest import MAX_CATEGORY

    few = build_forest([_categorical_chain(4, MAX_CATEGORY)], n_features=1, n_outputs=1)
    assert few.cat_bitset.nbytes == 4 * 2**21
    with pytest.raises(ModelFormatError, match="category sets need 18 MB of bitsets for "
                                               "9 listed categories"):
        build_forest([_categorical_chain(9, MAX_CATEGORY)], n_features=1, n_outputs=1)
    many = build_forest([_categorical_chain(2000, 5000)], n_features=1, n_outputs=1)
    assert many.n_nodes == 4001  # small categories: any number of nodes


@pytest.mark.parametrize("plan", [
    "sparse", {"schedule": True}, {"representation": 1.5}, {"representation": "dense"},
    {"tile_size": {"a": 1}}, {"small_schedule": -1}, {"sized_threads": 1},
    {"precision": []}, {"n_jobs": 2**31},
    {"small_batch": 8, "small_schedule": None}])  # predict raised a raw AttributeError
def test_a_plan_of_the_wrong_shape_is_a_format_error(saved, plan):
    """Found by mutating a saved plan's fields (with a digest to match): raw
    AttributeError, KeyError and TypeError came out of loading."""
    members = _members(saved)
    header = serialize.loads_meta(np.load(io.BytesIO(members["header.npy"])))
    changed = plan if isinstance(plan, str) else {**header["plan"], **plan}
    data = _archive(_header(members, plan=changed), redigest=True)
    with pytest.raises(ModelFormatError, match="plan"):
        Predictor.from_bytes(data, trust_code=False)


# ---- threads -----------------------------------------------------------------------------

def test_threads_sharing_predictors_get_the_serial_results(forest):
    """8 threads x predictors of different schedules, thread counts and outputs, for a
    bounded time: every result equals the one computed serially first."""
    rng = np.random.default_rng(1)
    predictors = [silvanforge.compile(forest, schedule=s, representation=r, n_jobs=2)
                  for s, r in ((None, None), ("xgboost", "sparse"), ("tree_parallel", "array"))]
    batches = [rng.normal(size=(n, 3)) for n in (1, 7, 300, 2000)]
    calls = [(p, X, output, jobs) for p in predictors for X in batches
             for output in ("value", "margin") for jobs in (1, 2, 3)]
    expected = [p.predict(X, output, jobs) for p, X, output, jobs in calls]
    deadline = time.perf_counter() + 3
    failures: list[str] = []

    def worker(seed: int) -> None:
        order = np.random.default_rng(seed)
        while time.perf_counter() < deadline and not failures:
            i = int(order.integers(len(calls)))
            p, X, output, jobs = calls[i]
            if not np.array_equal(p.predict(X, output, jobs), expected[i]):
                failures.append(f"call {i}")

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads) and not failures


# ---- memory ------------------------------------------------------------------------------

# In a process of its own, so that what other tests allocated and freed does not count.
# 200 compile-and-drop cycles of a 3-tree model grew RSS by ~30 MB (~150 KB each), nearly
# all of it llvmlite's optimisation pipeline; the builds now run in recycled workers.
COMPILE_AND_DROP = """
import gc, sys
import silvanforge
sys.path.insert(0, sys.argv[1])
from test_forest import forest_of, stump

def rss_mb():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS")) / 1024

forest = forest_of(*[stump(feature=k % 3, threshold=0.1 * k, values=(k, -k))
                     for k in range(1, 4)], n_features=3)
for _ in range(10):  # what the first compiles allocate for good (caches, imports)
    silvanforge.compile(forest)
gc.collect()
before = rss_mb()
for _ in range(200):
    silvanforge.compile(forest)
gc.collect()
print(rss_mb() - before)
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads VmRSS")
def test_compiling_and_dropping_predictors_does_not_grow_memory():
    tests = os.path.dirname(os.path.abspath(__file__))
    done = subprocess.run([sys.executable, "-c", COMPILE_AND_DROP, tests], text=True,
                          capture_output=True, timeout=300, check=True)
    assert float(done.stdout) < 5, f"RSS grew {float(done.stdout):.1f} MB"


def test_a_build_worker_is_replaced_after_its_share_and_builds_the_same(monkeypatch):
    """Workers hold the pipeline's leak: each is replaced after BUILDS_PER_WORKER modules,
    and the object code does not depend on which process built it."""
    monkeypatch.setattr(build, "BUILDS_PER_WORKER", 2)
    monkeypatch.setattr(build, "_HOME", [])  # not one that earlier builds have used
    target = jit.Target.host()
    args = (target.triple, target.cpu, target.features, 2)
    text = "define double @f(double %x) {\n  %y = fmul double %x, 3.0\n  ret double %y\n}"
    homes = []
    for _ in range(4):
        obj, _ = build.build(text, *args)
        assert obj == build.build_object(text, *args)[0]
        homes.append(build._HOME[0])
    assert homes[0] is homes[1] and homes[2] is homes[3] and homes[1] is not homes[2]
    assert homes[0].process is None and homes[3].process is None  # both retired


# ---- found by fuzz/harness.py ------------------------------------------------------------

@pytest.mark.parametrize("header", [
    b"{'descr': '<f8', 'fortran_order': False, 'shape': (3,",  # raw tokenize.TokenError
    b"{'descr': '<f8', 'fortran_order': False, 'shape': (10**12,), }",
    b"{'descr': '<f8', 'fortran_order': False, 'shape': (2**62, 2**62), }",
    b"{'descr': 'O', 'fortran_order': False, 'shape': (1,), }",
    b"{'descr': '<f8' 'fortran_order': False, 'shape': (3,), }",
    b"not a dict at all"], ids=range(6))
def test_a_damaged_npy_header_is_a_format_error(saved, header):
    """A member whose .npy header is damaged, with a digest that matches it."""
    member = b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + bytes(24)
    members = {**_members(saved), "forest_feature.npy": member}
    with pytest.raises(ModelFormatError, match="forest_feature.npy"):
        Predictor.from_bytes(_archive(members, redigest=True), trust_code=False)


def _central_directory_changed(data: bytes, offset: int, value: int) -> bytes:
    """``data`` with a 2-byte field of every central directory entry set to ``value``."""
    out = bytearray(data)
    at = out.find(b"PK\x01\x02")
    while at != -1:
        out[at + offset:at + offset + 2] = value.to_bytes(2, "little")
        at = out.find(b"PK\x01\x02", at + 4)
    return bytes(out)


@pytest.mark.parametrize("offset, value", [
    (6, 160),  # needs zip version 16.0: a raw NotImplementedError from zipfile
    (8, 1)],  # encrypted: a raw RuntimeError ("password required for extraction")
    ids=["version", "encrypted"])
def test_a_zip_feature_zipfile_lacks_is_a_format_error(saved, offset, value):
    with pytest.raises(ModelFormatError, match="not a saved SilvanForge predictor"):
        Predictor.from_bytes(_central_directory_changed(saved, offset, value),
                             trust_code=False)


def test_a_leaf_s_feature_never_reaches_compiled_code(saved, rows):
    # Found by the predictor fuzz harness: a leaf's feature 2^24 in a saved predictor
    # (digest matching) loaded, and padded walks load a leaf's feature like a split's,
    # past the row. A leaf's feature is now 0 whatever the file says.
    members = _members(saved)
    feature = np.load(io.BytesIO(members["forest_feature.npy"]))
    left = np.load(io.BytesIO(members["forest_left.npy"]))
    leaf = np.flatnonzero(left < 0)[0]
    feature[leaf] = 1 << 24
    members["forest_feature.npy"] = _npy(feature)
    loaded = Predictor.from_bytes(_archive(members, redigest=True), trust_code=False)
    assert loaded.forest.feature[leaf] == 0
    np.testing.assert_allclose(loaded.predict(rows),
                               silvanforge.reference.predict(loaded.forest, rows))
