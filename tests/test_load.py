"""load(): format detection and the refusal of everything that is not a model."""

from __future__ import annotations

import os
import pickle
import zlib

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import silvanforge
from silvanforge.errors import ModelFormatError, SilvanForgeError, UnsupportedModelError
from silvanforge.frontends import detect_format


class _Trap:
    """Unpickling this writes a file: proof that code ran."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


@pytest.mark.parametrize("wrap", [lambda b: b, zlib.compress])
def test_pickles_are_refused_not_run(tmp_path, wrap):
    sentinel = tmp_path / "code-ran"
    model = tmp_path / "model.json"
    model.write_bytes(wrap(pickle.dumps(_Trap(str(sentinel)))))
    with pytest.raises(ModelFormatError, match="pickle") as err:
        silvanforge.load(model)
    assert str(model) in str(err.value)
    assert not sentinel.exists()


def test_empty_file_names_the_file(tmp_path):
    path = tmp_path / "empty.json"
    path.write_bytes(b"")
    with pytest.raises(ModelFormatError, match=f"{path}: the file is empty"):
        silvanforge.load(str(path))


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(ModelFormatError, match="cannot read"):
        silvanforge.load(tmp_path / "nope.json")
    with pytest.raises(ModelFormatError, match="cannot read"):
        silvanforge.load(tmp_path)


def test_unrecognised_bytes():
    with pytest.raises(ModelFormatError, match="unrecognised model format"):
        silvanforge.load(b"hello, world")


def test_legacy_xgboost_binary_is_unsupported():
    with pytest.raises(UnsupportedModelError, match="legacy binary"):
        silvanforge.load(b"binf" + bytes(100))


@pytest.mark.parametrize("obj", [{"learner": {}}, [1, 2], 3.5, None, np.zeros(3)])
def test_objects_that_are_not_models(obj):
    with pytest.raises(UnsupportedModelError, match="cannot load"):
        silvanforge.load(obj)


def test_detection_is_by_content(tmp_path):
    assert detect_format(b'  {"learner": 1}') == "xgboost"
    assert detect_format(b"{L\x00\x00\x00\x00\x00\x00\x00\x07learner") == "xgboost"
    assert detect_format(b"tree\nversion=v4\n") == "lightgbm"
    assert detect_format(b"tree\r\nversion=v3\r\n") == "lightgbm"
    assert detect_format(b"\x08\x07\x12\x04skl2") == "onnx"


@pytest.mark.parametrize("prefix", [b"", b"{", b'{"', b"{L", b"tree\n", b"\x08\x07"])
@settings(max_examples=60)
@given(tail=st.binary(max_size=300))
def test_arbitrary_bytes_raise_our_errors(prefix, tail):
    """Whatever the bytes, load() answers with a SilvanForgeError or a valid Forest."""
    try:
        forest = silvanforge.load(prefix + tail)
    except SilvanForgeError:
        return
    assert isinstance(forest, silvanforge.Forest)


def test_load_accepts_path_like_and_str(tmp_path):
    path = tmp_path / "m.txt"
    path.write_bytes(b"garbage")
    for source in (path, str(path), os.fsencode(str(path)).decode()):
        with pytest.raises(ModelFormatError, match="m.txt"):
            silvanforge.load(source)


def test_loads_run_with_numpy_huge_pages_off_and_restore_them(monkeypatch):
    # A load's buffers are filled once: numpy's transparent huge pages cost it more
    # system time than they save (docs/ARCHITECTURE.md "Loading big models"). Loads in
    # several threads restore numpy's setting once the last ends.
    import threading

    from silvanforge import frontends

    switch = frontends._hugepage_switch()
    assert switch is not None  # numpy >= 1.20 has it
    seen, gate = [], threading.Barrier(2)
    real = frontends._load_bytes

    def load_bytes(data):
        state = switch(False)  # returns the setting in force
        switch(state)
        seen.append(state)
        gate.wait(timeout=10)  # both loads in progress at once
        return real(data)

    monkeypatch.setattr(frontends, "_load_bytes", load_bytes)
    data = open(os.path.join(os.path.dirname(silvanforge.__file__), "examples",
                             "xgboost_classifier.json"), "rb").read()
    for before in (True, False):
        switch(before)
        threads = [threading.Thread(target=silvanforge.load, args=(data,)) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert seen[-2:] == [False, False]
        assert switch(True) is before  # restored
    # A failing load restores it too.
    monkeypatch.setattr(frontends, "_load_bytes", lambda data: real(b"not a model"))
    switch(True)
    with pytest.raises(SilvanForgeError):
        silvanforge.load(data)
    assert switch(True) is True


def test_no_thread_of_a_load_outlives_it(tmp_path):
    # A file from PREPARE_BYTES on has the number scanner built in a thread while it is
    # read; the load joins it, whatever the format (a fork right after a load must not
    # copy the scanner's lock held). Fresh interpreters: the scanner is not built yet.
    import subprocess
    import sys
    import textwrap

    import xgboost

    booster = xgboost.train({"max_depth": 2}, xgboost.DMatrix(np.eye(4), np.arange(4)), 2)
    ubj = tmp_path / "model.ubj"
    booster.save_model(str(ubj))
    examples = os.path.join(os.path.dirname(silvanforge.__file__), "examples")
    for path in (os.path.join(examples, "xgboost_classifier.json"), str(ubj)):
        script = textwrap.dedent(f"""
            import threading
            from silvanforge.frontends import number_scan
            number_scan.PREPARE_BYTES = 0
            import silvanforge
            silvanforge.load({path!r})
            print(threading.active_count(), number_scan._build_scanner.cache_info().currsize)
        """)
        run = subprocess.run([sys.executable, "-c", script], capture_output=True,
                             text=True, timeout=120)
        assert run.returncode == 0, run.stderr[-2000:]
        assert run.stdout.split() == ["1", "1"]  # the scanner built, its thread gone
