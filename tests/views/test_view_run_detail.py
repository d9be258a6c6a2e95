"""The run page: plan review, steps, totals, answer, step details, cancel and the events feed."""

import re

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

from plans.journal.events import append_events
from plans.llm.offline import PRICE_GOAL, REFUND_GOAL
from plans.models import Run, RunEvent
from plans.runtime.advance import advance_run
from plans.services.runs import run_create
from plans.ui.run_page import run_page_context

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def offline_model(settings):
    settings.AGENTSITE_MODEL_BACKEND = "offline"


def finished_run(author, goal=PRICE_GOAL, **options):
    run = run_create(author=author, goal_text=goal, **options)
    advance_run(run.pk)
    run.refresh_from_db()
    return run


def page_of(client, run, **params):
    response = client.get(reverse("plans:run_detail", args=[run.pk]), params)
    assert response.status_code == 200
    return response.content.decode()


def test_it_sends_anonymous_visitors_to_the_login_page(client, author):
    run = run_create(author=author, goal_text=PRICE_GOAL)

    response = client.get(reverse("plans:run_detail", args=[run.pk]))

    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


def test_it_shows_the_plan_graph_steps_answer_and_totals_of_a_finished_run(client, author):
    run = finished_run(author)
    client.force_login(author)

    page = page_of(client, run)

    assert re.search(r'<svg[^>]*class="plan-graph"', page)
    for step_id in (1, 2, 3):
        assert f'id="step-{step_id}"' in page  # graph node, clickable by run.js
        assert f'id="step-row-{step_id}"' in page
    assert "&quot;expression&quot;: &quot;{{1}}+{{2}}&quot;" in page  # full args, pretty JSON
    assert "79900+12900" in page  # and what they resolved to
    assert 'class="status status-completed"' in page
    assert "92800" in page
    assert "<dt>Model calls</dt><dd>2</dd>" in page  # plan and answer
    assert "Planner&#x27;s raw output" in page or "Planner's raw output" in page
    assert reverse("plans:run_audit", args=[run.pk]) in page
    assert "Cancel run" not in page  # the run is over
    assert 'ws-connect="/ws/runs/' not in page  # nothing more will happen (the badge's stays)


def test_a_live_run_opens_a_socket_that_asks_for_events_after_those_shown(client, author):
    run = run_create(author=author, goal_text=PRICE_GOAL)
    client.force_login(author)

    page = page_of(client, run)

    last = run.events.order_by("-seq").first().seq
    assert f'ws-connect="/ws/runs/{run.pk}/?after={last}"' in page
    assert f'id="last-seq" data-first="{last}" data-seq="{last}"' in page
    assert "Cancel run" in page
    assert "The planner is writing a plan" in page


def test_another_authors_run_is_not_found(client, author, other_author):
    run = finished_run(author)
    client.force_login(other_author)

    response = client.get(reverse("plans:run_detail", args=[run.pk]))

    assert response.status_code == 404


def test_people_who_may_see_all_runs_see_it(client, author, outsider):
    outsider.user_permissions.add(Permission.objects.get(codename="view_all_runs"))
    run = finished_run(author)
    client.force_login(outsider)

    assert "92800" in page_of(client, run)


def test_an_invalid_plan_lists_its_problems_with_the_step_they_are_in(client, author):
    plan = {"steps": [{"id": 1, "tool": "teleport", "args": {}, "depends_on": [7]}]}
    run = run_create(author=author, goal_text="go somewhere", plan_data=plan)
    client.force_login(author)

    page = page_of(client, run)

    assert "The plan was rejected before anything ran." in page
    assert "step 1: unknown tool &#x27;teleport&#x27;" in page
    assert "step 1" in page and "7" in page
    assert 'class="status status-invalid_plan"' in page


