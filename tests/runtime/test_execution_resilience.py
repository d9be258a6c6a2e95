"""Retries with backoff for declared-retryable errors, time limits, and unknown outcomes."""

import pytest

from plans.models import Approval, LedgerEntry, RunEvent, Step, ToolCall
from plans.runtime.advance import advance_run
from plans.services.approvals import approval_decide
from plans.services.runs import run_create
from tests import support_tools

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def fault_tools(settings):
    settings.AGENTSITE_TOOL_MODULES = ["tests.support_tools"]
    settings.AGENTSITE_TOOL_RETRY_BASE_S = 0.01
    settings.AGENTSITE_TOOL_RETRY_CAP_S = 0.05
    support_tools.flaky_calls.clear()
    support_tools.hang_release.clear()
    yield
    support_tools.hang_release.set()  # let abandoned calls finish


def run_steps(author, steps):
    run = run_create(author=author, goal_text="resilience", plan_data={"steps": steps})
    advance_run(run.pk)
    run.refresh_from_db()
    return run, {s.step_id: s for s in Step.objects.filter(plan__run=run)}


def test_a_retryable_error_is_retried_with_every_attempt_recorded(author):
    run, steps = run_steps(
        author, [{"id": 1, "tool": "flaky", "args": {"label": "a", "failures": 2}}]
    )

    calls = list(ToolCall.objects.filter(step=steps[1]).order_by("attempt"))
    assert steps[1].status == "succeeded" and steps[1].result == "a ok after 3 calls"
    assert steps[1].attempts == 3
    assert [c.attempt for c in calls] == [1, 2, 3]
    assert [bool(c.error) for c in calls] == [True, True, False]
    retries = RunEvent.objects.filter(run=run, kind="step_retrying")
    assert [e.payload["attempt"] for e in retries] == [1, 2]
    assert all(0 <= e.payload["delay_s"] <= 0.05 for e in retries)


def test_retries_stop_at_the_attempt_limit(author, settings):
    settings.AGENTSITE_TOOL_MAX_ATTEMPTS = 3
    _, steps = run_steps(
        author, [{"id": 1, "tool": "flaky", "args": {"label": "b", "failures": 9}}]
    )

    assert steps[1].status == "failed"
    assert steps[1].error == "Flaky: transient failure 3"
    assert ToolCall.objects.filter(step=steps[1]).count() == 3


def test_an_error_the_tool_did_not_declare_retryable_is_not_retried(author):
    _, steps = run_steps(author, [{"id": 1, "tool": "bad_input", "args": {"text": "x"}}])

    assert steps[1].status == "failed"
    assert ToolCall.objects.filter(step=steps[1]).count() == 1


def test_a_call_past_its_time_limit_becomes_a_timed_out_observation(author):
    run, steps = run_steps(
        author,
        [
            {"id": 1, "tool": "hang", "args": {"label": "slow"}},
            {"id": 2, "tool": "echo", "args": {"text": "independent"}},
        ],
    )

    assert steps[1].status == "failed"
    assert steps[1].error == "timed out after 0.2s"
    assert ToolCall.objects.get(step=steps[1]).error == "timed out after 0.2s"
    assert steps[2].status == "succeeded"
    assert run.answer


def test_a_destructive_call_that_times_out_is_awaited_not_repeated_and_its_late_result_kept(
    author, reviewer
):
    plan = {"steps": [{"id": 1, "tool": "slow_charge", "args": {"account": "X", "amount": 5}}]}
    run = run_create(author=author, goal_text="charge", plan_data=plan)
    advance_run(run.pk)
    approval_decide(approval=Approval.objects.get(run=run), reviewer=reviewer, approve=True)

    step = Step.objects.get(plan__run=run, step_id=1)
    (call,) = ToolCall.objects.filter(step=step)
    assert step.status == "succeeded" and step.result == call.late_result
    assert LedgerEntry.objects.filter(kind="charge").count() == 1
    assert call.error == "timed out after 0.3s; outcome unknown, awaited"
    assert call.late_result["charged"] == 5
    assert call.late_arrived_at > call.started_at
    assert RunEvent.objects.filter(run=run, kind="step_outcome_unknown").count() == 1
    assert RunEvent.objects.filter(run=run, kind="tool_call_late").count() == 1


def test_a_tool_that_keeps_failing_opens_its_circuit_for_every_run(author, settings):
    from plans.models import CircuitBreaker

    settings.AGENTSITE_BREAKER_FAILURES = 3
    settings.AGENTSITE_TOOL_MAX_ATTEMPTS = 1
    for label in ("a", "b", "c"):
        run_steps(author, [{"id": 1, "tool": "flaky", "args": {"label": label, "failures": 9}}])
    calls_before = sum(support_tools.flaky_calls.values())

    _, steps = run_steps(
        author, [{"id": 1, "tool": "flaky", "args": {"label": "d", "failures": 0}}]
    )

    assert CircuitBreaker.objects.get(tool="flaky").state == "open"
    assert steps[1].status == "failed"
    assert steps[1].error == "tool unavailable (circuit open)"
    assert sum(support_tools.flaky_calls.values()) == calls_before  # answered without a call


