"""frontends/numbers.py: numbers parsed by numpy mean what the exact parsers say."""

import json

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

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
                    max_leaves=30))
def test_documents_read_as_json_loads_reads_them(doc):
    text = json.dumps({"d": doc, "s": "a: [1, 2] \\" + '"', "n": [1.5, -2]})
    assert _plain(loads_json(text)) == _plain(json.loads(text))


def test_member_lists_become_arrays_and_others_stay():
    doc = loads_json('{"a": [1, 2.5], "b": "[3]", "c": [[1], [2]], "d": [1, "x"], '
                     '"e": [], "f": [NaN, 1]}')
    assert isinstance(doc["a"], np.ndarray) and doc["a"].tolist() == [1.0, 2.5]
    assert doc["b"] == "[3]" and doc["c"] == [[1], [2]] and doc["d"] == [1, "x"]
    assert doc["e"] == [] and np.isnan(doc["f"][0])


def test_a_file_cannot_forge_a_placeholder():
    # A string that looks like the splice's placeholders stays a string: the tag has a
    # nonce drawn per parse.
    doc = loads_json('{"a": [1], "b": "\\u0000' + "0" * 32 + ':0"}')
    assert isinstance(doc["b"], str) and doc["a"].tolist() == [1.0]
