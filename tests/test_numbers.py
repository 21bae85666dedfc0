"""frontends/numbers.py: numbers parsed by numpy mean what the exact parsers say."""

import contextlib
import json

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from silvanforge.frontends import number_scan
from silvanforge.frontends.numbers import loads_json, parse_numbers

finite = st.floats(allow_nan=False, allow_infinity=False)
number = st.one_of(finite, st.integers(-2**53, 2**53),
                   finite.map(lambda v: float(np.float32(v)) if abs(v) < 3e38 else 0.0))


def _plain(value):
    """A loads_json document as json.loads gives it: arrays back to lists of floats."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


@settings(max_examples=200, deadline=None)
@given(st.lists(number, max_size=30), st.sampled_from([",", ", ", " ,\n "]))
def test_json_lists_parse_as_json_does(values, sep):
    text = sep.join(json.dumps(v) for v in values)
    got = parse_numbers(text, ",")
    assert got is not None
    assert got.tolist() == [float(v) for v in json.loads(f"[{text}]")]


@settings(max_examples=200, deadline=None)
@given(st.lists(number, min_size=1, max_size=30))
def test_space_separated_fields_parse_as_float_does(values):
    text = " ".join(repr(float(v)) for v in values)
    assert parse_numbers(text, " ").tolist() == [float(t) for t in text.split()]


@pytest.mark.parametrize("text", ["1,,2", "1,2,", ",1", "1-2", "1e", "--1", "1 2", "nan",
                                  "1,x", "0x10", "1.2.3"])
def test_what_is_not_a_comma_list_is_left_to_the_exact_parser(text):
    assert parse_numbers(text, ",") is None


@pytest.mark.parametrize("text", ["1  2", "1\t2", "1,2", "1 -", "inf 1", "1 nan"])
def test_what_is_not_a_single_space_list_is_left_to_the_exact_parser(text):
    assert parse_numbers(text, " ") is None


@settings(max_examples=100, deadline=None)
@given(st.recursive(st.one_of(number, st.text(max_size=8), st.booleans(), st.none()),
                    lambda inner: st.one_of(st.lists(inner, max_size=4),
                                            st.dictionaries(st.text(max_size=6), inner,
                                                            max_size=4)),
                    max_leaves=30),
       st.booleans(), st.sampled_from([None, (",", ":"), (" , ", " :")]),
       st.sampled_from([":[", ":\n\t\r ["]), st.integers(1, 64))
def test_documents_read_as_json_loads_reads_them(doc, ascii, separators, opening, chunk):
    """Any document, any blanks, strings in UTF-8 or escaped, read in chunks of any
    size (the native pass pauses between tokens)."""
    text = json.dumps({"d": doc, "s": "a: [1, 2] \\" + '"', "n": [1.5, -2]},
                      ensure_ascii=ascii, separators=separators).replace(":[", opening)
    with _chunks(chunk):
        assert _plain(loads_json(text.encode())) == _plain(json.loads(text))


@contextlib.contextmanager
def _chunks(size: int):
    before, number_scan._CHUNK = number_scan._CHUNK, size
    try:
        yield
    finally:
        number_scan._CHUNK = before


def test_json_lists_spans():
    """Where each list is, where its values are, and the lists it leaves to the exact
    parser (-1) or to json.loads (absent): a 19-digit number, blanks alone, other
    tokens, other blanks, a list in a string, a list of lists."""
    data = b'{"a" : [ 1, 2 ], "b": [1234567890123456789], "c": [ ], "d": [1, true], ' \
           b'"e": [1\f], "f": "x\\": [2]", "g": [[3]], "h":[4]}'
    values, spans = number_scan.json_lists(data)
    assert values.tolist() == [1.0, 2.0, 4.0]
    rows = [(data[c:c + 1], data[e - 1:e], first, count, data[a:b])
            for c, e, first, count, a, b in spans.tolist()]
    assert rows == [(b":", b"]", 0, 2, b"1, 2"), (b":", b"]", 2, -1, b"1234567890123456789"),
                    (b":", b"]", 2, -1, b""), (b":", b"]", 2, 1, b"4")]


def test_invalid_utf8_is_refused_as_json_loads_refuses_it():
    with pytest.raises(UnicodeDecodeError):
        loads_json(b'{"a": [1], "b": "\xff"}')
    with pytest.raises(UnicodeDecodeError):
        loads_json(b'{"b": "\xed\xa0\x80"}')  # a lone surrogate


def test_member_lists_become_arrays_and_others_stay():
    doc = loads_json(b'{"a": [1, 2.5], "b": "[3]", "c": [[1], [2]], "d": [1, "x"], '
                     b'"e": [], "f": [NaN, 1]}')
    assert isinstance(doc["a"], np.ndarray) and doc["a"].tolist() == [1.0, 2.5]
    assert doc["b"] == "[3]" and doc["c"] == [[1], [2]] and doc["d"] == [1, "x"]
    assert doc["e"] == [] and np.isnan(doc["f"][0])


def test_a_file_cannot_forge_a_placeholder():
    # An integer that looks like the splice's placeholders (40 digits) stays an integer:
    # the first 30 are a nonce drawn per parse.
    forged = b"1" + b"0" * 39
    doc = loads_json(b'{"a": [1], "b": ' + forged + b', "c": {"d": -' + forged + b'}}')
    assert doc["b"] == int(forged) and doc["c"]["d"] == -int(forged)
    assert doc["a"].tolist() == [1.0]