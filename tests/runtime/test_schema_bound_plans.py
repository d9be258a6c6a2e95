"""Claude's plan replies are bound to the plan's JSON Schema: structured outputs, or a forced
tool call; a reply that still breaks a rule gets the one repair round.

Through the real Anthropic SDK on a mock transport (tests/llm/anthropic_http.py).
"""

import json

import pytest

from plans import engine
from plans.llm.anthropic_model import PLAN_TOOL, schema_mode
from plans.models import ModelCall, Run
from plans.runtime.advance import advance_run
from plans.services.runs import run_create
from plans.tools import get_registry
from tests.llm.anthropic_http import message, streamed

pytestmark = pytest.mark.django_db(transaction=True)

GOAL = "Price of an iPhone 16"
PLAN = {"steps": [{"id": 1, "tool": "price", "args": {"item": "iPhone 16"}, "depends_on": []}]}


def answer():
    return streamed(["iPhone 16: INR 79900 [step 1]."], input_tokens=50, output_tokens=9)


def tools_in(schema):
    return sorted(
        step["properties"]["tool"]["enum"][0]
        for step in schema["properties"]["steps"]["items"]["anyOf"]
    )


def test_the_plan_call_carries_the_plan_schema_and_a_valid_reply_runs_with_no_repair(
    author, claude_replies
):
    bodies = claude_replies(message(text=json.dumps(PLAN)), answer())
    run = run_create(author=author, goal_text=GOAL)

    assert advance_run(run.pk) == "completed"

    plan_body = bodies[0]
    bound = plan_body["output_config"]["format"]
    assert bound["type"] == "json_schema"
    assert tools_in(bound["schema"]) == sorted(get_registry())
    assert "tools" not in plan_body and "tool_choice" not in plan_body
    # Structured outputs take closed objects only: the SDK's transform, every object closed.
    assert '"additionalProperties": true' not in json.dumps(bound)
    assert ModelCall.objects.filter(run=run, purpose="plan").count() == 1  # no repair
    assert "output_config" not in bodies[1]  # the answer is prose
    run.refresh_from_db()
    assert run.plans.get().is_valid


def test_a_model_without_structured_outputs_writes_its_plan_into_a_forced_tool(
    author, claude_replies, settings
):
    settings.AGENTSITE_PLAN_SCHEMA = "tool"
    content = [{"type": "tool_use", "id": "toolu_1", "name": PLAN_TOOL, "input": PLAN}]
    bodies = claude_replies(message(content=content, stop_reason="tool_use"), answer())
    run = run_create(author=author, goal_text=GOAL)

    assert advance_run(run.pk) == "completed"

    plan_body = bodies[0]
    assert plan_body["tool_choice"] == {"type": "tool", "name": PLAN_TOOL}
    (tool,) = plan_body["tools"]
    # The router is on by default: a reply may carry an answer instead of steps.
    expected = engine.plan_json_schema(get_registry(), max_steps=5, direct_answer=True)
    assert tool["input_schema"] == expected
    assert "output_config" not in plan_body
    assert ModelCall.objects.filter(run=run, purpose="plan").count() == 1
    plan = Run.objects.get(pk=run.pk).plans.get()
    assert plan.is_valid and json.loads(plan.raw_output) == PLAN


def test_auto_picks_structured_outputs_for_current_models_and_a_tool_for_older_ones():
    schema = engine.plan_json_schema(get_registry(), max_steps=5)
    assert schema_mode("claude-sonnet-5-5", schema) == "output_format"
    assert schema_mode("claude-haiku-4-5", schema) == "output_format"
    for older in (
        "claude-3-5-haiku-20241022",
        "claude-opus-4-1-20250805",
        "claude-sonnet-4-20250514",
    ):
        assert schema_mode(older, schema) == "tool", older
    # A full JSON Schema (an MCP server's tool) is more than structured outputs take.
    mcp = {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}
    assert schema_mode("claude-sonnet-5-5", mcp) == "tool"


def test_a_schema_valid_reply_that_breaks_a_plan_rule_still_gets_the_repair_round(
    author, claude_replies
):
    dangling = {"steps": [{**PLAN["steps"][0], "depends_on": [9]}]}
    bodies = claude_replies(
        message(text=json.dumps(dangling)), message(text=json.dumps(PLAN)), answer()
    )
    run = run_create(author=author, goal_text=GOAL)

    assert advance_run(run.pk) == "completed"

    assert ModelCall.objects.filter(run=run, purpose="plan").count() == 2
    repair = bodies[1]
    assert "depends on step 9, which does not exist" in repair["messages"][-1]["content"]
    assert repair["output_config"] == bodies[0]["output_config"]  # still bound
    assert repair["system"] == bodies[0]["system"]  # and the same cached prefix


def test_with_binding_off_the_plan_call_sends_no_schema(author, claude_replies, settings):
    settings.AGENTSITE_PLAN_SCHEMA = "off"
    bodies = claude_replies(message(text=json.dumps(PLAN)), answer())
    run = run_create(author=author, goal_text=GOAL)

    assert advance_run(run.pk) == "completed"
    assert not {"output_config", "tools", "tool_choice"} & set(bodies[0])
