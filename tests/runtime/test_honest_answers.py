"""A reply that is not a whole answer or plan says so: cut off, refused, or without text.

Through the real Anthropic SDK on a mock transport (tests/llm/anthropic_http.py).
"""

import json

import pytest
from django.urls import reverse

from plans.models import ModelCall, Plan, Run, RunEvent
from plans.runtime.advance import advance_run
from plans.services.runs import run_create
from tests.llm.anthropic_http import message, sse, stream_events

pytestmark = pytest.mark.django_db(transaction=True)

PLAN = {"steps": [{"id": 1, "tool": "price", "args": {"item": "iPhone 16"}, "depends_on": []}]}


def streamed(deltas, *, stop_reason="end_turn"):
    events = stream_events(
        deltas, input_usage={"input_tokens": 50}, output_tokens=9, stop_reason=stop_reason
    )
    if not deltas:  # no text block at all
        events = [e for e in events if not e["type"].startswith("content_block")]
    return sse(*events)


@pytest.mark.parametrize(
    ("deltas", "stop_reason", "reason"),
    [
        (["The total is 79,9"], "max_tokens", "cut off at its max_tokens limit"),
        ([], "refusal", "refused"),
        ([], "end_turn", "no text"),
    ],
    ids=["cut-off", "refused", "no-text"],
)
def test_an_answer_that_is_not_whole_ends_the_run_not_completed_keeping_the_partial_text(
    author, claude_replies, deltas, stop_reason, reason, client
):
    claude_replies(streamed(deltas, stop_reason=stop_reason))
    run = run_create(author=author, goal_text="Price of an iPhone 16", plan_data=PLAN)

    assert advance_run(run.pk) == "failed"

    run.refresh_from_db()
    assert run.status == Run.Status.FAILED
    assert run.answer == "".join(deltas)
    assert run.error.startswith("the answer is incomplete:") and reason in run.error
    event = RunEvent.objects.get(run=run, kind="answer_incomplete")
    assert event.payload["stop_reason"] == stop_reason
    assert not RunEvent.objects.filter(run=run, kind="answer_finished").exists()
    assert ModelCall.objects.get(run=run, purpose="answer").output_tokens == 9
    client.force_login(author)
    page = client.get(reverse("plans:run_detail", args=[run.pk])).content.decode()
    assert "the answer is incomplete:" in page and "".join(deltas) in page


def test_a_whole_answer_still_completes_the_run(author, claude_replies):
    claude_replies(streamed(["The total is ", "79,900 INR."]))
    run = run_create(author=author, goal_text="Price of an iPhone 16", plan_data=PLAN)

    assert advance_run(run.pk) == "completed"
    assert Run.objects.get(pk=run.pk).answer == "The total is 79,900 INR."


def test_a_plan_cut_off_at_max_tokens_is_named_so_and_repaired_with_a_higher_limit(
    author, claude_replies
):
    cut = json.dumps(PLAN)[:30]
    bodies = claude_replies(
        message(cut, stop_reason="max_tokens"),
        message(json.dumps(PLAN)),
        streamed(["79,900 INR."]),
    )
    run = run_create(author=author, goal_text="Price of an iPhone 16")

    assert advance_run(run.pk) == "completed"

    first_limit = bodies[0]["max_tokens"]
    assert bodies[1]["max_tokens"] == 2 * first_limit
    repair_prompt = bodies[1]["messages"][-1]["content"]
    assert "cut off at its max_tokens limit" in repair_prompt
    assert "not valid JSON" not in repair_prompt


@pytest.mark.parametrize(
    ("reply", "named"),
    [
        (message("", stop_reason="refusal"), "refused to plan"),
        (
            message(
                "",
                stop_reason="tool_use",
                content=[{"type": "tool_use", "id": "t1", "name": "price", "input": {}}],
            ),
            "tool call instead of a JSON plan",
        ),
        (message(json.dumps(PLAN)[:25], stop_reason="max_tokens"), "max_tokens"),
    ],
    ids=["refusal", "tool-use", "max-tokens"],
)
def test_a_planner_reply_that_is_not_a_plan_is_reported_for_what_it_is(
    author, claude_replies, reply, named
):
    claude_replies(reply, reply)
    run = run_create(author=author, goal_text="Price of an iPhone 16")

    advance_run(run.pk)

    plan = Plan.objects.get(run=run)
    assert not plan.is_valid
    assert any(named in problem for problem in plan.problems)
    assert not any("empty" in problem for problem in plan.problems)
