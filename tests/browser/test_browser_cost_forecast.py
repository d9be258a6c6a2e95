"""A reviewer sees a trip's cost forecast before approving its plan, and after the run the
forecast beside the actual cost, on the run page and on the costs page."""

import re

import pytest
from playwright.sync_api import expect

from plans.llm.offline import TRIP_GOAL

pytestmark = pytest.mark.browser


def test_the_forecast_is_shown_at_plan_approval_and_beside_the_actual_cost(
    sign_in, screenshot, daphne_server
):
    author = sign_in("author")
    author.get_by_label("Goal").fill(TRIP_GOAL)
    author.get_by_label("A reviewer approves the whole plan before any step runs").check()
    author.get_by_role("button", name="Plan", exact=True).click()
    expect(author).to_have_url(re.compile(r"/runs/\d+/$"))
    run_id = re.search(r"/runs/(\d+)/", author.url).group(1)
    run_page = author.url

    reviewer = sign_in("reviewer")
    reviewer.goto(run_page)
    expect(reviewer.locator("#run-status")).to_have_text("awaiting plan approval")
    forecast = reviewer.locator(".plan-decision #plan-forecast")
    expect(forecast).to_contain_text("Forecast cost:")
    # flight_price declares $0.002 a call; the trip's plan makes one.
    expect(forecast.locator("#forecast-tools-usd")).to_have_text("$0.002")
    expect(forecast.locator("#forecast-basis")).to_contain_text(re.compile("median|default"))
    expect(forecast).to_contain_text("No declared cost: hotel_price")
    screenshot(reviewer, "plan_approval_forecast")
    reviewer.get_by_role("button", name="Approve plan", exact=True).click()
    expect(reviewer.locator("#run-status")).to_have_text("awaiting approval")

    reviewer.goto(run_page.rsplit("/runs/", 1)[0] + "/approvals/")
    bookings = reviewer.locator(f"#group-{run_id}-3")
    bookings.get_by_role("button", name="Approve", exact=True).click()
    expect(bookings.locator(".decision-stamp.stamp-approved")).to_have_count(2)

    reviewer.goto(run_page)
    expect(reviewer.locator("#run-status")).to_have_text("completed")
    totals = reviewer.locator("#run-totals #totals-forecast")
    expect(totals).to_contain_text("Forecast")
    expect(totals).to_contain_text("+ $0.002 tools' declared costs")
    screenshot(reviewer, "run_totals_forecast", full_page=False)

    operator = sign_in("operator")
    operator.goto(f"{daphne_server}/costs/")
    table = operator.locator("table#forecasts")
    expect(table.locator("tr.total")).to_contain_text("All 30 days")
    expect(table.locator("tr.total td.forecast")).to_have_text(re.compile(r"^\$\d"))
    expect(table.locator("tr.total td.actual")).to_have_text(re.compile(r"^\$\d"))
    screenshot(operator, "costs_forecast_vs_actual")
