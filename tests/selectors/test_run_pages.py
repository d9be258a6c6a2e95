"""The runs list's keyset pages: every sort, both ways, ties and unfinished runs, no OFFSET;
and the indexes that serve them (EXPLAIN on SQLite here, PostgreSQL in test_run_pages_pg)."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from plans.models import TERMINAL_STATUSES, Goal, Run
from plans.selectors.approvals import approvals_waiting_first, pending_approvals_count
from plans.selectors.runs import RUN_SORT_KEYS, RUN_SORTS, RunFilters, runs_matching, runs_page

pytestmark = pytest.mark.django_db


@pytest.fixture
def many_runs(operator):
    """37 runs with tied costs, tied creation times and some unfinished (no duration)."""
    now = timezone.now()
    goal = Goal.objects.create(author=operator, text="pages")
    runs = []
    for i in range(37):
        run = Run.objects.create(
            goal=goal,
            status=Run.Status.COMPLETED if i % 3 else Run.Status.FAILED,
            budget_usd=Decimal("0.5"),
            budget_tokens=1000,
            cost_usd=Decimal(i % 4) / 100,
        )
        created = now - timedelta(minutes=i // 2)  # pairs share a timestamp
        finished = None if i % 5 == 0 else created + timedelta(seconds=i % 7)
        Run.objects.filter(pk=run.pk).update(
            created_at=created,
            started_at=created if finished else None,
            finished_at=finished,
        )
        runs.append(run)
    return runs


def walk(viewer, filters, *, size):
    """Every page from the first by Next, then from the last by Previous."""
    forwards, cursor = [], None
    while True:
        page = runs_page(viewer=viewer, filters=filters, after=cursor, size=size)
        forwards.extend(run.pk for run in page.object_list)
        cursor = page.next_cursor
        if cursor is None:
            break
    backwards: list[int] = []
    page = runs_page(viewer=viewer, filters=filters, last=True, size=size)
    while True:
        backwards[:0] = [run.pk for run in page.object_list]
        if page.previous_cursor is None:
            break
        page = runs_page(viewer=viewer, filters=filters, before=page.previous_cursor, size=size)
    return forwards, backwards


@pytest.mark.parametrize("sort", list(RUN_SORTS))
@pytest.mark.parametrize("status", [None, Run.Status.COMPLETED])
def test_pages_forwards_and_backwards_list_every_run_once_in_the_sorted_order(
    operator, many_runs, sort, status
):
    filters = RunFilters(sort=sort, status=status)
    expected = list(runs_matching(viewer=operator, filters=filters).values_list("pk", flat=True))

    forwards, backwards = walk(operator, filters, size=5)

    assert forwards == expected
    assert backwards == expected


def test_a_page_after_a_cursor_does_not_count_what_came_before(operator, many_runs):
    first = runs_page(viewer=operator, filters=RunFilters(), size=10)
    second = runs_page(viewer=operator, filters=RunFilters(), after=first.next_cursor, size=10)

    assert first.is_first and not second.is_first
    assert second.previous_cursor is not None
    back = runs_page(viewer=operator, filters=RunFilters(), before=second.previous_cursor, size=10)
    assert [r.pk for r in back.object_list] == [r.pk for r in first.object_list]
    assert first.count == second.count == 37


@pytest.mark.parametrize("cursor", ["garbage", "W10", "WyJ4IiwgMV0", "WzEsICJ4Il0", "bnVsbA"])
def test_an_unreadable_cursor_gives_the_first_page(operator, many_runs, cursor):
    page = runs_page(viewer=operator, filters=RunFilters(sort="-cost"), after=cursor, size=5)
    first = runs_page(viewer=operator, filters=RunFilters(sort="-cost"), size=5)

    assert [r.pk for r in page.object_list] == [r.pk for r in first.object_list]


def test_the_count_stops_at_its_cap(operator, many_runs, monkeypatch):
    monkeypatch.setattr("plans.selectors.runs.RUNS_COUNT_CAP", 20)

    page = runs_page(viewer=operator, filters=RunFilters(), size=5)

    assert page.count == 20 and page.count_capped


# --- the indexes serve every documented filter and sort (no full scan, no sort of all rows) --

DOCUMENTED_FILTERS = [
    RunFilters(),
    RunFilters(status=Run.Status.COMPLETED),
    RunFilters(date_from=timezone.localdate() - timedelta(days=7)),
]


def page_queries(viewer, filters, **cursor):
    with CaptureQueriesContext(connection) as captured:
        runs_page(viewer=viewer, filters=filters, size=50, **cursor)
    return [q["sql"] for q in captured.captured_queries if "ORDER BY" in q["sql"]]


def sqlite_plan(sql: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN QUERY PLAN " + sql)
        return "\n".join(row[-1] for row in cursor.fetchall())


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's EXPLAIN QUERY PLAN")
@pytest.mark.parametrize("sort", list(RUN_SORT_KEYS))
@pytest.mark.parametrize("filters", DOCUMENTED_FILTERS, ids=["all", "status", "since"])
def test_sqlite_serves_each_page_from_an_index_in_its_order(operator, many_runs, sort, filters):
    filters = RunFilters(**{**filters.__dict__, "sort": sort})
    deep = runs_page(viewer=operator, filters=filters, size=5).next_cursor
    for sql in [*page_queries(operator, filters), *page_queries(operator, filters, after=deep)]:
        plan = sqlite_plan(sql)
        scans = [line for line in plan.splitlines() if re.match(r"SCAN plans_run\b", line)]
        assert all("INDEX" in line for line in scans), f"{sort}: full scan\n{plan}"
        assert "TEMP B-TREE" not in plan, f"{sort}: sorts every match\n{plan}"


# The other documented filters are read through an index too (an author's runs come sorted
# from their goals' index, so those are sorted; every other page is a range read in order).
NARROWING_FILTERS = {
    "author": RunFilters(author="olivia"),
    "date range": RunFilters(
        date_from=timezone.localdate() - timedelta(days=7), date_to=timezone.localdate()
    ),
    "status since": RunFilters(
        status=Run.Status.FAILED, date_from=timezone.localdate() - timedelta(days=7)
    ),
}


def full_scans(plan: str) -> list[str]:
    """SQLite plan lines reading a whole table rather than an index."""
    return [
        line
        for line in plan.splitlines()
        if re.search(r"\bSCAN plans_\w+|\bSCAN auth_user\b", line) and "INDEX" not in line
    ]


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's EXPLAIN QUERY PLAN")
@pytest.mark.parametrize("name", list(NARROWING_FILTERS))
def test_sqlite_reads_the_other_documented_filters_through_an_index(operator, many_runs, name):
    filters = NARROWING_FILTERS[name]
    with CaptureQueriesContext(connection) as captured:
        runs_page(viewer=operator, filters=filters, size=50)
    queries = [q["sql"] for q in captured.captured_queries if "plans_run" in q["sql"]]

    assert len(queries) >= 2  # the page and its capped count
    for sql in queries:
        plan = sqlite_plan(sql)
        assert full_scans(plan) == [], f"{name}: full scan\n{plan}"


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's EXPLAIN QUERY PLAN")
def test_sqlite_reads_the_inbox_and_the_badge_count_through_indexes(reviewer):
    with CaptureQueriesContext(connection) as captured:
        approvals_waiting_first(reviewer)
        pending_approvals_count(reviewer)
    queries = [q["sql"] for q in captured.captured_queries if "plans_approval" in q["sql"]]

    assert len(queries) >= 2
    for sql in queries:
        plan = sqlite_plan(sql)
        assert full_scans(plan) == [], f"full scan\n{plan}"


def test_the_live_runs_index_leaves_out_exactly_the_terminal_statuses():
    assert set(TERMINAL_STATUSES) == set(Run.TERMINAL)


@pytest.mark.parametrize("sort", list(RUN_SORT_KEYS))
def test_a_prolific_authors_runs_are_read_in_the_lists_order_and_are_the_same(
    operator, many_runs, monkeypatch, sort
):
    filters = RunFilters(author=operator.username, sort=sort)
    by_author_index = [
        r.pk for r in runs_page(viewer=operator, filters=filters, size=10).object_list
    ]
    monkeypatch.setattr("plans.selectors.runs.AUTHOR_WALKS_ORDER_OVER_GOALS", 0)

    page = runs_page(viewer=operator, filters=filters, size=10)
    queries = page_queries(operator, filters)

    assert [r.pk for r in page.object_list] == by_author_index
    assert page.count == 37
    if connection.vendor == "sqlite":
        for sql in queries:
            assert "TEMP B-TREE" not in sqlite_plan(sql), sqlite_plan(sql)


def test_an_unknown_author_has_no_runs(operator, many_runs):
    page = runs_page(viewer=operator, filters=RunFilters(author="nobody"), size=10)

    assert page.object_list == [] and page.count == 0
