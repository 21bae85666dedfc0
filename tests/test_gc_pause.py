"""The garbage collector is paused while models compile, and only then."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

import silvanforge
from silvanforge.runtime import gc_pause

from test_forest import forest_of, stump


@pytest.fixture(autouse=True)
def collector_on():
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_paused_nests_and_resumes():
    with gc_pause.paused():
        assert not gc.isenabled()
        with gc_pause.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer block still runs
    assert gc.isenabled()


def test_an_error_resumes_collection():
    with pytest.raises(ZeroDivisionError):
        with gc_pause.paused():
            1 / 0
    assert gc.isenabled()


def test_a_collector_the_user_turned_off_stays_off():
    gc.disable()
    with gc_pause.paused():
        pass
    assert not gc.isenabled()
    silvanforge.compile(forest_of(stump()), n_jobs=1)
    assert not gc.isenabled()


def test_overlapping_blocks_in_threads_resume_after_the_last():
    inside, leave = threading.Event(), threading.Event()
    states = []

    def other():
        with gc_pause.paused():
            inside.set()
            leave.wait(10)
        states.append(gc.isenabled())

    thread = threading.Thread(target=other)
    with gc_pause.paused():
        thread.start()
        assert inside.wait(10)
    assert not gc.isenabled()  # this block ended, the other thread's has not
    leave.set()
    thread.join(10)
    assert states == [True] and gc.isenabled()


def test_compile_pauses_the_collector_and_resumes_it(monkeypatch):
    seen = []
    original = gc.disable

    def spy():
        seen.append("disable")
        original()

    monkeypatch.setattr(gc, "disable", spy)
    predictor = silvanforge.compile(forest_of(stump()), n_jobs=1)
    monkeypatch.undo()
    assert seen and gc.isenabled()
    X = np.array([[0.0, 0.0], [1.0, 0.0]])
    np.testing.assert_array_equal(predictor.predict(X),
                                  silvanforge.reference.predict(predictor.forest, X))
