"""manage.py policy_check and policy_replay: the rule modules validated, and replayed on the
approvals of the last days."""

from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.auth.models import Group
from django.core.management import CommandError, call_command
from django.utils import timezone

from plans.engine import args_sha256
from plans.models import Approval, Step
from plans.services.runs import run_create

pytestmark = pytest.mark.django_db

DEMO = "plans.demo.approval_rules"


def run_command(name, *args):
    out, err = StringIO(), StringIO()
    call_command(name, *args, stdout=out, stderr=err)
    return out.getvalue() + err.getvalue()


def test_policy_check_lists_the_rules_in_the_order_they_are_tried():
    Group.objects.create(name="finance")

    out = run_command("policy_check", "--rules", DEMO)

    lines = [line for line in out.splitlines() if line[:2] in ("1.", "2.", "3.", "4.")]
    assert [line.split()[1] for line in lines] == [
        "huge_refund",
        "small_refund_on_delivered_order",
        "large_refund_needs_two_reviewers",
        "refund_before_delivery_goes_to_finance",
    ]
    assert "issue_refund -> approve automatically" in out
    assert "4 rule(s) in 1 module(s): OK" in out


def test_policy_check_fails_naming_a_group_that_does_not_exist():
    with pytest.raises(CommandError, match="problem"):
        call_command("policy_check", "--rules", DEMO, stdout=StringIO(), stderr=(err := StringIO()))
    assert "names group 'finance', which does not exist" in err.getvalue()


def test_policy_check_fails_naming_a_tool_that_is_not_registered():
    err = StringIO()
    with pytest.raises(CommandError, match="1 problem"):
        call_command(
            "policy_check",
            "--rules",
            "tests.rule_modules.unknown_tool",
            stdout=StringIO(),
            stderr=err,
        )
    assert "names tool 'issue_refnud', not registered" in err.getvalue()


def test_policy_check_refuses_a_module_that_cannot_be_imported():
    with pytest.raises(CommandError, match=r"cannot import 'tests\.rule_modules\.nope'"):
        call_command("policy_check", "--rules", "tests.rule_modules.nope", stdout=StringIO())


def test_policy_check_refuses_a_module_without_rules():
    with pytest.raises(CommandError, match="defines no rule"):
        call_command("policy_check", "--rules", "tests.rule_modules", stdout=StringIO())


def past_approval(author, *, amount, order_id="A-1001", decision, reviewer=None, days_ago=1):
    args = {"order_id": order_id, "amount_inr": amount, "reason": "r"}
    plan = {"steps": [{"id": 1, "tool": "issue_refund", "args": args, "depends_on": []}]}
    run = run_create(author=author, goal_text="refund", plan_data=plan)
    step = Step.objects.get(plan__run=run)
    approval = Approval.objects.create(
        run=run,
        step=step,
        tool="issue_refund",
        requested_args=args,
        args=args,
        args_sha256=args_sha256("issue_refund", args),
        decision=decision,
        reviewer=reviewer,
        via="web" if reviewer else "ttl",
        reason="" if decision == "approved" else "customer kept the item",
    )
    Approval.objects.filter(pk=approval.pk).update(
        requested_at=timezone.now() - timedelta(days=days_ago)
    )
    return approval


def test_policy_replay_counts_per_rule_and_lists_what_a_rule_would_approve_a_person_rejected(
    author, reviewer
):
    rejected = past_approval(author, amount=900, decision="rejected", reviewer=reviewer)
    past_approval(author, amount=800, decision="approved", reviewer=reviewer)
    past_approval(author, amount=60_000, order_id="A-1002", decision="approved", reviewer=reviewer)
    past_approval(author, amount=600_000, order_id="A-1002", decision="approved", reviewer=reviewer)
    past_approval(author, amount=2_000, decision="expired")
    past_approval(author, amount=700, decision="rejected", reviewer=reviewer, days_ago=40)

    out = run_command("policy_replay", "--days", "30", "--rules", DEMO)

    assert "5 approval(s) asked in the last 30 day(s)" in out
    assert (
        "small_refund_on_delivered_order: 2 matched -> approve automatically; 1 decided otherwise"
        in out
    )
    assert "large_refund_needs_two_reviewers: 1 matched" in out
    assert "huge_refund: 1 matched" in out
    assert "(no rule): 1 matched" in out
    assert "Would have approved automatically what a person rejected: 1" in out
    assert f"approval {rejected.pk} (run {rejected.run_id}) issue_refund" in out
    assert "rejected by bob: customer kept the item" in out
    assert "Would have denied what a person approved: 1" in out


def test_policy_replay_refuses_days_below_one():
    with pytest.raises(CommandError, match="--days must be 1 or more"):
        call_command("policy_replay", "--days", "0", "--rules", DEMO, stdout=StringIO())


def test_policy_replay_counts_every_case_and_says_how_many_it_lists(author, reviewer):
    for amount in (600_000, 700_000, 800_000):
        past_approval(
            author, amount=amount, order_id="A-1002", decision="approved", reviewer=reviewer
        )

    out = run_command("policy_replay", "--days", "30", "--rules", DEMO, "--listed", "2")

    assert "Would have denied what a person approved: 3 (the first 2 listed)" in out
    assert out.count("rule huge_refund; approved by bob") == 2


def test_a_replay_reads_in_the_same_few_queries_however_many_authors_and_tools(
    django_user_model, reviewer
):
    """No query per author (their groups) or per row (reviewers, reasons): at a million runs
    the replay streams one read; calls of tools no rule names are only counted."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from plans.guards.approval_rules import rules_load, rules_replay

    rules = rules_load([DEMO])
    since = timezone.now() - timedelta(days=30)
    first = django_user_model.objects.create_user("first-author")
    past_approval(first, amount=900, decision="rejected", reviewer=reviewer)
    with CaptureQueriesContext(connection) as one_author:
        rules_replay(rules, since=since)
    for number in range(4):
        author = django_user_model.objects.create_user(f"author-{number}")
        author.groups.add(Group.objects.get_or_create(name=f"team-{number}")[0])
        past_approval(author, amount=900, decision="rejected", reviewer=reviewer)
        email = past_approval(author, amount=800, decision="approved", reviewer=reviewer)
        Approval.objects.filter(pk=email.pk).update(tool="send_email")

    with CaptureQueriesContext(connection) as five_authors:
        replay = rules_replay(rules, since=since)

    assert len(five_authors) == len(one_author) <= 5
    assert replay.approvals == 9
    assert replay.tallies[""].matched == 4  # the e-mails: no rule names send_email
    assert replay.tallies["small_refund_on_delivered_order"].matched == 5
    assert replay.approve_rejected_count == 5
    assert {case.decided for case in replay.approve_rejected} == {"rejected by bob"}
    assert {case.reason for case in replay.approve_rejected} == {"customer kept the item"}
