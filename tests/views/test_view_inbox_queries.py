"""/approvals/ reads a constant number of queries, whatever the number of runs and groups."""

import pytest
from django.contrib.auth.models import Group
from django.urls import reverse

from plans.llm.offline import REFUND_GOAL, TRIP_GOAL
from plans.models import Approval, Plan
from plans.runtime.advance import advance_run
from plans.services.changes import changes_request
from plans.services.plans import plan_decide
from plans.services.runs import run_create

pytestmark = pytest.mark.django_db(transaction=True)

MAX_QUERIES = 12


@pytest.fixture(autouse=True)
def offline_model(settings):
    settings.AGENTSITE_MODEL_BACKEND = "offline"
    settings.AGENTSITE_APPROVAL_RULE_MODULES = ["plans.demo.approval_rules"]


def waiting_runs(author, count, reviewer):
    for i in range(count):
        run = run_create(author=author, goal_text=TRIP_GOAL if i % 2 else REFUND_GOAL)
        advance_run(run.pk)
    # And one replanned at a reviewer's request: its card says what it replaced.
    run = run_create(author=author, goal_text=REFUND_GOAL)
    advance_run(run.pk)
    refund = Approval.objects.get(run=run, tool="issue_refund")
    changes_request(approvals=[refund], reviewer=reviewer, instructions="refund 500, not 2499")
    plan_decide(plan=Plan.objects.get(run=run, version=2), reviewer=reviewer, approve=True)


@pytest.mark.parametrize(("runs", "groups"), [(2, 1), (8, 40)])
def test_the_queue_makes_a_constant_number_of_queries(
    client, author, reviewer, django_assert_max_num_queries, runs, groups
):
    waiting_runs(author, runs, reviewer)
    reviewer.groups.add(*[Group.objects.create(name=f"team-{i}") for i in range(groups)])
    client.force_login(reviewer)

    for scope in ("mine", "groups", "all"):
        with django_assert_max_num_queries(MAX_QUERIES):
            page = client.get(reverse("plans:inbox"), {"scope": scope})
        assert page.status_code == 200
    page = client.get(reverse("plans:inbox")).content.decode()
    assert page.count('class="card decision-group"') == runs + 1
    assert "Plan v2 replaced v1 at a reviewer" in page
