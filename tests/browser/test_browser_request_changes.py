"""A reviewer requests changes on a refund, then approves the replanned smaller refund."""

import re

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.browser

# An order of its own: the browser tests share one server and its refund ledger.
REFUND_GOAL = "Refund order A-1004 for a damaged item"
INSTRUCTIONS = "refund 500, not 21297"


def test_changes_requested_on_a_refund_lead_to_a_smaller_approved_refund(sign_in, screenshot):
    author = sign_in("author")
    author.get_by_label("Goal").fill(REFUND_GOAL)
    author.get_by_role("button", name="Plan", exact=True).click()
    expect(author).to_have_url(re.compile(r"/runs/\d+/$"))
    run_id = re.search(r"/runs/(\d+)/", author.url).group(1)
    expect(author.locator("#run-status")).to_have_text("awaiting approval")

    run_page = author.url
    inbox = run_page.rsplit("/runs/", 1)[0] + "/approvals/"
    reviewer = sign_in("reviewer")
    reviewer.goto(inbox)
    group = reviewer.locator(f"#group-{run_id}-2")
    expect(group).to_contain_text('"amount_inr": 21297')
    group.get_by_label("Reason").fill(INSTRUCTIONS)
    group.get_by_role("button", name="Request changes", exact=True).click()

    reviewer.goto(run_page)
    expect(reviewer.locator("#run-status")).to_have_text("awaiting plan approval")
    summary = reviewer.locator("#replan-summary")
    expect(summary).to_contain_text(INSTRUCTIONS)
    expect(summary.locator("#diff-2-step-2")).to_contain_text("500")
    screenshot(reviewer, "run_page_replanned_on_request")
    reviewer.get_by_role("button", name="Approve plan", exact=True).click()
    expect(reviewer.locator("#run-status")).to_have_text("awaiting approval")

    reviewer.goto(inbox)
    refund = reviewer.locator(f"#group-{run_id}-2")
    expect(refund).to_contain_text('"amount_inr": 500')
    refund.get_by_role("button", name="Approve", exact=True).click()
    expect(refund.locator(".decision-stamp")).to_have_text("approved by reviewer")
    reviewer.goto(run_page)
    expect(reviewer.locator("#step-row-3")).to_contain_text("awaiting")
    reviewer.goto(inbox)
    email = reviewer.locator(f"#group-{run_id}-3")
    email.get_by_role("button", name="Approve", exact=True).click()

    reviewer.goto(run_page)
    expect(reviewer.locator("#run-status")).to_have_text("completed")
    expect(reviewer.locator("#answer-text")).to_contain_text("500")

    reviewer.goto(run_page + "audit/")
    expect(reviewer.get_by_label("Plan version 1")).to_contain_text(INSTRUCTIONS)
    expect(reviewer.get_by_label("Plan version 2")).to_contain_text("Changes from version 1")
    screenshot(reviewer, "audit_after_request_changes")
