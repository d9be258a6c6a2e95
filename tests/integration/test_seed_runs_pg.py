"""seed_runs on PostgreSQL: rows loaded by COPY read back as runs on every page."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client

from plans.models import Goal, Run
from tests.integration.conftest import postgres_settings
from tests.management.test_seed_runs_command import (
    assert_copied_runs_read_as_runs,
    seed_with_copies,
)

pytestmark = pytest.mark.services


def test_copied_runs_loaded_by_copy_read_back_on_every_page(pg_database, this_process_on):
    with this_process_on(postgres_settings(pg_database)):
        call_command("migrate", verbosity=0)
        seed_with_copies()
        client = Client()
        operator = get_user_model().objects.create_superuser("seed-operator")
        client.force_login(operator)

        assert Run.objects.count() == 60
        assert_copied_runs_read_as_runs(client)
        # The id sequences continue after the loaded ids.
        goal = Goal.objects.create(author=operator, text="after the seeding")
        run = Run.objects.create(goal=goal, budget_usd=Decimal("0.5"), budget_tokens=1)
        assert run.pk == 61
