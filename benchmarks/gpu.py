"""SilvanForge on a GPU against Hummingbird (torch, CUDA) and XGBoost's GPU predictor.

    python benchmarks/gpu.py [--target cuda|opencl] [--models higgs-like,...]
                             [--batches 512,4096,65536,1048576] [--schedules a,b]

For each model (the higgs-, epsilon- and year-like stand-ins of benchmarks/models.py) and
batch size: the median time per call of every GPU schedule in the library (rows already on
the device when the target is CUDA, so no transfer is timed), Hummingbird's torch
backend on CUDA and XGBoost's ``device="cuda"`` inplace_predict when installed, and the
bandwidth bound ``rows x features x 4 bytes / device bandwidth`` (``--bandwidth`` GB/s,
default 3350 for an H100 SXM): no kernel that reads every row once can beat it.
Predictions are checked against the reference before anything is timed (SilvanForge's
must match; a peer's largest difference is printed beside its time).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

DEFAULT_MODELS = "higgs-like,epsilon-like,year-like"
DEFAULT_BATCHES = "512,4096,65536,1048576"


def _median_seconds(call, sync, rounds: int) -> float:
    call()
    sync()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        call()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _engines(case, target: str, schedules: list[str], batch: int):
    """(name, call, sync) for each engine that can run here."""
    import silvanforge

    rows = case.rows[:batch]
    sync = lambda: None  # noqa: E731
    device_rows = rows
    if target == "cuda":
        import cupy as cp
        device_rows = cp.asarray(rows)
        sync = cp.cuda.Device().synchronize
    for schedule in schedules:
        p = silvanforge.compile(case.forest, target=target, schedule=schedule)
        yield f"silvanforge/{schedule}", (lambda p=p: p.predict(device_rows)), sync
    try:
        import torch
        from hummingbird.ml import convert
        model = convert(_for_hummingbird(case.estimator), "torch", rows[:1]).to("cuda")
        tensor = torch.from_numpy(rows).cuda()
        # Probabilities for classifiers, as the others compute (predict gives labels).
        if hasattr(model, "predict_proba"):
            call = lambda: model.predict_proba(tensor)[:, 1]  # noqa: E731
        else:
            call = lambda: model.predict(tensor)  # noqa: E731
        yield "hummingbird-torch-cuda", call, torch.cuda.synchronize
    except Exception as exc:  # noqa: BLE001 - an engine that is not installed is skipped
        print(f"  (hummingbird skipped: {exc})")
    if case.booster is not None and case.library == "xgboost":
        try:
            booster = case.booster.copy()
            booster.set_param({"device": "cuda"})
            yield ("xgboost-gpu", (lambda: booster.inplace_predict(device_rows)), sync)
        except Exception as exc:  # noqa: BLE001
            print(f"  (xgboost gpu skipped: {exc})")


def _for_hummingbird(estimator):
    """``estimator`` as Hummingbird 0.4 can read it: XGBoost >= 2 writes its base score
    as a one-element list ("[5E-1]"), which Hummingbird's converter passes to float(),
    and for logistic objectives as a probability, which Hummingbird adds to the margin."""
    import json
    import math

    get_booster = getattr(estimator, "get_booster", None)
    if get_booster is None:
        return estimator
    booster = get_booster()
    config = json.loads(booster.save_config())
    param = config["learner"]["learner_model_param"]
    base = float(json.loads(param["base_score"].replace("E", "e"))[0]
                 if param["base_score"].startswith("[") else param["base_score"])
    if config["learner"]["objective"]["name"] in ("binary:logistic", "reg:logistic"):
        base = math.log(base / (1 - base))
    param["base_score"] = repr(base)
    text = json.dumps(config)

    class Booster:  # what the converter reads of a booster
        feature_names = booster.feature_names
        get_dump = booster.get_dump

        @staticmethod
        def save_config() -> str:
            return text

    estimator.get_booster = lambda: Booster  # an instance attribute: the class is kept
    return estimator


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", choices=("cuda", "opencl"), default="cuda")
    parser.add_argument("--models", default=DEFAULT_MODELS)
    parser.add_argument("--batches", default=DEFAULT_BATCHES)
    parser.add_argument("--schedules", default=None,
                        help="comma-separated GPU schedule names (default: all)")
    parser.add_argument("--bandwidth", type=float, default=3350.0,
                        help="device memory bandwidth in GB/s for the bound")
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args(argv)

    import models
    from silvanforge import reference
    from silvanforge.schedule.library import GPU_SCHEDULES

    schedules = args.schedules.split(",") if args.schedules else list(GPU_SCHEDULES)
    batches = [int(b) for b in args.batches.split(",")]
    cases = models.cases(False, max(batches), names=args.models.split(","))
    print("model,batch,engine,seconds,ns_per_row,bandwidth_bound_ns_per_row,max_abs_diff")
    for case in cases:
        for batch in batches:
            rows = case.rows[:batch]
            bound = rows.shape[1] * 4 / (args.bandwidth * 1e9) * 1e9
            expected = reference.predict(case.forest, rows)
            for name, call, sync in _engines(case, args.target, schedules, batch):
                got = call()
                got = got.get() if hasattr(got, "get") else np.asarray(
                    got.cpu() if hasattr(got, "cpu") else got)
                if name.startswith("silvanforge"):
                    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6,
                                               err_msg=f"{case.name} {name}")
                # Peers are timed whatever they compute; the difference says how far
                # from the training library's values they are (Hummingbird 0.4 drops
                # an XGBoost classifier's base score).
                diff = float(np.max(np.abs(np.reshape(got, expected.shape) - expected)))
                seconds = _median_seconds(call, sync, args.rounds)
                print(f"{case.name},{batch},{name},{seconds:.6g},"
                      f"{seconds / batch * 1e9:.4g},{bound:.4g},{diff:.3g}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
