"""The admin's raw audit tables: read-only, and their lists cost a fixed number of queries."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from plans.llm.offline import REFUND_GOAL
from plans.runtime.advance import advance_run
from plans.services.runs import run_create

pytestmark = pytest.mark.django_db(transaction=True)


def queries_to_list(client, url):
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    return len(captured)


def test_the_approvals_list_costs_the_same_queries_for_one_row_or_many(client, author, admin_user):
    client.force_login(admin_user)
    advance_run(run_create(author=author, goal_text=REFUND_GOAL).pk)
    one = queries_to_list(client, "/admin/plans/approval/")
    for _ in range(3):
        advance_run(run_create(author=author, goal_text=REFUND_GOAL).pk)

    assert queries_to_list(client, "/admin/plans/approval/") == one
