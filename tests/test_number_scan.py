"""frontends/number_scan.py: the native scanner reads exactly what float() reads, or
declines; it takes the numbers XGBoost writes."""

import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from silvanforge.frontends import number_scan
from silvanforge.frontends.number_scan import scan

finite = st.floats(allow_nan=False, allow_infinity=False)


def bits(values) -> list[int]:
    """Values as their float64 bits: -0.0 differs from 0.0, as a parser's must not."""
    return np.asarray(values, dtype=np.float64).view(np.int64).tolist()


def xgboost_text(value: float) -> str:
    """A float32 as XGBoost's JSON writer gives it: shortest digits, 'E' exponent
    ("2.8186565E-2", "1E0")."""
    with np.errstate(over="ignore"):
        text = np.format_float_scientific(np.float32(value), unique=True, exp_digits=1)
    return text.upper().replace("E+", "E").replace(".E", "E")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(finite.map(repr), finite.map(lambda v: f"{v:.17g}"),
                          finite.map(lambda v: f"{v:.6e}"), finite.map(xgboost_text),
                          st.integers(-10**20, 10**20).map(str)), min_size=1, max_size=20),
       st.sampled_from([",", ", ", " ,\n\t", " "]))
def test_what_it_reads_is_what_float_reads(texts, sep):
    got = scan(sep.join(texts), "," if "," in sep else " ")
    if got is not None:
        assert bits(got) == bits([float(t) for t in texts])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.just(0.0), finite.filter(lambda v: 1e-13 <= abs(v) < 1e21))
                .map(xgboost_text) | st.integers(-2**31, 2**31).map(str),
                min_size=1, max_size=50))
def test_it_reads_the_numbers_xgboost_writes(texts):
    # Integers, and float32 values of the magnitudes models hold (1e-13 to 1e21: a
    # power of ten within 10**22 once the 9 digits are an integer); others may go the
    # slow way, which test_what_it_reads_is_what_float_reads covers.
    got = scan(",".join(texts), ",")
    assert got is not None
    assert bits(got) == bits([float(t) for t in texts])


@pytest.mark.parametrize("text, want", [
    ("-0", -0.0), ("-0.0e5", -0.0), ("0e99999999", 0.0), ("007", 7.0), ("1e22", 1e22),
    ("1E-22", 1e-22), ("9007199254740992", 2.0**53), ("0.000000000000000000001", 1e-21),
    ("900719925474099e-15", 0.900719925474099)])
def test_edges_of_the_fast_path(text, want):
    assert bits(scan(text, ",")) == bits([want])


@pytest.mark.parametrize("text", [
    "1e23", "9007199254740993", "1234567890123456789", "1e-23", "0.12345678901234567",
    "", "1.", ".5", "+1", "1,,2", "1,2,", ",1", "1-2", "1e", "1e+", "--1", "-", "nan",
    "inf", "0x10", "1.2.3", "1\v,2", "1 ,\f2", "1,x", "1 2", "é"])
def test_it_declines_what_is_not_exact_or_not_its_grammar(text):
    assert scan(text, ",") is None


@pytest.mark.parametrize("text", ["1  2", "1\t2", "1,2", "1 ", " 1", "1 -"])
def test_single_spaces_only(text):
    assert scan(text, " ") is None


def test_it_writes_only_the_slots_it_is_given():
    function = number_scan._scanner()[0]
    out = np.full(3, -7.0)
    data = b"1,2,3"
    assert function(data, len(data), 1, out.ctypes.data, 2) == -1
    assert out[2] == -7.0
    # It reads only the length it is told: the rest of the bytes are not its text.
    assert function(data, 3, 1, out.ctypes.data, 3) == 2 and out[:2].tolist() == [1, 2]


def test_json_lists_write_only_the_room_they_are_given():
    """The document pass stops, unchanged past its buffers, when its values or spans
    are full, at the colon of the list that did not fit; a call with more room goes on
    from there."""
    lists = number_scan._scanner()[1]
    data = b'{"a": [1, 2], "b": [3, 4, 5]}'
    no_names = b"\0"
    for cap, max_spans in ((3, 2), (5, 1)):
        values, spans = np.full(cap + 1, -7.0), np.full((max_spans + 1, 6), -7)
        state = np.zeros(5, dtype=np.int64)
        assert lists(data, len(data), len(data), values.ctypes.data, cap, spans.ctypes.data,
                     max_spans, state.ctypes.data, no_names) == -1
        assert values[cap] == -7.0 and (spans[max_spans] == -7).all()
        assert state[1] == 2 and state[2] == 1  # the first list, read
        assert data[state[0]:state[0] + 1] == b":" and data[state[0] - 3:state[0]] == b'"b"'
        more_values, more_spans = np.full(8, -7.0), np.full((3, 6), -7)
        more_values[:2], more_spans[:1] = values[:2], spans[:1]
        assert lists(data, len(data), len(data), more_values.ctypes.data, 8,
                     more_spans.ctypes.data, 3, state.ctypes.data, no_names) == 0
        assert more_values[:5].tolist() == [1, 2, 3, 4, 5] and state[2] == 2
        assert more_spans[1, 2:4].tolist() == [2, 3]
    # It reads only the length it is told: cut before the first ']', no list is closed.
    state = np.zeros(5, dtype=np.int64)
    assert lists(data, 11, 11, values.ctypes.data, 5, spans.ctypes.data, 2,
                 state.ctypes.data, no_names) == 0
    assert state[:3].tolist() == [11, 0, 0]


