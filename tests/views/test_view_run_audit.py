"""The run audit page, its JSON export and the plan graph SVG: contents, permission, escaping."""

import json
import re
import xml.etree.ElementTree as ET

import pytest
from django.core.cache import cache
from django.db import transaction
from django.urls import reverse
from django.utils.timezone import now

from plans.engine import args_sha256
from plans.journal.events import append_events
from plans.llm.offline import PRICE_GOAL
from plans.models import Approval, Plan, Run, Step
from plans.runtime.advance import advance_run
from plans.services.approvals import approval_decide
from plans.services.plans import plan_check, plan_store
from plans.services.runs import run_create
from tests.html_safety import DOT_BREAKER, IMG, MULTILINE, SCRIPT, executable_markup
from tests.pages import section
from tests.reviewing import refund_plan

pytestmark = pytest.mark.django_db(transaction=True)

SVG = {"svg": "http://www.w3.org/2000/svg"}

PRICE_PLAN = {
    "steps": [
        {"id": 1, "tool": "price", "args": {"item": "iPhone 16"}, "depends_on": []},
        {"id": 2, "tool": "price", "args": {"item": "AirPods 4"}, "depends_on": []},
        {
            "id": 3,
            "tool": "calculator",
            "args": {"expression": "{{1}}+{{2}}"},
            "depends_on": [1, 2],
        },
    ]
}
REFUND_PLAN = {
    "steps": [
        {"id": 1, "tool": "order_total", "args": {"order_id": "A-1001"}, "depends_on": []},
        {
            "id": 2,
            "tool": "issue_refund",
            "args": {"order_id": "A-1001", "amount_inr": "{{1}}", "reason": "damaged item"},
            "depends_on": [1],
        },
        {
            "id": 3,
            "tool": "send_email",
            "args": {"to": "a@example.com", "subject": "Your refund", "body": "Ref {{2}}"},
            "depends_on": [2],
        },
    ]
}


@pytest.fixture(autouse=True)
def offline_model_and_test_tools(settings):
    settings.AGENTSITE_MODEL_BACKEND = "offline"
    settings.AGENTSITE_TOOL_MODULES = ["tests.support_tools"]
    cache.clear()


def finished_run(author, plan=PRICE_PLAN, goal=PRICE_GOAL, **options):
    run = run_create(author=author, goal_text=goal, plan_data=plan, **options)
    advance_run(run.pk)
    run.refresh_from_db()
    return run


def audit_page(client, run):
    response = client.get(reverse("plans:run_audit", args=[run.pk]))
    assert response.status_code == 200
    return response.content.decode()


@pytest.fixture
def hostile_run(author, reviewer):
    """A run whose goal, arguments, results, errors, answer and approval reason are hostile."""
    steps = [
        {"id": 1, "tool": "echo", "args": {"text": SCRIPT}, "depends_on": []},
        {"id": 2, "tool": "echo", "args": {"text": IMG}, "depends_on": []},
        {"id": 3, "tool": "echo", "args": {"text": DOT_BREAKER}, "depends_on": [1]},
        {"id": 4, "tool": "echo", "args": {"text": MULTILINE}, "depends_on": []},
        {"id": 5, "tool": "explode", "args": {"message": f"{SCRIPT} {IMG}"}, "depends_on": []},
        {
            "id": 6,
            "tool": "send_email",
            "args": {"to": "x@example.com", "subject": IMG, "body": SCRIPT},
            "depends_on": [],
        },
    ]
    run = run_create(
        author=author,
        goal_text=f"Check {SCRIPT} and {IMG} and {DOT_BREAKER}",
        plan_data={"steps": steps},
        lift_plan_step_cap=True,
    )
    advance_run(run.pk)
    approval_decide(
        approval=Approval.objects.get(run=run),
        reviewer=reviewer,
        approve=False,
        reason=f"{SCRIPT}{IMG}",
    )
    run.refresh_from_db()
    assert run.is_terminal
    assert SCRIPT in run.answer  # the model's output repeats the hostile results
    return run


# --- permission --------------------------------------------------------------------------


def test_it_sends_anonymous_visitors_to_the_login_page(client, author):
    run = run_create(author=author, goal_text=PRICE_GOAL)

    for name in ("run_audit", "run_export", "run_graph_svg"):
        response = client.get(reverse(f"plans:{name}", args=[run.pk]))
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("login"))


