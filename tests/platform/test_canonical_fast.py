"""agp_project.canonical: every JSON value, through the fast path for the common subset or not, gives
exactly the RFC 8785 bytes (the rfc8785 library is the reference)."""

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from agp_project.canonical import canonical_json

pytestmark = pytest.mark.unit

LIMIT = 2**53 - 1

scalars = (st.none() | st.booleans() | st.text()
           | st.integers(min_value=-LIMIT - 5, max_value=LIMIT + 5) | st.integers()
           | st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from([0.0, -0.0, 1.0, 1e21, 1e-7, 0.1]))
keys = st.text(max_size=8) | st.text(alphabet=st.characters(max_codepoint=0x7F), max_size=8)
values = st.recursive(scalars, lambda children: st.lists(children, max_size=5)
                      | st.dictionaries(keys, children, max_size=5), max_leaves=25)


def _reference(value):
    try:
        return rfc8785.dumps(value)
    except rfc8785.CanonicalizationError as exc:
        return type(exc)


def _ours(value):
    try:
        return canonical_json(value)
    except rfc8785.CanonicalizationError as exc:
        return type(exc)


@settings(max_examples=600, deadline=None)
@given(values)
def test_it_serialises_every_json_value_exactly_as_rfc8785(value):
    assert _ours(value) == _reference(value)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(alphabet=st.characters(max_codepoint=0x7F), max_size=10),
                       st.none() | st.booleans() | st.text() | st.integers(min_value=-LIMIT, max_value=LIMIT)
                       | st.lists(st.text(), max_size=3), max_size=8))
def test_it_serialises_ascii_keyed_objects_of_strings_integers_and_lists_exactly_as_rfc8785(value):
    assert canonical_json(value) == rfc8785.dumps(value)


def test_it_serialises_floats_non_ascii_keys_tuples_and_subclasses_exactly_as_rfc8785():
    class Text(str):
        """A str subclass."""

    for value in ({"a": 1.5}, {"f": 1e21}, {"é": 1}, {"t": (1, 2)}, {"s": Text("x")}, {"n": LIMIT}):
        assert canonical_json(value) == rfc8785.dumps(value)
    assert canonical_json({"é": 1, "z": 2, "\U0001f600": 3, "\ufb01": 4}) == rfc8785.dumps(
        {"é": 1, "z": 2, "\U0001f600": 3, "\ufb01": 4})


def test_it_refuses_lone_surrogates_and_out_of_range_integers_like_rfc8785():
    for value in ({"s": "\ud800"}, {"n": LIMIT + 1}, {"n": -LIMIT - 1}):
        assert _ours(value) is _reference(value)
        assert isinstance(_ours(value), type) and issubclass(_ours(value), rfc8785.CanonicalizationError)
