"""The GPU auto-scheduler (silvanforge.tune.gpu): Algorithm 1's choices against the seed's
rules (no device needed), every point of a small template space exact on PoCL, the tuner
for target="opencl" and its cache, and compile(schedule="auto") on OpenCL.

The expected values below are worked out from seed 002 §9's rules, not from the code.
Compiling a kernel costs PoCL 0.5-1 s, so the device tests use about 20 kernels.
"""

from __future__ import annotations

import dataclasses
import json
import os
import warnings

import numpy as np
import pytest

import silvanforge
from silvanforge import reference
from silvanforge.errors import SilvanForgeWarning
from silvanforge.model.builder import Tree
from silvanforge.plan import cache, gpu_template as gpu
from silvanforge.tune import gpu as gpu_search
from silvanforge.tune.gpu import Evaluator

from test_forest import forest_of, stump
from util import with_nans

BIG = gpu.DeviceFacts("test device", max_block_threads=1024, shared_bytes=48 * 1024)


def _stumps(n_trees: int, n_features: int, dtype: str = "float32"):
    trees = [stump(feature=k % n_features, threshold=0.1 * k, values=(k, -k))
             for k in range(n_trees)]
    return forest_of(*trees, n_features=n_features, input_dtype=dtype)


def _shape(points):
    """(rows per block, tree threads) pairs, in order of first appearance."""
    return list(dict.fromkeys((p["rows_per_block"], p["tree_threads"]) for p in points))


def test_small_batch_takes_few_rows_and_many_tree_threads():
    """N_batch <= 2048: rows {8, 32} x tree threads {20, 50}; 32 x 50 = 1600 threads is
    more than a block may have, so that pair is left out."""
    points = gpu.algorithm1(_stumps(100, 28), 2048, BIG)
    assert _shape(points) == [(8, 20), (8, 50), (32, 20)]
    # x interleave {1, 2, 4} x {array, sparse, reorg}; but 50 tree threads have 2 trees
    # each, where interleaving 4 walks is interleaving 2: 9 + 6 + 9.
    assert len(points) == 24
    assert {p["interleave"] for p in points if p["tree_threads"] == 50} == {1, 2}
    assert {p["interleave"] for p in points} == {1, 2, 4}
    assert {p["representation"] for p in points} == {"array", "sparse", "reorg"}
    for p in points:  # always cache rows (28 float32 features fit), never trees
        assert (p["cache_rows"], p["cache_trees"], p["shared_reduce"], p["unroll_walks"],
                p["rows_per_thread"]) == (True, False, False, False, 1)


def test_large_batch_few_features_takes_more_rows_and_few_tree_threads():
    points = gpu.algorithm1(_stumps(100, 128), 2049, BIG)  # 128 features: not "many"
    assert _shape(points) == [(32, 2), (32, 10), (64, 2), (64, 10)]
    assert len(points) == 4 * 9
    # The untimed choice (compile(schedule="auto")): the first point, as text.
    text, rep = gpu.render(points[0], _stumps(100, 128))
    assert rep == "array" and text.splitlines() == [
        "tile(batch, b0, b1, 32)", "tile(tree, t0, t1, 50)", "reorder(b0, b1, t0, t1)",
        "gpuDimension(b0, grid.x)",
        "gpuDimension(b1, block.x)", "gpuDimension(t0, block.y)", "cache(b0)"]


def test_many_features_partition_trees_even_at_large_batches():
    """N_f > 128: the small-batch shapes; rows are cached only where a block's rows fit
    (8 x 1000 float32 = 32000 bytes do, 32 x 1000 x 4 do not)."""
    points = gpu.algorithm1(_stumps(100, 1000), 100_000, BIG)
    assert _shape(points) == [(8, 20), (8, 50), (32, 20)]
    assert {p["rows_per_block"]: p["cache_rows"] for p in points} == {8: True, 32: False}


def test_fewer_trees_than_tree_threads_and_a_small_device():
    # 11 trees: 20 and 50 tree threads are both 11 threads of one tree, which leaves
    # nothing to interleave: 2 row shapes x 3 representations.
    points = gpu.algorithm1(_stumps(11, 3), 16, BIG)
    assert _shape(points) == [(8, 11), (32, 11)] and len(points) == 6
    assert {p["interleave"] for p in points} == {1}
    # 256 threads a block: only 8 x 20 = 160 fits.
    small = gpu.DeviceFacts("small", max_block_threads=256, shared_bytes=16 * 1024)
    assert _shape(gpu.algorithm1(_stumps(100, 28), 100, small)) == [(8, 20)]


def test_shared_reduction_stage():
    first = gpu.algorithm1(_stumps(100, 28), 100_000, BIG)[:3]
    second = gpu.with_shared_reduction(first + [{**first[0], "tree_threads": 1}])
    assert second == [{**p, "shared_reduce": True} for p in first]
    assert "sharedReduce(t0)" in gpu.render(second[0], _stumps(100, 28))[0]


def _deep(k: int) -> Tree:
    """Depth 2 on the left, 1 on the right: walks of unequal length."""
    return Tree(left=[1, 3, -1, -1, -1], right=[2, 4, -1, -1, -1],
                feature=[k % 3, (k + 1) % 3, 0, 0, 0], threshold=[0.2 * k - 1, 0.1 * k, 0, 0, 0],
                leaf_value=[0.0, 0.0, 0.5 * k, k, -k])


@pytest.fixture(scope="module")
def forest():
    return forest_of(*[_deep(k) for k in range(9)], n_features=3, base_score=0.25,
                     post_transform="sigmoid")


