"""On PostgreSQL: an e-mail decision link decides once when used twice at once, and the review
analytics rollup (waits computed in SQL by the rebuild) matches what the services kept."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.core.management import call_command
from django.db import connection

from plans.journal.rollup import rollup_drift
from plans.models import DecisionLinkUse, RunEvent
from plans.selectors.reviews import review_report
from plans.services.approvals import ApprovalRefused, approval_decide
from plans.services.decision_links import (
    LinkRefused,
    approval_decide_by_link,
    decision_link_read,
    decision_link_token,
)
from tests.integration.conftest import postgres_settings
from tests.reviewing import shown_token
from tests.selectors.test_reviews import waiting_refund

pytestmark = pytest.mark.services


def people():
    users = get_user_model().objects
    author = users.create_user("pg-alice")
    reviewer = users.create_user("pg-bob")
    reviewer.user_permissions.add(Permission.objects.get(codename="decide_approval"))
    reviewer.groups.add(Group.objects.create(name="finance"))
    return author, users.get(pk=reviewer.pk)


def test_two_uses_of_one_link_at_once_decide_once(pg_database, this_process_on):
    with this_process_on(postgres_settings(pg_database)):
        call_command("migrate", verbosity=0)
        author, reviewer = people()
        approval = waiting_refund(author, asked_ago=timedelta(seconds=5))
        link = decision_link_read(
            decision_link_token(approval=approval, reviewer=reviewer, choice="approve")
        )
        seen = shown_token(approval)
        start = threading.Barrier(3)
        outcomes: list[str] = []

        def use() -> None:
            try:
                start.wait(10)
                approval_decide_by_link(
                    link=link, reviewer=reviewer, seen_preview=seen, resume=False
                )
                outcomes.append("decided")
            except (LinkRefused, ApprovalRefused) as refused:
                outcomes.append(refused.code)
            finally:
                connection.close()

        threads = [threading.Thread(target=use) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)

        assert sorted(outcomes) == ["decided", "link_used", "link_used"]
        assert DecisionLinkUse.objects.count() == 1
        decided = RunEvent.objects.filter(run_id=approval.run_id, kind="approval_decided")
        assert decided.count() == 1


def test_the_review_rollup_kept_on_postgresql_equals_a_rebuild(pg_database, this_process_on):
    with this_process_on(postgres_settings(pg_database)):
        call_command("migrate", verbosity=0)
        author, reviewer = people()
        for seconds, approve in ((600, True), (3000, False)):
            approval_decide(
                approval=waiting_refund(author, asked_ago=timedelta(seconds=seconds)),
                reviewer=reviewer,
                approve=approve,
                reason="" if approve else "no",
            )

        assert rollup_drift() == []
        times = {
            t.key: (t.decisions, t.p50_s, t.p95_s) for t in review_report().decide_times["group"]
        }
        assert times == {"finance": (2, 600, 3000)}