@pytest.mark.parametrize("name", ["run_audit", "run_export", "run_graph_svg"])
def test_someone_elses_run_is_as_missing_as_a_run_that_does_not_exist(
    client, author, outsider, other_author, name
):
    run = run_create(author=author, goal_text=PRICE_GOAL, plan_data=PRICE_PLAN)

    for person in (outsider, other_author):
        client.force_login(person)
        theirs = client.get(reverse(f"plans:{name}", args=[run.pk]))
        missing = client.get(reverse(f"plans:{name}", args=[run.pk + 1000]))
        assert theirs.status_code == missing.status_code == 404


@pytest.mark.parametrize("name", ["run_audit", "run_export", "run_graph_svg"])
def test_the_author_and_people_who_see_all_runs_may_look(client, author, operator, name):
    run = run_create(author=author, goal_text=PRICE_GOAL, plan_data=PRICE_PLAN)

    for person in (author, operator):
        client.force_login(person)
        assert client.get(reverse(f"plans:{name}", args=[run.pk])).status_code == 200


# --- the audit page ----------------------------------------------------------------------


def test_it_shows_the_run_its_steps_and_every_model_and_tool_call(client, author):
    run = finished_run(author)
    client.force_login(author)

    page = audit_page(client, run)

    assert "Total price of an iPhone 16 and AirPods 4 in INR" in page
    assert 'class="status status-completed"' in page
    assert "92800" in page  # step 3's result and the answer
    calls = section(page, "model-calls-heading")
    assert "<td>answer</td>" in calls and "<code>offline</code>" in calls
    assert calls.count("<tr>") == 1 + run.model_call_count
    tools = section(page, "tool-calls-heading")
    assert tools.count("<tr>") == 1 + 3
    assert "&quot;expression&quot;: &quot;79900+12900&quot;" in tools  # the resolved arguments
    assert 'title="' in tools and "<code>calculator</code>" in tools
    assert reverse("plans:run_export", args=[run.pk]) in page
    assert "Download JSON" in page


def test_long_arguments_and_results_are_collapsed_to_a_preview_with_the_whole_escaped_inside(
    client, author
):
    long_text = (SCRIPT + " " + "word " * 120).strip()
    steps = [
        {"id": 1, "tool": "echo", "args": {"text": long_text}, "depends_on": []},
        {"id": 2, "tool": "echo", "args": {"text": "short"}, "depends_on": []},
    ]
    run = finished_run(author, plan={"steps": steps}, goal="Echo a long text")
    client.force_login(author)

    page = audit_page(client, run)

    tools = section(page, "tool-calls-heading")
    collapsed = re.findall(
        r'<details class="json-long"><summary>(.*?)</summary>(.*?)</details>', tools, re.S
    )
    assert len(collapsed) == 2  # step 1's arguments and result; step 2's stay open
    summary, whole = collapsed[0]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in summary and "characters" in summary
    assert len(re.sub(r"<[^>]+>", "", summary)) < 200
    assert whole.count("word") == 120 and "&lt;script&gt;" in whole
    assert '<pre class="json">{&quot;text&quot;: &quot;short&quot;}</pre>' in tools  # one line
    assert executable_markup(page) == []


def test_numbers_are_shown_with_separators_and_dollars_with_six_decimals(client, author):
    run = finished_run(author)
    Run.objects.filter(pk=run.pk).update(input_tokens=1234567, cost_usd="0.000123")
    client.force_login(author)

    page = audit_page(client, run)

    assert "1,234,567" in page
    assert "$0.000123" in page


def test_it_shows_each_approval_with_reviewer_decision_reason_hash_and_edited_arguments(
    client, author, reviewer
):
    run = finished_run(author, plan=REFUND_PLAN, goal="Refund order A-1001")
    refund = Approval.objects.get(run=run, tool="issue_refund")
    edited = {"order_id": "A-1001", "amount_inr": 1000, "reason": "partial refund"}
    approval_decide(approval=refund, reviewer=reviewer, approve=True, edited_args=edited)
    email = Approval.objects.get(run=run, tool="send_email")
    approval_decide(approval=email, reviewer=reviewer, approve=False, reason="wrong address")
    client.force_login(author)

    approvals = section(audit_page(client, run), "approvals-heading")

    assert approvals.count("decision-pill-approved") == 1
    assert approvals.count("decision-pill-rejected") == 1
    assert approvals.count("<td>bob") == 2
    assert "wrong address" in approvals
    assert "requested" in approvals and "edited by the reviewer to" in approvals
    assert "&quot;amount_inr&quot;: 2499" in approvals  # what the executor asked about
    assert "&quot;amount_inr&quot;: 1000" in approvals  # what was decided
    assert f'title="{args_sha256("issue_refund", edited)}"' in approvals


