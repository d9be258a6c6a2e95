"""Review analytics: waiting by age, time to decide per tool, group and reviewer, and how
requests ended per tool and rule; read from the rollup the services keep (equal to a rebuild),
never from a scan of the approvals."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from plans.journal.rollup import rollup_drift, rollup_rebuild, token_bucket, wait_seconds
from plans.models import Approval, ReviewWaitRollup, Run
from plans.selectors.reviews import review_report
from plans.services.approvals import approval_decide, approvals_expire
from tests.reviewing import decider, refund_of_order_total, waiting_approval

pytestmark = pytest.mark.django_db(transaction=True)

REFUND = refund_of_order_total("damaged")


def waiting_refund(author, *, asked_ago: timedelta) -> Approval:
    approval = waiting_approval(author, REFUND, goal="Refund order A-1001")
    Approval.objects.filter(pk=approval.pk).update(requested_at=timezone.now() - asked_ago)
    return Approval.objects.select_related("run__goal__author", "step").get(pk=approval.pk)


@pytest.fixture
def team(reviewer, django_user_model):
    reviewers, finance = (
        Group.objects.create(name="reviewers"),
        Group.objects.create(name="finance"),
    )
    reviewer.groups.add(reviewers, finance)
    return {"bob": reviewer, "dave": decider(django_user_model, "dave", "reviewers")}


@pytest.fixture
def history(author, team, settings):
    """Three decisions by people (after 600 s, 3000 s and 7200 s), one expiry, one waiting."""
    bob, dave = team["bob"], team["dave"]
    approval_decide(
        approval=waiting_refund(author, asked_ago=timedelta(seconds=600)),
        reviewer=bob,
        approve=True,
    )
    approval_decide(
        approval=waiting_refund(author, asked_ago=timedelta(seconds=3000)),
        reviewer=bob,
        approve=False,
        reason="not this one",
    )
    approval_decide(
        approval=waiting_refund(author, asked_ago=timedelta(seconds=7200)),
        reviewer=dave,
        approve=True,
    )
    settings.AGENTSITE_APPROVAL_TTL_S = 3600
    waiting_refund(author, asked_ago=timedelta(hours=2))
    assert len(approvals_expire()) == 1
    waiting_refund(author, asked_ago=timedelta(hours=2))  # still waiting: made after the expiry


def times(report, dimension):
    return {t.key: (t.decisions, t.p50_s, t.p95_s) for t in report.decide_times[dimension]}


def test_time_to_decide_per_tool_group_and_reviewer(history):
    report = review_report(days=7)

    assert times(report, "tool") == {"issue_refund": (3, 3000, 7200)}
    assert times(report, "reviewer") == {"bob": (2, 600, 3000), "dave": (1, 7200, 7200)}
    assert times(report, "group") == {"reviewers": (3, 3000, 7200), "finance": (2, 600, 3000)}


def test_how_requests_ended_per_tool_and_rule(history):
    report = review_report(days=1)

    [refunds] = report.by_tool
    assert (refunds.key, refunds.approved, refunds.rejected, refunds.expired, refunds.auto) == (
        "issue_refund",
        2,
        1,
        1,
        0,
    )
    assert refunds.rates == {"approved": 0.5, "rejected": 0.25, "expired": 0.25, "auto": 0.0}
    [no_rule] = report.by_rule
    assert no_rule.key == "" and no_rule.settled == 4


def test_waiting_now_is_counted_by_age(history, author):
    waiting_refund(author, asked_ago=timedelta(days=4))
    report = review_report()

    assert dict(report.waiting) == {
        "under 1 hour": 0,
        "1 to 8 hours": 1,
        "8 to 24 hours": 0,
        "1 to 3 days": 0,
        "over 3 days": 1,
    }
    assert report.waiting_total == 2


def test_a_request_left_pending_on_a_run_that_ended_is_not_waiting(history, author):
    waiting_refund(author, asked_ago=timedelta(days=2))
    ended = waiting_refund(author, asked_ago=timedelta(days=2))
    Run.objects.filter(pk=ended.run_id).update(status=Run.Status.CANCELLED)

    report = review_report()

    assert dict(report.waiting)["1 to 3 days"] == 1
    assert report.waiting_total == 2


def test_the_kept_rollup_equals_a_rebuild_from_the_approvals(history):
    assert ReviewWaitRollup.objects.filter(dimension="group", key="finance").exists()
    assert rollup_drift() == []
    before = review_report(days=30)

    rollup_rebuild()

    after = review_report(days=30)
    assert (after.decide_times, after.by_tool, after.by_rule) == (
        before.decide_times,
        before.by_tool,
        before.by_rule,
    )


def test_waits_count_whole_seconds_as_sql_does():
    now = timezone.now().replace(microsecond=900_000)
    assert wait_seconds(now - timedelta(seconds=30, microseconds=800_000), now) == 30
    assert wait_seconds(now, now - timedelta(seconds=5)) == 0
    assert token_bucket(3001) == 3000


def sqlite_plan(sql: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN QUERY PLAN " + sql)
        return "\n".join(row[-1] for row in cursor.fetchall())


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's EXPLAIN QUERY PLAN")
def test_the_report_reads_the_rollup_and_the_waiting_index_never_a_scan(history):
    with CaptureQueriesContext(connection) as captured:
        review_report(days=30)
    queries = [q["sql"] for q in captured.captured_queries]
    on_approvals = [sql for sql in queries if "plans_approval" in sql]

    assert len(on_approvals) == 1  # what waits now; the rest is the rollup's
    for sql in queries:
        plan = sqlite_plan(sql)
        scans = [
            line
            for line in plan.splitlines()
            if re.search(r"\bSCAN (plans_(approval|run|step|goal)|auth_user)\b", line)
            and "INDEX" not in line
        ]
        assert scans == [], f"a scan of the raw rows:\n{sql}\n{plan}"
    # What waits now: from the live runs (searched in the status index, no ANALYZE needed) to
    # their pending requests (the index on run and decision), both read from the index alone:
    # no run's row per request.
    waiting = sqlite_plan(on_approvals[0])
    assert re.search(
        r"SEARCH plans_approval USING COVERING INDEX \w+ \(run_id=\? AND decision=\?", waiting
    ), waiting
    assert re.search(r"SEARCH \w+ USING COVERING INDEX \w+ \(status=\?\)", waiting), waiting
