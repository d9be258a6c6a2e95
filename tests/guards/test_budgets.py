"""Spend limits before every model call: the author's daily cap and the shared rate limit."""

import contextlib
import json
from decimal import Decimal
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.utils import timezone

from plans.guards.budgets import rate_limit_wait
from plans.models import ModelCall, RateBucket, Run

pytestmark = pytest.mark.django_db(transaction=True)

PRICE_GOAL = "Total price of an iPhone 16 and AirPods 4 in INR"


@pytest.fixture
def priced_offline_model(settings):
    """The offline model, charged like a real one so spend adds up."""
    prices = dict(settings.AGENTSITE_MODEL_PRICES)
    prices["offline"] = {"input": 3.0, "output": 15.0, "cache_read": 0.3, "cache_write": 3.75}
    settings.AGENTSITE_MODEL_PRICES = prices
    settings.AGENTSITE_AUTHOR_DAILY_USD = 1.00


def run_goal(author="alice"):
    get_user_model().objects.get_or_create(username=author)
    out = StringIO()
    with contextlib.suppress(SystemExit):
        call_command("run_goal", PRICE_GOAL, "--json", "--author", author, stdout=out)
    return json.loads(out.getvalue())


def spent_earlier_today(username, usd):
    """An earlier run of this author that cost at least usd today, its calls recorded as any
    run's are (priced high for it, with no cap or run budget in its way)."""
    from django.conf import settings
    from django.test import override_settings

    from plans.guards.budgets import author_spent_today

    dear = dict.fromkeys(("input", "output", "cache_read", "cache_write"), 1000.0)
    prices = {**settings.AGENTSITE_MODEL_PRICES, "offline": dear}
    with override_settings(
        AGENTSITE_MODEL_PRICES=prices, AGENTSITE_AUTHOR_DAILY_USD=0, AGENTSITE_RUN_BUDGET_USD=100
    ):
        assert run_goal(username)["status"] == "completed"
    author = get_user_model().objects.get(username=username)
    assert author_spent_today(author.pk) >= Decimal(usd)


def test_an_author_over_the_daily_cap_is_stopped_before_the_next_model_call(
    priced_offline_model,
):
    spent_earlier_today("alice", "1.50")

    out = run_goal("alice")

    assert out["status"] == "budget_exhausted"
    assert "daily cap of $1.00" in out["error"] and "alice" in out["error"]
    assert out["model_calls"] == 0


def test_the_daily_cap_is_per_author(priced_offline_model):
    spent_earlier_today("alice", "1.50")

    out = run_goal("carol")

    assert out["status"] == "completed"
    assert out["cost_usd"] > 0


def test_the_rate_limit_waits_for_a_token_then_lets_the_call_through(settings):
    settings.AGENTSITE_MODEL_CALLS_PER_MINUTE = 60  # one a second
    settings.AGENTSITE_MODEL_CALLS_BURST = 1
    sleeps = []

    assert rate_limit_wait(sleep=sleeps.append) is None  # the burst token
    RateBucket.objects.update(tokens=0.5)
    assert (
        rate_limit_wait(sleep=lambda s: (sleeps.append(s), RateBucket.objects.update(tokens=1)))
        is None
    )

    assert len(sleeps) == 1 and 0 < sleeps[0] <= 1.0


def test_a_run_that_gets_no_call_within_its_patience_fails_with_a_clear_message(settings):
    settings.AGENTSITE_MODEL_CALLS_PER_MINUTE = 0.001
    settings.AGENTSITE_MODEL_CALLS_BURST = 1
    settings.AGENTSITE_RATE_LIMIT_PATIENCE_S = 1
    RateBucket.objects.create(name="model-calls", tokens=0, refilled_at=timezone.now())

    out = run_goal()

    assert out["status"] == "failed"
    assert "rate limit" in out["error"]
    assert Run.objects.get(pk=out["run_id"]).model_call_count == 0


