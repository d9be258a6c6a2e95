"""Deciding from the e-mail, end to end: the server mails the reviewer (a real SMTP server on
loopback receives it), the test reads the link out of the message, and Chromium opens it,
signs in, sees the exact arguments and approves. The link then refuses a second use, and
refuses another signed-in user."""

import re

import pytest
from playwright.sync_api import expect

from plans.llm.offline import REFUND_GOAL
from tests.browser.conftest import PASSWORDS

pytestmark = pytest.mark.browser

ADDRESS = "reviewer-demo@example.test"
VIA = """
from plans.models import Approval
a = Approval.objects.get(run_id={run_id}, tool="issue_refund")
print(a.decision, a.via, a.reviewer.username)
"""


def test_a_reviewer_approves_from_the_email_and_the_link_then_refuses_reuse_and_others(
    sign_in, open_page, manage, mail_sink, screenshot, ends_runs
):
    reviewer = sign_in("reviewer")
    reviewer.get_by_role("link", name="Settings").click()
    reviewer.get_by_label("Your email address").fill(ADDRESS)
    reviewer.get_by_label("Emails when steps or plans wait for your decision").select_option(
        "each_round"
    )
    reviewer.get_by_role("button", name="Save").click()
    expect(reviewer.get_by_text("Email settings saved.")).to_be_visible()
    reviewer.context.close()

    author = sign_in("author")
    author.get_by_label("Goal").fill(REFUND_GOAL)
    author.get_by_role("button", name="Plan", exact=True).click()
    expect(author).to_have_url(re.compile(r"/runs/\d+/$"))
    run_id = re.search(r"/runs/(\d+)/", author.url).group(1)
    ends_runs(run_id)
    expect(author.locator("#run-status")).to_have_text("awaiting approval")

    email = mail_sink.wait_for(
        lambda m: m["To"] == ADDRESS and m["Subject"].startswith(f"Run {run_id}: ")
    )
    assert "issue_refund" in email["Subject"]
    text = email.get_body(preferencelist=("plain",)).get_content()
    approve_url = re.search(r"Approve: (http://\S+/approvals/by-email/\S+/)", text).group(1)

    # Signed out: the link asks the reviewer to sign in as themselves, then shows the request.
    page = open_page("reviewer-from-email")
    page.goto(approve_url)
    page.get_by_label("Username").fill("reviewer")
    page.get_by_label("Password").fill(PASSWORDS["reviewer"])
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Approve step 2: issue_refund?")
    expect(page.locator("#decision-args")).to_contain_text('"amount_inr": 2499')
    expect(page.locator("#decision-args")).to_contain_text('"order_id": "A-1001"')
    screenshot(page, "email_decision_confirm")
    page.get_by_role("button", name="Approve step 2").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Approved")
    expect(page.get_by_role("status")).to_contain_text("You approved step 2 (issue_refund)")
    decided = manage("shell", "-c", VIA.format(run_id=run_id))
    assert decided.stdout.splitlines()[-1].split() == ["approved", "email", "reviewer"], (
        decided.stderr
    )

    # The same link again: used.
    page.goto(approve_url)
    expect(page.get_by_role("heading", level=1)).to_have_text("This link decides nothing")
    expect(page.get_by_role("alert")).to_contain_text("This link was already used")
    screenshot(page, "email_decision_used")

    # Someone else, signed in: refused, and shown nothing of the request.
    operator = sign_in("operator")
    operator.goto(approve_url)
    expect(operator.get_by_role("alert")).to_contain_text("This link was sent to another reviewer")
    expect(operator.locator("#decision-args")).to_have_count(0)

    # The operator's review analytics count the decision: by tool and by its reviewer.
    operator.goto(operator.url.split("/approvals/")[0] + "/reviews/?days=1")
    expect(operator.locator("#decide-reviewer")).to_contain_text("reviewer")
    expect(operator.locator("#outcomes-tool")).to_contain_text("issue_refund")
    screenshot(operator, "review_analytics")
