"""GPU backends against the reference: OpenCL kernels run on PoCL (or any OpenCL device),
every CUDA kernel compiled to PTX by NVRTC, and on a machine with an NVIDIA GPU the CUDA
path run for real (marker ``cuda``).

CI has no GPU but must run these: there a missing pyopencl / OpenCL device / NVRTC is a
failure; elsewhere (no ``CI`` in the environment) a skip with the reason printed.
Compiling an OpenCL program costs PoCL about a second, so predictors are built once per
configuration and shared by the tests.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import silvanforge
from silvanforge import reference
from silvanforge.backends.gpu import CUDARenderer, OpenCLRenderer
from silvanforge.errors import BackendError, InputError, ScheduleError, UnsupportedModelError
from silvanforge.lir import finish, gpu, ir
from silvanforge.lir.interpret import NUMPY_DTYPES, run_launch
from silvanforge.mir import lower as mir_lower
from silvanforge.representations import REGISTRY
from silvanforge.schedule import named
from silvanforge.schedule.library import GPU_SCHEDULES

from test_finish import CASES as FINISH_CASES, model as finish_model
from test_forest import forest_of, random_forests, stump
from test_representations import category_forest
from test_tiled_compile import skewed_forest
from util import assert_parity, probe_rows, with_nans

REPRESENTATIONS = ["array", "sparse", "reorg"]


_PREDICTORS: dict = {}


def predictor(forest, schedule: str, representation: str = "sparse", target="opencl"):
    key = (id(forest), schedule, representation, target)
    if key not in _PREDICTORS:
        _PREDICTORS[key] = silvanforge.compile(forest, target=target, schedule=schedule,
                                               representation=representation)
    return _PREDICTORS[key]


@pytest.fixture(scope="module")
def forest():
    """Eleven stumps over three features, a sigmoid: T not a multiple of any tile."""
    trees = [stump(feature=k % 3, threshold=0.1 * k, values=(k, -k)) for k in range(1, 12)]
    return forest_of(*trees, n_features=3, base_score=0.5, post_transform="sigmoid")


def _program(forest, schedule: str, representation: str) -> gpu.Program:
    sched = named(schedule, forest.n_trees) if schedule in GPU_SCHEDULES else \
        silvanforge.schedule.Schedule.parse(schedule, forest.n_trees)
    return gpu.lower(mir_lower(forest, sched), forest, REGISTRY[representation](forest))


# Beyond the named ones: a row cache on a block of rows, rows per block with tree threads
# on block.y and no shared reduction (global privatized buffer, one launch), and a split.
EXTRA = {
    "cached rows": "tile(batch, b0, b1, 16)\ncache(b0)\ngpuDimension(b0, grid.x)\n"
                   "gpuDimension(b1, block.x)",
    "global tree reduce": "tile(batch, b0, b1, 4)\ntile(tree, t0, t1, 3)\n"
                          "reorder(b0, b1, t0, t1)\ngpuDimension(b0, grid.x)\n"
                          "gpuDimension(b1, block.x)\ngpuDimension(t0, block.y)",
    "split unrolled": "tile(batch, b0, b1, 32)\nsplit(tree, ta, tb, 5)\nunrollWalk(ta, 1)\n"
                      "gpuDimension(b0, grid.x)\ngpuDimension(b1, block.x)",
}
MATRIX = [(s, r) for s in GPU_SCHEDULES for r in REPRESENTATIONS] + \
    [(s, "sparse") for s in EXTRA.values()]


@pytest.mark.parametrize("schedule,representation", MATRIX)
def test_opencl_matches_reference(opencl, forest, schedule, representation):
    p = predictor(forest, schedule, representation)
    rng = np.random.default_rng(1)
    for n in (0, 1, 63, 65, 200):
        X = with_nans(rng.normal(size=(n, 3)), 0.1, seed=n)
        for output in ("margin", "value"):
            np.testing.assert_allclose(p.predict(X, output=output),
                                       reference.predict(forest, X, output=output),
                                       rtol=1e-12, atol=1e-12,
                                       err_msg=f"{schedule}, {representation}, {n} rows")


@pytest.mark.parametrize("schedule,representation", MATRIX)
def test_cuda_kernels_compile_to_ptx(nvrtc, forest, schedule, representation):
    program = _program(forest, schedule, representation)
    ptx = nvrtc(CUDARenderer().render(program))
    for launch in program.launches:
        assert f".entry {launch.kernel.name}" in ptx


# Each post-transform with one of the three averaging kinds (finishing is per row: the
# schedule does not matter to it).
FINISHES = [(case, [(False, True), (True, True), (True, False)][i % 3])
            for i, case in enumerate(FINISH_CASES)]


@pytest.mark.parametrize("case, averaging", FINISHES,
                         ids=[f"{c[0]}-{c[1]}-{a[0]}-{a[1]}" for c, a in FINISHES])
def test_rows_are_finished_on_the_device(opencl, nvrtc, case, averaging):
    """The last launch finishes margins and values as the CPU kernel does; transforms
    only numpy has are applied to its scores on the host."""
    name, outputs, params = case
    forest = finish_model(name, outputs, params, *averaging)
    p = silvanforge.compile(forest, target="opencl")
    assert "finish" in p.dump("lir").rsplit("// launch", 1)[1]
    X = with_nans(np.random.default_rng(outputs).normal(0, 2, size=(300, 3)), 0.1)
    for output in ("margin", "value"):
        np.testing.assert_allclose(p.predict(X, output=output),
                                   reference.predict(forest, X, output=output),
                                   rtol=1e-12, atol=1e-15, err_msg=output)
    nvrtc(CUDARenderer().render(p.program))


@settings(max_examples=8, deadline=None)
@given(forest=random_forests(), seed=st.integers(0, 2**32 - 1),
       schedule=st.sampled_from(GPU_SCHEDULES), representation=st.sampled_from(REPRESENTATIONS))
def test_random_forests_on_opencl(opencl, forest, seed, schedule, representation):
    """Every split semantic (operators, missing rules, categories, vector leaves)."""
    try:
        p = silvanforge.compile(forest, target="opencl", schedule=schedule,
                                representation=representation)
    except UnsupportedModelError:
        assert representation == "array"
        return
    X = probe_rows(forest, seed, 37)
    for output in ("margin", "value"):
        np.testing.assert_allclose(p.predict(X, output=output),
                                   reference.predict(forest, X, output=output),
                                   rtol=1e-12, atol=1e-12, err_msg=f"{schedule}, {representation}")


def test_xgboost_model_on_opencl(opencl):
    xgb = pytest.importorskip("xgboost")
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 6)).astype(np.float32)
    y = (X[:, 0] + X[:, 1] * X[:, 2] > 0).astype(int)
    booster = xgb.train({"max_depth": 4, "objective": "binary:logistic"},
                        xgb.DMatrix(X, y), num_boost_round=12)
    p = silvanforge.compile(booster, target="opencl", schedule="gpu_tree_parallel")
    X = with_nans(X, 0.05)
    assert_parity(p.predict(X), booster.predict(xgb.DMatrix(X)), "xgboost on opencl")


def test_launch_shapes_and_shared_memory(forest):
    direct = _program(forest, "tahoe_direct", "sparse")
    # The last launch finishes the rows, FINISH_BLOCK a block.
    assert [launch.block for launch in direct.launches] == [(64, 1, 1),
                                                           (gpu.FINISH_BLOCK, 1, 1)]
    assert direct.launches[0].grid_size(129) == (3, 1, 1)
    assert direct.launches[1].grid_size(gpu.FINISH_BLOCK + 1) == (2, 1, 1)
    assert direct.launches[1].grid_size(0) == (0, 1, 1)
    # A tree loop on grid.y needs its reduction in a second launch (grid-wide order).
    partial = _program(forest, "tahoe_shared_partial_forest", "sparse")
    assert len(partial.launches) == 3 and len(partial.scratch) == 1
    assert partial.launches[0].grid_size(100) == (2, 4, 1)
    # sharedReduce: the privatized buffer is in shared memory, not a parameter.
    shared = _program(forest, "gpu_tree_parallel", "sparse")
    assert shared.scratch == () and shared.launches[0].shared_bytes == 6 * 8 * 8
    source = OpenCLRenderer().render(shared)
    assert "__local double result_p0" in source and "barrier(" in source
    # cache(t0) over the whole forest: the model is copied into shared memory.
    cached = OpenCLRenderer().render(_program(forest, "tahoe_shared_forest", "sparse"))
    assert "__local double cached_model_threshold" in cached
    # cache(batch) at block level: rows are read from the block's copy.
    rows = OpenCLRenderer().render(_program(forest, "tahoe_shared_data", "sparse"))
    assert "cached_rows" in rows and "rows[" in rows


def test_atomic_reduce_renders_per_language(forest):
    program = _program(forest, "gpu_atomic", "sparse")
    assert program.uses_atomics and not program.scratch
    assert "atom_cmpxchg" in OpenCLRenderer().render(program)
    assert "atomicAdd(&result[" in CUDARenderer().render(program)


def test_lir_interpreter_runs_gpu_launches():
    """The LIR oracle runs a launch with barriers and shared memory thread by thread."""
    trees = [stump(feature=k % 2, threshold=0.2 * k, values=(k, 0.5 * k)) for k in range(5)]
    forest = forest_of(*trees, n_features=2)
    text = named("gpu_tree_parallel", 5, rows=2, threads=3)
    program = _program(forest, str(text), "sparse")
    X = np.array([[0.1, 0.9], [np.nan, 0.3], [0.7, -1.0]], dtype=forest.input_dtype)
    rep = REGISTRY["sparse"](forest)
    result = np.zeros((3, 1))
    args = {"rows": X, "n_rows": 3, "result": result, "finish": finish.MARGIN,
            "tree_output": forest.tree_output.astype(np.int32),
            **{p.name: np.ascontiguousarray(rep.buffers[p.name], NUMPY_DTYPES[p.dtype])
               for p in rep.params}}
    for launch in program.launches:
        run_launch(launch.kernel, args, launch.grid_size(3), launch.block)
    np.testing.assert_allclose(reference.shaped(forest, result),
                               reference.predict(forest, X, output="margin"), rtol=1e-12)


@settings(max_examples=40, deadline=None)
@given(forest=random_forests())
def test_each_tree_part_holds_its_tree(forest):
    """tree_parts: every slot of tree t (and only those) lies in its part, in each
    buffer the layout stores tree after tree; slots counted by the slot → node maps."""
    tree_of = lambda nodes: np.where(  # noqa: E731 - a one-line helper
        nodes >= 0, np.searchsorted(forest.tree_offsets, nodes, side="right") - 1, -1)
    sparse = REGISTRY["sparse"](forest)
    internal, leaves = sparse.slot_nodes
    parts = sparse.tree_parts()
    for name, nodes in [("model_threshold", internal), ("model_child", internal),
                        ("model_leaf_value", leaves)]:
        width = sparse.buffers[name].size // len(nodes)
        owner = np.repeat(tree_of(nodes), width)
        for t in range(forest.n_trees):
            a, b = parts[name][t], parts[name][t + 1]
            assert (owner[a:b] == t).all() and (owner[:a] != t).all() and \
                (owner[b:] != t).all(), (name, t)
    try:
        array = REGISTRY["array"](forest)
    except UnsupportedModelError:
        return
    start = array.buffers["model_tree_start"]
    for name, p in array.tree_parts().items():
        width = array.buffers[name].size // len(array.buffers["model_feature"])
        np.testing.assert_array_equal(p[:-1], start * width, err_msg=name)
        assert p[-1] == array.buffers[name].size


def partial_cache(forest, representation: str, budget: int, monkeypatch):
    """The tahoe_shared_partial_forest program when shared memory holds ``budget`` bytes."""
    monkeypatch.setattr(gpu, "SHARED_BUDGET", budget)
    return _program(forest, "tahoe_shared_partial_forest", representation)


def test_a_block_caches_only_its_chunk_of_trees(opencl, nvrtc, forest, monkeypatch):
    """cache(t1) under a tree loop on grid.y: each block copies the trees of its chunk
    (3 of 11 stumps here) when the whole model does not fit; exact on PoCL."""
    model = sum(a.nbytes for a in REGISTRY["sparse"](forest).buffers.values())
    program = partial_cache(forest, "sparse", model - 1, monkeypatch)
    source = OpenCLRenderer().render(program)
    assert "__local double cached_model_threshold" in source and "tree_parts_0" in source
    # Three stumps a chunk: three split slots, six leaves; where each chunk starts.
    assert "cached_model_threshold5[3]" in source and "cached_model_leaf_value13[6]" in source
    nvrtc(CUDARenderer().render(program))
    p = silvanforge.compile(forest, target="opencl", schedule="tahoe_shared_partial_forest")
    assert "cached_model_threshold" in p.dump("opencl")
    X = with_nans(np.random.default_rng(4).normal(size=(150, 3)), 0.1)
    np.testing.assert_allclose(p.predict(X), reference.predict(forest, X), rtol=1e-12)
    # A chunk that does not fit either: no cache, the same numbers.
    assert "cached_" not in OpenCLRenderer().render(partial_cache(forest, "sparse", 8,
                                                                  monkeypatch))


@settings(max_examples=10, deadline=None)
@given(forest=random_forests(), seed=st.integers(0, 2**32 - 1),
       representation=st.sampled_from(["sparse", "array"]))
def test_cached_chunks_predict_exactly(opencl, forest, seed, representation):
    """Partial tree caches on PoCL for every split semantic, leaf width and layout."""
    with pytest.MonkeyPatch.context() as patch:
        # The model's input precision, as compile() chooses it: float32 thresholds
        # change the buffers (category sets too wide for a 32-bit mask go to tables).
        precision = "float32" if forest.input_dtype == np.float32 else "float64"
        try:
            rep = REGISTRY[representation](forest, precision)
        except UnsupportedModelError:
            return
        whole = sum(a.nbytes for a in rep.buffers.values())
        patch.setattr(gpu, "SHARED_BUDGET", max(min(whole - 1, gpu.SHARED_BUDGET), 1))
        p = silvanforge.compile(forest, target="opencl", representation=representation,
                                schedule="tahoe_shared_partial_forest")
        # A chunk leaves out the other trees and the per-tree tables (roots): it fits.
        assert "cached_" in p.dump("opencl") or whole > gpu.SHARED_BUDGET + 1
    X = probe_rows(forest, seed, 37)
    for output in ("margin", "value"):
        np.testing.assert_allclose(p.predict(X, output=output),
                                   reference.predict(forest, X, output=output),
                                   rtol=1e-12, atol=1e-12, err_msg=representation)


def barriers(program: gpu.Program) -> int:
    return OpenCLRenderer().render(program).count("barrier(")


@pytest.mark.parametrize("tree_threads", [2, 3, 5, 7])
@pytest.mark.parametrize("outputs", [1, 3])
def test_tree_threads_reduce_together_when_rows_are_few(opencl, tree_threads, outputs):
    """sharedReduce over tree threads: a tree reduction by the threads (seed 002 §6.1.2)
    when a block has fewer reductions (rows x outputs) than threads, else one thread a
    row; both exact on PoCL and in the LIR interpreter, for slot counts that are not
    powers of two."""
    trees = [stump(feature=k % 2, threshold=0.2 * k - 1, values=(k, 0.5 * k),
                   output=k % outputs) for k in range(tree_threads * 2)]
    forest = forest_of(*trees, n_features=2, n_outputs=outputs, base_score=0.25)
    rows = 2
    text = named("gpu_tree_parallel", forest.n_trees, rows=rows, threads=tree_threads)
    program = _program(forest, str(text), "sparse")
    steps = (tree_threads - 1).bit_length()  # halvings from tree_threads slots to 1
    together = rows * outputs < rows * tree_threads
    # The walk's barriers (zeroed shared buffer, walks done) plus one a halving.
    assert barriers(program) == 2 + (steps if together else 0)
    X = with_nans(np.random.default_rng(tree_threads).normal(size=(7, 2)), 0.2)
    rep = REGISTRY["sparse"](forest)
    result = np.zeros((7, outputs))
    args = {"rows": X.astype(forest.input_dtype), "n_rows": 7, "result": result,
            "finish": finish.MARGIN, "tree_output": forest.tree_output.astype(np.int32),
            **{p.name: np.ascontiguousarray(rep.buffers[p.name], NUMPY_DTYPES[p.dtype])
               for p in rep.params}}
    for launch in program.launches:
        run_launch(launch.kernel, args, launch.grid_size(7), launch.block)
    expected = reference.predict(forest, X, output="margin")
    np.testing.assert_allclose(reference.shaped(forest, result), expected, rtol=1e-12)
    p = silvanforge.compile(forest, target="opencl", schedule=text)
    np.testing.assert_allclose(p.predict(X, output="margin"), expected, rtol=1e-12)


def test_gpu_only_nodes_are_refused_on_cpu():
    from silvanforge.backends.cpu import compile_kernel

    x = ir.Buffer("x", ir.F64)
    kernel = ir.Kernel("k", [x], [ir.Store(x, ir.ThreadIndex("x", "thread"),
                                           ir.Const(1.0, ir.F64))])
    with pytest.raises(BackendError, match="GPU thread index"):
        compile_kernel(kernel)
    with pytest.raises(BackendError, match="barrier"):
        compile_kernel(ir.Kernel("k", [x], [ir.Barrier()]))


@pytest.mark.parametrize("schedule,message", [
    ("tile(batch, b0, b1, 8)\nparallel(b0)", "CPU directive"),
    ("gpuDimension(batch, block.x)", "compile-time trip count"),
    ("tile(tree, t0, t1, 3)\nreorder(t0, batch, t1)\ngpuDimension(t0, grid.x)\n"
     "gpuDimension(batch, grid.y)\nsharedReduce(t0)", "shared memory belongs to one block"),
])
def test_schedules_a_gpu_cannot_run(forest, schedule, message):
    with pytest.raises(BackendError, match=message):
        _program(forest, schedule, "sparse")


def test_a_thread_share_is_refused_on_gpus(forest):
    with pytest.raises(ScheduleError, match="no meaning on a GPU"):
        _program(forest, "tile(batch, b0, b1, share)\ngpuDimension(b0, grid.x)", "sparse")


def test_unknown_target_names_the_valid_ones(forest):
    with pytest.raises(InputError, match="'cuda', 'opencl'"):
        silvanforge.compile(forest, target="metal")


def test_dump_levels(opencl, forest):
    p = predictor(forest, "tahoe_direct")
    assert "__kernel void predict_0" in p.dump("opencl")
    assert "thread.x" in p.dump("lir") and "block.x" in p.dump("mir")
    with pytest.raises(InputError):
        p.dump("llvm")


def test_the_gpu_benchmark_runs_on_opencl(opencl, capsys):
    """benchmarks/gpu.py (written for a CUDA device) runs end to end on OpenCL: models
    trained, predictions checked, times and differences printed."""
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
    import gpu as benchmark

    assert benchmark.main(["--target", "opencl", "--models", "year-like", "--batches", "64",
                           "--schedules", "tahoe_direct", "--rounds", "1"]) == 0
    rows = [line.split(",") for line in capsys.readouterr().out.splitlines()
            if line.startswith("year-like,64,")]
    ours = [r for r in rows if r[2] == "silvanforge/tahoe_direct"]
    assert len(ours) == 1 and float(ours[0][3]) > 0 and float(ours[0][6]) < 1e-6


@pytest.mark.cuda
def test_cuda_device(forest):
    """On an NVIDIA GPU: numpy in → numpy out, CuPy in → CuPy out, same numbers."""
    try:
        import cupy as cp
        cp.cuda.runtime.getDeviceCount()
    except Exception as exc:  # noqa: BLE001
        print(f"\nskipped: no CUDA device or CuPy: {exc}")
        pytest.skip(f"no CUDA device or CuPy: {exc}")
    rng = np.random.default_rng(2)
    X = with_nans(rng.normal(size=(300, 3)), 0.1)
    expected = reference.predict(forest, X)
    for schedule in GPU_SCHEDULES:
        p = predictor(forest, schedule, target="cuda")
        np.testing.assert_allclose(p.predict(X), expected, rtol=1e-12, err_msg=schedule)
        on_device = p.predict(cp.asarray(X))
        assert isinstance(on_device, cp.ndarray)
        np.testing.assert_allclose(on_device.get(), expected, rtol=1e-12, err_msg=schedule)


@pytest.mark.parametrize("representation", ["sparse", "array"])
@pytest.mark.parametrize("tile_size", [2, 4, 8])
def test_tiled_walks_on_opencl_and_nvrtc(opencl, nvrtc, representation, tile_size):
    """Tiled layouts through both GPU renderers: exact on PoCL, PTX from NVRTC."""
    rng = np.random.default_rng(tile_size)
    stumps = forest_of(*[stump(feature=k % 3, threshold=0.1 * k, values=(k, -k))
                         for k in range(1, 6)], n_features=3)
    for model in (stumps, skewed_forest()):
        p = silvanforge.compile(model, target="opencl", representation=representation,
                                tile_size=tile_size)
        X = with_nans(rng.normal(0, 3, size=(70, model.n_features)), 0.1, seed=tile_size)
        np.testing.assert_allclose(p.predict(X, output="margin"),
                                   reference.predict(model, X, output="margin"),
                                   rtol=1e-12, atol=1e-12)
        ptx = nvrtc(CUDARenderer().render(p.program))
        assert ".entry" in ptx


@pytest.mark.parametrize("precision", ["float32", "float64"])
def test_category_masks_on_opencl_and_nvrtc(opencl, nvrtc, precision):
    """Category sets kept in threshold bits (bitcasts in both languages), the float32
    ones including a mask whose bits read as a signalling NaN."""
    sets = [list(range(23, 32)), [0, 5], list(range(23, 31)) + [0]]
    model = category_forest(sets)
    p = silvanforge.compile(model, target="opencl", precision=precision)
    assert p.representation.spec.category_mask
    X = np.array([[c] for c in range(-1, 34)] + [[np.nan], [0.5]], dtype=np.float32)
    np.testing.assert_array_equal(p.predict(X, output="margin"),
                                  reference.predict(model, X, output="margin"))
    ptx = nvrtc(CUDARenderer().render(p.program))
    assert ".entry" in ptx