def test_spent_today_sums_only_todays_calls_in_the_authors_runs(db):
    from datetime import timedelta

    from plans.guards.budgets import author_spent_today
    from plans.journal.rollup import model_calls_recorded
    from plans.services.runs import run_create

    users = get_user_model().objects
    alice, bob = users.create(username="alice-spend"), users.create(username="bob-spend")
    run_a = run_create(author=alice, goal_text="a")
    run_b = run_create(author=bob, goal_text="b")

    def recorded(run, usd, *, days_ago=0):
        """A model call recorded as the recorder records one: its row, then its rollup share."""
        call = ModelCall.objects.create(
            run=run, cost_usd=Decimal(usd), purpose="plan", model="m", prices={}, latency_ms=1
        )
        if days_ago:
            when = timezone.now() - timedelta(days=days_ago)
            ModelCall.objects.filter(pk=call.pk).update(created_at=when)
            call.refresh_from_db()
        model_calls_recorded(run.pk, [call])

    recorded(run_a, "0.25")
    recorded(run_a, "0.50")
    recorded(run_b, "9")
    recorded(run_a, "7", days_ago=1)

    assert author_spent_today(alice.pk) == Decimal("0.75")
    assert author_spent_today(bob.pk) == Decimal("9")
    assert author_spent_today(users.create(username="carol-spend").pk) == Decimal(0)


def test_the_daily_spend_is_read_from_the_rollup_not_from_every_call_of_the_author(db):
    """Before every model call: a lookup of today's few rollup rows, whatever the author's
    history (summing the calls walked every run the author ever had)."""
    from django.db import connection

    from plans.guards.budgets import _spent_on_sql

    sql = _spent_on_sql(connection.alias)
    assert "plans_modelcall" not in sql and "plans_run" not in sql
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}", ["2026-12-07", 1])
            plan = " ".join(str(row[-1]) for row in cursor.fetchall())
        assert "SEARCH plans_spendrollup USING INDEX" in plan, plan


def drive(run):
    """Advance a run until it ends, as the worker would."""
    from plans.runtime.advance import advance_run

    for _ in range(20):
        if advance_run(run.pk) != "busy":
            run.refresh_from_db()
            if run.is_terminal:
                return run
    raise AssertionError(f"run {run.pk} did not end: {run.status}")


@pytest.mark.parametrize(
    ("budget", "stored"),
    [
        ({"budget_usd": Decimal(0)}, ("budget_usd", Decimal(0))),
        ({"budget_usd": 0}, ("budget_usd", Decimal(0))),
        ({"budget_tokens": 0}, ("budget_tokens", 0)),
    ],
)
def test_a_zero_budget_is_kept_and_stops_the_run_before_its_first_model_call(
    priced_offline_model, budget, stored
):
    from django.contrib.auth import get_user_model

    from plans.services.runs import run_create

    author = get_user_model().objects.create(username="zero-budget")
    run = run_create(author=author, goal_text=PRICE_GOAL, **budget)
    field, value = stored
    assert getattr(Run.objects.get(pk=run.pk), field) == value

    run = drive(run)

    assert run.status == Run.Status.BUDGET_EXHAUSTED
    assert "budget" in run.error
    assert run.model_call_count == 0
    assert not ModelCall.objects.filter(run=run).exists()


def test_budgets_left_out_take_the_configured_defaults(db, settings):
    from django.contrib.auth import get_user_model

    from plans.services.runs import run_create

    settings.AGENTSITE_RUN_BUDGET_USD = 0.25
    settings.AGENTSITE_RUN_BUDGET_TOKENS = 1234
    author = get_user_model().objects.create(username="default-budget")
    run = run_create(author=author, goal_text="a", budget_usd=None, budget_tokens=None)

    run.refresh_from_db()
    assert run.budget_usd == Decimal("0.25")
    assert run.budget_tokens == 1234
