"""Previews where decisions are made: the inbox card (both previews side by side once a
request comes back stale), the run page's step panel, the API's approval object and the
approvals e-mail; a preview's text is the tool's, shown escaped."""

import json

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

from plans.models import Approval, Step
from plans.notifications.emails import approval_round_email
from plans.runtime.advance import advance_run
from plans.services.approvals import approval_decide
from plans.services.runs import run_create
from tests import preview_tools
from tests.html_safety import IMG, SCRIPT, executable_markup

pytestmark = pytest.mark.django_db(transaction=True)

HOSTILE_ITEM = f"{SCRIPT}{IMG}"


@pytest.fixture(autouse=True)
def preview_tool_module(settings):
    settings.AGENTSITE_TOOL_MODULES = ["tests.preview_tools"]
    settings.AGENTSITE_FOUR_EYES = True
    preview_tools.reset(**{"widget": 10, HOSTILE_ITEM: 4})


def parked(author, item="widget", tool="ship"):
    steps = [{"id": 1, "tool": tool, "args": {"item": item, "quantity": 3}}]
    run = run_create(author=author, goal_text="ship", plan_data={"steps": steps})
    advance_run(run.pk)
    return run


def gone_stale(run, reviewer):
    first = Approval.objects.get(run=run)
    approval_decide(approval=first, reviewer=reviewer, approve=True, resume=False)
    preview_tools.restock("widget", 5)
    advance_run(run.pk)
    return Approval.objects.get(run=run, decision="pending")


def test_the_card_shows_the_preview_of_the_effect(client, author, reviewer):
    parked(author)
    client.force_login(reviewer)

    page = client.get(reverse("plans:inbox")).content.decode()

    assert "Preview of the effect" in page
    assert "Ship 3 of widget; 10 in stock" in page
    assert "<dt>In stock</dt><dd>10</dd>" in page
    assert "<dt>Left after</dt><dd>7</dd>" in page


def test_a_failed_preview_shows_as_no_preview_with_its_error(client, author, reviewer):
    parked(author, tool="ship_broken")
    client.force_login(reviewer)

    page = client.get(reverse("plans:inbox")).content.decode()

    assert "no preview: RuntimeError: warehouse API answered 503" in page
    assert 'name="decision" value="approve"' in page  # still decidable


def test_a_stale_request_comes_back_with_both_previews_and_what_changed(client, author, reviewer):
    run = parked(author)
    gone_stale(run, reviewer)
    client.force_login(reviewer)

    page = client.get(reverse("plans:inbox")).content.decode()

    assert f"The target changed since {reviewer.username} approved this call" in page
    assert "<li>In stock: 10 → 15</li>" in page
    before = page.index("As approved")
    now = page.index("<h3>Now</h3>")
    assert before < page.index("Ship 3 of widget; 10 in stock") < now
    assert now < page.index("Ship 3 of widget; 15 in stock")


def test_the_step_panel_shows_each_approvals_preview(client, author, reviewer):
    run = parked(author)
    gone_stale(run, reviewer)
    client.force_login(author)
    step = Step.objects.get(plan__run=run)

    panel = client.get(
        reverse("plans:step_detail", args=[run.pk, step.step_id]), headers={"HX-Request": "true"}
    ).content.decode()

    assert "<strong>stale</strong>" in panel
    assert "Its target changed before the call, which did not run" in panel
    assert "Ship 3 of widget; 15 in stock" in panel


def test_a_hostile_preview_is_shown_escaped(client, author, reviewer):
    parked(author, item=HOSTILE_ITEM)
    client.force_login(reviewer)

    page = client.get(reverse("plans:inbox")).content.decode()

    assert "Ship 3 of &lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert executable_markup(page) == []


def test_the_api_approval_carries_both_previews_and_what_changed(client, author, reviewer):
    run = parked(author)
    first = Approval.objects.get(run=run)
    fresh = gone_stale(run, reviewer)
    client.force_login(reviewer)  # the API takes the browser's session too

    listed = client.get("/api/v1/approvals/").json()

    (shown,) = listed
    assert shown["id"] == fresh.pk
    assert shown["preview"] == {
        "available": True,
        "summary": "Ship 3 of widget; 15 in stock",
        "facts": [{"label": "In stock", "value": "15"}, {"label": "Left after", "value": "12"}],
        "warnings": [],
        "target_version": "widget@2",
        "error": "",
    }
    assert shown["supersedes"]["approval"] == first.pk
    assert shown["supersedes"]["reviewer"] == reviewer.username
    assert shown["supersedes"]["preview"]["target_version"] == "widget@1"
    assert shown["supersedes"]["changes"] == ["In stock: 10 → 15", "Left after: 7 → 12"]


def test_the_approvals_email_carries_the_preview_and_a_stale_requests_change(
    author, reviewer, django_user_model
):
    reviewer.email = "bob@example.com"
    reviewer.save()
    run = parked(author)
    fresh = gone_stale(run, reviewer)

    email = approval_round_email(run.pk, fresh.step.round, reviewer.pk)

    assert "Asked again: its target changed since it was approved" in email.text
    assert "  - In stock: 10 → 15" in email.text
    assert email.text.index("As approved:") < email.text.index("Ship 3 of widget; 10 in stock")
    assert email.text.index("Now:") < email.text.index("Ship 3 of widget; 15 in stock")
    assert "<li>In stock: 10 → 15</li>" in email.html


def test_the_email_escapes_a_hostile_preview(author, reviewer):
    reviewer.email = "bob@example.com"
    reviewer.save()
    reviewer.user_permissions.add(Permission.objects.get(codename="decide_approval"))
    run = parked(author, item=HOSTILE_ITEM)

    email = approval_round_email(run.pk, 1, reviewer.pk)

    assert executable_markup(email.html) == []
    assert "Ship 3 of &lt;script&gt;" in email.html


def test_the_export_keeps_each_approvals_preview_and_what_superseded_it(client, author, reviewer):
    run = parked(author)
    first = Approval.objects.get(run=run)
    fresh = gone_stale(run, reviewer)
    client.force_login(author)

    response = client.get(reverse("plans:run_export", args=[run.pk]))
    exported = json.loads(b"".join(response.streaming_content))["approvals"]

    by_id = {approval["id"]: approval for approval in exported}
    assert by_id[first.pk]["decision"] == "stale"
    assert by_id[first.pk]["preview"]["target_version"] == "widget@1"
    assert by_id[fresh.pk]["supersedes"] == first.pk
    assert by_id[fresh.pk]["changes"] == ["In stock: 10 → 15", "Left after: 7 → 12"]


def test_a_stale_request_is_mailed_again_though_its_round_was_mailed(author, reviewer):
    from plans.models import RunEvent
    from plans.notifications.deliveries import deliveries_for_events

    reviewer.email = "bob@example.com"
    reviewer.save()
    run = parked(author)
    gone_stale(run, reviewer)
    events = [
        {"kind": e.kind, "payload": e.payload, "seq": e.seq, "at": e.at}
        for e in RunEvent.objects.filter(run=run, kind__in=["approval_requested", "approval_stale"])
    ]

    made = deliveries_for_events(run.pk, events)

    assert [(d.channel, d.event_type) for d in made] == [
        ("email", "approval.requested"),
        ("email", "approval.stale"),
    ]
