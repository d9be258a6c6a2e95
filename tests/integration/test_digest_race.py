"""Sweeps racing for the approval digest's period send one digest per reader, on SQLite and on
PostgreSQL: the claim is a conditional UPDATE that changes the row for one process only."""

from __future__ import annotations

import threading

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connections

from plans.models import Delivery, DigestPeriod, NotificationPreference
from plans.runtime.sweeper import sweep_once
from tests.integration.conftest import postgres_settings, sqlite_settings

pytestmark = pytest.mark.django_db(transaction=True)

SWEEPS = 4


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.services)])
def database(request, tmp_path, this_process_on):
    if request.param == "sqlite":
        config = sqlite_settings(tmp_path / "digest.sqlite3")
    else:
        config = postgres_settings(request.getfixturevalue("pg_database"))
    with this_process_on(config):
        call_command("migrate", verbosity=0)
        yield request.param


def test_sweeps_racing_for_the_period_send_one_digest(database, settings):
    settings.AGENTSITE_NOTIFICATIONS = True  # no run events: the notifier stays asleep
    settings.AGENTSITE_APPROVAL_DIGEST_S = 24 * 3600
    for name in ("dora", "dan"):
        reader = User.objects.create_user(name, email=f"{name}@example.com")
        NotificationPreference.objects.create(user=reader, approval_emails="daily")
    barrier = threading.Barrier(SWEEPS)
    failures: list[BaseException] = []

    def sweep() -> None:
        barrier.wait(30)
        try:
            sweep_once()
        except BaseException as error:
            failures.append(error)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=sweep) for _ in range(SWEEPS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert failures == []
    queued = Delivery.objects.filter(event_type="approval.digest")
    assert sorted(queued.values_list("payload__user", flat=True)) == sorted(
        User.objects.values_list("pk", flat=True)
    )
    assert DigestPeriod.objects.count() == 1
