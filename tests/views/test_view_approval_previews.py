"""Previews where decisions are made: the inbox card (both previews side by side once a
request comes back stale), the run page's step panel, the API's approval object and the
approvals e-mail; a preview's text is the tool's, shown escaped."""

import json
import re

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

from plans.models import Approval, Step, ToolPreview
from plans.notifications.emails import approval_round_email
from plans.runtime.advance import advance_run
from plans.services.approvals import approval_decide
from plans.services.runs import run_create
from tests import preview_tools
from tests.html_safety import IMG, SCRIPT, executable_markup
from tests.pages import section

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


# --- an edit's own preview, read before the approval binds to it -------------------------------


def decide_on_card(client, approval, page, *, draft=None, htmx=True):
    """Approve as the card in `page` would post it: its hashes, its preview token, any draft."""
    token = re.search(rf'name="preview-{approval.pk}" value="(\w+)"', page)[1]
    data = {
        "group": f"{approval.run_id}-{approval.step.round}",
        "approval": [approval.pk],
        "decision": "approve",
        f"seen-{approval.pk}": approval.args_sha256,
        f"preview-{approval.pk}": token,
    }
    if draft is not None:
        data[f"args-{approval.pk}"] = json.dumps(draft)
    headers = {"HX-Request": "true"} if htmx else {}
    return client.post(reverse("plans:decide"), data, headers=headers)


@pytest.mark.parametrize("htmx", [True, False])
def test_an_edit_shows_its_own_preview_before_the_approval_binds_to_it(
    client, author, reviewer, htmx
):
    run = parked(author)
    approval = Approval.objects.get(run=run)
    client.force_login(reviewer)
    card = client.get(reverse("plans:inbox")).content.decode()
    edited = {"item": HOSTILE_ITEM, "quantity": 2}

    shown = decide_on_card(client, approval, card, draft=edited, htmx=htmx)

    page = shown.content.decode()
    assert shown.status_code == 409
    assert "read the preview of your edited arguments of step 1 (ship)" in page
    assert 'class="alert alert-info" role="status"' in page  # a step to confirm, not an error
    assert "alert-error" not in page
    assert "Preview of your edited arguments" in page
    assert "Ship 2 of &lt;script&gt;alert(1)&lt;/script&gt;" in page  # the tool's text, escaped
    assert executable_markup(page) == []
    assert "&quot;quantity&quot;: 2" in page  # the draft is kept
    approval.refresh_from_db()
    assert approval.decision == "pending" and approval.args["quantity"] == 3

    decided = decide_on_card(client, approval, page, draft=edited, htmx=htmx)

    approval.refresh_from_db()
    assert decided.status_code == (200 if htmx else 302)
    assert approval.decision == "approved" and approval.args == edited
    assert approval.target_version == f"{HOSTILE_ITEM}@1"


def test_an_edit_whose_preview_hangs_says_no_preview_and_is_approved_on_the_second_click(
    client, author, reviewer
):
    run = parked(author, tool="ship_hanging")
    approval = Approval.objects.get(run=run)
    client.force_login(reviewer)
    card = client.get(reverse("plans:inbox")).content.decode()
    edited = {"item": "widget", "quantity": 1}

    shown = decide_on_card(client, approval, card, draft=edited)
    page = shown.content.decode()
    assert "no preview: timed out after 0.2s" in page.split("Preview of your edited arguments")[1]

    decided = decide_on_card(client, approval, page, draft=edited)
    approval.refresh_from_db()
    assert decided.status_code == 200
    assert (approval.decision, approval.args) == ("approved", edited)
    assert approval.preview == {"error": "timed out after 0.2s"}


def test_the_next_approver_is_shown_the_edits_preview(client, author, reviewer, settings):
    settings.AGENTSITE_APPROVAL_RULE_MODULES = ["tests.rule_modules.two_for_shipping"]
    run = parked(author)
    approval = Approval.objects.get(run=run)
    approval_decide(
        approval=approval,
        reviewer=reviewer,
        approve=True,
        edited_args={"item": "widget", "quantity": 5},
        resume=False,
    )
    erin = type(reviewer).objects.create_user("erin")
    erin.user_permissions.add(Permission.objects.get(codename="decide_approval"))
    client.force_login(erin)

    page = client.get(reverse("plans:inbox")).content.decode()

    assert "Preview of the effect" in page and "of the edited arguments" in page
    assert "Ship 5 of widget; 10 in stock" in page
    assert "Ship 3 of widget" not in page


def test_an_api_edit_is_handed_its_preview_and_token_before_it_is_approved(
    client, author, reviewer
):
    run = parked(author)
    client.force_login(reviewer)
    (listed,) = client.get("/api/v1/approvals/").json()
    edited = {"item": "widget", "quantity": 4}
    choice = {"id": listed["id"], "args_sha256": listed["args_sha256"], "args": edited}
    decide = "/api/v1/approvals/decide/"

    refused = client.post(
        decide, {"decision": "approve", "approvals": [choice]}, content_type="application/json"
    )

    assert refused.status_code == 409
    body = refused.json()
    assert body["code"] == "preview_unseen"
    (shown,) = body["previews"]
    assert (shown["id"], shown["args"], shown["edited"]) == (listed["id"], edited, True)
    assert shown["preview"]["summary"] == "Ship 4 of widget; 10 in stock"
    assert Approval.objects.get(run=run).decision == "pending"

    choice["preview_token"] = shown["preview_token"]
    decided = client.post(
        decide, {"decision": "approve", "approvals": [choice]}, content_type="application/json"
    )

    assert decided.status_code == 200
    approval = Approval.objects.get(run=run)
    assert (approval.decision, approval.args) == ("approved", edited)
    assert approval.preview["summary"] == "Ship 4 of widget; 10 in stock"


