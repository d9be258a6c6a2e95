"""The runs list's keyset pages are served by indexes on PostgreSQL too (EXPLAIN)."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from plans.models import Goal, Run
from plans.selectors.approvals import approvals_waiting_first, pending_approvals_count
from plans.selectors.runs import RUN_SORT_KEYS, RunFilters, runs_page
from tests.integration.conftest import postgres_settings
from tests.selectors.test_run_pages import NARROWING_FILTERS

pytestmark = pytest.mark.services

FILTERS = {
    "all": RunFilters(),
    "status": RunFilters(status=Run.Status.COMPLETED),
    "since": RunFilters(date_from=timezone.localdate() - timedelta(days=7)),
}


def test_postgresql_serves_each_page_from_an_index_in_its_order(pg_database, this_process_on):
    with this_process_on(postgres_settings(pg_database)):
        call_command("migrate", verbosity=0)
        operator = get_user_model().objects.create_superuser("pages-operator")
        goal = Goal.objects.create(author=operator, text="pages")
        for i in range(30):
            Run.objects.create(
                goal=goal,
                status=Run.Status.COMPLETED,
                budget_usd=Decimal("0.5"),
                budget_tokens=1,
                cost_usd=Decimal(i % 3),
            )
        problems, checked = [], 0
        for sort in RUN_SORT_KEYS:
            for name, base in FILTERS.items():
                filters = RunFilters(**{**base.__dict__, "sort": sort})
                deep = runs_page(viewer=operator, filters=filters, size=5).next_cursor
                for cursor in (None, deep):
                    with CaptureQueriesContext(connection) as captured:
                        runs_page(viewer=operator, filters=filters, size=50, after=cursor)
                    for query in captured.captured_queries:
                        if "ORDER BY" not in query["sql"]:
                            continue
                        plan = explain_without_scans_or_sorts(query["sql"])
                        checked += 1
                        if "Seq Scan on plans_run" in plan or "Sort" in plan:
                            problems.append(f"{sort} {name} {cursor and 'deep'}:\n{plan}")
        assert checked >= 2 * len(RUN_SORT_KEYS) * len(FILTERS)
        assert not problems, "\n\n".join(problems)


def explain_without_scans_or_sorts(sql: str) -> str:
    """The plan when full scans and sorts are priced out: one is still there only if no index
    can serve the query in its order."""
    with connection.cursor() as cursor:
        cursor.execute("SET enable_seqscan = off")
        cursor.execute("SET enable_sort = off")
        cursor.execute("SET enable_incremental_sort = off")
        try:
            cursor.execute("EXPLAIN " + sql)
            return "\n".join(row[0] for row in cursor.fetchall())
        finally:
            cursor.execute("RESET ALL")


def test_postgresql_reads_the_other_filters_and_the_inbox_through_indexes(
    pg_database, this_process_on
):
    with this_process_on(postgres_settings(pg_database)):
        call_command("migrate", verbosity=0)
        operator = get_user_model().objects.create_superuser("olivia")
        goal = Goal.objects.create(author=operator, text="pages")
        for i in range(30):
            Run.objects.create(
                goal=goal, status=Run.Status.FAILED, budget_usd=Decimal("0.5"), budget_tokens=i
            )
        with CaptureQueriesContext(connection) as captured:
            for filters in NARROWING_FILTERS.values():
                runs_page(viewer=operator, filters=filters, size=50)
            approvals_waiting_first(operator)
            pending_approvals_count(operator)
        queries = [
            q["sql"]
            for q in captured.captured_queries
            if "plans_run" in q["sql"] and q["sql"].startswith("SELECT")
        ]
        assert len(queries) >= 2 * len(NARROWING_FILTERS) + 2
        problems = []
        for sql in queries:
            plan = explain_without_scans_or_sorts(sql)
            if re.search(r"Seq Scan on (plans_\w+|auth_user)", plan):
                problems.append(f"{sql[:200]}\n{plan}")
        assert not problems, "\n\n".join(problems)
