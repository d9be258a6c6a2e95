"""Selectors only read: every query they make is a SELECT, and who sees a run is one rule."""

from contextlib import contextmanager

import pytest
from django.db import connection

from plans.llm.offline import PRICE_GOAL, REFUND_GOAL
from plans.models import Run
from plans.runtime.advance import advance_run
from plans.selectors.approvals import approvals_waiting, pending_approvals_count
from plans.selectors.audit import run_audit_get, run_export_data
from plans.selectors.costs import cost_report
from plans.selectors.runs import RunFilters, run_visible_get, runs_matching, runs_visible_to
from plans.services.runs import run_create

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def offline_model(settings):
    settings.AGENTSITE_MODEL_BACKEND = "offline"


@contextmanager
def only_reads():
    statements = []

    def record(execute, sql, params, many, context):
        statements.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        yield statements
    writes = [sql for sql in statements if not sql.lstrip().upper().startswith("SELECT")]
    assert statements, "the selectors made no query at all"
    assert writes == []


def finished(author, goal):
    run = run_create(author=author, goal_text=goal)
    advance_run(run.pk)
    return Run.objects.get(pk=run.pk)


def test_the_pages_queries_only_read(author, reviewer, operator):
    done = finished(author, PRICE_GOAL)
    waiting = finished(author, REFUND_GOAL)
    assert waiting.status == Run.Status.AWAITING_APPROVAL

    with only_reads():
        list(runs_matching(viewer=operator, filters=RunFilters(status="completed", sort="-cost")))
        list(approvals_waiting(reviewer))
        pending_approvals_count(reviewer)
        run_audit_get(run=done)
        run_export_data(run=waiting)
        cost_report(days=7)
        run_visible_get(user=author, run_id=done.pk)


def test_who_sees_a_run_is_the_same_rule_for_a_run_and_for_lists(
    author, other_author, reviewer, operator, outsider
):
    run = finished(author, REFUND_GOAL)

    for user, sees in [
        (author, True),
        (other_author, False),
        (reviewer, True),
        (operator, True),
        (outsider, False),
    ]:
        assert (run_visible_get(user=user, run_id=run.pk) is not None) is sees, user
        assert runs_visible_to(user).filter(pk=run.pk).exists() is sees, user
        assert approvals_waiting(user).filter(run=run).exists() is sees, user