def test_an_approval_a_rule_decided_names_the_rule_and_its_version(client, author, settings):
    settings.AGENTSITE_APPROVAL_RULE_MODULES = ["plans.demo.approval_rules"]
    plan = refund_plan("A-1001", 800, reason="damaged")
    run = finished_run(author, plan=plan, goal="Refund 800 on A-1001")
    decided = Approval.objects.get(run=run)
    assert decided.decided_by_rule and decided.rule_version
    client.force_login(author)

    approvals = section(audit_page(client, run), "approvals-heading")

    assert f"rule <code>{decided.rule}</code>" in approvals
    assert f"version {decided.rule_version}" in approvals


def test_every_plan_version_is_shown(client, author):
    run = run_create(author=author, goal_text=PRICE_GOAL, plan_data=PRICE_PLAN)
    replan, problems = plan_check(
        {"steps": [{"id": 1, "tool": "search", "args": {"query": "prices"}, "depends_on": []}]},
        max_steps=None,
    )
    assert not problems
    plan_store(run=run, raw_output="{}", plan=replan, problems=[], source="replan")
    client.force_login(author)

    plans = section(audit_page(client, run), "plans-heading")

    assert "side-by-side" in plans
    assert "Version 1 · file" in plans and "Version 2 · replan" in plans
    assert "<code>calculator</code>" in plans and "<code>search</code>" in plans
    graph = reverse("plans:run_graph_svg", args=[run.pk])
    assert f'src="{graph}?version=1"' in plans and f'src="{graph}?version=2"' in plans


def test_a_reviewers_decision_on_the_whole_plan_is_shown_and_exported(client, author, reviewer):
    run = run_create(author=author, goal_text=PRICE_GOAL, plan_data=PRICE_PLAN)
    run.plans.update(
        decision="rejected", decided_by=reviewer, decision_reason="too costly", decided_at=now()
    )
    client.force_login(author)

    plans = section(audit_page(client, run), "plans-heading")
    response = client.get(reverse("plans:run_export", args=[run.pk]))
    exported = json.loads(b"".join(response.streaming_content))["plans"][0]

    assert "plan rejected" in plans and "by bob" in plans and "too costly" in plans
    assert exported["decision"] == "rejected" and exported["decided_by"] == "bob"
    assert exported["decision_reason"] == "too costly"


def test_the_timeline_has_a_bar_per_started_step_grouped_by_round(client, author):
    run = finished_run(author)
    client.force_login(author)

    timeline = section(audit_page(client, run), "timeline-heading")

    assert timeline.count('class="span"') == 3
    assert ">Round 1<" in timeline and ">Round 2<" in timeline
    assert ">3 · calculator<" in timeline


def test_the_event_log_lists_every_event_and_the_state_of_its_hash_chain(client, author):
    run = finished_run(author)
    client.force_login(author)

    events = section(audit_page(client, run), "events-heading")

    assert events.count('<tr id="event-') == run.last_seq
    assert "<code>run_finished</code>" in events
    assert "hash chain intact" in events


def test_each_event_row_shows_its_time_to_the_microsecond_and_the_start_of_its_hash(client, author):
    run = finished_run(author)
    first = run.events.get(seq=1)
    on_the_second = first.at.replace(microsecond=0)
    run.events.filter(pk=first.pk).update(at=on_the_second)  # isoformat leaves out ".000000"
    last = run.events.get(seq=run.last_seq)
    client.force_login(author)

    events = section(audit_page(client, run), "events-heading")

    stamp = on_the_second.strftime("%H:%M:%S")
    assert f'<time datetime="{on_the_second.isoformat()}">{stamp}.000000</time>' in events
    assert "+00:00" in on_the_second.isoformat() and "." not in on_the_second.isoformat()
    shown = last.at.strftime("%H:%M:%S.%f")
    assert f'<time datetime="{last.at.isoformat()}">{shown}</time>' in events
    assert f'<code class="hash" title="{last.hash}">{last.hash[:12]}…</code>' in events


