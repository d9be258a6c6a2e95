"""The evals page and the costs page in Chromium: experiments side by side, the judge's spend,
and a by-model table that fits its card."""

import json
from pathlib import Path

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.browser

CASES = Path(__file__).resolve().parents[2] / "plans" / "evals" / "cases" / "planner.json"

# A model call with every priced kind of usage and large counts, on a run of its own, kept in
# the rollup as the recorder keeps it (once per server).
PRICED_CALL = """
from decimal import Decimal
from django.contrib.auth.models import User
from plans.journal.rollup import model_calls_recorded
from plans.models import Goal, ModelCall, Run
NAME = "claude-sonnet-5-5-with-a-long-model-name"
if not ModelCall.objects.filter(model=NAME).exists():
    goal = Goal.objects.create(author=User.objects.get(username="operator"), text="priced")
    run = Run.objects.create(goal=goal, status="completed", budget_usd=Decimal(1),
                             budget_tokens=1)
    call = ModelCall(run=run, purpose="answer", model=NAME, input_tokens=123456,
                     output_tokens=65432, cache_read_tokens=9876543, cache_write_tokens=1234567,
                     cache_write_1h_tokens=765432, web_search_requests=12, prices={},
                     cost_usd=Decimal("0.1234"), latency_ms=10)
    call.save()
    model_calls_recorded(run.pk, [call])
"""

FITS = """() => {
  const table = document.querySelector("#by-model");
  const card = table.closest(".card");
  const scroller = table.closest(".table-scroll");
  return {table: table.scrollWidth, scroller: scroller.clientWidth,
          cardRight: card.getBoundingClientRect().right,
          tableRight: table.getBoundingClientRect().right,
          page: document.documentElement.clientWidth,
          pageScroll: document.documentElement.scrollWidth};
}"""


def test_two_experiments_side_by_side_and_the_judges_spend_on_the_costs_page(
    sign_in, manage, tmp_path, daphne_server, screenshot
):
    suite = json.loads(CASES.read_text(encoding="utf-8"))
    demo = [case for case in suite["cases"] if case["category"] == "demo"][:2]
    cases = tmp_path / "two.json"
    cases.write_text(json.dumps({**suite, "cases": demo}), encoding="utf-8")
    evaluated = manage(
        "eval_planner", "--model", "offline", "--cases", str(cases), "--compare", "--judge"
    )
    assert "PASS" in evaluated.stdout or "FAIL" in evaluated.stdout, evaluated.stderr

    operator = sign_in("operator")
    operator.goto(f"{daphne_server}/evals/")
    experiments = operator.locator("section[aria-labelledby=experiments-heading]")
    expect(experiments).to_contain_text("plan-and-execute")
    expect(experiments).to_contain_text("ReAct")
    comparison = operator.locator("#comparison")
    expect(comparison).to_contain_text("against")
    expect(comparison.locator("table.data").first).to_contain_text("Model calls")
    every_case = comparison.locator("details")
    every_case.locator("summary").click()
    expect(every_case.locator("code", has_text=demo[0]["id"])).to_be_visible()
    screenshot(operator, "evals_side_by_side")

    operator.goto(f"{daphne_server}/costs/")
    judge = operator.locator("#judge-spend")
    expect(judge).to_contain_text("Eval judge spend")
    expect(judge).to_contain_text("4 answers judged")  # two cases, by each of two agents


@pytest.mark.parametrize("width", [1440, 1024])
def test_the_by_model_table_fits_its_card(sign_in, manage, daphne_server, screenshot, width):
    recorded = manage("shell", "-c", PRICED_CALL)
    assert recorded.returncode == 0, recorded.stderr

    operator = sign_in("operator")
    operator.set_viewport_size({"width": width, "height": 1000})
    operator.goto(f"{daphne_server}/costs/")
    table = operator.locator("#by-model")
    expect(table).to_contain_text("765,432")  # cache writes kept for an hour
    expect(table).to_contain_text("12")  # web searches
    size = operator.evaluate(FITS)
    assert size["table"] <= size["scroller"], size  # no scrolling inside the card
    assert size["tableRight"] <= size["cardRight"] + 0.5, size
    assert size["pageScroll"] <= size["page"], size  # nor across the page
    screenshot(operator, f"costs_by_model_{width}")
