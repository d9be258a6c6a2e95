"""The API's create rate limit under 16 concurrent clients, on SQLite and on PostgreSQL."""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.utils import timezone

from plans.api.tokens import token_create
from plans.guards.budgets import bucket_take
from plans.models import RateBucket, Run
from plans.roles import roles_ensure
from tests.integration.conftest import postgres_settings, sqlite_settings

CLIENTS = 16
REQUESTS = 300
PER_MINUTE, BURST = 30, 10


@pytest.fixture(
    params=["sqlite", pytest.param("postgresql", marks=pytest.mark.services)],
)
def database(request, tmp_path, this_process_on):
    """This process's ORM on a fresh, migrated database of the given kind."""
    if request.param == "sqlite":
        config = sqlite_settings(tmp_path / "rate.sqlite3")
    else:
        config = postgres_settings(request.getfixturevalue("pg_database"))
    with this_process_on(config):
        call_command("migrate", verbosity=0)
        yield request.param


def test_concurrent_creates_never_pass_burst_plus_rate_times_elapsed(
    database, author_user_token, settings
):
    settings.AGENTSITE_API_RUNS_PER_MINUTE = PER_MINUTE
    settings.AGENTSITE_API_RUNS_BURST = BURST
    settings.TASKS = {"default": {"BACKEND": "django.tasks.backends.dummy.DummyBackend"}}
    start = threading.Barrier(CLIENTS)

    def client_posts(count: int) -> list[int]:
        api = Client(raise_request_exception=False)
        headers = {"Authorization": f"Bearer {author_user_token}"}
        try:
            start.wait(30)
            body, kind = {"goal": "hi"}, "application/json"
            return [
                api.post("/api/v1/runs/", body, content_type=kind, headers=headers).status_code
                for _ in range(count)
            ]
        finally:
            connection.close()  # this thread's own

    began = time.monotonic()
    with ThreadPoolExecutor(CLIENTS) as pool:
        shares = [REQUESTS // CLIENTS + (i < REQUESTS % CLIENTS) for i in range(CLIENTS)]
        statuses = Counter(s for batch in pool.map(client_posts, shares) for s in batch)
    elapsed = time.monotonic() - began

    allowed = BURST + PER_MINUTE / 60 * elapsed
    assert set(statuses) <= {201, 429}, statuses
    assert sum(statuses.values()) == REQUESTS
    assert statuses[201] == Run.objects.count()
    assert BURST <= statuses[201] <= math.floor(allowed), (database, statuses, elapsed)


def test_the_refill_time_never_moves_backwards(database):
    ahead = timezone.now() + timedelta(minutes=5)  # the last writer's clock was ahead of ours
    RateBucket.objects.create(name="skewed", tokens=0.0, refilled_at=ahead)

    waits = [bucket_take("skewed", per_minute=60, burst=5) for _ in range(3)]

    assert all(wait > 0 for wait in waits)  # no refill credited from an earlier time
    assert RateBucket.objects.get(name="skewed").refilled_at == ahead


@pytest.fixture
def author_user_token(database):
    from django.contrib.auth.models import User

    user = User.objects.create_user("alice", password="alice-pass-123")
    user.groups.add(roles_ensure()["authors"])
    return token_create(user=user, name="load", roles=["authors"])[1]