def test_a_run_without_a_plan_yet_has_an_audit_page(client, author):
    run = run_create(author=author, goal_text=PRICE_GOAL)
    client.force_login(author)

    page = audit_page(client, run)

    assert "No plan was made." in page and "No step has started." in page


def test_hostile_text_is_inert_on_the_audit_page(client, author, hostile_run):
    client.force_login(author)

    page = audit_page(client, hostile_run)

    assert executable_markup(page) == []
    escaped_script = "&lt;script&gt;alert(1)&lt;/script&gt;"
    assert page.count(escaped_script) >= 6  # goal, args, results, error, answer, reason, events
    assert "&quot;&gt;&lt;img src=x onerror=alert(1)&gt;" in section(page, "approvals-heading")
    assert "<code>explode</code>" in page


# --- the export --------------------------------------------------------------------------


def test_the_export_is_a_json_attachment_with_the_whole_run(client, author, reviewer):
    run = finished_run(author, plan=REFUND_PLAN, goal="Refund order A-1001")
    approval_decide(
        approval=Approval.objects.get(run=run), reviewer=reviewer, approve=False, reason="no"
    )
    run.refresh_from_db()
    client.force_login(author)

    response = client.get(reverse("plans:run_export", args=[run.pk]))

    assert response["Content-Type"] == "application/json; charset=utf-8"
    assert response["Content-Disposition"] == f'attachment; filename="run-{run.pk}.json"'
    assert response.streaming  # read from the database as it is sent
    data = json.loads(b"".join(response.streaming_content))
    assert set(data) >= {"run", "goal", "plans", "approvals", "model_calls", "tool_calls", "events"}
    assert data["run"]["status"] == "blocked" and data["goal"]["author"] == "alice"
    assert [s["tool"] for s in data["plans"][0]["steps"]] == [
        "order_total",
        "issue_refund",
        "send_email",
    ]
    assert data["approvals"][0]["reviewer"] == "bob" and data["approvals"][0]["reason"] == "no"
    assert len(data["model_calls"]) == run.model_call_count
    assert data["tool_calls"][0]["idempotency_key"]
    assert [e["seq"] for e in data["events"]] == list(range(1, run.last_seq + 1))
    assert data["events"][-1]["hash"] == data["run"]["last_event_hash"]
    assert data["run"]["cost_usd"] == format(run.cost_usd, "f")  # decimals stay exact
    # A zero cost (the offline model's) reads 0.00000000, not str(Decimal)'s 0E-8.
    assert [call["cost_usd"] for call in data["model_calls"]] == ["0.00000000"] * len(
        data["model_calls"]
    )


def test_hostile_text_in_the_export_is_exact_data_that_cannot_open_a_tag(
    client, author, hostile_run
):
    client.force_login(author)

    response = client.get(reverse("plans:run_export", args=[hostile_run.pk]))

    raw = b"".join(response.streaming_content).decode()
    assert "<" not in raw and ">" not in raw
    assert response["X-Content-Type-Options"] == "nosniff"
    data = json.loads(raw)
    assert data["goal"]["text"] == f"Check {SCRIPT} and {IMG} and {DOT_BREAKER}"
    steps = {s["id"]: s for s in data["plans"][0]["steps"]}
    assert steps[2]["result"] == IMG and steps[4]["result"] == MULTILINE
    assert steps[5]["error"] == f"{SCRIPT} {IMG}"
    assert data["approvals"][0]["reason"] == f"{SCRIPT}{IMG}"


def exported(client, run):
    response = client.get(reverse("plans:run_export", args=[run.pk]))
    return json.loads(b"".join(response.streaming_content))


def test_the_export_holds_every_step_tool_call_preview_and_event_as_stored(
    client, author, hostile_run
):
    from plans.selectors.audit import (
        EVENT_FIELDS,
        STEP_FIELDS,
        TOOL_CALL_FIELDS,
        TOOL_PREVIEW_FIELDS,
        _ExportEncoder,
    )

    client.force_login(author)

    data = exported(client, hostile_run)

    def record(row, names, **named):
        return json.loads(_ExportEncoder().encode({**named, **{n: getattr(row, n) for n in names}}))

    def of_step(row):
        return {"id": row.pk, "plan_version": row.step.plan.version, "step": row.step.step_id}

    steps = Step.objects.filter(plan__run=hostile_run).order_by("step_id")
    calls = hostile_run.tool_calls.order_by("started_at", "pk")
    previews = hostile_run.tool_previews.order_by("started_at", "pk")
    assert previews.exists() and calls.exists()
    assert data["plans"][0]["steps"] == [record(s, STEP_FIELDS, id=s.step_id) for s in steps]
    assert data["tool_calls"] == [record(c, TOOL_CALL_FIELDS, **of_step(c)) for c in calls]
    assert data["tool_previews"] == [record(p, TOOL_PREVIEW_FIELDS, **of_step(p)) for p in previews]
    events = hostile_run.events.order_by("seq")
    assert data["events"] == [record(e, EVENT_FIELDS) for e in events]


