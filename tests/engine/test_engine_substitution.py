import pytest

from plans.engine import UnresolvedPlaceholder, placeholder_refs, resolve

RESULTS = {
    1: 79900,
    2: {"status": "sent", "reference": "R-7"},
    3: ["a", "b"],
    4: "Goa",
    5: None,
    6: 2.5,
    7: "₹ price",
}


@pytest.mark.parametrize("step_id", [1, 2, 3, 4, 5, 6])
def test_an_exact_placeholder_becomes_the_result_with_its_own_type(step_id):
    assert resolve(f"{{{{{step_id}}}}}", RESULTS) == RESULTS[step_id]


def test_spaces_inside_the_braces_still_make_an_exact_placeholder():
    assert resolve("{{ 1 }}", RESULTS) == 79900


@pytest.mark.parametrize(
    ("text", "resolved"),
    [
        ("{{1}}+{{1}}", "79900+79900"),
        ("to {{4}}", "to Goa"),
        ("ref {{2}}", 'ref {"reference":"R-7","status":"sent"}'),
        ("items {{3}}", 'items ["a","b"]'),
        ("none {{5}}", "none null"),
        ("{{6}} nights", "2.5 nights"),
        ("{{7}}!", "₹ price!"),
        (" {{1}}", " 79900"),  # not exact: the surrounding text keeps it a string
    ],
)
def test_a_placeholder_inside_text_becomes_the_results_text(text, resolved):
    assert resolve(text, RESULTS) == resolved


def test_placeholders_are_resolved_through_nested_lists_and_dicts_leaving_keys_alone():
    args = {"{{1}}": ["{{1}}", {"deep": ["x{{4}}", "{{3}}"]}], "n": 3, "flag": True}

    assert resolve(args, RESULTS) == {
        "{{1}}": [79900, {"deep": ["xGoa", ["a", "b"]]}],
        "n": 3,
        "flag": True,
    }


def test_resolving_leaves_the_original_arguments_untouched():
    args = {"a": ["{{1}}"]}

    resolve(args, RESULTS)

    assert args == {"a": ["{{1}}"]}


def test_a_placeholder_without_a_result_raises_unresolved_placeholder():
    with pytest.raises(UnresolvedPlaceholder) as caught:
        resolve({"a": "total {{9}}"}, RESULTS)

    assert isinstance(caught.value, KeyError)
    assert caught.value.step_id == 9
    assert str(caught.value) == "placeholder {{9}} refers to step 9, which has no result"


def test_placeholder_refs_finds_every_step_named_anywhere_in_the_values():
    args = {"a": "{{1}} and {{ 2 }}", "b": [{"c": "{{3}}"}, 4, None], "{{8}}": "{{01}}"}

    assert placeholder_refs(args) == {1, 2, 3}


def test_placeholder_refs_ignores_text_that_only_looks_like_a_placeholder():
    assert placeholder_refs(["{1}", "{{x}}", "{{-1}}", "{{ }}", "{{1.5}}"]) == set()


def test_placeholder_refs_walks_arbitrarily_deep_nesting_without_recursion():
    value: list = ["{{1}}"]
    for _ in range(10_000):
        value = [value]

    assert placeholder_refs(value) == {1}


# Non-ASCII digits and spaces that re's \d and \s would accept in a str pattern.
LOOKALIKES = [
    "{{\u0661}}",  # ARABIC-INDIC DIGIT ONE
    "{{\uff11}}",  # FULLWIDTH DIGIT ONE
    "{{\u0967}}",  # DEVANAGARI DIGIT ONE
    "{{\u00a01\u00a0}}",  # no-break spaces around an ASCII 1
    "{{\u20031}}",  # EM SPACE
    "{{1\u3000}}",  # IDEOGRAPHIC SPACE
]


@pytest.mark.parametrize("text", LOOKALIKES)
def test_only_ascii_digits_and_spaces_make_a_placeholder(text):
    assert placeholder_refs({"a": text}) == set()
    assert resolve(text, RESULTS) == text
    assert resolve(f"total {text}", RESULTS) == f"total {text}"


def test_ascii_whitespace_inside_the_braces_still_makes_a_placeholder():
    assert placeholder_refs(["{{\t1\n}}", "{{ 2\r}}"]) == {1, 2}


def test_a_result_becomes_the_same_text_whatever_order_its_keys_come_in():
    # PostgreSQL's jsonb hands a reloaded result back with its keys reordered.
    as_returned = {"status": "refunded", "reference": "RF-1", "amount_inr": 2499}
    as_reloaded = {"amount_inr": 2499, "reference": "RF-1", "status": "refunded"}
    args = {"body": "Reference: {{1}}"}

    assert resolve(args, {1: as_returned}) == resolve(args, {1: as_reloaded})