def test_model_and_tool_text_is_escaped(client, author):
    hostile = '<img src=x onerror="alert(1)">'
    plan = {"steps": [{"id": 1, "tool": "search", "args": {"query": hostile}, "depends_on": []}]}
    run = finished_run(author, goal=f"Look up {hostile}", plan_data=plan)
    client.force_login(author)

    page = page_of(client, run)

    assert hostile not in page
    assert "&lt;img src=x onerror=" in page


def test_a_step_opens_in_the_side_panel_for_htmx(client, author):
    run = finished_run(author)
    client.force_login(author)

    response = client.get(
        reverse("plans:step_detail", args=[run.pk, 3]), headers={"HX-Request": "true"}
    )

    panel = response.content.decode()
    assert response.status_code == 200
    assert panel.lstrip().startswith('<div class="step-panel" data-step="3">')
    assert "Arguments as called" in panel and "79900+12900" in panel
    assert "Inputs" in panel and "12900" in panel  # the results of steps 1 and 2
    assert "92800" in panel


def test_a_step_link_without_htmx_opens_the_run_page_with_that_step(client, author):
    run = finished_run(author)
    client.force_login(author)

    response = client.get(reverse("plans:step_detail", args=[run.pk, 2]))

    page = response.content.decode()
    assert '<div id="run-page"' in page
    assert '<div class="step-panel" data-step="2">' in page


def test_a_step_of_someone_elses_run_is_not_found(client, author, other_author):
    run = finished_run(author)
    client.force_login(other_author)

    response = client.get(reverse("plans:step_detail", args=[run.pk, 1]))

    assert response.status_code == 404


def test_cancel_stops_a_run_that_waits_for_approval(client, author):
    run = finished_run(author, goal=REFUND_GOAL)
    assert run.status == Run.Status.AWAITING_APPROVAL
    client.force_login(author)

    response = client.post(
        reverse("plans:run_cancel", args=[run.pk]), headers={"HX-Request": "true"}
    )

    run.refresh_from_db()
    assert response.status_code == 200
    assert run.status == Run.Status.CANCELLED
    assert response.content.decode().lstrip().startswith('<div id="run-header"')
    assert RunEvent.objects.filter(run=run, kind="cancel_requested").exists()


def test_cancel_must_be_posted(client, author):
    run = finished_run(author, goal=REFUND_GOAL)
    client.force_login(author)

    response = client.get(reverse("plans:run_cancel", args=[run.pk]))

    run.refresh_from_db()
    assert response.status_code == 405
    assert run.status == Run.Status.AWAITING_APPROVAL


def test_nobody_else_can_cancel_a_run(client, author, other_author):
    run = finished_run(author, goal=REFUND_GOAL)
    client.force_login(other_author)

    response = client.post(reverse("plans:run_cancel", args=[run.pk]))

    run.refresh_from_db()
    assert response.status_code == 404
    assert run.status == Run.Status.AWAITING_APPROVAL


def test_the_events_feed_renders_only_the_events_after_the_given_seq(client, author):
    run = finished_run(author)
    client.force_login(author)
    after = 3

    response = client.get(reverse("plans:run_events", args=[run.pk]), {"after": after})

    html = response.content.decode()
    seqs = [int(s) for s in re.findall(r'<li class="event[^"]*" data-seq="(\d+)"', html)]
    assert response.status_code == 200
    assert sorted(seqs) == list(range(after + 1, run.last_seq + 1))
    assert f'data-first="{after + 1}" data-seq="{run.last_seq}" hidden hx-swap-oob="true"' in html
    assert 'id="run-header" class="run-header is-terminal" hx-swap-oob="true"' in html
    assert 'id="answer"' in html and "92800" in html  # answer_finished is among them


def test_the_events_feed_has_nothing_when_the_client_is_up_to_date(client, author):
    run = finished_run(author)
    client.force_login(author)

    response = client.get(reverse("plans:run_events", args=[run.pk]), {"after": run.last_seq})

    assert response.status_code == 204