def test_the_exported_event_log_verifies_its_hash_chain_on_its_own(client, author):
    from datetime import datetime

    from plans.engine import canonical_json
    from plans.guards.audit import GENESIS, event_hash

    run = finished_run(author)
    client.force_login(author)

    data = exported(client, run)

    events = data["events"]
    assert [event["seq"] for event in events] == list(range(1, run.last_seq + 1))
    assert any(datetime.fromisoformat(e["at"]).microsecond % 1000 for e in events)  # not cut
    previous = GENESIS
    for event in events:
        assert event["prev_hash"] == previous
        recomputed = event_hash(
            run_id=data["run"]["id"],
            seq=event["seq"],
            kind=event["kind"],
            payload_json=canonical_json(event["payload"]),
            at=datetime.fromisoformat(event["at"]),
            prev_hash=previous,
        )
        assert recomputed == event["hash"], event["seq"]
        previous = event["hash"]
    assert previous == data["run"]["last_event_hash"]


def test_times_stored_in_another_spelling_are_exported_as_the_times_they_are(client, author):
    from django.db import connection

    run = finished_run(author)
    first, second = run.tool_calls.order_by("pk")[:2]
    with connection.cursor() as cursor:  # what a raw statement may have written
        for call, text in ((first, "2026-01-02T03:04:05.5+00:00"), (second, "2026-01-02 03:04:05")):
            cursor.execute(
                "UPDATE plans_toolcall SET started_at = %s WHERE id = %s", [text, call.pk]
            )
    client.force_login(author)

    calls = {call["id"]: call for call in exported(client, run)["tool_calls"]}

    assert calls[first.pk]["started_at"] == "2026-01-02T03:04:05.500000Z"
    assert calls[second.pk]["started_at"] == "2026-01-02T03:04:05Z"


# --- the graph ---------------------------------------------------------------------------


def test_the_graph_is_sanitised_svg_with_a_locked_down_content_policy(client, author):
    run = finished_run(author)
    client.force_login(author)

    response = client.get(reverse("plans:run_graph_svg", args=[run.pk]))

    assert response["Content-Type"] == "image/svg+xml; charset=utf-8"
    assert response["Content-Security-Policy"] == "default-src 'none'; style-src 'unsafe-inline'"
    assert response["X-Content-Type-Options"] == "nosniff"
    root = ET.fromstring(response.content)  # noqa: S314 - our own sanitised output
    nodes = {g.get("id"): g.get("class") for g in root.iterfind(".//svg:g[@class]", SVG)}
    assert nodes["step-3"] == "node step status-succeeded"


def test_the_graph_of_an_earlier_plan_version_can_be_asked_for(client, author):
    run = run_create(author=author, goal_text=PRICE_GOAL, plan_data=PRICE_PLAN)
    replan, _ = plan_check(
        {"steps": [{"id": 9, "tool": "search", "args": {"query": "x"}, "depends_on": []}]},
        max_steps=None,
    )
    plan_store(run=run, raw_output="{}", plan=replan, problems=[], source="replan")
    client.force_login(author)
    url = reverse("plans:run_graph_svg", args=[run.pk])

    assert 'id="step-9"' in client.get(url).content.decode()  # the current version
    assert 'id="step-3"' in client.get(url, {"version": 1}).content.decode()
    assert client.get(url, {"version": 7}).status_code == 404
    assert client.get(url, {"version": "one"}).status_code == 404


def test_a_run_without_a_plan_has_no_graph(client, author):
    run = run_create(author=author, goal_text=PRICE_GOAL)
    client.force_login(author)

    assert client.get(reverse("plans:run_graph_svg", args=[run.pk])).status_code == 404