def test_after_the_cooldown_one_probe_closes_the_circuit_again(author, settings):
    from datetime import timedelta

    from django.utils import timezone

    from plans.guards.circuits import reset_cache
    from plans.models import CircuitBreaker

    CircuitBreaker.objects.create(
        tool="flaky",
        state="open",
        consecutive_failures=5,
        opened_at=timezone.now() - timedelta(seconds=settings.AGENTSITE_BREAKER_COOLDOWN_S + 1),
    )
    reset_cache()

    _, steps = run_steps(
        author, [{"id": 1, "tool": "flaky", "args": {"label": "p", "failures": 0}}]
    )

    breaker = CircuitBreaker.objects.get(tool="flaky")
    assert steps[1].status == "succeeded"
    assert breaker.state == "closed" and breaker.consecutive_failures == 0


def test_a_failed_probe_reopens_the_circuit(author, settings):
    from datetime import timedelta

    from django.utils import timezone

    from plans.models import CircuitBreaker

    settings.AGENTSITE_TOOL_MAX_ATTEMPTS = 1
    long_ago = timezone.now() - timedelta(seconds=settings.AGENTSITE_BREAKER_COOLDOWN_S + 1)
    CircuitBreaker.objects.create(
        tool="flaky", state="open", consecutive_failures=5, opened_at=long_ago
    )

    run_steps(author, [{"id": 1, "tool": "flaky", "args": {"label": "q", "failures": 9}}])

    breaker = CircuitBreaker.objects.get(tool="flaky")
    assert breaker.state == "open" and breaker.opened_at > long_ago


def test_a_tool_refusing_its_input_does_not_count_against_its_circuit(author, settings):
    from plans.models import CircuitBreaker

    settings.AGENTSITE_BREAKER_FAILURES = 2
    for _ in range(3):
        run_steps(author, [{"id": 1, "tool": "bad_input", "args": {"text": "x"}}])

    assert not CircuitBreaker.objects.filter(tool="bad_input", state="open").exists()


def test_an_identical_call_of_a_tool_not_declared_pure_is_made_again(author):
    run, steps = run_steps(
        author,
        [
            {"id": 1, "tool": "echo", "args": {"text": "same"}},
            {"id": 2, "tool": "echo", "args": {"text": "same"}, "depends_on": [1]},
        ],
    )

    assert steps[2].status == "succeeded" and steps[2].result == "same"
    assert ToolCall.objects.filter(run=run, tool="echo").count() == 2
    event = RunEvent.objects.get(run=run, kind="step_finished", payload__step=2)
    assert "reused_from" not in event.payload


EMAIL = {"to": "ops@example.com", "subject": "Stock alert", "body": "Reorder AirPods 4"}
EMAIL_TWICE = {
    "steps": [
        {"id": 1, "tool": "send_email", "args": EMAIL},
        {"id": 2, "tool": "send_email", "args": EMAIL, "depends_on": [1]},
    ]
}


def test_an_identical_destructive_call_needs_its_own_approval_and_then_happens_again(
    author, reviewer
):
    from django.core import mail

    run = run_create(author=author, goal_text="email twice", plan_data=EMAIL_TWICE)
    advance_run(run.pk)
    approval_decide(approval=Approval.objects.get(run=run), reviewer=reviewer, approve=True)
    second = Approval.objects.get(run=run, decision="pending")
    assert second.step.step_id == 2  # asked again, not waved through

    approval_decide(approval=second, reviewer=reviewer, approve=True)

    keys = set(ToolCall.objects.filter(run=run).values_list("idempotency_key", flat=True))
    assert len(mail.outbox) == 2
    assert LedgerEntry.objects.filter(kind="email").count() == 2
    assert len(keys) == 2


def test_a_repeated_destructive_call_that_is_declined_does_not_happen_again(author, reviewer):
    from django.core import mail

    run = run_create(author=author, goal_text="email twice", plan_data=EMAIL_TWICE)
    advance_run(run.pk)
    approval_decide(approval=Approval.objects.get(run=run), reviewer=reviewer, approve=True)
    approval_decide(
        approval=Approval.objects.get(run=run, decision="pending"),
        reviewer=reviewer,
        approve=False,
        reason="already sent",
    )

    assert len(mail.outbox) == 1
    assert Step.objects.get(plan__run=run, step_id=2).status == "blocked"


def test_a_timed_out_call_that_answers_after_the_run_ended_is_still_put_on_record(author):
    import time

    run, steps = run_steps(author, [{"id": 1, "tool": "hang", "args": {"label": "late"}}])
    assert run.status == "failed" and steps[1].error == "timed out after 0.2s"

    support_tools.hang_release.set()  # the abandoned call now returns
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        call = ToolCall.objects.get(step=steps[1])
        if call.late_arrived_at is not None:
            break
        time.sleep(0.01)
    assert call.late_result == "late" and call.late_arrived_at > call.started_at


def test_a_reply_after_the_run_ended_gets_its_event_and_the_run_page_shows_it(author, client):
    import time

    run, steps = run_steps(author, [{"id": 1, "tool": "hang", "args": {"label": "late \u202e"}}])
    assert run.status == "failed"
    ended_at_seq = RunEvent.objects.filter(run=run).order_by("-seq").first().seq

    support_tools.hang_release.set()  # the abandoned call returns after the run's loop ended
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # the row and its event commit together
        late = RunEvent.objects.filter(run=run, kind="tool_call_late").first()
        if late is not None:
            break
        time.sleep(0.01)
    assert late is not None, "the late reply has no event"
    assert late.seq == ended_at_seq + 1
    assert late.payload["step"] == 1 and late.payload["result"] == "late \u202e"
    assert ToolCall.objects.get(step=steps[1]).late_result == "late \u202e"
    client.force_login(author)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert "A late outcome for step 1" in page