def test_an_api_approval_naming_its_preview_token_is_held_to_that_preview(client, author, reviewer):
    parked(author)
    client.force_login(reviewer)
    (listed,) = client.get("/api/v1/approvals/").json()
    choice = {
        "id": listed["id"],
        "args_sha256": listed["args_sha256"],
        "preview_token": "0" * 32,  # not the token of the preview the approval holds
    }

    refused = client.post(
        "/api/v1/approvals/decide/",
        {"decision": "approve", "approvals": [choice]},
        content_type="application/json",
    )

    assert refused.status_code == 409 and refused.json()["code"] == "preview_unseen"
    assert refused.json()["previews"][0]["preview_token"] == listed["preview_token"]


# --- previews on the audit page and in its export ----------------------------------------------


def audit_rows(client, run, **query):
    """The audit page's tool-call rows, each as (kind, its text without tags), in page order."""
    response = client.get(reverse("plans:run_audit", args=[run.pk]), query)
    assert response.status_code == 200
    page = response.content.decode()
    rows = re.findall(
        r"<tr( class=\"preview-row\")?>(.*?)</tr>", section(page, "tool-calls-heading"), re.S
    )
    return page, [
        ("preview" if marked else "call", " ".join(re.sub(r"<[^>]+>", " ", html).split()))
        for marked, html in rows
        if "<td" in html
    ]


def test_the_audit_lists_each_preview_with_the_calls_in_the_order_they_started(
    client, author, reviewer
):
    run = parked(author)
    approval = Approval.objects.get(run=run)
    edited = {"item": "widget", "quantity": 2}
    approval_decide(
        approval=approval, reviewer=reviewer, approve=True, edited_args=edited, resume=False
    )
    advance_run(run.pk)
    client.force_login(author)

    _, rows = audit_rows(client, run)

    assert [kind for kind, _ in rows] == ["preview", "preview", "call", "preview"]
    request, edit, _, launch = (text for _, text in rows)
    assert "before the decision" in request and "Ship 3 of widget; 10 in stock" in request
    assert "of a reviewer&#x27;s edit" in edit and "Ship 2 of widget; 10 in stock" in edit
    assert "re-checked before the call" in launch and "target version widget@1" in launch
    hashed = ToolPreview.objects.get(run=run, purpose="edit").args_sha256
    assert hashed == Approval.objects.get(run=run).args_sha256
    assert hashed[:16] in edit  # the arguments' hash, as the approval's
    assert "ms" in launch  # how long the hook took


def test_a_failed_or_hostile_preview_is_listed_escaped_on_the_audit_page(client, author):
    hanging = parked(author, tool="ship_hanging")
    hostile = parked(author, item=HOSTILE_ITEM)
    client.force_login(author)

    _, (failed,) = audit_rows(client, hanging)
    page, (shown,) = audit_rows(client, hostile)

    assert "no preview: timed out after 0.2s" in failed[1]
    assert "Ship 3 of &lt;script&gt;alert(1)&lt;/script&gt;" in shown[1]
    assert executable_markup(page) == []


def test_each_preview_is_listed_once_beside_its_page_of_tool_calls(
    client, author, reviewer, monkeypatch
):
    monkeypatch.setattr("plans.selectors.audit.AUDIT_ROWS_PAGE", 1)
    steps = [
        {"id": 1, "tool": "ship", "args": {"item": "widget", "quantity": 1}},
        {"id": 2, "tool": "ship", "args": {"item": "widget", "quantity": 2}, "depends_on": [1]},
    ]
    run = run_create(author=author, goal_text="ship twice", plan_data={"steps": steps})
    for _ in steps:
        advance_run(run.pk)
        approval = Approval.objects.get(run=run, decision="pending")
        approval_decide(approval=approval, reviewer=reviewer, approve=True, resume=False)
    advance_run(run.pk)
    client.force_login(author)

    _, first = audit_rows(client, run)
    _, second = audit_rows(client, run, tool_calls_after=1)

    assert [kind for kind, _ in first] == ["preview", "call"]  # step 1's request, its call
    assert [kind for kind, _ in second] == ["preview", "preview", "call", "preview"]
    assert ToolPreview.objects.filter(run=run).count() == 4  # each listed once


def test_the_export_lists_every_preview(client, author, reviewer):
    run = parked(author)
    approval_decide(
        approval=Approval.objects.get(run=run),
        reviewer=reviewer,
        approve=True,
        edited_args={"item": "widget", "quantity": 2},
        resume=False,
    )
    advance_run(run.pk)
    client.force_login(author)

    response = client.get(reverse("plans:run_export", args=[run.pk]))
    exported = json.loads(b"".join(response.streaming_content))["tool_previews"]

    assert [row["purpose"] for row in exported] == ["request", "edit", "launch"]
    edit = exported[1]
    assert (edit["step"], edit["tool"], edit["args"]) == (
        1,
        "ship",
        {"item": "widget", "quantity": 2},
    )
    assert edit["args_sha256"] == Approval.objects.get(run=run).args_sha256
    assert edit["preview"]["target_version"] == "widget@1" and edit["error"] == ""
    assert edit["duration_ms"] >= 0 and edit["started_at"]