def test_hostile_text_in_the_graph_is_drawn_as_text(client, author, hostile_run):
    client.force_login(author)

    svg = client.get(reverse("plans:run_graph_svg", args=[hostile_run.pk])).content.decode()

    assert "<script" not in svg and "<img" not in svg and "<a " not in svg
    root = ET.fromstring(svg)  # noqa: S314 - our own sanitised output
    assert not [name for element in root.iter() for name in element.attrib if name.startswith("on")]
    labels = {
        g.get("id"): "".join(g.itertext())
        for g in root.iterfind(".//svg:g[@id]", SVG)
        if g.get("id", "").startswith("step-")
    }
    assert set(labels) == {f"step-{n}" for n in range(1, 7)}  # nothing broke out of a label
    assert SCRIPT in labels["step-1"]
    assert "onerror=alert(1)" in labels["step-2"]
    assert r'text="\"]; x [label=\""' in labels["step-3"]  # as JSON: quotes escaped
    assert r"line one\nline two {braces} }" in labels["step-4"]


# --- what a replan changed -----------------------------------------------------------------


def test_a_replan_marks_each_step_as_added_removed_changed_or_unchanged_and_reused(client, author):
    run = run_create(author=author, goal_text=PRICE_GOAL, plan_data=PRICE_PLAN)
    first = run.plans.get(version=1)
    second = Plan.objects.create(
        run=run, version=2, parent=first, source="replan", raw_output="{}", is_valid=True
    )
    Step.objects.bulk_create(
        [
            Step(plan=second, step_id=1, tool="price", args={"item": "iPhone 16"}, round=1),
            Step(plan=second, step_id=2, tool="price", args={"item": "AirPods Pro"}, round=1),
            Step(plan=second, step_id=4, tool="search", args={"query": "INR rate"}, round=1),
        ]
    )
    with transaction.atomic():
        append_events(
            run.pk,
            [
                ("plan_created", {"version": 2, "source": "replan"}),
                (
                    "step_finished",
                    {
                        "step": 1,
                        "tool": "price",
                        "status": "succeeded",
                        "result": 79900,
                        "reused_from": "plan v1 step 1",
                    },
                ),
            ],
        )
    client.force_login(author)

    diff = re.search(
        r'<div class="plan-diff" id="plan-diff-2">.*?</table>', audit_page(client, run), re.S
    )

    assert diff, "version 2 has no list of changes"
    html = diff.group(0)
    assert "Changes from version 1" in html
    assert "1 added · 1 removed · 1 changed · 1 unchanged" in html
    rows = dict(re.findall(r'<tr id="diff-2-step-(\d+)" class="diff-(\w+)">', html))
    assert rows == {"1": "unchanged", "2": "changed", "3": "removed", "4": "added"}
    assert "result reused from plan v1 step 1" in html
    changed = re.search(r'<tr id="diff-2-step-2".*?</tr>', html, re.S).group(0)
    assert "&quot;AirPods 4&quot;" in changed and "&quot;AirPods Pro&quot;" in changed
    assert "<del" in changed and "<ins" in changed
    assert "plan-diff-1" not in audit_page(client, run)  # the first version has nothing to compare


def test_the_event_log_is_shown_a_page_at_a_time(client, author, monkeypatch):
    monkeypatch.setattr("plans.selectors.audit.AUDIT_EVENTS_PAGE", 5)
    run = finished_run(author)
    assert run.last_seq > 10
    client.force_login(author)
    url = reverse("plans:run_audit", args=[run.pk])

    first = client.get(url).content.decode()
    second = client.get(url, {"events_after": 5}).content.decode()

    assert re.findall(r'<tr id="event-(\d+)">', first) == ["1", "2", "3", "4", "5"]
    assert re.findall(r'<tr id="event-(\d+)">', second) == ["6", "7", "8", "9", "10"]
    assert f"{run.last_seq} events, 5 shown from seq 1" in first
    assert 'href="?events_after=5#events-heading" rel="next"' in first
    assert 'href="?events_after=0#events-heading" rel="prev"' in second
    assert "hash chain intact" in first  # checked over the whole log, not the page


WIDE_PLAN = {
    "steps": [
        {"id": i, "tool": "echo", "args": {"text": f"row {i}"}, "depends_on": []}
        for i in range(1, 13)
    ]
}


