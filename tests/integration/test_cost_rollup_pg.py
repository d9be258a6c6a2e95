"""The costs rollup on PostgreSQL: concurrent writers lose no increment, and it matches."""

from __future__ import annotations

import random
import threading
from datetime import timedelta
from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connection, transaction
from django.db.models import Sum
from django.utils import timezone

from plans.guards.budgets import author_spent_today
from plans.journal.rollup import rollup_drift, tool_calls_recorded
from plans.models import ModelCall, ToolRollup
from plans.selectors.forecasts import answer_history
from tests.integration.conftest import postgres_settings
from tests.journal.test_cost_rollup import (
    recorded_at_random,
    report_from_raw_rows,
    report_from_rollup,
)

pytestmark = pytest.mark.services


@pytest.fixture(autouse=True)
def priced_offline_model(settings):
    prices = settings.AGENTSITE_MODEL_PRICES
    settings.AGENTSITE_MODEL_PRICES = {**prices, "offline": prices["claude-sonnet-5-5"]}


def test_two_connections_adding_to_one_bucket_at_once_lose_nothing(pg_database, this_process_on):
    each, writers = 200, 2
    started_at = timezone.now() - timedelta(hours=1)
    row = {"tool": "price", "error": "", "started_at": started_at, "duration_ms": 1.5}
    with this_process_on(postgres_settings(pg_database)):
        call_command("migrate", verbosity=0)
        ready = threading.Barrier(writers)
        failures: list[BaseException] = []

        def add_many() -> None:
            try:
                ready.wait(10)
                for _ in range(each):
                    with transaction.atomic():
                        tool_calls_recorded([row])
            except BaseException as exc:
                failures.append(exc)
            finally:
                connection.close()  # this thread's own

        threads = [threading.Thread(target=add_many) for _ in range(writers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)

        assert failures == []
        bucket = ToolRollup.objects.get(tool="price")
        assert bucket.calls == each * writers
        assert bucket.duration_ms == pytest.approx(1.5 * each * writers)


def test_the_rollup_kept_on_postgresql_equals_the_raw_rows_summed(pg_database, this_process_on):
    with this_process_on(postgres_settings(pg_database)):
        call_command("migrate", verbosity=0)
        users = get_user_model().objects
        people = [
            users.create_user("pg-alice"),
            users.create_user("pg-carol"),
            users.create_superuser("pg-rita"),
        ]

        recorded_at_random(random.Random(11), people)

        assert rollup_drift() == []
        assert report_from_rollup(30) == report_from_raw_rows(30)
        # What is read from the rollup and with prepared statements before model calls and
        # plans, as PostgreSQL spells it (a date, jsonb).
        today = timezone.now().replace(hour=0, minute=0, second=0, microsecond=0)
        for person in people:
            calls = ModelCall.objects.filter(run__goal__author=person, created_at__gte=today)
            spent = calls.aggregate(total=Sum("cost_usd"))["total"] or Decimal(0)
            assert author_spent_today(person.pk) == spent
        answers = ModelCall.objects.filter(
            purpose="answer", model="offline", state="finished", error="", run__status="completed"
        ).order_by("-created_at", "-pk")
        assert [sample.tools for sample in answer_history(model="offline")] == [
            frozenset(tools) for tools in answers.values_list("run__tools_used", flat=True)
        ]
        assert answers.exists()
