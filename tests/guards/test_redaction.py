"""Card numbers (and configured patterns) never reach stored events or audit records."""

import pytest

from plans.engine import canonical_json
from plans.guards.redaction import redact, redacted_json
from plans.models import Run, RunEvent, ToolCall
from plans.runtime.advance import advance_run
from plans.services.runs import run_create

CARD = "4111 1111 1111 1111"


def test_a_card_number_is_replaced_by_its_last_four_digits():
    assert redact(f"pay with {CARD} now") == "pay with [redacted card ending 1111] now"
    assert redact({"a": ["x 4111-1111-1111-1111"]}) == {"a": ["x [redacted card ending 1111]"]}


def test_redacted_json_is_the_canonical_text_of_the_redacted_value():
    clean = {"b": [1, 2], "a": "née 2026-12-01"}
    value, text = redacted_json(clean)
    assert value is clean  # nothing to redact: not walked, not copied
    assert text == canonical_json(clean)

    value, text = redacted_json({"pay": f"card {CARD}", "n": 12345678901234})
    assert value == {"pay": "card [redacted card ending 1111]", "n": 12345678901234}
    assert text == canonical_json(value)


def test_redacted_json_applies_configured_patterns_however_few_the_digits(settings):
    settings.AGENTSITE_REDACTION_PATTERNS = [r"sk-[a-z]{6,}"]

    assert redacted_json({"key": "sk-abcdefgh"}) == (
        {"key": "[redacted]"},
        '{"key":"[redacted]"}',
    )


def test_a_long_number_that_fails_the_luhn_check_is_left_alone():
    assert redact("order 1234567890123") == "order 1234567890123"


def test_configured_patterns_are_redacted_too(settings):
    settings.AGENTSITE_REDACTION_PATTERNS = [r"sk-[A-Za-z0-9]{8,}"]

    assert redact("key sk-abcdef123456") == "key [redacted]"


@pytest.mark.django_db(transaction=True)
def test_a_card_number_in_a_tool_result_is_not_stored_in_events_or_tool_calls(author, settings):
    settings.AGENTSITE_TOOL_MODULES = ["tests.support_tools"]
    plan = {"steps": [{"id": 1, "tool": "echo", "args": {"text": f"card {CARD}"}}]}
    run = run_create(author=author, goal_text="echo a card", plan_data=plan)
    advance_run(run.pk)

    stored = [str(e.payload) for e in RunEvent.objects.filter(run=run)]
    stored += [str(c.args) + str(c.result) for c in ToolCall.objects.filter(run=run)]
    stored.append(Run.objects.get(pk=run.pk).answer)
    assert not any("4111 1111 1111 1111" in text for text in stored)
    assert any("[redacted card ending 1111]" in text for text in stored)


@pytest.mark.parametrize(
    "card",
    [
        "4111111111111111",  # Visa
        "4111 1111 1111 1111",
        "5555-5555-5555-4444",  # Mastercard
        "2223003122003222",  # Mastercard 2-series
        "378282246310005",  # American Express
        "3782 822463 10005",
        "6011111111111117",  # Discover
        "3530111333300000",  # JCB
        "30569309025904",  # Diners Club
        "6062826786276634",  # UnionPay / RuPay range
    ],
)
def test_real_card_formats_standing_alone_are_redacted(card):
    last4 = card.replace(" ", "").replace("-", "")[-4:]
    for text in (card, f"card: {card}.", f"({card})", f'"{card}"', f"paid with {card}, thanks"):
        assert redact(text) == text.replace(card, f"[redacted card ending {last4}]")


def test_digits_after_a_decimal_point_are_not_a_card_number():
    assert redact("the ratio is 0.42634572865364495") == "the ratio is 0.42634572865364495"
    assert redact("x = 4111111111111111.5") == "x = 4111111111111111.5"
    assert redact("1,4111111111111111") == "1,4111111111111111"
    assert redact("1.4111111111111111e-05") == "1.4111111111111111e-05"


def test_a_card_shaped_run_inside_a_longer_run_or_an_id_is_left_alone():
    assert redact("04111111111111111") == "04111111111111111"
    assert redact("ref 1Z4111111111111111") == "ref 1Z4111111111111111"
    assert redact("id ORD-4111111111111111") == "id ORD-4111111111111111"
    assert redact("file_4111111111111111") == "file_4111111111111111"


def test_floats_cents_and_tracking_ids_that_pass_the_checksum_are_not_redacted():
    import random

    rng = random.Random(12)
    # Long floats (their repr), amounts in cents, tracking numbers: none may be touched.
    floats = [repr(rng.random()) for _ in range(2000)] + [
        repr(rng.random() * 1e6) for _ in range(500)
    ]
    cents = [str(rng.randrange(10**12, 10**15)) for _ in range(500)]
    tracking = ["1Z" + "".join(rng.choice("0123456789") for _ in range(16)) for _ in range(200)]
    tracking += ["9400" + "".join(rng.choice("0123456789") for _ in range(18)) for _ in range(200)]
    for text in floats + tracking:
        assert redact(f"value {text} end") == f"value {text} end"
    touched = [c for c in cents if redact(c) != c]
    # A 13-15 digit amount is card-shaped only if a network issues its prefix and length
    # (and one in ten passes the checksum); a plain long number never starting so is kept.
    assert all(c[0] in "3456" for c in touched)
    assert len(touched) < len(cents) / 40