def next_page(client, run, page, label):
    """The audit page the `rel="next"` link of the pagination labelled `label` leads to."""
    nav = re.search(rf'<nav class="pagination" aria-label="{label}">.*?</nav>', page, re.S)
    assert nav, f"no {label} navigation"
    link = re.search(r'<a href="\?([^"#]+)(#[^"]*)?" rel="next">', nav.group(0))
    if link is None:
        return None
    key, value = link.group(1).split("=")
    response = client.get(reverse("plans:run_audit", args=[run.pk]), {key: value})
    assert response.status_code == 200
    return response.content.decode()


def step_rows(page):
    return [int(step) for step in re.findall(r'<tr id="v1-step-(\d+)">', page)]


def echoed(page):
    return re.findall(
        r"&quot;text&quot;: &quot;(row \d+)&quot;", section(page, "tool-calls-heading")
    )


def test_a_long_plan_shows_its_steps_and_tool_calls_a_page_at_a_time(client, author, monkeypatch):
    monkeypatch.setattr("plans.selectors.audit.AUDIT_ROWS_PAGE", 5)
    run = finished_run(author, plan=WIDE_PLAN, goal="Echo twelve rows", lift_plan_step_cap=True)
    assert run.tool_calls.count() == 12
    client.force_login(author)

    first = audit_page(client, run)

    assert step_rows(first) == [1, 2, 3, 4, 5]
    assert "steps 1\u20135 of 12" in first
    assert 'href="?steps_after=5#plans-heading" rel="next"' in first
    assert '<span class="disabled">← Earlier steps</span>' in first
    assert len(echoed(first)) == 5
    assert 'Tool calls <span class="muted">12, 1\u20135 shown</span>' in first
    assert 'href="?tool_calls_after=5#tool-calls-heading" rel="next"' in first

    second = next_page(client, run, first, "Step pages")
    third = next_page(client, run, second, "Step pages")
    assert step_rows(second) == [6, 7, 8, 9, 10]
    assert step_rows(third) == [11, 12]
    assert "steps 11\u201312 of 12" in third
    assert 'href="?steps_after=5#plans-heading" rel="prev"' in third
    assert next_page(client, run, third, "Step pages") is None

    calls_second = next_page(client, run, first, "Tool call pages")
    calls_third = next_page(client, run, calls_second, "Tool call pages")
    assert len(echoed(calls_second)) == 5 and len(echoed(calls_third)) == 2
    assert "12, 11\u201312 shown" in calls_third
    assert next_page(client, run, calls_third, "Tool call pages") is None
    shown = echoed(first) + echoed(calls_second) + echoed(calls_third)
    assert sorted(shown) == sorted(f"row {i}" for i in range(1, 13))


def test_a_short_plan_shows_every_step_and_tool_call_without_pages(client, author):
    run = finished_run(author)
    client.force_login(author)

    page = audit_page(client, run)

    assert step_rows(page) == [1, 2, 3]
    assert section(page, "tool-calls-heading").count("<tr>") == 1 + 3
    assert 'aria-label="Step pages"' not in page and 'aria-label="Tool call pages"' not in page
    assert "steps 1\u2013" not in page and "shown</span>" not in section(page, "tool-calls-heading")


def test_an_audit_of_one_plan_version_reads_only_the_steps_it_shows(client, author, monkeypatch):
    from django.db.models.signals import post_init

    monkeypatch.setattr("plans.selectors.audit.AUDIT_ROWS_PAGE", 3)
    run = finished_run(author, plan=WIDE_PLAN, goal="Echo twelve rows", lift_plan_step_cap=True)
    client.force_login(author)
    read = []

    def count(sender, instance, **kwargs):
        read.append(instance)

    post_init.connect(count, sender=Step)
    try:
        page = audit_page(client, run)
    finally:
        post_init.disconnect(count, sender=Step)

    assert step_rows(page) == [1, 2, 3] and "steps 1\u20133 of 12" in page
    assert 'alt="Graph of plan version 1: 12 steps"' in page
    # The three shown, and the steps of the three tool calls shown: not the other nine.
    assert len(read) <= 6


def test_the_timeline_draws_the_page_of_steps_on_the_whole_runs_time_axis(
    client, author, monkeypatch
):
    from datetime import timedelta

    from plans.selectors.audit import run_audit_get
    from plans.ui.reports import run_timeline

    monkeypatch.setattr("plans.selectors.audit.AUDIT_ROWS_PAGE", 5)
    run = finished_run(author, plan=WIDE_PLAN, goal="Echo twelve rows", lift_plan_step_cap=True)
    for step in Step.objects.filter(plan__run=run):
        began = run.started_at + timedelta(seconds=10 * step.step_id)
        Step.objects.filter(pk=step.pk).update(
            started_at=began, finished_at=began + timedelta(seconds=5)
        )
    client.force_login(author)

    spans, horizon = run_timeline(run_audit_get(run=run), now=now())

    assert [span.label.split()[0] for span in spans] == ["1", "2", "3", "4", "5"]
    assert horizon == 12 * 10 + 5  # to the end of step 12, on another page
    timeline = section(audit_page(client, run), "timeline-heading")
    assert "the steps of the page shown above, on the whole run" in timeline


