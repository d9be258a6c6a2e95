"""The demo shop's approval rules in the browser: a small refund of a delivered order is
approved by its rule (the timeline names it), a large one needs two distinct reviewers, and a
refund routed to finance is not in a plain reviewer's queue."""

import json
import re

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import served

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def rules_site(tmp_path_factory):
    """A site of this module's own, with the demo shop's rules (the shared one has none)."""
    site = served(
        tmp_path_factory.mktemp("agentsite-rules"),
        AGENTSITE_APPROVAL_RULE_MODULES="plans.demo.approval_rules",
    )
    yield next(site)
    next(site, None)


@pytest.fixture
def daphne_server(rules_site):
    return rules_site[0]


@pytest.fixture
def server_env(rules_site):
    return rules_site[1]


def refund_run(manage, tmp_path, order_id, amount, ends_runs=None):
    args = {"order_id": order_id, "amount_inr": amount, "reason": "returned"}
    plan = {"steps": [{"id": 1, "tool": "issue_refund", "args": args, "depends_on": []}]}
    plan_file = tmp_path / f"refund-{order_id}-{amount}.json"
    plan_file.write_text(json.dumps(plan), encoding="utf-8")
    goal = f"Refund INR {amount} on {order_id}"
    result = manage("run_goal", goal, "--plan-file", str(plan_file), "--author", "author", "--json")
    assert result.stdout.strip(), result.stderr
    run_id = json.loads(result.stdout)["run_id"]
    if ends_runs is not None:
        ends_runs(run_id)
    return run_id


def test_a_small_refund_on_a_delivered_order_is_approved_by_the_rule(
    sign_in, manage, daphne_server, tmp_path, screenshot
):
    run_id = refund_run(manage, tmp_path, "A-1001", 800)

    author = sign_in("author")
    author.goto(f"{daphne_server}/runs/{run_id}/")
    expect(author.locator("#run-status")).to_have_text("completed")
    expect(author.locator("#timeline")).to_contain_text(
        re.compile(r"rule small_refund_on_delivered_order \(version [0-9a-f]{12}\) approved step 1")
    )
    expect(author.locator("#graph g#step-1")).to_contain_text("approved by rule")
    screenshot(author, "run_page_approved_by_rule")


def test_a_large_refund_needs_two_distinct_reviewers(
    sign_in, manage, daphne_server, tmp_path, screenshot, ends_runs
):
    run_id = refund_run(manage, tmp_path, "A-1002", 60000, ends_runs)

    first = sign_in("reviewer")
    first.goto(f"{daphne_server}/approvals/")
    group = first.locator(f'[id^="group-{run_id}-"]')
    expect(group).to_contain_text("rule large_refund_needs_two_reviewers")
    expect(group.locator(".approvals-progress")).to_have_text("0 of 2 approvals")
    group.get_by_role("button", name="Approve", exact=True).click()
    expect(group.locator(".approvals-progress")).to_have_text("1 of 2 approvals")
    expect(group).to_contain_text("(approved by reviewer)")
    screenshot(first, "inbox_one_of_two")

    second = sign_in("reviewer2")
    second.goto(f"{daphne_server}/approvals/")
    other = second.locator(f'[id^="group-{run_id}-"]')
    expect(other.locator(".approvals-progress")).to_have_text("1 of 2 approvals")
    other.get_by_role("button", name="Approve", exact=True).click()
    expect(other.locator(".decision-stamp")).to_have_text("approved by reviewer2")

    author = sign_in("author")
    author.goto(f"{daphne_server}/runs/{run_id}/")
    expect(author.locator("#run-status")).to_have_text("completed")
    expect(author.locator("#timeline")).to_contain_text("1 of 2 approvals")


def test_a_reject_by_either_reviewer_ends_a_two_person_refund(
    sign_in, manage, daphne_server, tmp_path, ends_runs
):
    run_id = refund_run(manage, tmp_path, "A-1002", 70000, ends_runs)
    first = sign_in("reviewer")
    first.goto(f"{daphne_server}/approvals/")
    group = first.locator(f'[id^="group-{run_id}-"]')
    group.get_by_role("button", name="Approve", exact=True).click()
    expect(group.locator(".approvals-progress")).to_have_text("1 of 2 approvals")

    second = sign_in("reviewer2")
    second.goto(f"{daphne_server}/approvals/")
    other = second.locator(f'[id^="group-{run_id}-"]')
    other.get_by_label("Reason").fill("the customer kept the phone")
    other.get_by_role("button", name="Reject", exact=True).click()
    expect(other.locator(".decision-stamp")).to_have_text("rejected by reviewer2")

    author = sign_in("author")
    author.goto(f"{daphne_server}/runs/{run_id}/")
    expect(author.locator("#run-status")).to_have_text("blocked")


def test_a_refund_routed_to_finance_is_not_in_a_plain_reviewers_queue(
    sign_in, manage, daphne_server, tmp_path, ends_runs, screenshot
):
    run_id = refund_run(manage, tmp_path, "A-1004", 500, ends_runs)

    finance = sign_in("finance")
    finance.goto(f"{daphne_server}/approvals/")
    group = finance.locator(f'[id^="group-{run_id}-"]')
    expect(group).to_contain_text("routed to finance")
    expect(group.get_by_role("button", name="Approve", exact=True)).to_be_enabled()

    reviewer = sign_in("reviewer")
    reviewer.goto(f"{daphne_server}/approvals/")
    expect(reviewer.locator("#inbox-list")).to_be_visible()
    expect(reviewer.locator(f'[id^="group-{run_id}-"]')).to_have_count(0)
    reviewer.goto(f"{daphne_server}/approvals/?scope=all")
    shown = reviewer.locator(f'[id^="group-{run_id}-"]')
    expect(shown).to_contain_text("Only members of finance may decide it.")
    expect(shown.get_by_role("button", name="Approve", exact=True)).to_have_count(0)
    screenshot(reviewer, "inbox_routed_to_finance_read_only")
