"""Storable text: unpaired surrogates found, and written out as escapes."""

from hypothesis import given
from hypothesis import strategies as st

from plans.engine import canonical_json, storable, surrogate_in


def test_an_unpaired_surrogate_is_found_in_keys_values_and_lists():
    assert surrogate_in({"a": ["fine é 😀", ("x", "bad \ud800")]}) == "\ud800"
    assert surrogate_in({"\udfff key": 1}) == "\udfff"
    assert surrogate_in({"a": ["é", 1, None, 2.5], "😀": "ascii"}) is None


def test_storable_writes_each_surrogate_as_its_escape_and_keeps_the_rest():
    value = {"k\udc80": ["ok é 😀", "bad \ud800 end"], "n": 3}

    assert storable(value) == {"k\\udc80": ["ok é 😀", "bad \\ud800 end"], "n": 3}


def test_storable_returns_clean_text_unchanged():
    text = "naïve 😀 text"
    assert storable(text) is text


@given(st.recursive(st.text(), lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner)))
def test_what_storable_returns_always_encodes_as_utf_8(value):
    assert surrogate_in(storable(value)) is None
    canonical_json(storable(value)).encode("utf-8")
