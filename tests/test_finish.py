"""The kernel's epilogue (lir/finish.py): compiled margins and values match the
reference for every post-transform — those the kernel applies and those left to numpy —
with and without averaging, in the small-batch and the main kernel, on one thread and
two."""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest

import silvanforge
from silvanforge import reference
from silvanforge.lir import ir
from silvanforge.lir.finish import KERNEL_TRANSFORMS
from silvanforge.model import serialize, transforms
from silvanforge.runtime.predictor import _DIGEST, FORMAT_VERSION, Predictor, _npy

from test_forest import forest_of, stump
from test_hardening import _archive, _members

# (transform, outputs, parameters)
CASES = [
    ("identity", 1, {}), ("identity", 3, {}), ("sigmoid", 1, {}),
    ("sigmoid", 1, {"alpha": 0.5}), ("exp", 1, {}), ("log1p_exp", 1, {}),
    ("signed_square", 1, {}), ("hinge", 1, {}), ("softmax", 3, {}), ("argmax", 3, {}),
    ("sigmoid_pair", 1, {}), ("isolation_score", 1, {"c": 2.5, "offset": 0.5}),
    ("onnx_softmax_zero", 3, {}), ("onnx_binary_logistic", 2, {}),
]


def model(name: str, outputs: int, params: dict, average: bool, in_margin: bool):
    trees = [stump(feature=k % 3, threshold=0.2 * k - 1, values=(0.3 * k, -0.7 * k),
                   output=k % outputs) for k in range(1, 14)]
    return forest_of(*trees, n_features=3, n_outputs=outputs,
                     base_score=[0.25 * (k + 1) for k in range(outputs)],
                     post_transform=name, transform_params=params, average=average,
                     average_in_margin=in_margin)


def test_the_cases_cover_every_kernel_transform():
    assert KERNEL_TRANSFORMS <= {name for name, _, _ in CASES}
    assert set(transforms.TRANSFORMS) - {name for name, _, _ in CASES} <= {
        "isolation_label", "onnx_probit"}


@pytest.mark.parametrize("average, in_margin", [(False, True), (True, True), (True, False)])
@pytest.mark.parametrize("name, outputs, params", CASES)
def test_compiled_outputs_match_the_reference(name, outputs, params, average, in_margin):
    forest = model(name, outputs, params, average, in_margin)
    rng = np.random.default_rng(outputs)
    for jobs in (1, 2):
        predictor = silvanforge.compile(forest, n_jobs=jobs)
        for n in (1, 5, 300):  # the small-batch kernel, then the main one (threaded)
            X = rng.normal(0, 2, size=(n, 3))
            X[::7, 1] = np.nan
            margin = predictor.predict(X, output="margin")
            np.testing.assert_allclose(margin, reference.predict(forest, X, "margin"),
                                       rtol=1e-12, atol=1e-15)
            np.testing.assert_allclose(predictor.predict(X), reference.predict(forest, X),
                                       rtol=1e-12, atol=1e-15, err_msg=f"{n} rows")


@pytest.mark.parametrize("fmt", [1, 2, 3, 4, 5, 6])
def test_an_older_archive_is_recompiled_with_a_warning(fmt):
    # Formats before 7 hold kernels of other signatures (before 5 without a digest):
    # their code is never run, the kernels are compiled afresh.
    forest = model("sigmoid", 1, {}, False, True)
    predictor = silvanforge.compile(forest, n_jobs=1)
    members = _members(predictor.to_bytes())
    header = serialize.loads_meta(np.load(io.BytesIO(members["header.npy"])))
    assert header["format"] == FORMAT_VERSION == 7
    header["format"] = fmt
    del members[_DIGEST]  # format 5 added it
    # Formats 1-3 saved compile's options where the plan is now.
    if fmt < 4:
        plan = header.pop("plan")
        header["options"] = {k: plan[k] for k in ("schedule", "representation",
                                                  "precision", "n_jobs", "small_schedule",
                                                  "tile_size", "tiling", "sized_threads")}
    members["header.npy"] = _npy(serialize.dumps_meta(header))
    # Formats 1 and 2 held one object file a kernel, as "object_code_<kernel>".
    for key in [k for k in members if k.startswith("object_code_") and fmt < 3]:
        members[key.rsplit("_", 1)[0] + ".npy"] = members.pop(key)
    with pytest.warns(UserWarning, match=f"format {fmt}.*recompiling"):
        old = Predictor.from_bytes(_archive(members, redigest=fmt >= 5))
    X = np.random.default_rng(0).normal(size=(20, 3))
    np.testing.assert_allclose(old.predict(X), reference.predict(forest, X), rtol=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = Predictor.from_bytes(old.to_bytes())
    np.testing.assert_array_equal(again.predict(X), old.predict(X))


def test_saved_code_of_a_kernel_with_other_parameters_is_recompiled_not_called():
    # Object code whose kernel takes other parameters than this version's lowering
    # gives it (saved by another SilvanForge of the same format) is never called with
    # them: loading finds no function of its signature and compiles the kernel again.
    from silvanforge.backends.cpu import compile_kernel

    forest = model("sigmoid", 1, {}, False, True)
    predictor = silvanforge.compile(forest, n_jobs=1)
    members = _members(predictor.to_bytes())
    name = predictor._main.lir.name
    other = compile_kernel(ir.Kernel(name, [ir.Buffer("rows", ir.F64),
                                            ir.Var("n_rows", ir.I64)], []))
    for key in [k for k in members if k.startswith("object_code_0_")]:
        del members[key]
    for j, obj in enumerate(other.object_code):
        members[f"object_code_0_{j}.npy"] = _npy(np.frombuffer(obj, np.uint8))
    with pytest.warns(UserWarning, match="recompiling: .* takes other parameters"):
        loaded = Predictor.from_bytes(_archive(members, redigest=True))
    X = np.random.default_rng(0).normal(size=(20, 3))
    np.testing.assert_allclose(loaded.predict(X), reference.predict(forest, X), rtol=1e-12)


@pytest.mark.parametrize("schedule, in_blocks", [
    ("tile(batch, b0, b1, 64)\nreorder(b0, tree, b1)\nparallel(b0)", True),
    ("reorder(tree, batch)", False)])
def test_rows_are_finished_in_their_blocks_where_a_block_walks_every_tree(schedule, in_blocks):
    # A kernel that is one loop over blocks of rows, each walking every tree, finishes
    # a block's rows at the end of its iteration (one parallel region a call); a loop
    # over trees outside the rows leaves the finish a loop of its own after the walks.
    # The values match the reference either way, batches ending inside a block.
    forest = model("softmax", 3, {}, False, True)
    predictor = silvanforge.compile(forest, schedule=schedule, n_jobs=2)
    kernel = predictor.dump("lir").split("batches of up to")[0]
    top = [line for line in kernel.splitlines() if line.startswith("  ") and
           not line.startswith("   ") and "for" in line]
    assert any("finish_row" in line for line in top) != in_blocks, top
    assert ("finish_row = b0" in kernel) == in_blocks
    rng = np.random.default_rng(7)
    for n in (1, 63, 64, 65, 200):
        X = rng.normal(0, 2, size=(n, 3))
        X[::5, 2] = np.nan
        for output in ("margin", "value"):
            np.testing.assert_allclose(predictor.predict(X, output=output),
                                       reference.predict(forest, X, output),
                                       rtol=1e-12, atol=1e-15, err_msg=f"{n} rows")
