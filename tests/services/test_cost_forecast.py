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
