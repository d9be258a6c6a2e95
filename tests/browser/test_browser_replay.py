"""An operator replays a waiting refund run from its page and reads the stored diff."""

import re

import pytest
from playwright.sync_api import expect

from plans.llm.offline import REFUND_GOAL

pytestmark = pytest.mark.browser


def test_an_operator_replays_a_run_and_sees_the_unrecorded_refund(sign_in, screenshot):
    author = sign_in("author")
    author.get_by_label("Goal").fill(REFUND_GOAL)
    author.get_by_role("button", name="Plan", exact=True).click()
    expect(author).to_have_url(re.compile(r"/runs/\d+/$"))
    expect(author.locator("#run-status")).to_have_text("awaiting approval")
    run_url = author.url

    operator = sign_in("operator")
    operator.goto(run_url)
    operator.get_by_role("link", name="Replay", exact=True).click()
    expect(operator.get_by_role("heading", name="Replays", exact=True)).to_be_visible()
    form = operator.get_by_role("form", name="Replay this run")
    expect(form.get_by_label("Model")).to_have_value("offline")  # the configured model
    form.get_by_label("Model").select_option("offline")
    expect(form.get_by_label("Prompts")).to_contain_text("this checkout's")
    screenshot(operator, "replay_form", full_page=False)
    form.get_by_role("button", name="Replay", exact=True).click()

    expect(operator).to_have_url(re.compile(r"/replays/\d+/$"))
    expect(operator.locator(".replay-not-recorded")).to_have_text(
        re.compile(r"step 2 issue_refund: not recorded")
    )
    expect(operator.locator(".replay-plan")).to_contain_text("order_total")
    expect(operator.locator(".replay-plan")).to_contain_text("recorded")
    screenshot(operator, "replay_diff")
    # The run itself is untouched: it still waits for the refund's approval.
    author.reload()
    expect(author.locator("#run-status")).to_have_text("awaiting approval")
