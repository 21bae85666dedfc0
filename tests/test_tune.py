"""The autotuner: exact results, the gate, the cache and its keys, "auto", the CLI."""

from __future__ import annotations

import json
import re
import warnings

import numpy as np
import pytest

import silvanforge
from silvanforge import reference
from silvanforge.cli import main
from silvanforge.errors import SilvanForgeWarning
from silvanforge.representations import REGISTRY
from silvanforge.representations.tiled import TILED
from silvanforge.tune import Configuration, cache, explore, heuristic, space

from util import with_nans

BUDGET_S = 3.0


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SILVANFORGE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _rows(n_features: int, n: int = 300, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return with_nans(rng.normal(size=(n, n_features)), 0.1, seed)


def _xgboost():
    xgb = pytest.importorskip("xgboost")
    X = _rows(5)
    y = np.nan_to_num(X[:, 0]) + np.nan_to_num(X[:, 1]) > 0
    return xgb.train({"max_depth": 3, "objective": "binary:logistic", "nthread": 1},
                     xgb.DMatrix(X, label=y), num_boost_round=8), X


def _lightgbm():
    lgb = pytest.importorskip("lightgbm")
    X = _rows(4)
    y = np.nan_to_num(X[:, 0]) * 2 - np.nan_to_num(X[:, 2])
    return lgb.train({"num_leaves": 7, "verbose": -1, "num_threads": 1},
                     lgb.Dataset(X, y), num_boost_round=6), X


def _random_forest():
    ensemble = pytest.importorskip("sklearn.ensemble")
    X = _rows(6)
    y = np.nan_to_num(X[:, 0]) > np.nan_to_num(X[:, 3])
    return ensemble.RandomForestClassifier(n_estimators=5, max_depth=4, random_state=0) \
        .fit(np.nan_to_num(X), y), X


MODELS = {"xgboost": _xgboost, "lightgbm": _lightgbm, "random_forest": _random_forest}


@pytest.fixture(scope="module")
def xgb_model():
    return _xgboost()


@pytest.mark.parametrize("name", sorted(MODELS))
def test_tuned_configuration_is_exact(name):
    model, X = MODELS[name]()
    forest = silvanforge.load(model)
    config = silvanforge.tune(forest, X, batch_size=64, n_jobs=2, budget_s=BUDGET_S,
                              progress=False)
    assert (config.representation in REGISTRY or config.is_default) \
        and 1 <= config.n_jobs <= 2
    assert config.seconds > 0 and config.batch_size == 64 and config.search == "guided"
    expected = reference.predict(forest, X)
    default = silvanforge.compile(forest, n_jobs=config.n_jobs)
    for predictor in (silvanforge.compile(forest, schedule=config),
                      silvanforge.compile(forest, **config.compile_kwargs())):
        np.testing.assert_allclose(predictor.predict(X), expected, rtol=1e-12, atol=1e-12)
        if config.is_default:
            assert predictor.plan.to_json() == default.plan.to_json()
        else:
            assert str(predictor.schedule) == config.schedule
        assert predictor.plan.n_jobs == config.n_jobs


@pytest.mark.parametrize("fastest", ["default", "other"])
def test_the_default_plan_is_timed_beside_every_search(xgb_model, monkeypatch, fastest):
    """A tuned configuration is never slower than the default on the rows it was given:
    the default plan is a candidate of the shortlist and of the final round, and is
    returned (as a configuration that leaves schedule and representation to the
    planner) when it wins."""
    model, X = xgb_model
    forest = silvanforge.load(model)
    rounds, counts = [], []

    def medians(timers, n_rounds, *args):
        ev_points = list(timers)
        rounds.append(ev_points)
        counts.append(n_rounds)
        # Timed by their index in the round; the default point comes first in each.
        return {i: (1e-6 if (i == ev_points[0]) == (fastest == "default") else 1e-3 + i)
                for i in timers}

    monkeypatch.setattr(explore.bench, "interleaved_medians", medians)
    ev = explore.Evaluator(forest, X[:64])
    results = explore.guided(ev, n_jobs=2)
    orders = [r.point["order"] for r in results]
    assert space.DEFAULT_ORDER in orders and len(rounds) == 2
    # The last comparison, of a few close candidates, takes a benchmark's rounds.
    assert counts == [explore.SEARCH_ROUNDS, explore.FINAL_ROUNDS]
    best = Configuration.of(results[0], 64, "guided")
    assert best.is_default == (fastest == "default")
    default_s = next(r.seconds for r in results if r.point["order"] == space.DEFAULT_ORDER)
    assert results[0].seconds <= default_s
    if best.is_default:
        assert best.compile_kwargs() == {"n_jobs": 2}
        again = Configuration.from_json(json.loads(json.dumps(best.to_json())))
        plan = silvanforge.compile(forest, schedule=again).plan
        assert plan.to_json() == silvanforge.compile(forest, n_jobs=2).plan.to_json()
    every = explore.exhaustive(explore.Evaluator(forest, X[:64]), n_jobs=1,
                               deadline=0.0)  # past: only what is compiled runs
    assert every == [] or every[0].point["order"] == space.DEFAULT_ORDER


def test_configuration_round_trips_json_and_compiles(xgb_model):
    model, X = xgb_model
    config = silvanforge.tune(model, X, batch_size=16, n_jobs=1, budget_s=BUDGET_S,
                              use_cache=False, progress=False)
    again = Configuration.from_json(json.loads(json.dumps(config.to_json())))
    assert again == config
    np.testing.assert_allclose(silvanforge.compile(model, schedule=again).predict(X),
                               reference.predict(silvanforge.load(model), X), rtol=1e-12)


def test_explicit_keywords_win_over_the_configuration(xgb_model):
    model, _ = xgb_model
    config = Configuration("reorder(tree, batch)", "sparse", 2)
    predictor = silvanforge.compile(model, schedule=config, representation="array",
                                    n_jobs=1)
    assert predictor.plan.representation == "array" and predictor.plan.n_jobs == 1
    assert str(predictor.schedule) == "reorder(tree, batch)"


def test_every_point_of_the_space_renders_a_schedule_or_is_refused():
    forest = silvanforge.load(_xgboost()[0])
    points = space.points(forest.n_trees, n_jobs=2)
    assert points[0] == space.default_point(2)
    points = points[1:]
    assert {p["representation"] for p in points} == set(REGISTRY)
    assert {p["order"] for p in points} == set(space.ORDERS)
    assert all(p["threads"] == 2 for p in points if p["order"] == "tree_chunks")
    texts = {space.render(p, forest.n_trees)[0] for p in points}
    assert len(texts) > 50


def test_code_is_shortlisted_in_blocks_of_a_threads_share():
    # Skewed trees (chains of 20 splits) take the code-emitting layouts; from
    # LARGE_CODE_BATCH rows their tiled point has blocks sized when predict runs.
    from silvanforge.model.builder import Tree, build_forest

    def chain(k: int) -> Tree:  # internal nodes 0, 2, ..., 38, each with a leaf on its left
        internal = [i % 2 == 0 and i < 40 for i in range(41)]
        return Tree(left=[i + 1 if inner else -1 for i, inner in enumerate(internal)],
                    right=[i + 2 if inner else -1 for i, inner in enumerate(internal)],
                    feature=[(i + k) % 3 for i in range(41)],
                    threshold=[0.05 * i - 1 for i in range(41)],
                    leaf_value=[float(i) for i in range(41)])
    forest = build_forest([chain(k) for k in range(6)], n_features=3, n_outputs=1)
    every = space.points(forest.n_trees, n_jobs=2)
    tiled = [p for p in heuristic.shortlist(forest, heuristic.LARGE_CODE_BATCH, n_jobs=2)
             if p["order"] == "tiled_code"]
    assert tiled and all(p["block"] == "share" and p in every for p in tiled)
    text, _ = space.render(tiled[0], forest.n_trees)
    assert text.startswith("tile(batch, b0, b1, share)")
    rows = np.random.default_rng(0).normal(size=(700, 3)) * 2
    predictor = silvanforge.compile(forest, schedule=text,
                                    representation=tiled[0]["representation"], n_jobs=2)
    np.testing.assert_allclose(predictor.predict(rows), reference.predict(forest, rows),
                               rtol=1e-12)


def test_heuristic_points_lie_in_the_space():
    forest = silvanforge.load(_xgboost()[0])
    every = space.points(forest.n_trees, n_jobs=4)
    for batch in (1, 8, 64, 1024, 65536):
        short = heuristic.shortlist(forest, batch, n_jobs=4)
        assert short and all(p in every for p in short)
        more = heuristic.refinements(short[:heuristic.KEEP], forest, batch, n_jobs=4)
        assert all(p in every for p in more)
        # Tiles are tried on a leader whose layout has a tiled form, and only there.
        tiled = [p for p in more if p.get("tile_size", 1) > 1]
        assert all(p["representation"] in TILED for p in tiled)
        assert bool(tiled) == (short[0]["representation"] in TILED)
    assert {p.get("tile_size", 1) for p in every} == set(space.TILE_SIZES)
    assert all(space.tiles_fit(p) for p in every)
    text, options = space.render({**short[0], "tile_size": 3}, forest.n_trees)
    assert options["tile_size"] == 3


def test_exhaustive_search_finds_an_exact_configuration(xgb_model):
    model, X = xgb_model
    config = silvanforge.tune(model, X, batch_size=32, n_jobs=1, budget_s=BUDGET_S,
                              exhaustive=True, use_cache=False, progress=False)
    assert config.search == "exhaustive"
    np.testing.assert_allclose(silvanforge.compile(model, schedule=config).predict(X),
                               reference.predict(silvanforge.load(model), X), rtol=1e-12)


def test_a_wrong_candidate_is_discarded_not_timed(xgb_model):
    model, X = xgb_model
    forest = silvanforge.load(model)
    ev = explore.Evaluator(forest, X[:32])
    ev.expected = ev.expected + 1e-3  # as if every kernel computed something else
    points = heuristic.shortlist(forest, 32, n_jobs=1)
    with pytest.warns(SilvanForgeWarning, match="discarded a wrong configuration"):
        results = ev.run(points)
    assert results and all(r.seconds is None for r in results)
    assert ev.rejected and all("MISMATCH" in r.error for r in ev.rejected)


def test_cache_round_trips_and_keys_on_model_and_cpu(xgb_model, cache_dir, monkeypatch):
    model, X = xgb_model
    forest = silvanforge.load(model)
    config = silvanforge.tune(forest, X, batch_size=16, n_jobs=1, budget_s=BUDGET_S,
                              progress=False)
    assert (cache_dir / cache.FILE_NAME).exists()
    key = cache.cache_key(forest, 16, 1)
    assert Configuration.from_json(cache.lookup(key)) == config
    # The second call is answered from the cache: no search runs.
    monkeypatch.setattr(explore, "guided", lambda *a: pytest.fail("searched again"))
    assert silvanforge.tune(forest, X, batch_size=16, n_jobs=1, progress=False) == config
    # Another batch size, thread count, model or CPU misses.
    assert cache.lookup(cache.cache_key(forest, 32, 1)) is None
    assert cache.lookup(cache.cache_key(forest, 16, 2)) is None
    other = silvanforge.load(_lightgbm()[0])
    assert cache.lookup(cache.cache_key(other, 16, 1)) is None
    monkeypatch.setattr(cache, "cpu_id", lambda cpu="native": "some-other-cpu +avx512f")
    assert cache.lookup(cache.cache_key(forest, 16, 1)) is None


def test_model_hash_sees_any_change_to_the_forest(xgb_model):
    forest = silvanforge.load(xgb_model[0])
    threshold = forest.threshold.copy()
    threshold[np.flatnonzero(~forest.is_leaf)[0]] += 1e-3
    changed = silvanforge.load(xgb_model[0])
    object.__setattr__(changed, "threshold", threshold)
    assert cache.model_hash(forest) == cache.model_hash(silvanforge.load(xgb_model[0]))
    assert cache.model_hash(forest) != cache.model_hash(changed)


def test_a_damaged_cache_file_is_a_miss(xgb_model, cache_dir):
    cache_dir.mkdir()
    (cache_dir / cache.FILE_NAME).write_text("{not json")
    forest = silvanforge.load(xgb_model[0])
    assert cache.lookup(cache.cache_key(forest, 16, 1)) is None
    entry = Configuration("xgboost", "sparse", 1).to_json()
    cache.store(cache.cache_key(forest, 16, 1), entry)
    assert cache.lookup(cache.cache_key(forest, 16, 1)) == entry


def test_auto_uses_the_cache_entry_else_the_default(xgb_model):
    model, X = xgb_model
    forest = silvanforge.load(model)
    default = silvanforge.compile(forest, schedule="auto", n_jobs=2)
    assert default.plan == silvanforge.compile(forest, n_jobs=2).plan
    tuned = Configuration("tile(batch, b0, b1, 8)\nparallel(b0)", "array", 1)
    cache.store(cache.cache_key(forest, 100, 2), tuned.to_json())
    predictor = silvanforge.compile(forest, schedule="auto", n_jobs=2)
    assert str(predictor.plan.schedule) == tuned.schedule
    assert predictor.plan.representation == "array" and predictor.plan.n_jobs == 1
    np.testing.assert_allclose(predictor.predict(X), reference.predict(forest, X),
                               rtol=1e-12)
    # Entries for other thread counts are not used.
    assert silvanforge.compile(forest, schedule="auto", n_jobs=1).plan.small_schedule


def test_cli_tune_writes_the_cache_and_compile_auto_uses_it(xgb_model, tmp_path, capsys):
    model, X = xgb_model
    path, data = tmp_path / "m.json", tmp_path / "rows.csv"
    model.save_model(str(path))
    np.savetxt(data, X[:40], delimiter=",")
    assert main(["tune", str(path), str(data), "--n-jobs", "1", "--budget", "2",
                 "--quiet", "-o", str(tmp_path / "c.json")]) == 0
    config = Configuration.from_json(json.loads(capsys.readouterr().out))
    assert config.batch_size == 40
    assert Configuration.from_json(json.loads((tmp_path / "c.json").read_text())) == config
    assert main(["compile", str(path), "-o", str(tmp_path / "m.sfp"), "--schedule", "auto",
                 "--n-jobs", "1"]) == 0
    saved = silvanforge.load_predictor(tmp_path / "m.sfp")
    assert str(saved.plan.schedule) == config.schedule


def test_cli_tune_help(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["tune", "--help"])
    assert exit_.value.code == 0
    assert "--budget" in capsys.readouterr().out


def test_tune_rejects_bad_arguments(xgb_model):
    model, X = xgb_model
    with pytest.raises(silvanforge.InputError):
        silvanforge.tune(model, X[:0], progress=False)
    with pytest.raises(silvanforge.InputError):
        silvanforge.tune(model, X, n_jobs=0, progress=False)
    with pytest.raises(silvanforge.InputError):
        silvanforge.tune(model, X, target="gpu", progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert silvanforge.compile(model, schedule=" auto ", n_jobs=1)


def test_vector_walks_are_shortlisted_for_array_forests_and_exact(xgb_model):
    model, X = xgb_model
    forest = silvanforge.load(model)
    assert not any(p["order"] == "row_vectors"
                   for p in heuristic.shortlist(forest, heuristic.SMALL_BATCH, n_jobs=1))
    vector = [p for p in heuristic.shortlist(forest, 64, n_jobs=1)
              if p["order"] == "row_vectors"]
    assert len(vector) == 1  # an XGBoost forest of near-complete trees: array tables
    for point in vector + heuristic.refinements(vector, forest, 64, n_jobs=1):
        text, options = space.render(point, forest.n_trees)
        assert "vectorize(b1)" in text and ("cache(b0)" in text) == point["cache"]
        predictor = silvanforge.compile(model, schedule=text, n_jobs=1, **options)
        np.testing.assert_array_equal(predictor.predict(X, output="margin"),
                                      silvanforge.reference.predict(forest, X,
                                                                    output="margin"))


def test_vector_walks_are_shortlisted_in_the_default_plans_block(xgb_model):
    # Candidates are built for this machine: the vector point takes the block the
    # default plan takes here (128 rows on AVX-512, 64 on AVX2), and the space has both.
    model, _ = xgb_model
    forest = silvanforge.load(model)
    plan = silvanforge.compile(model, n_jobs=1).plan
    if not plan.schedules[0].vectorized:
        pytest.skip(f"no vector walks by default on this CPU ({plan.cpu})")
    block = int(re.search(r"tile\(batch, b0, b1, (\d+)\)", str(plan.schedules[0])).group(1))
    vector = [p for p in heuristic.shortlist(forest, 1024, n_jobs=1)
              if p["order"] == "row_vectors" and p["representation"] == "array"]
    assert [p["block"] for p in vector] == [block]
    blocks = next(a for a in space.ORDERS["row_vectors"] if a.name == "block").values
    assert {64, 128} <= set(blocks)


def test_vector_walks_of_wide_rows_are_shortlisted_in_compiles_copied_blocks():
    # 5000 float32 features: a copy of 64 rows would pass the stack bound; compile's
    # default copies 16 a block, and so does the tuner's point.
    from test_vector_walks import complete_forest
    forest = complete_forest([3, 3], n_features=5000)
    vector = [p for p in heuristic.shortlist(forest, 64, n_jobs=1)
              if p["order"] == "row_vectors"]
    assert [(p["block"], p["cache"]) for p in vector] == [(16, True)]
    text, options = space.render(vector[0], forest.n_trees)
    rows = np.random.default_rng(0).normal(size=(40, 5000)).astype(np.float32)
    predictor = silvanforge.compile(forest, schedule=text, n_jobs=1, **options)
    np.testing.assert_array_equal(predictor.predict(rows, output="margin"),
                                  silvanforge.reference.predict(forest, rows,
                                                                output="margin"))


def test_vector_walks_of_masks_are_shortlisted_cached_and_exact():
    # Skewed LightGBM trees of up to 31 leaves: masks, whose vector walks read the
    # block's rows prepared (always cached: the toggled copy is no refinement of theirs).
    lgb = pytest.importorskip("lightgbm")
    X = _rows(5, n=3000)
    y = np.nan_to_num(X[:, 0]) * np.nan_to_num(X[:, 1]) + np.sin(np.nan_to_num(X[:, 2]))
    model = lgb.train({"num_leaves": 31, "verbose": -1, "num_threads": 1},
                      lgb.Dataset(X, y), num_boost_round=5)
    forest = silvanforge.load(model)
    assert "mask" in heuristic.representations(forest)
    vector = [p for p in heuristic.shortlist(forest, 64, n_jobs=1)
              if p["order"] == "row_vectors" and p["representation"] == "mask"]
    assert len(vector) == 1 and vector[0]["cache"]
    more = heuristic.refinements(vector, forest, 64, n_jobs=1)
    assert all(p["cache"] for p in more if p["order"] == "row_vectors")
    for point in vector + more:
        text, options = space.render(point, forest.n_trees)
        predictor = silvanforge.compile(model, schedule=text, n_jobs=1, **options)
        np.testing.assert_array_equal(predictor.predict(X, output="margin"),
                                      silvanforge.reference.predict(forest, X,
                                                                    output="margin"))
