"""Storable text: unpaired surrogates and NUL found, and written out as escapes."""

from hypothesis import given
from hypothesis import strategies as st

from plans.engine import canonical_json, storable, unstorable_in


def test_unstorable_characters_are_found_in_keys_values_and_lists():
    surrogate = "an unpaired surrogate ('\\ud800')"
    assert unstorable_in({"a": ["fine é 😀", ("x", "bad \ud800")]}) == surrogate
    assert unstorable_in({"\udfff key": 1}) == "an unpaired surrogate ('\\udfff')"
    assert unstorable_in(["ascii\x00"]) == "a NUL character ('\\x00')"
    assert unstorable_in({"a": ["é", 1, None, 2.5], "😀": "ascii"}) is None


def test_storable_writes_each_unstorable_character_as_its_escape_and_keeps_the_rest():
    value = {"k\udc80": ["ok é 😀", "bad \ud800 end", "nul\x00"], "n": 3}

    assert storable(value) == {"k\\udc80": ["ok é 😀", "bad \\ud800 end", "nul\\u0000"], "n": 3}


def test_storable_returns_clean_text_unchanged():
    text = "naïve 😀 text"
    assert storable(text) is text


@given(st.recursive(st.text(), lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner)))
def test_what_storable_returns_always_encodes_as_utf_8(value):
    assert unstorable_in(storable(value)) is None
    canonical_json(storable(value)).encode("utf-8")
