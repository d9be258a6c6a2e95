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
