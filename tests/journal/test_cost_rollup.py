"""The costs rollup, kept by the recording services, equals the raw rows summed afresh."""

from __future__ import annotations

import math
import random
from datetime import UTC, timedelta
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db.models import Avg, Count, F, Q, Sum
from django.db.models.functions import TruncDate
from django.utils import timezone

from plans.journal.rollup import rollup_drift, rollup_rebuild, token_bucket
from plans.llm.offline import PRICE_GOAL, REFUND_GOAL
from plans.models import Approval, ModelCall, ReviewRollup, Run, ToolCall, ToolRollup
from plans.runtime.advance import advance_run
from plans.selectors.costs import cost_report
from plans.selectors.runs import start_of_day, uses_tool
from plans.services.approvals import approval_decide
from plans.services.runs import run_cancel, run_create

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def priced_offline_model(settings):
    """The offline model at Sonnet's prices: billed calls are on record at their estimate first."""
    prices = settings.AGENTSITE_MODEL_PRICES
    settings.AGENTSITE_MODEL_PRICES = {**prices, "offline": prices["claude-sonnet-5-5"]}


def report_from_raw_rows(days: int) -> dict:
    """The report's figures summed from the calls, decisions and runs themselves."""
    first_day = timezone.localdate() - timedelta(days=days - 1)
    since = start_of_day(first_day)
    calls = ModelCall.objects.filter(created_at__gte=since)
    daily = {
        row["day"]: (usd(row["cost"]), row["calls"])
        for row in calls.annotate(day=TruncDate("created_at"))
        .values("day")
        .annotate(cost=Sum("cost_usd"), calls=Count("id"))
    }
    runs = Run.objects.filter(created_at__gte=since)
    by_model = sorted(
        (r["model"], r["calls"], r["i"], r["o"], r["cr"], r["cw"], usd(r["cost"]))
        for r in calls.values("model").annotate(
            calls=Count("id"),
            i=Sum("input_tokens"),
            o=Sum("output_tokens"),
            cr=Sum("cache_read_tokens"),
            cw=Sum("cache_write_tokens"),
            cost=Sum("cost_usd"),
        )
    )
    created = dict(runs.values_list("goal__author__username").annotate(n=Count("id")).order_by())
    by_author = sorted(
        (r["author"], r["calls"], created.get(r["author"], 0), usd(r["cost"]))
        for r in calls.values(author=F("run__goal__author__username")).annotate(
            calls=Count("id"), cost=Sum("cost_usd")
        )
    )
    tools = ToolCall.objects.filter(started_at__gte=since)
    by_tool = sorted(
        (
            r["tool"],
            r["calls"],
            r["errors"],
            round(r["avg_ms"], 6),
            runs.filter(uses_tool(r["tool"])).count(),
            usd(runs.filter(uses_tool(r["tool"])).aggregate(c=Sum("cost_usd"))["c"]),
        )
        for r in tools.values("tool").annotate(
            calls=Count("id"), errors=Count("id", filter=~Q(error="")), avg_ms=Avg("duration_ms")
        )
    )
    totals = sorted(
        r.input_tokens + r.output_tokens + r.cache_read_tokens + r.cache_write_tokens
        for r in runs.filter(status=Run.Status.COMPLETED)
    )

    def percentile(fraction):
        return token_bucket(totals[max(1, math.ceil(fraction * len(totals))) - 1])

    decided = Approval.objects.filter(decided_at__gte=since, decision__in=["approved", "rejected"])
    return {
        "daily": daily,
        "by_model": by_model,
        "by_author": by_author,
        "by_tool": by_tool,
        "tokens": (
            len(totals),
            sum(totals) / len(totals) if totals else None,
            percentile(0.5) if totals else None,
            percentile(0.95) if totals else None,
        ),
        "rejections": (decided.filter(decision="rejected").count(), decided.count()),
        "exhaustion": (
            runs.filter(status=Run.Status.BUDGET_EXHAUSTED).count(),
            runs.filter(status__in=Run.TERMINAL).count(),
        ),
        "runs": runs.count(),
    }


