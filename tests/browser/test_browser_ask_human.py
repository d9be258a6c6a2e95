"""A run asks its author a question (ask_human); the answer is the refund's amount."""

import re

import pytest
from playwright.sync_api import expect

from plans.llm.offline import CONFIRMED_REFUND_GOAL

pytestmark = pytest.mark.browser


def test_the_author_answers_the_runs_question_and_the_run_finishes_using_the_answer(
    sign_in, screenshot
):
    author = sign_in("author")
    author.get_by_label("Goal").fill(CONFIRMED_REFUND_GOAL)
    author.get_by_role("button", name="Plan", exact=True).click()
    expect(author).to_have_url(re.compile(r"/runs/\d+/$"))
    run_id = re.search(r"/runs/(\d+)/", author.url).group(1)
    run_page = author.url
    expect(author.locator("#run-status")).to_have_text("waiting for an answer")

    author.get_by_role("link", name=re.compile("Approvals")).first.click()
    card = author.locator(".question-card").filter(has_text=f"Run #{run_id}")
    expect(card).to_contain_text("Order A-1002 totals INR 92800. How many rupees")
    screenshot(author, "inbox_question")
    card.get_by_label(re.compile("Your answer")).fill("500")
    card.get_by_role("button", name="Answer", exact=True).click()
    expect(author.locator(".messages")).to_contain_text(f"Answered step 2 of run #{run_id}")

    reviewer = sign_in("reviewer")
    reviewer.get_by_role("link", name=re.compile("Approvals")).first.click()
    refund = reviewer.locator(f"#group-{run_id}-3")
    expect(refund).to_contain_text('"amount_inr": 500')
    author.goto(run_page)
    refund.get_by_role("button", name="Approve", exact=True).click()
    expect(refund.locator(".decision-stamp")).to_have_text("approved by reviewer")
    expect(author.locator("#step-row-4")).to_contain_text("awaiting")
    reviewer.reload()
    email = reviewer.locator(f"#group-{run_id}-4")
    expect(email).to_contain_text("We refunded INR 500 for order A-1002")
    email.get_by_role("button", name="Approve", exact=True).click()

    expect(author.locator("#run-status")).to_have_text("completed")
    expect(author.locator("#answer-text")).to_contain_text("INR 500")
    expect(author.locator("#step-row-2")).to_contain_text("500")
    screenshot(author, "run_page_answered_question")
