"""The runs list: who sees which runs, filters, sorting, paging, htmx swaps and query counts."""

import re
from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from plans.models import Goal, Plan, Run, Step
from tests.html_safety import IMG, SCRIPT, executable_markup

pytestmark = pytest.mark.django_db

URL = reverse("plans:run_list")


def make_run(
    author,
    goal="Total price of an iPhone 16 and AirPods 4 in INR",
    *,
    status=Run.Status.COMPLETED,
    cost="0.000123",
    tokens=(1000, 200, 30, 4),
    created_at=None,
    seconds=None,
    tools=(),
    rounds=2,
    model_calls=2,
):
    """A run row as the executor leaves it, without running anything."""
    run = Run.objects.create(
        goal=Goal.objects.create(author=author, text=goal),
        status=status,
        budget_usd=Decimal("0.5"),
        budget_tokens=200000,
        cost_usd=Decimal(cost),
        input_tokens=tokens[0],
        output_tokens=tokens[1],
        cache_read_tokens=tokens[2],
        cache_write_tokens=tokens[3],
        round_count=rounds,
        model_call_count=model_calls,
        tools_used=sorted(set(tools)),
    )
    created_at = created_at or timezone.now()
    started_at = finished_at = None
    if seconds is not None:
        started_at = created_at + timedelta(seconds=1)
        finished_at = started_at + timedelta(seconds=seconds)
    Run.objects.filter(pk=run.pk).update(
        created_at=created_at, started_at=started_at, finished_at=finished_at
    )
    if tools:
        plan = Plan.objects.create(run=run, version=1, is_valid=True)
        for number, tool in enumerate(tools, start=1):
            Step.objects.create(plan=plan, step_id=number, tool=tool, args={}, round=1)
    run.refresh_from_db()
    return run


def listed_ids(response):
    """Run ids in the table, in order."""
    return [
        int(n)
        for n in re.findall(r'<td class="mono"><a href="/runs/(\d+)/">', response.content.decode())
    ]


def get(client, **params):
    response = client.get(URL, params)
    assert response.status_code == 200
    return response


def test_it_sends_anonymous_visitors_to_the_login_page(client):
    response = client.get(URL)

    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


def test_an_author_sees_only_their_own_runs(client, author, other_author):
    mine = make_run(author)
    make_run(other_author)
    client.force_login(author)

    response = get(client)

    assert listed_ids(response) == [mine.pk]
    assert 'name="author"' not in response.content.decode()  # nothing to filter by


def test_users_who_may_see_all_runs_see_every_authors_runs(client, author, other_author, operator):
    first = make_run(author, created_at=timezone.now() - timedelta(hours=1))
    second = make_run(other_author)
    client.force_login(operator)

    assert listed_ids(get(client)) == [second.pk, first.pk]  # newest first


def test_each_row_shows_goal_author_status_rounds_duration_calls_tokens_and_cost(client, author):
    make_run(
        author,
        status=Run.Status.BUDGET_EXHAUSTED,
        cost="1234.5",
        tokens=(1_000_000, 234_000, 500, 67),
        seconds=12.4,
        rounds=3,
        model_calls=1234,
        tools=["price", "calculator"],
    )
    client.force_login(author)

    page = get(client).content.decode()

    assert "Total price of an iPhone 16 and AirPods 4 in INR" in page
    assert '<td class="nowrap">alice</td>' in page
    assert 'class="status status-budget_exhausted"' in page
    assert '<td class="num">3</td>' in page
    assert '<td class="num">12.4 s</td>' in page
    assert '<td class="num">1,234</td>' in page
    assert '<td class="num">1,234,567</td>' in page
    assert 'title="$1234.5 exactly">$1,234.50</span>' in page
    assert "<code>calculator</code><code>price</code>" in page


def test_costs_show_cents_or_four_figures_under_a_cent_with_the_exact_amount_as_a_tooltip(
    client, author
):
    make_run(author, cost="0.00012345")
    make_run(author, cost="2.5")
    client.force_login(author)

    page = get(client).content.decode()

    assert '<span class="money" title="$0.00012345 exactly">$0.0001235</span>' in page
    assert '<span class="money" title="$2.5 exactly">$2.50</span>' in page


def test_it_filters_by_status(client, author):
    failed = make_run(author, status=Run.Status.FAILED)
    make_run(author, status=Run.Status.COMPLETED)
    client.force_login(author)

    assert listed_ids(get(client, status="failed")) == [failed.pk]