def report_from_rollup(days: int) -> dict:
    report = cost_report(days=days)
    return {
        "daily": {r["day"]: (r["cost"], r["calls"]) for r in report.daily if r["calls"]},
        "by_model": sorted(
            (
                r["model"],
                r["calls"],
                r["input_tokens"],
                r["output_tokens"],
                r["cache_read_tokens"],
                r["cache_write_tokens"],
                r["cost"],
            )
            for r in report.by_model
        ),
        "by_author": sorted(
            (r["author"], r["calls"], r["runs"], r["cost"]) for r in report.by_author
        ),
        "by_tool": sorted(
            (r["tool"], r["calls"], r["errors"], round(r["avg_ms"], 6), r["runs"], r["runs_cost"])
            for r in report.by_tool
        ),
        "tokens": (report.tokens.runs, report.tokens.average, report.tokens.p50, report.tokens.p95),
        "rejections": (report.rejections.part, report.rejections.whole),
        "exhaustion": (report.budget_exhaustion.part, report.budget_exhaustion.whole),
        "runs": report.runs,
    }


def usd(value) -> Decimal:
    return Decimal(str(value or 0)).quantize(Decimal("0.00000001"))


def recorded_at_random(rng: random.Random, people: list) -> None:
    """Runs started, advanced, decided, cancelled and starved at random, all through the
    services and the worker's recorder."""
    authors, reviewer = people[:-1], people[-1]
    for _ in range(rng.randint(4, 8)):
        run = run_create(
            author=rng.choice(authors),
            goal_text=rng.choice([PRICE_GOAL, REFUND_GOAL, REFUND_GOAL]),
            budget_usd=rng.choice([None, None, None, None, 0.0001]),
        )
        if rng.random() < 0.15:
            run_cancel(run=run, user=run.goal.author)
        advance_run(run.pk)
        for approval in Approval.objects.filter(run=run, decision="pending"):
            if rng.random() < 0.7:
                approve = rng.random() < 0.6
                approval_decide(
                    approval=approval,
                    reviewer=reviewer,
                    approve=approve,
                    reason="" if approve else "not this one",
                    resume=False,
                )
                advance_run(run.pk)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_rollup_kept_by_the_services_equals_the_raw_rows_summed(
    seed, author, other_author, reviewer, settings
):
    # Customer e-mails approved by a rule as they are asked, refunds decided under a rule.
    settings.AGENTSITE_APPROVAL_RULE_MODULES = ["tests.rule_modules.review_mix"]
    recorded_at_random(random.Random(seed), [author, other_author, reviewer])
    refund = run_create(author=author, goal_text=REFUND_GOAL)
    advance_run(refund.pk)
    approval_decide(approval=Approval.objects.get(run=refund), reviewer=reviewer, approve=True)
    assert ModelCall.objects.exists() and ToolCall.objects.exists()
    by_rule = {(row.tool, row.rule): row for row in ReviewRollup.objects.all()}
    assert by_rule["send_email", "customer_emails_go_out"].auto >= 1
    assert by_rule["issue_refund", "refunds_need_a_reviewer"].approved >= 1

    for days in (7, 30):
        assert report_from_rollup(days) == report_from_raw_rows(days)
    assert rollup_drift() == []


def test_an_approval_gone_stale_stays_counted_as_approved_by_the_rebuild(
    author, reviewer, settings
):
    from tests import preview_tools

    settings.AGENTSITE_TOOL_MODULES = ["tests.preview_tools"]
    preview_tools.reset(widget=10)
    steps = [{"id": 1, "tool": "ship", "args": {"item": "widget", "quantity": 3}}]
    run = run_create(author=author, goal_text="ship", plan_data={"steps": steps})
    advance_run(run.pk)
    first = Approval.objects.get(run=run, decision="pending")
    approval_decide(approval=first, reviewer=reviewer, approve=True, resume=False)
    preview_tools.restock("widget", 5)  # its target changes before the call: asked again
    advance_run(run.pk)
    assert Approval.objects.get(pk=first.pk).decision == "stale"

    assert rollup_drift() == []