# Every axis takes each of its values somewhere: one space with the directives on (one and
# four tree threads, one and two rows a thread), one with them off over every
# representation.
SPACES = [
    {"rows_per_block": (8,), "rows_per_thread": (1, 2), "tree_threads": (1, 4),
     "cache_rows": (True,), "cache_trees": (False, True), "unroll_walks": (True,),
     "interleave": (4,), "shared_reduce": (True,), "representation": ("sparse",)},
    {"rows_per_block": (32,), "rows_per_thread": (1,), "tree_threads": (4,),
     "cache_rows": (False,), "cache_trees": (False,), "unroll_walks": (False,),
     "interleave": (2,), "shared_reduce": (False,),
     "representation": ("array", "reorg", "sparse")},
]


def test_small_space_has_the_points_the_rules_give(forest):
    # 2 rows/thread x 2 caches x (1 tree thread: no shared reduction; 4: shared) = 8.
    assert len(gpu.points(forest, BIG, SPACES[0])) == 8
    assert len(gpu.points(forest, BIG, SPACES[1])) == 3
    assert len(gpu.points(forest, BIG)) > 1000  # the whole template


@pytest.mark.parametrize("point", [p for space in SPACES for p in gpu.points(
    forest_of(*[_deep(k) for k in range(9)], n_features=3), BIG, space)],
    ids=lambda p: "-".join(str(v) for v in p.values()))
def test_every_point_of_a_small_space_is_exact_on_opencl(opencl, forest, point):  # noqa: F811
    text, rep = gpu.render(point, forest)
    p = silvanforge.compile(forest, "opencl", text, rep)
    rng = np.random.default_rng(3)
    for n in (0, 1, 9, 70):
        X = with_nans(rng.normal(size=(n, 3)) * 2, 0.1, seed=n)
        for output in ("margin", "value"):
            np.testing.assert_allclose(p.predict(X, output=output),
                                       reference.predict(forest, X, output=output),
                                       rtol=1e-12, atol=1e-12, err_msg=f"{text}\n{rep}")


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SILVANFORGE_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_tuner_result_is_exact_and_round_trips_the_cache(opencl, forest, cache_dir,  # noqa: F811
                                                         monkeypatch):
    X = with_nans(np.random.default_rng(4).normal(size=(50, 3)), 0.1)
    config = silvanforge.tune(forest, X, target="opencl", batch_size=64, progress=False)
    # 9 trees over 20 or 50 tree threads: one tree each; rows 8 or 32; 3 representations;
    # then the best 3 with shared reduction.
    facts = gpu.device_facts("opencl")
    stage1 = [gpu.render(p, forest) for p in gpu.algorithm1(forest, 64, facts)]
    assert len(stage1) == 6 and config.search == "algorithm1"
    assert (config.schedule, config.representation) in stage1 or \
        "sharedReduce(t0)" in config.schedule
    assert config.batch_size == 64 and config.seconds > 0
    p = silvanforge.compile(forest, target="opencl", schedule=config)
    np.testing.assert_allclose(p.predict(X), reference.predict(forest, X), rtol=1e-12)

    entries = json.loads((cache_dir / "tuning.json").read_text())["entries"]
    assert [e["key"]["target"] for e in entries] == ["opencl"]
    assert entries[0]["key"]["device"] == facts.name

    def no_search(*args, **kwargs):
        raise AssertionError("a cached result must not be searched again")

    monkeypatch.setattr(gpu_search, "Evaluator", no_search)
    assert silvanforge.tune(forest, X, target="opencl", batch_size=64) == config
    # schedule="auto" takes the cache entry: the most recent, whatever its batch size.
    auto = silvanforge.compile(forest, target="opencl", schedule="auto")
    assert (str(auto.schedule), auto.representation.name) == \
        (str(p.schedule), config.representation)
    text, rep = gpu.render(gpu.points(forest, facts, SPACES[1])[0], forest)
    other = dataclasses.replace(config, schedule=text, representation=rep, batch_size=128)
    cache.store(gpu.cache_key(forest, 128, "opencl", facts), other.to_json())
    auto = silvanforge.compile(forest, target="opencl", schedule="auto")
    assert (str(auto.schedule), auto.representation.name) == \
        (str(silvanforge.schedule.Schedule.parse(text, 9)), rep)
    np.testing.assert_allclose(auto.predict(X), reference.predict(forest, X), rtol=1e-12)


def test_auto_without_a_cache_entry_is_algorithm1s_first_point(opencl, forest,  # noqa: F811
                                                               cache_dir):
    auto = silvanforge.compile(forest, target="opencl", schedule="auto")
    text, rep = gpu.render(gpu.algorithm1(forest, gpu.AUTO_BATCH,
                                          gpu.device_facts("opencl"))[0], forest)
    assert str(auto.schedule) == str(silvanforge.schedule.Schedule.parse(text, 9))
    assert auto.representation.name == rep
    X = np.random.default_rng(5).normal(size=(40, 3))
    np.testing.assert_allclose(auto.predict(X), reference.predict(forest, X), rtol=1e-12)
    assert not os.path.exists(cache_dir / "tuning.json")


def test_a_wrong_candidate_is_discarded_and_reported(opencl, forest):  # noqa: F811
    rows = np.random.default_rng(6).normal(size=(20, 3))
    ev = Evaluator(forest, rows, "opencl")
    ev.expected = ev.expected + 1.0  # as if the compiler were wrong
    point = gpu.algorithm1(forest, 20, BIG)[0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        [result] = ev.run([point])
    assert result.seconds is None and result.error.startswith("MISMATCH")
    assert ev.rejected == [result]
    assert any(issubclass(w.category, SilvanForgeWarning) for w in caught)
