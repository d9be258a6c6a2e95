"""A reviewer who submitted the goal sees disabled decision controls that say why."""

import re

import pytest
from playwright.sync_api import expect

from plans.llm.offline import REFUND_GOAL

pytestmark = pytest.mark.browser

CREATE_REVIEWING_AUTHOR = """
from django.contrib.auth.models import Group, User
user, _ = User.objects.get_or_create(username="rev-author")
user.set_password("rev-author-pass-1")
user.save()
user.groups.add(*Group.objects.filter(name__in=["authors", "reviewers"]))
"""


def test_the_submitter_who_reviews_gets_disabled_buttons_and_the_reason(
    open_page, manage, daphne_server, screenshot, ends_runs
):
    created = manage("shell", "-c", CREATE_REVIEWING_AUTHOR)
    assert created.returncode == 0, created.stderr
    page = open_page("rev-author")
    page.goto(f"{daphne_server}/accounts/login/")
    page.get_by_label("Username").fill("rev-author")
    page.get_by_label("Password").fill("rev-author-pass-1")
    page.get_by_role("button", name="Sign in").click()

    page.get_by_label("Goal").fill(REFUND_GOAL)
    page.get_by_role("button", name="Plan", exact=True).click()
    expect(page).to_have_url(re.compile(r"/runs/\d+/$"))
    run_id = re.search(r"/runs/(\d+)/", page.url).group(1)
    ends_runs(run_id)
    expect(page.locator("#run-status")).to_have_text("awaiting approval")

    # Not in their own queue ("Mine"): among all they may see, read-only.
    page.goto(f"{daphne_server}/approvals/")
    expect(page.locator("#inbox-list")).not_to_contain_text(REFUND_GOAL)
    page.goto(f"{daphne_server}/approvals/?scope=all")
    group = page.locator(f"#group-{run_id}-2")
    expect(group).to_contain_text("issue_refund")
    expect(group.get_by_role("button", name="Approve", exact=True)).to_be_disabled()
    expect(group.get_by_role("button", name="Reject", exact=True)).to_be_disabled()
    expect(group.locator(".four-eyes")).to_have_text(
        "You submitted this goal: under the four-eyes rule another reviewer must decide it."
    )
    screenshot(page, "inbox_four_eyes")

    reviewer = open_page("reviewer")
    reviewer.goto(f"{daphne_server}/accounts/login/")
    reviewer.get_by_label("Username").fill("reviewer")
    reviewer.get_by_label("Password").fill("reviewer-demo-pass")
    reviewer.get_by_role("button", name="Sign in").click()
    reviewer.goto(f"{daphne_server}/approvals/")
    other = reviewer.locator(f"#group-{run_id}-2")
    expect(other.get_by_role("button", name="Approve", exact=True)).to_be_enabled()
    expect(other.locator(".four-eyes")).to_have_count(0)
