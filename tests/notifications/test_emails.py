"""Emails, received by a real SMTP server on loopback: reviewers when a decision waits (one per
round), authors when their run ends, a daily digest for those who chose it."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.core.management import call_command

from plans.models import Run
from plans.notifications.models import Delivery, NotificationPreference
from plans.runtime.advance import advance_run
from plans.runtime.sweeper import sweep_once
from plans.services.runs import run_create
from tests.integration.support import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("notifications_on")]

HOSTILE_GOAL = 'Refund A-1001 <script>alert("x")</script> & <b>now</b>'
TWO_DESTRUCTIVE_STEPS_IN_ONE_ROUND = {
    "steps": [
        {"id": 1, "tool": "order_total", "args": {"order_id": "A-1001"}, "depends_on": []},
        {
            "id": 2,
            "tool": "issue_refund",
            "args": {"order_id": "A-1001", "amount_inr": "{{1}}", "reason": "<img src=x>"},
            "depends_on": [1],
        },
        {
            "id": 3,
            "tool": "send_email",
            "args": {
                "to": "customer-a1001@example.com",
                "subject": "Refund",
                "body": "Card 4111 1111 1111 1111 refunded INR {{1}}",
            },
            "depends_on": [1],
        },
    ]
}


@pytest.fixture
def people(django_user_model, author, reviewer):
    decide = Permission.objects.get(codename="decide_approval")
    author.email = "alice@example.com"
    author.save()
    author.user_permissions.add(decide)  # alice reviews too, but not her own goals
    reviewer.email = "bob@example.com"
    reviewer.save()
    quiet = django_user_model.objects.create_user("quinn", email="quinn@example.com")
    quiet.user_permissions.add(decide)
    NotificationPreference.objects.create(user=quiet, approval_emails="none")
    digest = django_user_model.objects.create_user("dora", email="dora@example.com")
    digest.user_permissions.add(decide)
    NotificationPreference.objects.create(user=digest, approval_emails="daily")
    return {"author": author, "reviewer": reviewer}


def delivered(mailbox, count: int):
    return wait_until(
        lambda: mailbox.messages if len(mailbox.messages) >= count else None,
        timeout=20,
        every=0.05,
        what=f"{count} emails",
    )


def test_reviewers_get_one_email_per_round_waiting_not_the_author_under_four_eyes(
    people, smtp_server
):
    run = run_create(
        author=people["author"],
        goal_text=HOSTILE_GOAL,
        plan_data=TWO_DESTRUCTIVE_STEPS_IN_ONE_ROUND,
    )
    advance_run(run.pk)
    assert Run.objects.get(pk=run.pk).status == Run.Status.AWAITING_APPROVAL

    [sent] = delivered(smtp_server, 1)
    wait_until(
        lambda: not Delivery.objects.filter(status="pending").exists(), timeout=10, what="idle"
    )
    assert sent["envelope_to"] == ["bob@example.com"]  # not alice (author), quinn, dora
    message = sent["message"]
    assert message["Subject"] == (
        f"Run {run.pk}: 2 steps (issue_refund, send_email) wait for your decision"
    )
    text = message.get_body(preferencelist=("plain",)).get_content()
    html = message.get_body(preferencelist=("html",)).get_content()
    assert HOSTILE_GOAL in text
    assert "issue_refund" in text and '"amount_inr": 2499' in text
    assert f"/approvals/#group-{run.pk}-2" in text
    assert "<script>" not in html and "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html
    assert "<img src=x>" not in html and "&lt;img src=x&gt;" in html
    assert "4111 1111 1111 1111" not in text + html  # redacted as stored
    [row] = Delivery.objects.filter(channel="email")
    assert row.status == "delivered" and row.attempts == 1
    assert row.recipients == ["bob@example.com"]


def test_the_author_is_emailed_when_the_run_ends(people, smtp_server):
    plan = {"steps": [{"id": 1, "tool": "price", "args": {"item": "Pixel 10"}, "depends_on": []}]}
    run = run_create(author=people["author"], goal_text="Price of a Pixel 10?", plan_data=plan)
    advance_run(run.pk)

    [sent] = delivered(smtp_server, 1)
    assert sent["envelope_to"] == ["alice@example.com"]
    assert sent["message"]["Subject"] == f"Run {run.pk} completed"
    assert "Price of a Pixel 10?" in sent["message"].get_body(("plain",)).get_content()


def test_an_author_who_turned_them_off_gets_no_run_emails(people, smtp_server):
    NotificationPreference.objects.create(user=people["author"], run_finished_emails=False)
    plan = {"steps": [{"id": 1, "tool": "price", "args": {"item": "Pixel 10"}, "depends_on": []}]}
    run = run_create(author=people["author"], goal_text="Price?", plan_data=plan)
    advance_run(run.pk)

    wait_until(
        lambda: Delivery.objects.filter(channel="email", status="skipped").exists(),
        timeout=20,
        what="the skipped email",
    )
    assert smtp_server.messages == []


def two_steps_waiting(people, mailbox) -> None:
    """A run of the author's with two steps waiting, and bob's email about them received."""
    run = run_create(
        author=people["author"],
        goal_text=HOSTILE_GOAL,
        plan_data=TWO_DESTRUCTIVE_STEPS_IN_ONE_ROUND,
    )
    advance_run(run.pk)
    delivered(mailbox, 1)  # bob's, at once


def test_the_daily_digest_lists_what_waits_for_those_who_chose_it(people, smtp_server):
    two_steps_waiting(people, smtp_server)

    call_command("send_approval_digest", verbosity=0)

    [digest] = smtp_server.to("dora@example.com")
    assert digest["message"]["Subject"] == "2 steps wait for your decision"
    assert "&lt;script&gt;" in digest["message"].get_body(("html",)).get_content()
    digest_text = digest["message"].get_body(("plain",)).get_content()
    assert digest_text.count("/approvals/by-email/") == 4  # approve and reject, for each step


def test_the_workers_sweep_sends_the_digest_without_cron_to_each_reader_alone(
    people, smtp_server, settings, django_user_model
):
    dan = django_user_model.objects.create_user("dan", email="dan@example.com")
    dan.user_permissions.add(Permission.objects.get(codename="decide_approval"))
    NotificationPreference.objects.create(user=dan, approval_emails="daily")
    two_steps_waiting(people, smtp_server)

    sweep_once()
    sweep_once()  # the period is claimed: nothing more

    def digests_received():
        readers = ("dora@example.com", "dan@example.com")
        received = [m for m in smtp_server.messages if m["envelope_to"][0] in readers]
        return received if len(received) >= 2 else None

    digests = wait_until(digests_received, timeout=20, every=0.05, what="the two digests")
    assert sorted(m["envelope_to"] for m in digests) == [["dan@example.com"], ["dora@example.com"]]
    for digest in digests:
        assert digest["message"]["Subject"] == "2 steps wait for your decision"
        assert digest["message"]["To"] in ("dan@example.com", "dora@example.com")
    assert Delivery.objects.filter(event_type="approval.digest").count() == 2


def test_reviewers_are_emailed_when_a_plan_waits_for_approval(people, smtp_server):
    plan = {"steps": [{"id": 1, "tool": "price", "args": {"item": "Pixel 10"}, "depends_on": []}]}
    run = run_create(
        author=people["author"],
        goal_text="Price of a Pixel 10?",
        plan_data=plan,
        require_plan_approval=True,
    )
    advance_run(run.pk)
    assert Run.objects.get(pk=run.pk).status == Run.Status.AWAITING_PLAN_APPROVAL

    [sent] = delivered(smtp_server, 1)
    assert sent["envelope_to"] == ["bob@example.com"]
    assert sent["message"]["Subject"] == f"Run {run.pk}: plan v1 waits for your decision"


def test_each_reviewer_gets_an_email_of_their_own_with_links_signed_for_them(
    people, smtp_server, django_user_model, client
):
    import re

    from plans.models import Approval
    from plans.services.decision_links import decision_link_read

    carol = django_user_model.objects.create_user("carol2", email="carol@example.com")
    carol.user_permissions.add(Permission.objects.get(codename="decide_approval"))
    run = run_create(
        author=people["author"],
        goal_text=HOSTILE_GOAL,
        plan_data=TWO_DESTRUCTIVE_STEPS_IN_ONE_ROUND,
    )
    advance_run(run.pk)

    sent = delivered(smtp_server, 2)
    assert sorted(m["envelope_to"] for m in sent) == [["bob@example.com"], ["carol@example.com"]]
    approvals = {a.step.step_id: a for a in Approval.objects.filter(run=run).select_related("step")}
    for message in sent:
        address = message["envelope_to"][0]
        assert message["message"]["To"] == address  # nobody sees who else was asked
        assert "Cc" not in message["message"] and "Bcc" not in message["message"]
        text = message["message"].get_body(("plain",)).get_content()
        links = re.findall(r"(Approve|Reject): \S+/approvals/by-email/([^/\s]+)/", text)
        assert [choice for choice, _ in links] == ["Approve", "Reject", "Approve", "Reject"]
        reader = django_user_model.objects.get(email=address)
        read = [decision_link_read(token) for _, token in links]
        assert {link.reviewer_id for link in read} == {reader.pk}
        assert [(link.approval_id, link.choice) for link in read] == [
            (approvals[2].pk, "approve"),
            (approvals[2].pk, "reject"),
            (approvals[3].pk, "approve"),
            (approvals[3].pk, "reject"),
        ]
        by_id = {a.pk: a for a in approvals.values()}
        assert all(link.args_sha256 == by_id[link.approval_id].args_sha256 for link in read)
    rows = Delivery.objects.filter(channel="email").order_by("pk")
    assert [row.recipients for row in rows] == [["bob@example.com"], ["carol@example.com"]]


def test_a_reviewers_email_queued_for_all_before_the_upgrade_goes_out_one_per_reviewer(
    people, smtp_server, settings
):
    import uuid

    from django.utils import timezone

    settings.AGENTSITE_NOTIFICATIONS = False  # the old row is made by hand, as it was queued
    run = run_create(
        author=people["author"], goal_text="Refund", plan_data=TWO_DESTRUCTIVE_STEPS_IN_ONE_ROUND
    )
    advance_run(run.pk)
    old = Delivery.objects.create(
        channel="email",
        event_id=uuid.uuid4(),
        event_type="approval.requested",
        run=run,
        payload={"email": "approval_round", "run": run.pk, "round": 2},
        dedupe_key=f"approval-round:{run.pk}:v1:r2",
        next_attempt_at=timezone.now(),
    )
    settings.AGENTSITE_NOTIFICATIONS = True
    from plans.notifications.dispatch import notifier

    notifier.wake()

    [sent] = delivered(smtp_server, 1)
    assert sent["envelope_to"] == ["bob@example.com"]
    old.refresh_from_db()
    assert old.status == "skipped" and old.recipients == ["bob@example.com"]
    [split] = Delivery.objects.exclude(pk=old.pk)
    assert split.payload["user"] == people["reviewer"].pk
    wait_until(
        lambda: Delivery.objects.filter(pk=split.pk, status="delivered").exists(),
        timeout=10,
        what="the split delivery recorded as delivered",
    )
