"""The forecast where people decide and look back: the plan approval header, the run's totals,
the costs page and the API."""

from decimal import Decimal

import pytest
from django.test import Client

from plans.api.tokens import token_create
from plans.llm.offline import TRIP_GOAL
from plans.models import Run
from plans.roles import roles_ensure
from plans.runtime.advance import advance_run
from plans.selectors.plans import plan_current
from plans.services.plans import plan_decide
from plans.services.runs import run_create

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def priced_offline_model(settings):
    prices = settings.AGENTSITE_MODEL_PRICES
    settings.AGENTSITE_MODEL_PRICES = {**prices, "offline": prices["claude-sonnet-5-5"]}


@pytest.fixture
def reviewer(reviewer):
    reviewer.groups.add(roles_ensure()["reviewers"])
    return type(reviewer).objects.get(pk=reviewer.pk)


def held_run(author, goal=TRIP_GOAL):
    run = run_create(author=author, goal_text=goal, require_plan_approval=True)
    advance_run(run.pk)
    return Run.objects.get(pk=run.pk)


def test_the_plan_approval_header_shows_the_forecast_and_its_basis(client, author, reviewer):
    run = held_run(author)
    client.force_login(reviewer)

    page = client.get(f"/runs/{run.pk}/").content.decode()

    header = page[page.index('class="run-callout plan-decision"') :]
    header = header[: header.index("</form>")]
    assert 'id="plan-forecast"' in header
    assert f'data-forecast-usd="{plan_current(run).forecast["model_usd"]}"' in header
    assert "$0.002</span></span> in the tools' declared costs" in header
    assert "a default guess: no completed run has an answer on record yet" in header
    assert "No declared cost: hotel_price, calculator, book_flight, book_hotel" in header


def test_after_the_run_the_forecast_sits_beside_the_cost_with_its_error(client, author, reviewer):
    run = held_run(author, "Total price of an iPhone 16 and AirPods 4 in INR")
    plan_decide(plan=plan_current(run), reviewer=reviewer, approve=True)
    run.refresh_from_db()
    assert run.status == Run.Status.COMPLETED
    client.force_login(reviewer)

    page = client.get(f"/runs/{run.pk}/").content.decode()

    totals = page[page.index('id="run-totals"') :]
    totals = totals[: totals.index("</dl>")]
    assert 'id="totals-forecast"' in totals
    error = (run.forecast_usd - run.cost_usd) / run.cost_usd
    word = "over" if error > 0 else "under"
    assert f"{abs(float(error)) * 100:.1f}% {word}" in totals


def test_the_costs_page_sets_each_days_forecast_beside_the_actual(
    client, author, reviewer, operator
):
    run = held_run(author, "Total price of an iPhone 16 and AirPods 4 in INR")
    plan_decide(plan=plan_current(run), reviewer=reviewer, approve=True)
    run.refresh_from_db()
    client.force_login(operator)

    page = client.get("/costs/").content.decode()

    table = page[page.index('id="forecasts"') :]
    table = table[: table.index("</table>")]
    assert f"${run.forecast_usd:.6f}" in table
    assert f"${run.cost_usd:.6f}" in table
    assert "All 30 days" in table


def test_the_api_shows_the_forecast_on_the_plan_version_and_the_run(author, reviewer):
    run = held_run(author)
    _, raw = token_create(user=reviewer, name="ci", roles=["reviewers"])

    body = (
        Client().get(f"/api/v1/runs/{run.pk}/", headers={"Authorization": f"Bearer {raw}"}).json()
    )

    forecast = body["plan_versions"][0]["forecast"]
    assert forecast == plan_current(run).forecast
    assert Decimal(body["forecast_usd"]) == run.forecast_usd
    assert Decimal(body["forecast_tools_usd"]) == Decimal(forecast["tools_usd"]) > 0