def test_the_check_names_a_drifted_bucket_and_the_rebuild_mends_it(author, reviewer, capsys):
    recorded_at_random(random.Random(7), [author, reviewer])
    call_command("cost_rollup", "--check")
    bucket = ToolRollup.objects.filter(calls__gt=0).first()
    ToolRollup.objects.filter(pk=bucket.pk).update(calls=F("calls") + 1)

    with pytest.raises(CommandError, match="1 rollup bucket"):
        call_command("cost_rollup", "--check")

    assert f"ToolRollup day={bucket.day} tool={bucket.tool}: calls" in capsys.readouterr().out
    call_command("cost_rollup", "--rebuild")
    call_command("cost_rollup", "--check")
    assert report_from_rollup(30) == report_from_raw_rows(30)


@pytest.mark.parametrize("zone", ["UTC", "Etc/GMT+12"])
def test_the_rebuild_sums_rows_loaded_without_the_services(zone, author, settings):
    settings.TIME_ZONE = zone
    run = run_create(author=author, goal_text=PRICE_GOAL)
    advance_run(run.pk)
    # 03:00 UTC: the day before in UTC-12.
    at = (timezone.now() - timedelta(days=3)).replace(hour=3, tzinfo=UTC)
    Run.objects.filter(pk=run.pk).update(created_at=at)
    ModelCall.objects.filter(run=run).update(created_at=at)
    assert rollup_drift() != []

    rollup_rebuild()

    assert rollup_drift() == []
    assert report_from_rollup(7) == report_from_raw_rows(7)


@pytest.mark.parametrize(
    ("tokens", "bucket"), [(0, 0), (99, 99), (100, 100), (1999, 1900), (123_456, 120_000)]
)
def test_token_buckets_round_down_to_two_significant_figures(tokens, bucket):
    assert token_bucket(tokens) == bucket


def test_tools_that_hang_time_out_fail_and_answer_late_are_summed_as_the_rows_say(author, settings):
    """Tools we did not write: one hangs past its limit and answers late, one fails for good,
    one succeeds; the rollup counts every call and error the rows hold, late answers included."""
    from tests import support_tools

    settings.AGENTSITE_TOOL_MODULES = ["tests.support_tools"]
    support_tools.hang_release.clear()
    steps = [
        {"id": 1, "tool": "hang", "args": {"label": "slow"}, "depends_on": []},
        {"id": 2, "tool": "bad_input", "args": {"text": "x"}, "depends_on": []},
        {"id": 3, "tool": "echo", "args": {"text": "fine"}, "depends_on": []},
    ]
    run = run_create(author=author, goal_text="tools misbehave", plan_data={"steps": steps})
    try:
        advance_run(run.pk)
    finally:
        support_tools.hang_release.set()

    calls = ToolCall.objects.filter(step__plan__run=run)
    assert calls.filter(error__contains="timed out").exists()
    assert rollup_drift() == []
    rolled = {row.tool: (row.calls, row.errors) for row in ToolRollup.objects.all()}
    assert rolled == {
        tool: (calls.filter(tool=tool).count(), calls.filter(tool=tool).exclude(error="").count())
        for tool in ("hang", "bad_input", "echo")
    }
    assert rolled["hang"][1] >= 1 and rolled["bad_input"][1] >= 1 and rolled["echo"][1] == 0


def test_the_rebuild_counts_a_wait_in_whole_seconds_as_the_services_do(author, reviewer):
    """SQLite's strftime rounds a fraction to milliseconds: 0.9996 s past a second must still
    count in that second, as wait_seconds() counts it."""
    from datetime import timedelta

    from plans.journal.rollup import wait_seconds
    from plans.models import ReviewWaitRollup
    from tests.services.test_approvals import start_refund

    approval = Approval.objects.get(run=start_refund(author))
    requested = approval.requested_at.replace(microsecond=0)
    decided = requested + timedelta(seconds=1, microseconds=999_900)
    Approval.objects.filter(pk=approval.pk).update(
        requested_at=requested, decided_at=decided, decision="approved", reviewer=reviewer
    )

    rollup_rebuild()

    waits = set(ReviewWaitRollup.objects.values_list("wait_s", flat=True))
    assert waits == {wait_seconds(requested, decided)} == {1}
