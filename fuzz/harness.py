"""Fuzz harnesses: one per kind of input SilvanForge reads (issue 26).

    python fuzz/harness.py KIND [libFuzzer options] [corpus folders]

KIND is one of xgboost_json, xgboost_ubjson, lightgbm_text, onnx, predictor and
tuning_cache; ``fuzz/corpus/KIND`` holds its seeds (``fuzz/make_corpus.py`` writes them).
An input passes when it loads (and what it loads works) or raises a SilvanForgeError; any
other exception, a crash or a hang past libFuzzer's ``-timeout`` is a finding. For
example, an hour with new inputs kept in a scratch folder:

    python fuzz/harness.py onnx /tmp/onnx-new fuzz/corpus/onnx -max_total_time=3600 -timeout=20

Machine code from a fuzzed predictor is never run: predictors are read with
``trust_code=False`` (the kernels are compiled again from the model data).
"""

from __future__ import annotations

import faulthandler
import io
import json
import os
import sys
import tempfile
import warnings
import zipfile

import atheris
import numpy as np

# Coverage feedback from SilvanForge's code only: instrumenting numpy too would slow
# every input down for branches that are not ours.
with atheris.instrument_imports(include=["silvanforge"]):
    import silvanforge
    from silvanforge import reference
    from silvanforge.errors import SilvanForgeError
    # Imported on first use otherwise, after the instrumentation is over.
    from silvanforge.frontends import lightgbm, onnx, ubjson, xgboost  # noqa: F401
    from silvanforge.plan import cache, planner
    from silvanforge.runtime import predictor as saved

HERE = os.path.dirname(os.path.abspath(__file__))

#: Separates the members of a predictor in the "sealed" input form (see ``predictor``).
MEMBER = b"\n--member--\n"


def _check_forest(forest: silvanforge.Forest) -> None:
    """What a file loaded as works: the reference predicts rows with missing values."""
    X = np.zeros((2, forest.n_features))
    X[0] = np.nan
    assert len(reference.predict(forest, X)) == 2


def model_file(data: bytes) -> None:
    try:
        forest = silvanforge.load(data)
    except SilvanForgeError:
        return
    _check_forest(forest)


def seal(members: dict[str, bytes]) -> bytes:
    """A predictor archive of ``members`` (name -> .npy content) with a digest that
    matches, as :meth:`Predictor.to_bytes` writes one."""
    files = dict(members)
    files[saved._DIGEST] = saved._npy(np.frombuffer(saved._digest(files), dtype=np.uint8))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as archive:
        for name, content in files.items():
            archive.writestr(name, content)
    return buf.getvalue()


def predictor(data: bytes) -> None:
    """A saved predictor, as raw bytes (first byte even) or, so that mutations reach past
    the zip's CRCs and the digest, as members (``name\\ncontent`` joined by
    :data:`MEMBER`) that the harness archives and seals (first byte odd)."""
    if not data:
        return
    blob = data[1:]
    if data[0] % 2:
        members = {}
        for part in blob.split(MEMBER):
            name, _, content = part.partition(b"\n")
            # zipfile cuts a name at its first NUL, and a member needs a name.
            name = name.split(b"\0")[0]
            if name:
                members[name.decode("utf-8", "replace")] = content
        blob = seal(members)
    try:
        loaded = saved.Predictor.from_bytes(blob, trust_code=False)
    except SilvanForgeError:
        return
    X = np.zeros((3, loaded.forest.n_features))
    X[1] = np.nan
    assert np.allclose(loaded.predict(X), reference.predict(loaded.forest, X),
                       equal_nan=True, rtol=1e-4, atol=1e-4)


_cache_state: dict = {}
# Seed keys name the model and CPU by placeholder (fuzz/make_corpus.py), so the seeds'
# entries are found on any machine.
CACHE_PLACEHOLDERS = {b"@MODEL": lambda forest: cache.model_hash(forest),
                      b"@CPU": lambda forest: cache.cpu_id()}


def tuning_cache(data: bytes) -> None:
    """A tuning cache file, read for ``compile(schedule="auto")`` of the model its seeds
    were stored for; each new set of keywords it gives is compiled once."""
    if not _cache_state:
        folder = tempfile.mkdtemp(prefix="silvanforge-fuzz-cache-")
        os.environ["SILVANFORGE_CACHE_DIR"] = folder
        with open(os.path.join(HERE, "corpus", "cache_model.json"), "rb") as fh:
            _cache_state.update(folder=folder, forest=silvanforge.load(fh.read()),
                                compiled=set())
    forest = _cache_state["forest"]
    for placeholder, value in CACHE_PLACEHOLDERS.items():
        data = data.replace(placeholder, value(forest).encode())
    with open(os.path.join(_cache_state["folder"], "tuning.json"), "wb") as fh:
        fh.write(data)
    try:
        kwargs = planner.tuned_options(forest, "auto", {"n_jobs": 1}, "native")
        if repr(kwargs) in _cache_state["compiled"]:
            return
        _cache_state["compiled"].add(repr(kwargs))
        compiled = silvanforge.compile(forest, **kwargs)
    except SilvanForgeError:
        return
    X = np.zeros((2, forest.n_features))
    assert np.allclose(compiled.predict(X), reference.predict(forest, X), rtol=1e-4,
                       atol=1e-4)


HARNESSES = {"xgboost_json": model_file, "xgboost_ubjson": model_file,
             "lightgbm_text": model_file, "onnx": model_file, "predictor": predictor,
             "tuning_cache": tuning_cache}


def with_stacks(target):
    """``target``, turning faulthandler on at its first input. libFuzzer has set its
    signal handlers by then, so a fatal signal prints every Python thread's stack and
    then reaches libFuzzer's handler (faulthandler restores the previous handler and
    raises the signal again), which still writes the crashing input. The stacks are for
    a death that leaves no input, as the one inside libFuzzer's exit() does
    (docs/ARCHITECTURE.md, "Fuzzing")."""
    started = False

    def run(data: bytes) -> None:
        nonlocal started
        if not started:
            faulthandler.enable(all_threads=True)
            started = True
        target(data)
    return run


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in HARNESSES:
        sys.exit(f"usage: {sys.argv[0]} {{{','.join(HARNESSES)}}} [libFuzzer options]")
    kind = sys.argv.pop(1)
    # Warnings (older formats, skipped cache entries) are answers, not findings.
    warnings.simplefilter("ignore")
    atheris.Setup(sys.argv, with_stacks(HARNESSES[kind]))
    atheris.Fuzz()


if __name__ == "__main__":
    main()
