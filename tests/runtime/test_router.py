"""The router: the first call answers a goal that needs no tool, plans, or refuses; the
decision is on the run and in its event log, and it can be switched off."""

import json

import pytest
from django.urls import reverse

from plans.llm.prompts import ROUTER_RULE
from plans.models import ModelCall, Run, RunEvent
from plans.runtime.advance import advance_run
from plans.services.runs import run_create
from tests.llm.anthropic_http import message

pytestmark = pytest.mark.django_db(transaction=True)


def ran(author, goal):
    run = run_create(author=author, goal_text=goal)
    advance_run(run.pk)
    run.refresh_from_db()
    return run


def kinds(run):
    return list(RunEvent.objects.filter(run=run).order_by("seq").values_list("kind", flat=True))


def test_a_goal_that_needs_no_tool_is_answered_in_one_model_call(author, client):
    run = ran(author, "Which tools can you use?")

    assert run.status == Run.Status.COMPLETED
    assert run.route == Run.Route.ANSWER
    assert "calculator" in run.answer and "issue_refund" in run.answer
    assert ModelCall.objects.filter(run=run).count() == 1
    assert not run.plans.exists()
    events = kinds(run)
    assert events.index("routed") < events.index("answer_finished") < events.index("run_finished")
    assert RunEvent.objects.get(run=run, kind="routed").payload == {"route": "answer"}
    client.force_login(author)
    audit = client.get(reverse("plans:run_audit", args=[run.pk])).content.decode()
    assert "routed" in audit and "&quot;route&quot;: &quot;answer&quot;" in audit
    page = client.get(reverse("plans:run_detail", args=[run.pk])).content.decode()
    assert "Routed: answered directly, no tool needed" in page
    assert client.get(f"/api/v1/runs/{run.pk}/").json()["route"] == "answer"


def test_a_goal_that_needs_a_tool_is_routed_to_a_plan_and_planned_as_before(author):
    run = ran(author, "Total price of an iPhone 16 and AirPods 4 in INR")

    assert run.status == Run.Status.COMPLETED
    assert run.route == Run.Route.PLAN
    assert ModelCall.objects.filter(run=run).count() == 2
    events = kinds(run)
    assert events.index("routed") < events.index("plan_created")


def test_a_goal_no_tool_can_reach_is_refused_in_one_call(author):
    run = ran(author, "Will it rain in Goa tomorrow?")

    assert run.status == Run.Status.INVALID_PLAN
    assert run.route == Run.Route.REFUSE
    assert ModelCall.objects.filter(run=run).count() == 1


def test_a_direct_answer_runs_no_tool_so_it_waits_for_no_plan_approval(author, settings):
    settings.AGENTSITE_REQUIRE_PLAN_APPROVAL = True
    run = ran(author, "What is ReAct?")

    assert run.status == Run.Status.COMPLETED and run.route == Run.Route.ANSWER
    assert "one tool call at a time" in run.answer
    assert "plan_approval_requested" not in kinds(run)


def test_with_the_router_off_every_goal_is_planned_and_no_decision_recorded(author, settings):
    settings.AGENTSITE_ROUTER = False
    run = ran(author, "Which tools can you use?")

    assert run.route == ""
    assert run.status != Run.Status.COMPLETED  # the offline planner cannot plan it
    assert "routed" not in kinds(run)
    assert run.plans.exists()


def test_claudes_direct_answer_ends_the_run_after_its_one_bound_call(author, claude_replies):
    reply = {"steps": [], "answer": "Plan-and-execute plans every tool call first."}
    bodies = claude_replies(message(text=json.dumps(reply)))

    run = ran(author, "What is plan-and-execute?")

    assert run.status == Run.Status.COMPLETED and run.route == Run.Route.ANSWER
    assert run.answer == reply["answer"]
    (body,) = bodies
    assert ROUTER_RULE.strip() in body["system"][0]["text"]
    schema = body["output_config"]["format"]["schema"]
    assert schema["properties"]["answer"]["type"] == "string"


def test_a_direct_answer_from_claude_with_the_router_off_is_not_taken(
    author, claude_replies, settings
):
    settings.AGENTSITE_ROUTER = False
    reply = {"steps": [], "answer": "Plan-and-execute plans every tool call first."}
    bodies = claude_replies(message(text=json.dumps(reply)), message(text=json.dumps(reply)))

    run = ran(author, "What is plan-and-execute?")

    assert run.status == Run.Status.INVALID_PLAN and run.answer == ""
    assert ROUTER_RULE.strip() not in bodies[0]["system"][0]["text"]
    assert "answer" not in bodies[0]["output_config"]["format"]["schema"]["properties"]
