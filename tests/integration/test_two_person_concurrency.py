"""Concurrent approvals of a two-person (n-of-m) request count exactly once each, on SQLite
and on PostgreSQL (row locks there, the write lock here)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command

from plans.models import Approval, ApprovalVote, RunEvent
from tests.integration.conftest import postgres_settings, sqlite_settings
from tests.reviewing import approve_all_at_once, decider, refund_plan, waiting_approval

pytestmark = pytest.mark.django_db(transaction=True)

REVIEWERS = 6
PLAN = refund_plan("A-1002", 60000, reason="returned")


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
    approval = waiting_approval(author, PLAN, goal="Refund A-1002")
    run = approval.run
    reviewers = [decider(User, f"reviewer{i}") for i in range(REVIEWERS)]

    outcomes = approve_all_at_once(approval, reviewers)

    approval.refresh_from_db()
    assert approval.decision == Approval.Decision.APPROVED
    assert outcomes.count("recorded") == 2
    assert outcomes.count("already_decided") == REVIEWERS - 2
    assert ApprovalVote.objects.filter(approval=approval).count() == 2
    assert RunEvent.objects.filter(run=run, kind="approval_decided").count() == 1
