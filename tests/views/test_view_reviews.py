"""The review analytics page: operators only, its windows, and the figures it shows."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from plans.models import ReviewRollup, ReviewWaitRollup

pytestmark = pytest.mark.django_db


@pytest.fixture
def rollup(reviewer):
    today = timezone.localdate()
    ReviewRollup.objects.create(day=today, tool="issue_refund", approved=3, rejected=1)
    ReviewRollup.objects.create(
        day=today - timedelta(days=5),
        tool="issue_refund",
        rule="<b>small refunds</b>",
        auto=2,
        approved=2,
    )
    for wait, n in ((40, 2), (900, 1)):
        ReviewWaitRollup.objects.create(
            day=today, dimension="reviewer", key=str(reviewer.pk), wait_s=wait, decisions=n
        )
    ReviewWaitRollup.objects.create(
        day=today, dimension="group", key="<i>finance</i>", wait_s=0, decisions=1
    )


def test_only_those_who_see_costs_may_open_it(client, reviewer, operator):
    client.force_login(reviewer)
    assert client.get("/reviews/").status_code == 403
    client.force_login(operator)
    assert client.get("/reviews/").status_code == 200


def test_it_shows_each_window_from_the_rollup(client, operator, rollup):
    client.force_login(operator)

    today = client.get("/reviews/?days=1").content.decode()
    assert "over today" in today
    assert '<td>bob</td><td class="num">3</td><td class="num">40.0 s</td>' in today
    assert "15 min 00 s" in today  # bob's p95
    assert "&lt;i&gt;finance&lt;/i&gt;" in today and "under 1 s" in today
    assert '75.0% <span class="muted">(3)</span>' in today  # approved of issue_refund
    assert "small refunds" not in today  # five days ago

    week = client.get("/reviews/?days=7").content.decode()
    assert "over the last 7 days" in week
    assert "&lt;b&gt;small refunds&lt;/b&gt;" in week and "<b>small refunds</b>" not in week
    assert "no rule (a reviewer from reviewers)" in week

    odd = client.get("/reviews/?days=5")
    assert odd.status_code == 200 and "over the last 7 days" in odd.content.decode()


def test_the_costs_page_links_to_it(client, operator):
    client.force_login(operator)
    assert 'href="/reviews/"' in client.get("/costs/").content.decode()


@pytest.mark.django_db(transaction=True)
def test_rates_per_rule_come_from_the_rules_that_decided_and_routed_requests(
    client, author, reviewer, operator, settings
):
    from plans.llm.offline import REFUND_GOAL
    from plans.models import Approval
    from plans.runtime.advance import advance_run
    from plans.services.approvals import approval_decide
    from plans.services.runs import run_create

    settings.AGENTSITE_APPROVAL_RULE_MODULES = ["tests.rule_modules.review_mix"]
    for approve in (True, False):
        run = run_create(author=author, goal_text=REFUND_GOAL)
        advance_run(run.pk)
        refund = Approval.objects.get(run=run, tool="issue_refund")
        approval_decide(approval=refund, reviewer=reviewer, approve=approve, reason="no")
    client.force_login(operator)

    page = client.get("/reviews/?days=1").content.decode()

    by_rule = page[page.index('id="outcomes-rule"') :]
    by_rule = by_rule[: by_rule.index("</table>")]
    # The refund rule: one approved, one rejected by a person; the e-mail rule: approved itself.
    refunds = by_rule[by_rule.index("<code>refunds_need_a_reviewer</code>") :].split("</tr>")[0]
    assert '50.0% <span class="muted">(1)</span>' in refunds
    emails = by_rule[by_rule.index("<code>customer_emails_go_out</code>") :].split("</tr>")[0]
    assert emails.count('100.0% <span class="muted">(1)</span>') == 2  # approved, by a rule
