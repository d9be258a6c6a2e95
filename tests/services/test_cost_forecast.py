"""A plan's cost forecast: stored with the plan, on the run, in the API, on the pages."""

from decimal import Decimal

import pytest

from plans.journal.rollup import rollup_rebuild
from plans.llm import Usage
from plans.llm.offline import PRICE_GOAL, TRIP_GOAL
from plans.llm.pricing import cost_usd, prices_for
from plans.models import ModelCall, Run, RunRollup
from plans.runtime.advance import advance_run
from plans.selectors.plans import plan_current
from plans.services.plans import plan_decide
from plans.services.runs import run_create

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def priced_offline_model(settings):
    # The offline model is free; priced like Sonnet, its forecasts and costs are not all 0.
    prices = settings.AGENTSITE_MODEL_PRICES
    settings.AGENTSITE_MODEL_PRICES = {**prices, "offline": prices["claude-sonnet-5-5"]}


def held_run(author, goal=PRICE_GOAL):
    run = run_create(author=author, goal_text=goal, require_plan_approval=True)
    advance_run(run.pk)
    return Run.objects.get(pk=run.pk)


def finished_run(author, reviewer, goal=PRICE_GOAL):
    run = held_run(author, goal)
    plan_decide(plan=plan_current(run), reviewer=reviewer, approve=True)
    return Run.objects.get(pk=run.pk)


def test_a_plan_awaiting_approval_carries_its_forecast_with_no_history(author):
    run = held_run(author)
    forecast = plan_current(run).forecast

    assert run.status == Run.Status.AWAITING_PLAN_APPROVAL
    assert forecast["basis"] == "default" and forecast["samples"] == 0
    plan_calls = ModelCall.objects.filter(run=run)
    assert Decimal(forecast["spent_usd"]) == sum(c.cost_usd for c in plan_calls) > 0
    answer = cost_usd(Usage(**forecast["answer_tokens"]), prices_for("offline"))
    assert Decimal(forecast["answer_usd"]) == answer
    assert run.forecast_usd == Decimal(forecast["spent_usd"]) + answer
    assert forecast["tools_undeclared"] == ["price", "calculator"]
    assert run.forecast_tools_usd == 0


def test_the_answer_tokens_are_the_median_of_past_runs_with_the_same_tools(author, reviewer):
    answers = []
    for _ in range(3):
        done = finished_run(author, reviewer)
        assert done.status == Run.Status.COMPLETED
        answers.append(ModelCall.objects.get(run=done, purpose="answer").output_tokens)

    forecast = plan_current(held_run(author)).forecast

    assert (forecast["basis"], forecast["samples"]) == ("same tools", 3)
    assert forecast["answer_tokens"]["output_tokens"] == sorted(answers)[1]


def test_other_tools_fall_back_to_all_runs_and_declared_tool_costs_are_added(author, reviewer):
    finished_run(author, reviewer)  # a price run: not the trip's tools

    run = held_run(author, TRIP_GOAL)
    forecast = plan_current(run).forecast

    assert (forecast["basis"], forecast["samples"]) == ("all runs", 1)
    flights = plan_current(run).steps.filter(tool="flight_price").count()
    assert flights >= 1
    assert Decimal(forecast["tools_usd"]) == Decimal("0.002") * flights
    assert run.forecast_tools_usd == Decimal("0.002") * flights
    assert "flight_price" not in forecast["tools_undeclared"]


def test_an_unpriced_answer_model_gives_a_forecast_without_an_answer_price(settings):
    from plans import engine
    from plans.services.forecasts import plan_forecast
    from plans.tools import get_registry

    prices = settings.AGENTSITE_MODEL_PRICES
    settings.AGENTSITE_MODEL_PRICES = {k: v for k, v in prices.items() if k != "offline"}
    plan = engine.Plan(steps=(engine.PlanStep(id=1, tool="price", args={}, depends_on=()),))

    forecast = plan_forecast(plan=plan, registry=get_registry(), spent_usd=Decimal("0.01"))

    assert forecast["answer_usd"] is None and forecast["model_usd"] is None
    assert "no prices configured for model 'offline'" in forecast["problem"]
    assert forecast["spent_usd"] == "0.01"


def test_the_forecast_sits_beside_the_actual_cost_in_the_rollup_and_the_rebuild(author, reviewer):
    done = finished_run(author, reviewer)
    held_run(author)  # not finished: not in forecast vs actual yet

    kept = RunRollup.objects.get()
    assert kept.forecasted == 1
    assert kept.forecast_usd == done.forecast_usd
    assert kept.forecast_actual_usd == done.cost_usd
    rollup_rebuild()
    rebuilt = RunRollup.objects.get()
    assert (rebuilt.forecasted, rebuilt.forecast_usd, rebuilt.forecast_actual_usd) == (
        kept.forecasted,
        kept.forecast_usd,
        kept.forecast_actual_usd,
    )


def test_the_history_is_the_latest_finished_answers_of_completed_runs_with_that_model(
    author, monkeypatch
):
    from plans.selectors import forecasts
    from plans.selectors.forecasts import answer_history

    monkeypatch.setattr(forecasts, "HISTORY_LIMIT", 3)
    forecasts._history_statement.cache_clear()  # the limit is in the statement
    done = run_create(author=author, goal_text="done")
    Run.objects.filter(pk=done.pk).update(status=Run.Status.COMPLETED, tools_used=["price"])
    failed = run_create(author=author, goal_text="failed")
    Run.objects.filter(pk=failed.pk).update(status=Run.Status.FAILED, tools_used=["price"])
    common = {"prices": {}, "latency_ms": 1, "model": "m", "cost_usd": Decimal(0)}

    def call(run, output_tokens, **fields):
        values = {"purpose": "answer", "state": "finished", "error": "", **common, **fields}
        ModelCall.objects.create(run=run, output_tokens=output_tokens, **values)

    call(done, 1)  # the oldest of four that count: past the limit of 3
    for tokens in (2, 3):
        call(done, tokens)
    call(done, 90, purpose="plan")
    call(done, 91, state="started")
    call(done, 92, error="overloaded")
    call(done, 93, model="other")
    call(failed, 94)
    call(done, 4)
    try:
        history = answer_history(model="m")
    finally:
        forecasts._history_statement.cache_clear()

    assert [sample.tokens["output_tokens"] for sample in history] == [4, 3, 2]
    assert {sample.tools for sample in history} == {frozenset({"price"})}
    assert answer_history(model="nobody") == []
