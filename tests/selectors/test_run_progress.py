"""Progress in the run header and on the runs list: steps done, how the others ended, and
what they wait for (a reviewer, or a person's answer)."""

import pytest

from plans.llm.offline import REFUND_GOAL
from plans.runtime.advance import advance_run
from plans.selectors.runs import StepProgress, runs_progress
from plans.services.runs import run_create
from tests.engine.engine_catalog import SEED_PLAN


@pytest.mark.parametrize(
    ("statuses", "text"),
    [
        ({}, ""),
        ({"pending": 1}, "0 of 1 step done"),
        (
            {"succeeded": 2, "failed": 1, "awaiting_approval": 2},
            "2 of 5 steps done, 1 failed, 2 waiting for a reviewer",
        ),
        (
            {"succeeded": 1, "running": 2, "skipped": 1, "blocked": 1},
            "1 of 5 steps done, 1 not approved, 1 skipped, 2 running",
        ),
        # A finished run with a rejected step never reads "3 of 3 steps done".
        (
            {"succeeded": 1, "blocked": 1, "skipped": 1},
            "1 of 3 steps done, 1 not approved, 1 skipped",
        ),
        ({"succeeded": 1, "awaiting_answer": 1}, "1 of 2 steps done, 1 waiting for an answer"),
    ],
)
def test_progress_reads_as_a_sentence(statuses, text):
    assert StepProgress.of(statuses).text == text


@pytest.mark.django_db(transaction=True)
def test_the_run_page_and_the_runs_list_show_how_far_each_run_has_got(client, author, settings):
    settings.AGENTSITE_MODEL_BACKEND = "offline"
    done = run_create(author=author, goal_text="prices", plan_data=SEED_PLAN)
    advance_run(done.pk)
    parked = run_create(author=author, goal_text=REFUND_GOAL)
    advance_run(parked.pk)

    progress = runs_progress([done.pk, parked.pk])
    client.force_login(author)

    assert progress[done.pk].text == "3 of 3 steps done"
    assert progress[parked.pk].text == "1 of 3 steps done, 1 waiting for a reviewer"
    listed = client.get("/runs/").content.decode()
    assert "3 of 3 steps done" in listed
    assert "1 of 3 steps done, 1 waiting for a reviewer" in listed
    page = client.get(f"/runs/{parked.pk}/").content.decode()
    assert '<span id="run-progress"' in page
    assert "1 of 3 steps done, 1 waiting for a reviewer" in page
