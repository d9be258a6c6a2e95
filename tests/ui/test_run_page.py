"""The run page's pushes: one render per permission view, the same whoever of that view asks."""

import pytest

from plans.llm.offline import PRICE_GOAL
from plans.models import Run
from plans.runtime.advance import advance_run
from plans.selectors.runs import run_events_after
from plans.services.runs import run_create
from plans.ui.run_page import READER, live_state, push_view

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def offline_model(settings):
    settings.AGENTSITE_MODEL_BACKEND = "offline"


def test_a_push_does_not_name_runs_derived_from_this_one_that_only_some_viewers_may_see(
    author, other_author, operator, client
):
    origin = run_create(author=author, goal_text=PRICE_GOAL)
    advance_run(origin.pk)
    origin.refresh_from_db()
    # A re-run by someone else: the operator may see it, the origin's author may not.
    theirs = run_create(author=other_author, goal_text=PRICE_GOAL)
    Run.objects.filter(pk=theirs.pk).update(origin=origin, origin_kind=Run.Origin.RERUN)
    assert push_view(origin, author) == push_view(origin, operator) == READER
    events = run_events_after(origin, origin.last_seq - 1)

    pushes = [live_state(origin.pk, events, viewer) for viewer in (operator, author)]

    # One render serves both: it names no derived run, and the page's lineage stays (htmx
    # keeps the element marked hx-preserve when a push brings an empty one of the same id).
    assert pushes[0] == pushes[1]
    header = pushes[0].parts["run-header"]
    assert f"run #{theirs.pk}" not in header
    assert '<span id="run-lineage" hx-preserve></span>' in header
    client.force_login(operator)
    page = client.get(f"/runs/{origin.pk}/").content.decode()
    lineage = page[page.index('<span id="run-lineage" hx-preserve>') :][:400]
    assert f're-run as <a href="/runs/{theirs.pk}/">run #{theirs.pk}</a>' in lineage