def test_the_events_feed_is_private_too(client, author, other_author):
    run = finished_run(author)
    client.force_login(other_author)

    response = client.get(reverse("plans:run_events", args=[run.pk]), {"after": 0})

    assert response.status_code == 404


def test_the_page_shows_state_at_least_as_new_as_the_last_event_it_lists(author):
    # A change committed after the run was loaded but before the log was read (a run parking
    # while its page renders) must not show in the timeline only: pushes start after it.
    run = run_create(author=author, goal_text="parks during the render")
    loaded_before = Run.objects.get(pk=run.pk)
    append_events(
        run.pk,
        [("run_parked", {"awaiting": [4]})],
        run_fields={"status": Run.Status.AWAITING_APPROVAL},
    )

    context = run_page_context(loaded_before)

    assert context["last_seq"] == Run.objects.get(pk=run.pk).last_seq
    assert context["run"].status == Run.Status.AWAITING_APPROVAL


def test_a_long_result_is_folded_after_a_few_lines_with_a_show_all():
    from plans.templatetags.agentsite import folded_json

    long = folded_json({"rows": list(range(20))}, "result", 3)
    short = folded_json({"a": 1}, "result", 4)

    wide = folded_json("word " * 200, "args", 5)

    assert 'id="fold-result-3"' in long and "Show all (24 lines)" in long
    assert "Show all (1,002 characters)" in wide
    assert short.startswith('<pre class="json">') and "fold" not in short


def _text(html):
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).replace("&#x27;", "'")


def _part(page, start, end):
    at = page.index(start)
    return page[at : page.index(end, at)]


def test_a_question_reads_as_a_question_and_who_answered_shows_in_the_step_panel(author, client):
    from plans.llm.offline import CONFIRMED_REFUND_GOAL
    from plans.models import HumanQuestion
    from plans.services.questions import question_answer

    run = finished_run(author, CONFIRMED_REFUND_GOAL)
    client.force_login(author)

    page = page_of(client, run)

    assert _text(_part(page, '<span id="run-status"', "</span>")).strip() == "waiting for an answer"
    assert "waiting for an answer" in _text(_part(page, 'id="step-row-2"', "</tr>"))
    assert "awaiting approval" not in _text(_part(page, 'id="step-row-2"', "</tr>"))
    assert "1 waiting for an answer" in _text(_part(page, '<span id="run-progress"', "</span>"))
    timeline = _text(_part(page, 'id="timeline"', "</ol>"))
    assert "Step 2 asks the run's author a question:" in timeline
    assert "Waiting for an answer from the run's author (step 2)" in timeline
    assert "Waiting for a decision" not in timeline

    question_answer(question=HumanQuestion.objects.get(run=run), user=author, answer="500")
    panel = client.get(reverse("plans:step_detail", args=[run.pk, 2])).content.decode()
    facts = _text(_part(panel, 'class="facts step-question"', "</dl>"))
    assert "Answered by alice" in facts and "Answer “500”" in facts


def test_a_question_for_reviewers_names_them_in_good_english(author, client):
    plan = {
        "steps": [
            {"id": 1, "tool": "ask_human", "args": {"question": "Go?", "audience": "reviewers"}}
        ]
    }
    run = finished_run(author, "Ask the reviewers", plan_data=plan)
    client.force_login(author)

    timeline = _text(_part(page_of(client, run), 'id="timeline"', "</ol>"))

    assert "asks a reviewer a question" in timeline and "a reviewers" not in timeline
    assert "Waiting for an answer from a reviewer (step 1)" in timeline