@pytest.mark.parametrize("chunk", [1, 3, 1 << 23])
def test_json_lists_grow_their_buffers_and_skip_named_members(chunk, monkeypatch):
    # 3000 lists of 1-40 numbers in 20 KB: more than the first guess of room for
    # lists (one a KiB) and, with long lists of short numbers, for values (one every 8
    # bytes); the pass stops in the middle of names and lists (chunks of 1 and 3 bytes).
    monkeypatch.setattr(number_scan, "_CHUNK", chunk)
    rng = np.random.default_rng(5)
    lists = [rng.integers(0, 10, size=rng.integers(1, 40)).tolist() for _ in range(3000)]
    names = [("parents", "lefts", "par", "parentss")[i % 4] for i in range(3000)]
    data = ("{" + ",".join(f'"{n}{"" if n != "lefts" else i}":{v}'.replace(" ", "")
                          for i, (n, v) in enumerate(zip(names, lists))) + "}").encode()
    values, spans = number_scan.json_lists(data, skip=["parents", "x"])
    assert len(spans) == 3000
    kept = [v for n, v in zip(names, lists) if n != "parents"]
    assert values.tolist() == [x for v in kept for x in v]
    assert (spans[:, 3] == [number_scan.SKIPPED if n == "parents" else len(v)
                            for n, v in zip(names, lists)]).all()
    # Skipped lists still end where they end: the spans cut the text as before.
    whole, _ = number_scan.json_lists(data)
    assert len(whole) == sum(map(len, lists))


def test_skipped_names_must_fit_a_length_byte():
    with pytest.raises(ValueError, match="1 to 255 bytes"):
        number_scan.json_lists(b"{}", skip=[""])
    with pytest.raises(ValueError, match="1 to 255 bytes"):
        number_scan.json_lists(b"{}", skip=["x" * 256])


def test_first_scans_in_several_threads_build_one_scanner():
    # Each thread's first scan in a fresh process: they used to build a scanner each,
    # and the engine of the ones not kept was freed under their running code (a crash).
    script = textwrap.dedent("""
        import threading
        from silvanforge.frontends import number_scan
        gate = threading.Barrier(4)
        def scan():
            gate.wait()
            values, _ = number_scan.json_lists(b'{"a": [1, 2.5, 3]}')
            assert values.tolist() == [1.0, 2.5, 3.0]
        threads = [threading.Thread(target=scan) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print("ok")
    """)
    for _ in range(3):
        run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                             timeout=120)
        assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-2000:]


@pytest.mark.parametrize("chunk", [7, 1 << 23])
def test_json_lists_read_in_two_halves_as_in_one(chunk, monkeypatch):
    # Two halves at once from the first member name after a list past the middle; a
    # string there that only looks so ('"x": "aa], "' ends in a quote after '], ') makes
    # the first half's pass stop elsewhere, and it reads on alone. Both give the lists
    # one pass gives.
    monkeypatch.setattr(number_scan, "_CHUNK", chunk)
    monkeypatch.setattr(number_scan.cores, "usable", lambda: 2)
    rng = np.random.default_rng(3)
    members = [f'"k{i}": {rng.integers(0, 99, size=rng.integers(1, 9)).tolist()}'
               for i in range(400)]
    plain = ("{" + ", ".join(members) + "}").encode()
    middle = len(members) // 2
    head, tail = ", ".join(members[:middle]), ", ".join(members[middle:])
    # The middle of the text falls in the string's a's.
    pad = "a" * (abs(len(head) - len(tail)) + 1000)
    tricky = ("{" + head + ', "x": "' + pad + '], ", ' + tail + "}").encode()
    for data, halves in ((plain, 2), (tricky, 1)):
        monkeypatch.setattr(number_scan, "PARALLEL_BYTES", 1 << 40)
        alone = number_scan.json_lists(data, skip=["k3"])
        monkeypatch.setattr(number_scan, "PARALLEL_BYTES", 0)
        if halves == 1:  # the split point is the string's closing quote
            at = number_scan._split_point(data)
            assert data[at - 4:at + 1] == b'a], "'
        assert len(number_scan.json_list_parts(data, skip=["k3"])) == halves
        both = number_scan.json_lists(data, skip=["k3"])
        assert np.array_equal(both[0], alone[0]) and np.array_equal(both[1], alone[1])
        assert (alone[1][:, 3] == number_scan.SKIPPED).sum() == 1


def test_a_failure_in_the_second_half_is_raised(monkeypatch):
    # The second half's pass runs in a thread: what stops it (here, no memory for a
    # bigger buffer) stops the load, not a silent half.
    monkeypatch.setattr(number_scan, "PARALLEL_BYTES", 0)
    monkeypatch.setattr(number_scan.cores, "usable", lambda: 2)
    data = ("{" + ", ".join(f'"k{i}": {list(range(50))}' for i in range(200)) + "}").encode()
    split = number_scan._split_point(data)
    grown = number_scan._grown

    def failing(buffer, used):
        if threading.current_thread() is not threading.main_thread():
            raise MemoryError("no room")
        return grown(buffer, used)

    monkeypatch.setattr(number_scan, "_grown", failing)
    monkeypatch.setattr(number_scan._Pass, "__init__", _tight(number_scan._Pass.__init__))
    with pytest.raises(MemoryError, match="no room"):
        number_scan.json_list_parts(data)
    assert split is not None


def _tight(init):
    """_Pass.__init__ with room for 8 values: every pass must grow its buffer."""
    def tight(self, data, names, start, room):
        init(self, data, names, start, 8)
    return tight
