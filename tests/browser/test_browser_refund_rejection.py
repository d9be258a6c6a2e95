"""Scenario C: a reviewer rejects a refund; the author's page shows it blocked and why."""

import re

import pytest
from playwright.sync_api import expect

from plans.llm.offline import REFUND_GOAL

pytestmark = pytest.mark.browser

REASON = "Already refunded by phone on Monday"


def test_a_rejected_refund_blocks_its_step_and_skips_the_email(sign_in, screenshot):
    reviewer = sign_in("reviewer")
    reviewer.get_by_role("link", name=re.compile("Approvals")).click()
    expect(reviewer.locator("#inbox-list")).to_contain_text("Nothing is waiting")
    reviewer.evaluate("window.__marker = 1")

    author = sign_in("author")
    author.get_by_label("Goal").fill(REFUND_GOAL)
    author.get_by_role("button", name="Plan", exact=True).click()
    expect(author).to_have_url(re.compile(r"/runs/\d+/$"))
    run_id = re.search(r"/runs/(\d+)/", author.url).group(1)
    author.evaluate("window.__marker = 1")
    expect(author.locator("#run-status")).to_have_text("awaiting approval")

    group = reviewer.locator(f"#group-{run_id}-2")  # the open inbox follows new requests
    expect(group).to_contain_text(REFUND_GOAL)
    assert reviewer.evaluate("window.__marker") == 1
    group.get_by_role("button", name="Reject", exact=True).click()
    expect(group.locator(".alert-error")).to_have_text("A reason is required to reject.")
    group.get_by_label("Reason").fill(REASON)
    group.get_by_role("button", name="Reject", exact=True).click()
    expect(group.locator(".decision-stamp")).to_have_text("rejected by reviewer")
    screenshot(reviewer, "inbox_after_rejection")

    expect(author.locator("#run-status")).to_have_text("blocked")
    expect(author.locator("#step-row-2")).to_contain_text("blocked")
    expect(author.locator("#step-row-3")).to_contain_text("skipped")
    expect(author.locator("#graph g#step-2")).to_have_class(re.compile(r"\bstatus-blocked\b"))
    expect(author.locator("#graph g#step-3")).to_have_class(re.compile(r"\bstatus-skipped\b"))
    expect(author.locator("#graph g#step-2")).to_contain_text("rejected by reviewer")
    expect(author.locator("#answer-text")).to_contain_text(REASON)
    assert author.evaluate("window.__marker") == 1
    screenshot(author, "run_page_blocked")