def test_after_a_request_for_changes_the_totals_and_timeline_say_what_happened(
    author, reviewer, client
):
    from plans.models import Approval
    from plans.services.changes import changes_request

    run = finished_run(author, REFUND_GOAL)
    refund = Approval.objects.get(run=run, tool="issue_refund")
    changes_request(approvals=[refund], reviewer=reviewer, instructions="refund 500")
    client.force_login(author)

    page = page_of(client, run)

    totals = _text(_part(page, 'id="run-totals"', "</dl>"))
    assert "Round not started · 3 planned in plan v2" in totals
    assert "Round 3" not in totals
    timeline = _text(_part(page, 'id="timeline"', "</ol>"))
    assert "bob asked for changes to step 2 issue_refund instead of approving it" in timeline
    # Folded by default: the changes_requested line beside it says the same, with the reasons.
    declined = re.search(r'<li class="event event-approval_decided[^"]*"', page)
    assert declined is not None and "event-noise" in declined.group(0)
    assert "set aside for the requested changes" in timeline
    assert "sent back for changes" in timeline
    assert "rejected" not in timeline and "blocked" not in timeline


def test_a_finished_run_with_a_rejected_step_does_not_read_as_all_done(author, reviewer, client):
    from plans.models import Approval
    from plans.services.approvals import approval_decide

    run = finished_run(author, REFUND_GOAL)
    approval_decide(
        approval=Approval.objects.get(run=run, tool="issue_refund"),
        reviewer=reviewer,
        approve=False,
        reason="no",
    )
    client.force_login(author)

    page = page_of(client, run)

    assert _text(_part(page, '<span id="run-status"', "</span>")).strip() == "blocked"
    progress = _text(_part(page, '<span id="run-progress"', "</span>"))
    assert progress.strip() == "1 of 3 steps done, 1 not approved, 1 skipped"


def test_run_totals_break_out_one_hour_cache_writes_and_web_searches(author, client):
    from decimal import Decimal

    from plans.models import ModelCall

    run = finished_run(author)
    client.force_login(author)
    assert 'id="totals-web-searches"' not in page_of(client, run)  # none made: none shown
    ModelCall.objects.create(
        run=run,
        purpose="answer",
        model="claude-sonnet-5-5",
        cache_write_tokens=2000,
        cache_write_1h_tokens=1500,
        web_search_requests=2,
        prices={},
        cost_usd=Decimal("0.03"),
        latency_ms=10,
    )

    totals = _text(_part(page_of(client, run), 'id="run-totals"', "</dl>"))

    assert "Cache writes kept 1 h 1,500 tokens" in totals
    assert "Web searches 2" in totals


# --- a long run: a page of its steps, its latest events, a bounded number of queries ------


def wide_run(author, steps=12):
    """A finished run of that many independent steps (one round)."""
    plan = {
        "steps": [
            {"id": i, "tool": "calculator", "args": {"expression": f"{i}+0"}, "depends_on": []}
            for i in range(1, steps + 1)
        ]
    }
    run = finished_run(author, "Add the rows", plan_data=plan, lift_plan_step_cap=True)
    assert run.status == Run.Status.COMPLETED
    return run


def shown_rows(page):
    return [int(step) for step in re.findall(r'<tr id="step-row-(\d+)"', page)]


def test_a_long_plan_shows_its_steps_a_page_at_a_time(client, author, monkeypatch):
    monkeypatch.setattr("plans.ui.run_page.RUN_PAGE_STEPS", 5)
    run = wide_run(author)
    client.force_login(author)

    first = page_of(client, run)
    second = page_of(client, run, steps_after=5)
    third = page_of(client, run, steps_after=10)

    assert shown_rows(first) == [1, 2, 3, 4, 5]
    assert "steps 1\u20135 of 12" in first and "12 steps" in first
    assert 'href="?steps_after=5#steps-table" rel="next"' in first
    assert '<span class="disabled">← Earlier steps</span>' in first
    assert shown_rows(second) == [6, 7, 8, 9, 10]
    assert shown_rows(third) == [11, 12]
    assert 'href="?steps_after=5#steps-table" rel="prev"' in third
    assert '<span class="disabled">Later steps →</span>' in third
    # The graph still shows every step: each node opens its step, on whichever page.
    assert all(f'id="step-{step}"' in first for step in range(1, 13))


