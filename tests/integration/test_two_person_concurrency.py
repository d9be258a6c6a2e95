"""Concurrent approvals of a two-person (n-of-m) request count exactly once each, on SQLite
and on PostgreSQL (row locks there, the write lock here)."""

from __future__ import annotations

import threading

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.db import connections

from plans.models import Approval, ApprovalVote, RunEvent
from plans.runtime.advance import advance_run
from plans.services.approvals import ApprovalRefused, approvals_decide
from plans.services.runs import run_create
from tests.integration.conftest import postgres_settings, sqlite_settings

pytestmark = pytest.mark.django_db(transaction=True)

REVIEWERS = 6
PLAN = {
    "steps": [
        {
            "id": 1,
            "tool": "issue_refund",
            "args": {"order_id": "A-1002", "amount_inr": 60000, "reason": "returned"},
            "depends_on": [],
        }
    ]
}


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.services)])
def database(request, tmp_path, this_process_on):
    if request.param == "sqlite":
        config = sqlite_settings(tmp_path / "votes.sqlite3")
    else:
        config = postgres_settings(request.getfixturevalue("pg_database"))
    with this_process_on(config):
        call_command("migrate", verbosity=0)
        yield request.param


def test_concurrent_approvals_count_once_each_and_release_exactly_once(database, settings):
    settings.AGENTSITE_APPROVAL_RULE_MODULES = ["tests.rule_modules.two_of_anyone"]
    author = User.objects.create_user("alice")
    run = run_create(author=author, goal_text="Refund A-1002", plan_data=PLAN)
    advance_run(run.pk)
    approval = Approval.objects.get(run=run)
    decide = Permission.objects.get(codename="decide_approval")
    reviewers = []
    for i in range(REVIEWERS):
        user = User.objects.create_user(f"reviewer{i}")
        user.user_permissions.add(decide)
        reviewers.append(User.objects.get(pk=user.pk))
    barrier = threading.Barrier(REVIEWERS)
    outcomes: list[str] = []

    def approve(user: User) -> None:
        barrier.wait(30)
        try:
            approvals_decide(approvals=[approval], reviewer=user, approve=True, resume=False)
            outcomes.append("recorded")
        except ApprovalRefused as refused:
            outcomes.append(refused.code)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=approve, args=(user,)) for user in reviewers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    approval.refresh_from_db()
    assert approval.decision == Approval.Decision.APPROVED
    assert outcomes.count("recorded") == 2
    assert outcomes.count("already_decided") == REVIEWERS - 2
    assert ApprovalVote.objects.filter(approval=approval).count() == 2
    assert RunEvent.objects.filter(run=run, kind="approval_decided").count() == 1
