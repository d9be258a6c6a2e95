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
