"""The demo shop's rules in the browser, continued: a request one reviewer claimed shows its
claimer to another reviewer (two browser contexts), and a request left past its rule's
escalate_after reaches the escalation group's queue and e-mail (a real SMTP server on
loopback receives it). The request's clock is moved by its stored times, never by sleeping."""

import re

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import served
from tests.browser.test_browser_approval_rules import refund_run

pytestmark = pytest.mark.browser

FINANCE_ADDRESS = "finance-demo@example.test"
REVIEWER2_ADDRESS = "reviewer2-demo@example.test"

# Every deadline of the run's request moved back by `hours`, as if it had waited that long:
# the server's own sweep (every lease/3 s, on the worker side) reads the stored times against
# its clock and sends what fell due, as it does in production; nothing sleeps.
PAST_DEADLINES = """
from datetime import timedelta
from django.db.models import F
from plans.models import Approval
back = timedelta(hours={hours})
moved = Approval.objects.filter(run_id={run_id}, decision="pending").update(
    requested_at=F("requested_at") - back,
    remind_at=F("remind_at") - back,
    escalate_at=F("escalate_at") - back,
    expires_at=F("expires_at") - back,
)
assert moved == 1, moved
"""
CHASED = """
from plans.models import Approval
a = Approval.objects.get(run_id={run_id})
print(a.escalate_to, a.escalated_at is not None, a.reminded_at is not None)
"""

ADDRESSES = """
from django.contrib.auth import get_user_model
users = get_user_model().objects
users.filter(username="finance").update(email="{finance}")
users.filter(username="reviewer2").update(email="{reviewer2}")
"""


@pytest.fixture(scope="module")
def rules_mail_site(tmp_path_factory, mail_sink):
    """A site of this module's own, with the demo shop's rules and its mail to mail_sink."""
    site = served(
        tmp_path_factory.mktemp("agentsite-rules-mail"),
        mail_port=mail_sink.port,
        AGENTSITE_APPROVAL_RULE_MODULES="plans.demo.approval_rules",
    )
    yield next(site)
    next(site, None)


@pytest.fixture
def daphne_server(rules_mail_site):
    return rules_mail_site[0]


@pytest.fixture
def server_env(rules_mail_site):
    return rules_mail_site[1]


def test_a_claimed_request_shows_its_claimer_to_another_reviewer(
    sign_in, manage, daphne_server, tmp_path, ends_runs, screenshot
):
    # Delivered, over ₹1,000 and under ₹50,000: no rule matches, one reviewer decides.
    run_id = refund_run(manage, tmp_path, "A-1003", 5000, ends_runs)

    first = sign_in("reviewer")
    first.goto(f"{daphne_server}/approvals/")
    card = first.locator(f'[id^="group-{run_id}-"]')
    card.get_by_role("button", name="I'm on it").click()
    expect(card.locator(".claimed-by")).to_have_text(re.compile(r"Claimed by reviewer\b"))
    expect(card.get_by_role("button", name="I'm on it")).to_have_count(0)

    # Another reviewer, in a browser context of their own, sees who is on it and since when.
    second = sign_in("reviewer2")
    second.goto(f"{daphne_server}/approvals/")
    other = second.locator(f'[id^="group-{run_id}-"]')
    expect(other.locator(".claimed-by")).to_have_text(re.compile(r"Claimed by reviewer \S"))
    expect(other.get_by_role("button", name="I'm on it")).to_have_count(0)
    expect(other.get_by_role("button", name="Take over the claim")).to_be_visible()

    # Deciding over a live claim is refused, naming the claimer; taking it over is explicit.
    other.get_by_role("button", name="Approve", exact=True).click()
    expect(other.get_by_role("alert")).to_contain_text("reviewer claimed this issue_refund step")
    other = second.locator(f'[id^="group-{run_id}-"]')
    other.get_by_role("button", name="Take over the claim").click()
    expect(other.locator(".claimed-by")).to_have_text(re.compile(r"Claimed by reviewer2\b"))
    # Last: a full-page screenshot leaves style="" on inputs, which a later swap's settling
    # would copy under the strict CSP.
    screenshot(second, "inbox_claim_taken_over")

    # The first reviewer's queue, loaded again, now names the one who took it over.
    first.reload()
    expect(card.locator(".claimed-by")).to_have_text(re.compile(r"Claimed by reviewer2\b"))
    first.goto(f"{daphne_server}/runs/{run_id}/")
    expect(first.locator("#timeline")).to_contain_text(
        "reviewer2 took over reviewer's claim on step 1"
    )


def test_a_request_past_escalate_after_reaches_the_escalation_groups_queue_and_email(
    sign_in, manage, daphne_server, tmp_path, ends_runs, mail_sink, screenshot
):
    addressed = manage(
        "shell", "-c", ADDRESSES.format(finance=FINANCE_ADDRESS, reviewer2=REVIEWER2_ADDRESS)
    )
    assert addressed.returncode == 0, addressed.stderr
    # Over ₹50,000: two reviewers; reminded after 1 hour, escalated to finance after 4.
    run_id = refund_run(manage, tmp_path, "A-1002", 60000, ends_runs)

    finance = sign_in("finance")
    finance.goto(f"{daphne_server}/approvals/")
    card = finance.locator(f'[id^="group-{run_id}-"]')
    expect(card).to_contain_text("rule large_refund_needs_two_reviewers")
    expect(card.locator(".tag-escalated")).to_have_count(0)

    moved = manage("shell", "-c", PAST_DEADLINES.format(run_id=run_id, hours=4.1))
    assert moved.returncode == 0, moved.stderr

    # The escalation group's member is told, by an e-mail of their own with their own links.
    email = mail_sink.wait_for(
        lambda m: (
            m["To"] == FINANCE_ADDRESS
            and m["Subject"]
            == f"Run {run_id}: step 1 (issue_refund) escalated to you "
            "(rule large_refund_needs_two_reviewers)"
        )
    )
    text = email.get_body(preferencelist=("plain",)).get_content()
    assert re.search(r"Approve: http://\S+/approvals/by-email/\S+/", text), text
    chased = manage("shell", "-c", CHASED.format(run_id=run_id))
    assert chased.stdout.split()[-3:] == ["['finance']", "True", "True"], chased.stdout
    # A reviewer outside the escalation group is reminded, never told of the escalation.
    reminded = f"Run {run_id}: step 1 (issue_refund) still waits for a decision"
    mail_sink.wait_for(lambda m: m["To"] == REVIEWER2_ADDRESS and reminded in m["Subject"])
    subjects = [m["Subject"] for m in mail_sink.messages if m["To"] == REVIEWER2_ADDRESS]
    assert not any(f"Run {run_id}:" in s and "escalated" in s for s in subjects), subjects

    # And it is in their queue, saying so, with the request's age as moved.
    finance.reload()
    card = finance.locator(f'[id^="group-{run_id}-"]')
    expect(card.locator(".tag-escalated")).to_have_text("escalated to finance")
    expect(card.get_by_role("button", name="Approve", exact=True)).to_be_enabled()
    screenshot(finance, "inbox_escalated_to_finance")
    finance.goto(f"{daphne_server}/runs/{run_id}/")
    expect(finance.locator("#timeline")).to_contain_text(
        "Step 1 issue_refund is still undecided: escalated to finance"
    )