def answered(run, answer, citations):
    """The run with this answer and a check of its citations ((step, valid) in order)."""
    found = [(m.start(), m.end()) for m in re.finditer(r"\[step \d+\]", answer)]
    check = {
        "ok": all(valid for _, valid in citations),
        "unsupported": [],
        "citations": [
            {"step": step, "valid": valid, "reason": "" if valid else f"step {step} failed"}
            | {"start": start, "end": end}
            for (step, valid), (start, end) in zip(citations, found, strict=True)
        ],
    }
    Run.objects.filter(pk=run.pk).update(answer=answer, answer_check=check)
    run.refresh_from_db()
    return run


def test_valid_citations_are_counted_and_the_flagged_ones_listed(client, author):
    run = finished_run(author)
    answered(
        run,
        "A [step 1], B [step 2], C [step 3], D [step 9].",
        [(1, True), (2, True), (3, True), (9, False)],
    )
    client.force_login(author)

    check = re.search(r'<div class="answer-check".*?</ul>', audit_page(client, run), re.S).group(0)

    assert "3 citations valid (each cites a step that succeeded)" in check
    assert "[step 9]: not valid: step 9 failed" in check
    assert "[step 1]" not in check and check.count("<li>") == 2


@pytest.mark.parametrize("hidden", ["", "\u202e"])
def test_a_cited_answers_untrusted_text_is_escaped_once(client, author, hidden):
    run = finished_run(author)
    answered(run, f'Total <b>5 & 6</b>{hidden} [step 1] "<i>" [step 2]', [(1, True), (2, True)])
    client.force_login(author)

    for page in (audit_page(client, run), client.get(run_url(run)).content.decode()):
        assert "&lt;b&gt;5 &amp; 6&lt;/b&gt;" in page and "&amp;lt;" not in page
        assert "&quot;&lt;i&gt;&quot;" in page
        assert executable_markup(page) == []
        link = f'href="{reverse("plans:step_detail", args=[run.pk, 2])}"'
        assert link in page
        assert ("U+202E" in page) is bool(hidden)  # hidden characters shown where there are any


def run_url(run):
    return reverse("plans:run_detail", args=[run.pk])


def test_a_value_past_ten_thousand_characters_is_shown_whole_on_one_line(client, author):
    long_text = "word " * 5000 + "<script>end</script>"
    plan = {"steps": [{"id": 1, "tool": "echo", "args": {"text": long_text}, "depends_on": []}]}
    run = finished_run(author, plan=plan, goal="Echo a long text")
    client.force_login(author)

    calls = section(audit_page(client, run), "tool-calls-heading")

    whole = "{&quot;text&quot;: &quot;" + "word " * 5000 + "&lt;script&gt;end&lt;/script&gt;&quot;}"
    assert f'<pre class="json">{whole}</pre>' in calls  # whole, not indented over lines
    assert executable_markup(calls) == []


@pytest.mark.parametrize("steps", [6, 60])
def test_the_audit_and_export_make_as_few_queries_whatever_the_number_of_steps(
    client, author, steps, django_assert_max_num_queries
):
    plan = {
        "steps": [
            {"id": i, "tool": "calculator", "args": {"expression": f"{i}+0"}, "depends_on": []}
            for i in range(1, steps + 1)
        ]
    }
    run = finished_run(author, plan=plan, goal="Add the rows", lift_plan_step_cap=True)
    assert run.status == Run.Status.COMPLETED
    client.force_login(author)

    # 19: the audit also lists the run's forks and re-runs (one query), and the previews taken
    # beside its tool calls (one, as the export).
    with django_assert_max_num_queries(19):
        audit_page(client, run)
    with django_assert_max_num_queries(18):
        response = client.get(reverse("plans:run_export", args=[run.pk]))
        exported = json.loads(b"".join(response.streaming_content))

    assert len(exported["plans"][0]["steps"]) == steps
