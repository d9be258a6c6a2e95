"""The decision bar says what approving does for the ticked steps: tools, amounts, recipients."""

import re

import pytest
from playwright.sync_api import expect

from plans.llm.offline import TRIP_GOAL

pytestmark = pytest.mark.browser


def test_the_decision_bar_summarises_the_ticked_steps_and_follows_the_ticks(
    sign_in, screenshot, ends_runs
):
    author = sign_in("author2")
    author.get_by_role("button", name=TRIP_GOAL).click()
    expect(author).to_have_url(re.compile(r"/runs/\d+/$"))
    run_id = re.search(r"/runs/(\d+)/", author.url).group(1)
    ends_runs(run_id)
    expect(author.locator("#run-status")).to_have_text("awaiting approval")

    reviewer = sign_in("reviewer")
    reviewer.get_by_role("link", name=re.compile("Approvals")).click()
    group = reviewer.locator(f"#group-{run_id}-3")
    summary = group.locator(".decision-summary")
    expect(summary).to_contain_text(re.compile(r"book_flight: INR [\d,]+ · passenger .+ → "))
    expect(summary).to_contain_text(re.compile(r"book_hotel: INR [\d,]+ · guest "))
    screenshot(reviewer, "inbox_decision_summary")

    group.locator('input[name="approval"]').first.uncheck()
    expect(summary.locator(".effect:visible")).to_have_count(1)
    expect(summary).not_to_contain_text("book_flight", use_inner_text=True)
    group.locator('input[name="approval"]').nth(1).uncheck()
    expect(summary.locator(".effects-none")).to_be_visible()
    group.locator('input[name="approval"]').first.check()
    expect(summary).to_contain_text("book_flight", use_inner_text=True)