def test_it_filters_by_author_for_users_who_see_all_runs(client, author, other_author, operator):
    make_run(author)
    carols = make_run(other_author)
    client.force_login(operator)

    response = get(client, author="carol")

    assert listed_ids(response) == [carols.pk]
    assert '<option value="carol" selected>carol</option>' in response.content.decode()


def test_an_author_cannot_use_the_author_filter_to_see_other_runs(client, author, other_author):
    mine = make_run(author)
    make_run(other_author)
    client.force_login(author)

    assert listed_ids(get(client, author="carol")) == [mine.pk]


def test_it_filters_by_creation_date_with_both_ends_included(client, author):
    day = datetime(2026, 3, 10, tzinfo=timezone.get_current_timezone())
    make_run(author, created_at=day - timedelta(seconds=1))
    first = make_run(author, created_at=day)
    last = make_run(author, created_at=day + timedelta(days=2, hours=23, minutes=59))
    make_run(author, created_at=day + timedelta(days=3))
    client.force_login(author)

    response = get(client, date_from="2026-03-10", date_to="2026-03-12")

    assert listed_ids(response) == [last.pk, first.pk]


def test_it_filters_by_a_tool_exactly_not_by_substring(client, author):
    priced = make_run(author, tools=["price", "calculator"])
    make_run(author, tools=["flight_price", "hotel_price"])
    make_run(author)
    client.force_login(author)

    assert listed_ids(get(client, tool="price")) == [priced.pk]


def test_the_tool_filter_matches_the_tools_of_the_current_plan(client, author):
    run = make_run(author, tools=["search"])
    Run.objects.filter(pk=run.pk).update(tools_used=["send_email", "search"])  # a replan
    make_run(author, tools=["send_email_later"])
    client.force_login(author)

    assert listed_ids(get(client, tool="send_email")) == [run.pk]


def test_filters_combine(client, author, other_author, operator):
    wanted = make_run(author, status=Run.Status.FAILED, tools=["search"])
    make_run(author, status=Run.Status.COMPLETED, tools=["search"])
    make_run(other_author, status=Run.Status.FAILED, tools=["search"])
    make_run(author, status=Run.Status.FAILED, tools=["price"])
    client.force_login(operator)

    response = get(client, status="failed", author="alice", tool="search")

    assert listed_ids(response) == [wanted.pk]


def test_it_sorts_by_cost_both_ways(client, author):
    cheap = make_run(author, cost="0.01")
    dear = make_run(author, cost="0.30")
    middling = make_run(author, cost="0.02")
    client.force_login(author)

    assert listed_ids(get(client, sort="-cost")) == [dear.pk, middling.pk, cheap.pk]
    assert listed_ids(get(client, sort="cost")) == [cheap.pk, middling.pk, dear.pk]


def test_it_sorts_by_duration_with_unfinished_runs_last_both_ways(client, author):
    quick = make_run(author, seconds=0.5)
    slow = make_run(author, seconds=90)
    running = make_run(author, status=Run.Status.RUNNING)
    client.force_login(author)

    assert listed_ids(get(client, sort="-duration")) == [slow.pk, quick.pk, running.pk]
    assert listed_ids(get(client, sort="duration")) == [quick.pk, slow.pk, running.pk]


def test_the_sorted_column_header_shows_its_direction_and_links_to_the_reverse(client, author):
    make_run(author)
    client.force_login(author)

    page = get(client, sort="-cost", status="completed").content.decode()

    header = re.search(
        r'<th scope="col" class="num sortable" aria-sort="descending">(.*?)</th>', page
    )
    assert header and "Cost ↓" in header.group(1)
    assert 'href="/runs/?sort=cost&amp;status=completed"' in header.group(1) or (
        'href="/runs/?status=completed&amp;sort=cost"' in header.group(1)
    )


