"""Every kind of run event has its own wording, and no unknown kind reaches the log."""

import pathlib

import pytest
from django.conf import settings
from django.template.loader import render_to_string

from plans.journal.events import append_events
from plans.models import RunEvent
from plans.services.runs import run_create
from plans.templatetags.agentsite import event_template

pytestmark = pytest.mark.django_db

EVENTS_DIR = pathlib.Path(settings.BASE_DIR) / "templates" / "plans" / "events"


@pytest.mark.parametrize("kind", RunEvent.Kind.values)
def test_each_kind_is_worded_by_a_template_of_its_own(kind):
    assert event_template(kind) == f"plans/events/{kind}.html"
    assert (EVENTS_DIR / f"{kind}.html").is_file()


def test_a_kind_without_a_template_falls_back_to_its_name():
    assert event_template("something_else") == "plans/events/other.html"
    assert render_to_string("plans/events/other.html", {"event": {"kind": "a_b"}}).strip() == "a b"


def test_every_template_in_the_folder_belongs_to_a_kind():
    names = {path.stem for path in EVENTS_DIR.glob("*.html")}
    assert names - set(RunEvent.Kind.values) == {"other"}


def test_the_replan_event_names_the_failed_steps():
    event = {"kind": "replan_started", "payload": {"version": 1, "failed_steps": [2, 3]}}
    text = render_to_string("plans/run_detail.html#timeline_item", {"event": event})
    assert "Replanning plan v1 after failed steps 2, 3" in text


def test_an_unknown_kind_is_refused_before_anything_is_written(author):
    run = run_create(author=author, goal_text="Price of an iPhone 16")
    before = list(RunEvent.objects.filter(run=run).values_list("seq", flat=True))

    with pytest.raises(ValueError, match=r"unknown event kind\(s\) \['step_danced'\]"):
        append_events(run.pk, [("step_finished", {}), ("step_danced", {})])

    assert list(RunEvent.objects.filter(run=run).values_list("seq", flat=True)) == before


@pytest.mark.parametrize(
    ("awaiting", "text"),
    [([2, 3], "steps 2, 3"), ([4], "step 4"), ("plan v2", "plan v2")],
)
def test_a_parked_run_says_what_it_waits_for_whether_steps_or_a_plan(awaiting, text):
    event = {"kind": "run_parked", "payload": {"awaiting": awaiting}}
    rendered = render_to_string("plans/run_detail.html#timeline_item", {"event": event})
    assert f"Waiting for a decision on {text}" in " ".join(rendered.split())
