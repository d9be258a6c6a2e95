"""A refund's e-mail quotes the refund's reference, picked out of its result by {{2.reference}}."""

import re

import pytest
from playwright.sync_api import expect

from plans.llm.offline import REFUND_GOAL

pytestmark = pytest.mark.browser


def test_the_refund_email_the_reviewer_approves_reads_reference_rf(sign_in, screenshot):
    author = sign_in("author")
    author.get_by_label("Goal").fill(REFUND_GOAL)
    author.get_by_role("button", name="Plan", exact=True).click()
    expect(author).to_have_url(re.compile(r"/runs/\d+/$"))
    run_id = re.search(r"/runs/(\d+)/", author.url).group(1)
    expect(author.locator("#run-status")).to_have_text("awaiting approval")

    reviewer = sign_in("reviewer")
    reviewer.get_by_role("link", name=re.compile("Approvals")).click()
    refund = reviewer.locator(f"#group-{run_id}-2")
    expect(refund).to_contain_text("issue_refund")
    refund.get_by_role("button", name="Approve", exact=True).click()
    expect(refund.locator(".decision-stamp.stamp-approved")).to_have_count(1)

    email = reviewer.locator(f"#group-{run_id}-3")
    expect(email).to_contain_text("send_email")
    # The body ends with the reference itself, not the whole refund result as JSON.
    expect(email).to_contain_text(re.compile(r'Reference: RF-[0-9A-F]{10}"'))
    screenshot(reviewer, "inbox_refund_email")
    email.get_by_role("button", name="Approve", exact=True).click()
    expect(email.locator(".decision-stamp.stamp-approved")).to_have_count(1)

    expect(author.locator("#run-status")).to_have_text("completed")
    expect(author.locator("#graph g#step-2")).to_contain_text("approved by reviewer")
    expect(author.locator("#graph g#step-2")).not_to_contain_text("needs approval")
    expect(author.locator("#step-row-3")).to_contain_text(
        re.compile(r"Reference: RF-[0-9A-F]{10}\b")
    )
    screenshot(author, "run_page_refund_emailed")
