"""A run's and a step's status in words: a wait for a person's answer is never "awaiting
approval", and a run that waits for a reviewer and an answer says both."""

import pytest

from plans.selectors.runs import StepProgress, run_progress_status, status_words


@pytest.mark.parametrize(
    ("status", "waiting", "text"),
    [
        ("awaiting_approval", {"awaiting_approval": 1}, "awaiting approval"),
        ("awaiting_approval", {"awaiting_answer": 1}, "waiting for an answer"),
        (
            "awaiting_approval",
            {"awaiting_approval": 1, "awaiting_answer": 2},
            "awaiting approval and an answer",
        ),
        ("awaiting_plan_approval", {"awaiting_answer": 1}, "awaiting plan approval"),
        ("completed", {"succeeded": 2}, "completed"),
        ("awaiting_approval", None, "awaiting approval"),  # progress not read: the stored name
    ],
)
def test_a_runs_status_says_what_it_waits_for(status, waiting, text):
    progress = None if waiting is None else StepProgress.of(waiting)
    assert status_words(run_progress_status(status, progress)) == text


def test_a_steps_wait_for_an_answer_is_worded_as_one():
    assert status_words("awaiting_answer") == "waiting for an answer"
    assert status_words("awaiting_approval") == "awaiting approval"