def test_it_shows_fifty_runs_a_page_and_page_links_keep_the_filters(client, author):
    for _ in range(51):
        make_run(author, status=Run.Status.FAILED)
    make_run(author, status=Run.Status.COMPLETED)
    client.force_login(author)

    first = get(client, status="failed", sort="cost")
    cursor = re.search(
        r'href="/runs/\?status=failed&amp;sort=cost&amp;after=([\w-]+)"', first.content.decode()
    )
    assert cursor, "the next page's link keeps the filters and carries a cursor"
    assert (
        f'hx-get="/runs/?status=failed&amp;sort=cost&amp;after={cursor.group(1)}"'
        in first.content.decode()
    )
    second = get(client, status="failed", sort="cost", after=cursor.group(1))

    assert len(listed_ids(first)) == 50
    assert len(listed_ids(second)) == 1
    assert not set(listed_ids(first)) & set(listed_ids(second))
    assert "51</strong> runs" in first.content.decode()
    assert 'rel="prev"' in second.content.decode()


def test_an_htmx_request_from_the_filters_gets_only_the_table(client, author):
    make_run(author)
    client.force_login(author)

    response = client.get(
        URL, {"status": "completed"}, headers={"HX-Request": "true", "HX-Target": "runs-table"}
    )

    page = response.content.decode()
    assert page.lstrip().startswith('<div id="runs-table"')
    assert "<html" not in page and 'id="run-filters"' not in page
    assert 'name="sort" value="-date" form="run-filters"' in page
    assert "HX-Request" in response["Vary"]


def test_other_htmx_requests_get_the_whole_page(client, author):
    client.force_login(author)

    response = client.get(URL, headers={"HX-Request": "true", "HX-Target": "main"})

    assert "<html" in response.content.decode()


def test_the_filters_form_swaps_the_table_and_pushes_the_url(client, author):
    client.force_login(author)

    page = get(client).content.decode()

    form = re.search(r'<form id="run-filters"[^>]*>', page).group(0)
    assert 'hx-get="/runs/"' in form and 'action="/runs/"' in form
    assert 'hx-target="#runs-table"' in form and 'hx-push-url="true"' in form


def test_invalid_filters_are_reported_and_ignored(client, author):
    run = make_run(author)
    client.force_login(author)

    response = get(client, date_from="yesterday", status="exploded", sort="sideways", page="x")

    page = response.content.decode()
    assert listed_ids(response) == [run.pk]
    assert "Some filters were ignored" in page
    assert "Enter a valid date." in page


def test_an_empty_list_says_so(client, author):
    client.force_login(author)

    assert "No runs yet." in get(client).content.decode()
    assert "No runs match these filters." in get(client, status="failed").content.decode()


def test_the_queries_for_a_page_do_not_grow_with_the_number_of_rows(
    client, author, other_author, operator
):
    def queries_for_a_page():
        with CaptureQueriesContext(connection) as queries:
            get(client, tool="price")
        return len(queries)

    for person in (author, other_author):
        for _ in range(3):
            make_run(person, tools=["price"])
    client.force_login(operator)
    with_six = queries_for_a_page()
    for person in (author, other_author):
        for _ in range(22):
            make_run(person, tools=["price", "calculator"])

    assert queries_for_a_page() == with_six


def test_hostile_goal_text_is_shown_as_text(client, author):
    make_run(author, goal=f"{SCRIPT} {IMG}")
    client.force_login(author)

    page = get(client).content.decode()

    assert executable_markup(page) == []
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&quot;&gt;&lt;img src=x onerror=alert(1)&gt;" in page


def test_forks_on_a_page_read_their_lineage_in_one_query_and_show_only_visible_runs(
    client, author, other_author
):
    def fork_of(origin, person, kind=Run.Origin.FORK):
        run = make_run(person, tools=["price"])
        Run.objects.filter(pk=run.pk).update(origin=origin, origin_kind=kind)
        return run

    def queries_for_a_page():
        with CaptureQueriesContext(connection) as queries:
            response = get(client, tool="price")
        return len(queries), response.content.decode()

    origin = make_run(author, tools=["price"])
    first = fork_of(origin, author)
    client.force_login(author)
    with_one, _ = queries_for_a_page()
    forks = [fork_of(origin, author) for _ in range(12)]
    rerun_of_fork = fork_of(forks[0], author, Run.Origin.RERUN)
    hidden = fork_of(forks[0], other_author)  # another author's: not the author's to see

    count, page = queries_for_a_page()

    assert count == with_one
    assert f're-run as <a href="/runs/{rerun_of_fork.pk}/">run #{rerun_of_fork.pk}</a>' in page
    assert f"run #{hidden.pk}<" not in page
    # The origin's own row has no lineage line: its forks are listed on its page.
    assert f'forked as <a href="/runs/{first.pk}/">' not in page