def test_a_short_plan_shows_every_step_without_pages(client, author):
    run = finished_run(author)
    client.force_login(author)

    page = page_of(client, run)

    assert shown_rows(page) == [1, 2, 3]
    assert 'aria-label="Step pages"' not in page


def test_a_plan_too_large_to_draw_has_a_note_for_a_graph_and_its_counts_from_every_step(
    client, author, monkeypatch
):
    monkeypatch.setattr("plans.ui.run_page.MAX_STEPS_DRAWN", 8)
    monkeypatch.setattr("plans.ui.run_page.RUN_PAGE_STEPS", 5)
    run = wide_run(author)
    client.force_login(author)

    page = page_of(client, run, steps_after=5)

    assert shown_rows(page) == [6, 7, 8, 9, 10]
    assert "The plan has 12 steps; graphs are drawn for up to" in page
    assert "12 of 12 steps done" in page and "steps 6\u201310 of 12" in page


def test_the_timeline_shows_the_latest_events_and_sends_to_the_audit_for_the_others(
    client, author, monkeypatch
):
    monkeypatch.setattr("plans.ui.run_page.TIMELINE_SHOWN", 5)
    run = wide_run(author)
    client.force_login(author)

    page = page_of(client, run)

    seqs = [int(s) for s in re.findall(r'<li class="event[^"]*" data-seq="(\d+)"', page)]
    assert seqs == list(range(run.last_seq - 4, run.last_seq + 1))
    earlier = run.last_seq - 5
    assert f"{earlier} earlier events not shown" in page
    assert f'href="{reverse("plans:run_audit", args=[run.pk])}#events"' in page


@pytest.mark.parametrize("steps", [6, 60])
def test_the_run_page_makes_as_few_queries_whatever_the_number_of_steps(
    client, author, steps, django_assert_max_num_queries
):
    run = wide_run(author, steps)
    client.force_login(author)

    # 18: the header lists forks and re-runs, and the totals add the priced-apart figures.
    with django_assert_max_num_queries(18):
        page_of(client, run)
    with django_assert_max_num_queries(18):
        page_of(client, run, steps_after=50)


def test_the_events_feed_swaps_only_the_rows_of_the_steps_its_events_name(client, author):
    run = finished_run(author)
    client.force_login(author)
    step_3 = RunEvent.objects.get(run=run, kind="step_finished", payload__step=3).seq

    response = client.get(reverse("plans:run_events", args=[run.pk]), {"after": step_3 - 1})

    html = response.content.decode()
    # Rows in a <template>: htmx's own swap takes out-of-band rows from it.
    rows = html[html.index("<template>") :]
    assert re.findall(r'<tr id="step-row-(\d+)"[^>]*hx-swap-oob="true"', rows) == ["3"]
    assert 'id="steps-table"' not in html


def test_a_decision_no_person_made_says_where_it_came_from(author, client, settings):
    from datetime import timedelta

    from django.utils import timezone

    from plans.models import Approval
    from plans.services.approvals import approval_decide, approvals_expire

    by_command = finished_run(author, REFUND_GOAL)
    approval_decide(
        approval=Approval.objects.get(run=by_command, tool="issue_refund"),
        reviewer=None,
        approve=True,
        via="cli",
    )
    timed_out = finished_run(author, REFUND_GOAL)
    settings.AGENTSITE_APPROVAL_TTL_S = 3600
    Approval.objects.filter(run=timed_out).update(requested_at=timezone.now() - timedelta(hours=2))
    approvals_expire()
    client.force_login(author)

    by_command_line = _text(_part(page_of(client, by_command), 'id="timeline"', "</ol>"))
    expired = _text(_part(page_of(client, timed_out), 'id="timeline"', "</ol>"))

    assert "The command line approved step 2 issue_refund" in by_command_line
    assert "cli approved" not in by_command_line
    assert "Step 2 issue_refund expired: nobody decided it in time" in expired
    assert "ttl expired" not in expired
