"""Scenario A: an author plans the price goal and watches it finish, graph and answer live."""

import re

import pytest
from playwright.sync_api import expect

from plans.llm.offline import PRICE_GOAL

pytestmark = pytest.mark.browser


def test_an_author_plans_a_goal_and_sees_the_graph_and_the_answer(sign_in, screenshot):
    page = sign_in("author")
    expect(page.get_by_role("button", name=PRICE_GOAL)).to_be_visible()  # offline suggestions
    screenshot(page, "new_goal")

    page.get_by_label("Goal").fill(PRICE_GOAL)
    page.get_by_role("button", name="Plan", exact=True).click()

    expect(page).to_have_url(re.compile(r"/runs/\d+/$"))
    expect(page.locator("#graph svg g.node")).to_have_count(3)
    expect(page.locator("#run-status")).to_have_text("completed")
    expect(page.locator("#answer-text")).to_contain_text("92800")
    expect(page.locator("#step-row-3")).to_contain_text("92800")

    page.locator("#graph g#step-3").click()  # run.js opens the step in the side panel
    expect(page.locator("#step-panel")).to_contain_text("Step 3")
    expect(page.locator("#step-panel")).to_contain_text("79900+12900")
    screenshot(page, "run_page")


def test_a_rejected_goal_is_explained_and_kept_in_the_box(sign_in):
    page = sign_in("author")

    page.get_by_label("Goal").fill("   ")
    page.get_by_label("Goal").evaluate("box => box.removeAttribute('required')")
    page.get_by_role("button", name="Plan", exact=True).click()

    expect(page.locator("#goal-error")).to_contain_text("The goal is empty")
    expect(page).to_have_url(re.compile(r"/$"))
