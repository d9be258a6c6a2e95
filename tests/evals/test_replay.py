"""manage.py replay: a past run re-planned and re-answered on recorded tool results, no tool
called, and diffed against the original."""

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from plans.demo.seeding import runs_seed
from plans.evals.replay import NOT_RECORDED, run_replay
from plans.evals.runner import model_settings
from plans.llm.offline import REFUND_GOAL
from plans.models import Approval, Goal, LedgerEntry, Run, ToolCall
from plans.runtime.advance import advance_run
from plans.services.approvals import approval_decide
from plans.services.runs import run_create
from plans.tools.registry import ToolSpec

pytestmark = pytest.mark.django_db(transaction=True)


def forbid_tools(monkeypatch):
    """From here on, any dispatch to a tool's code fails the test (a guard, not a stand-in)."""

    def refuse(self, args, *, idempotency_key):
        raise AssertionError(f"replay called the tool {self.name}")

    monkeypatch.setattr(ToolSpec, "call", refuse)


def decide_everything(run, reviewer, *, approve):
    for _ in range(10):
        run.refresh_from_db()
        if run.status != Run.Status.AWAITING_APPROVAL:
            return run
        for approval in Approval.objects.filter(run=run, decision="pending"):
            approval_decide(
                approval=approval,
                reviewer=reviewer,
                approve=approve,
                reason="" if approve else "no",
            )
    raise AssertionError(f"run {run.pk} still waits: {run.status}")


def replay_json(run_id, *extra):
    out = StringIO()
    call_command("replay", str(run_id), "--model", "offline", "--json", *extra, stdout=out)
    return json.loads(out.getvalue())


def test_a_seeded_refund_run_replays_without_calling_a_tool_and_shows_its_diff(monkeypatch):
    runs_seed(count=40, seed=3)
    forbid_tools(monkeypatch)
    run = Run.objects.filter(status="completed", goal__text__startswith="Refund order").first()
    assert run is not None, "the seeding made no completed refund run"
    ledger, calls = LedgerEntry.objects.count(), ToolCall.objects.count()

    out = StringIO()
    call_command(
        "replay", str(run.pk), "--model", "offline", "--prompt-version", "current", stdout=out
    )
    text = out.getvalue()

    assert LedgerEntry.objects.count() == ledger  # the shop ledger is unchanged
    assert ToolCall.objects.count() == calls
    assert f"replay of run {run.pk} on offline" in text
    assert "step 2 unchanged: issue_refund" in text
    assert "0 only in the original, 0 only in the replay" in text
    assert "model calls: 2 -> 2" in text
    assert "answer (original -> replay):" in text  # the seeder's answer is not the model's
    assert "cost: $0.0" in text


def test_a_live_refund_replays_on_its_recorded_results_and_the_ledger_is_unchanged(
    author, reviewer, monkeypatch
):
    run = run_create(author=author, goal_text=REFUND_GOAL)
    advance_run(run.pk)
    run = decide_everything(run, reviewer, approve=True)
    assert run.status == "completed"
    ledger = list(LedgerEntry.objects.values_list("pk", "idempotency_key"))
    assert len(ledger) >= 1
    calls = ToolCall.objects.count()
    forbid_tools(monkeypatch)
    replay = replay_json(run.pk)

    assert list(LedgerEntry.objects.values_list("pk", "idempotency_key")) == ledger
    assert ToolCall.objects.count() == calls
    diff = replay["diff"]
    assert {row["change"] for row in diff["plan"]} == {"unchanged"}
    assert [s["status"] for s in replay["steps"]] == ["recorded"] * len(replay["steps"])
    assert diff["calls"]["only_original"] == diff["calls"]["only_replay"] == []
    assert diff["answer"]["same"] is True
    assert diff["model_calls"] == {"original": 2, "replay": 2}
    assert diff["tokens"]["output_tokens"]["replay"] > 0


def test_a_step_the_original_never_called_is_not_recorded(author, reviewer, monkeypatch):
    run = run_create(author=author, goal_text=REFUND_GOAL)
    advance_run(run.pk)
    # The reviewer declined the refund: the original never issued it (nor sent the email).
    run = decide_everything(run, reviewer, approve=False)
    assert not ToolCall.objects.filter(run=run, tool="issue_refund").exists()
    forbid_tools(monkeypatch)

    replay = replay_json(run.pk)

    steps = {s["tool"]: s for s in replay["steps"]}
    assert steps["order_total"]["status"] == "recorded"
    assert steps["issue_refund"]["status"] == NOT_RECORDED
    assert steps["issue_refund"]["resolved_args"]["order_id"] == "A-1001"
    assert steps["send_email"]["status"] == "unresolved"  # it needs the refund's result
    # The same plan step, unresolved in both: not a change, and shown with its placeholders.
    email = next(row for row in replay["diff"]["plan"] if row["step"] == 3)
    assert email["change"] == "unchanged"
    assert "{{2.reference}}" in email["replay"]["args"]["body"]
    not_recorded = replay["diff"]["calls"]["not_recorded"]
    assert [c["tool"] for c in not_recorded] == ["issue_refund"]
    assert replay["diff"]["calls"]["only_replay"][0]["tool"] == "issue_refund"
    assert LedgerEntry.objects.count() == 0


def test_a_prompt_version_this_code_does_not_have_is_a_clear_error(author):
    run = run_create(author=author, goal_text=REFUND_GOAL)
    with pytest.raises(CommandError, match="prompt version 'abc123' is not available"):
        call_command("replay", str(run.pk), "--model", "offline", "--prompt-version", "abc123")
    with pytest.raises(CommandError, match="There is no run 999999"):
        call_command("replay", "999999", "--model", "offline")
    react = run_create(author=author, goal_text=REFUND_GOAL, agent=Goal.Agent.REACT)
    with pytest.raises(CommandError, match="replay re-plans plan-and-execute runs only"):
        call_command("replay", str(react.pk), "--model", "offline")


def test_the_replay_serves_no_tool_it_was_not_given(author):
    run = run_create(author=author, goal_text=REFUND_GOAL)  # never advanced: nothing recorded
    with model_settings("offline"):
        replay = run_replay(run=run, wanted_prompt_version="current")
    assert [s.status for s in replay.steps] == [NOT_RECORDED, "unresolved", "unresolved"]
    assert replay.original["calls"] == []


def test_eval_planner_from_runs_replays_the_selected_runs_as_gated_cases(
    author, reviewer, monkeypatch, tmp_path
):
    approved = run_create(author=author, goal_text=REFUND_GOAL)
    advance_run(approved.pk)
    decide_everything(approved, reviewer, approve=True)
    declined = run_create(author=author, goal_text=REFUND_GOAL)
    advance_run(declined.pk)
    declined = decide_everything(declined, reviewer, approve=False)
    ledger = LedgerEntry.objects.count()
    forbid_tools(monkeypatch)
    baseline = tmp_path / "replay.json"

    out = StringIO()
    call_command(
        "eval_planner",
        "--model",
        "offline",
        "--from-runs",
        "status=completed,tool=issue_refund,days=7",
        "--save-baseline",
        str(baseline),
        stdout=out,
    )
    text = out.getvalue()
    assert f"PASS run-{approved.pk}" in text
    assert f"run-{declined.pk}" not in text  # not completed, and it never called issue_refund
    assert json.loads(baseline.read_text())["categories"]["replay"]["rate"] == 1.0

    out = StringIO()
    call_command(
        "eval_planner",
        "--model",
        "offline",
        "--from-runs",
        f"status={declined.status}",
        stdout=out,
    )
    assert f"FAIL run-{declined.pk}" in out.getvalue()
    assert "step 2 issue_refund: not recorded" in out.getvalue()
    assert LedgerEntry.objects.count() == ledger

    with pytest.raises(SystemExit):  # the declined run's replay fails the gate
        call_command(
            "eval_planner",
            "--model",
            "offline",
            "--from-runs",
            "tool=order_total",
            "--baseline",
            str(baseline),
            stdout=StringIO(),
        )


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("colour=red", "unknown key 'colour'"),
        ("status=done", "status 'done' is not one of"),
        ("days=-1", "days must be a whole number above 0"),
        ("status", "'status' is not key=value"),
        ("status=completed", "selects no runs"),
    ],
)
def test_a_bad_runs_query_is_a_clear_error(query, message):
    with pytest.raises(CommandError, match=message):
        call_command("eval_planner", "--model", "offline", "--from-runs", query, stdout=StringIO())


def test_an_operator_replays_a_run_from_its_page_and_reads_the_stored_diff_later(
    author, reviewer, client, django_user_model, monkeypatch
):
    from django.urls import reverse

    from plans.models import RunReplay
    from plans.roles import roles_ensure

    run = run_create(author=author, goal_text=REFUND_GOAL)
    advance_run(run.pk)
    run = decide_everything(run, reviewer, approve=False)  # the refund was never issued
    forbid_tools(monkeypatch)
    operator = django_user_model.objects.create_user("otto", password="otto-pass-123")
    operator.groups.add(roles_ensure()["operators"])

    client.force_login(reviewer)  # sees every run, but is no operator
    page = client.get(reverse("plans:run_detail", args=[run.pk]))
    assert reverse("plans:run_replays", args=[run.pk]) in page.content.decode()
    assert client.post(reverse("plans:run_replays", args=[run.pk])).status_code == 403
    assert b'name="model"' not in client.get(reverse("plans:run_replays", args=[run.pk])).content

    client.force_login(operator)
    response = client.post(reverse("plans:run_replays", args=[run.pk]))
    stored = RunReplay.objects.get(run=run)
    assert response.status_code == 302
    assert response["Location"] == reverse("plans:run_replay", args=[run.pk, stored.pk])
    assert stored.requested_by == operator and stored.not_recorded == 1
    assert LedgerEntry.objects.count() == 0

    client.force_login(reviewer)  # anyone who sees the run reads its replays
    listing = client.get(reverse("plans:run_replays", args=[run.pk])).content.decode()
    assert f"#{stored.pk}" in listing and "otto" in listing
    page = client.get(reverse("plans:run_replay", args=[run.pk, stored.pk])).content.decode()
    assert "step 2 issue_refund: not recorded" in " ".join(page.split())
    assert "only in the replay" in page


def test_the_command_stores_its_replay(author):
    from plans.models import RunReplay

    run = run_create(author=author, goal_text=REFUND_GOAL)
    out = StringIO()
    call_command("replay", str(run.pk), "--model", "offline", stdout=out)
    stored = RunReplay.objects.get(run=run)
    assert f"stored as replay {stored.pk}: /runs/{run.pk}/replays/{stored.pk}/" in out.getvalue()
    assert stored.model == "offline" and stored.diff["plan"]


def test_a_call_that_timed_out_but_replied_late_is_served_its_late_result(
    author, reviewer, monkeypatch
):
    from django.utils import timezone

    from plans.models import Step

    run = run_create(author=author, goal_text=REFUND_GOAL)
    advance_run(run.pk)
    run = decide_everything(run, reviewer, approve=True)
    call = ToolCall.objects.get(run=run, tool="issue_refund")
    took = call.result
    # As a refund past its time limit is recorded: outcome unknown, then its late reply.
    ToolCall.objects.filter(pk=call.pk).update(
        error="timed out after 30 s; outcome unknown",
        result=None,
        late_result=took,
        late_arrived_at=timezone.now(),
    )
    Step.objects.filter(pk=call.step_id).update(status="failed", result=None)
    forbid_tools(monkeypatch)

    steps = {s["tool"]: s for s in replay_json(run.pk)["steps"]}

    assert steps["issue_refund"]["status"] == "recorded"
    assert steps["issue_refund"]["result"] == took


def test_the_plan_diff_compares_resolved_calls_step_by_step():
    from decimal import Decimal

    from plans.evals.replay import RECORDED, UNRESOLVED, Replay, ReplayStep
    from plans.llm import Usage

    original = {
        "steps": [
            {"id": 1, "tool": "price", "resolved_args": {"item": "a"}},
            {"id": 2, "tool": "price", "resolved_args": {"item": "b"}},
            {"id": 3, "tool": "echo", "resolved_args": {"text": "x"}},
        ],
        "calls": [],
        "answer": "",
        "model_calls": 0,
        "cost_usd": Decimal(0),
        "tokens": {"input_tokens": 0},
    }
    steps = [
        ReplayStep(id=1, tool="price", args="{{0}}", resolved_args={"item": "a"}, status=RECORDED),
        ReplayStep(id=2, tool="price", args={}, resolved_args={"item": "c"}, status=NOT_RECORDED),
        ReplayStep(id=4, tool="echo", args={}, resolved_args=None, status=UNRESOLVED),
    ]
    replay = Replay(
        run_id=1,
        model="offline",
        prompt_version="p",
        route="plan",
        plan_problems=[],
        steps=steps,
        answer="",
        usage=Usage(),
        model_calls=0,
        cost_usd=Decimal(0),
        original=original,
    )

    assert replay.diff()["plan"] == [
        {
            "step": 1,
            "change": "unchanged",
            "original": {"tool": "price", "args": {"item": "a"}},
            "replay": {"tool": "price", "args": {"item": "a"}, "status": RECORDED},
        },
        {
            "step": 2,
            "change": "changed",
            "original": {"tool": "price", "args": {"item": "b"}},
            "replay": {"tool": "price", "args": {"item": "c"}, "status": NOT_RECORDED},
        },
        {
            "step": 3,
            "change": "removed",
            "original": {"tool": "echo", "args": {"text": "x"}},
            "replay": None,
        },
        {
            "step": 4,
            "change": "added",
            "original": None,
            # Unresolved in the replay: shown as planned, as the original's steps are read.
            "replay": {"tool": "echo", "args": {}, "status": UNRESOLVED},
        },
    ]


def test_the_replay_plans_with_the_catalog_the_run_was_planned_with(author, monkeypatch):
    from plans.evals import replay as replay_module
    from plans.llm.offline import PRICE_GOAL, OfflineModel
    from plans.runtime import advance

    sent = {}

    class Recording(OfflineModel):
        def __init__(self, who):
            super().__init__()
            self.who = who

        def complete(self, request, *, on_text=None):
            if request.purpose == "plan":
                sent[self.who] = request.cached_prefix()
            return super().complete(request, on_text=on_text)

    monkeypatch.setattr(advance, "get_model", lambda: Recording("run"))
    monkeypatch.setattr(replay_module, "model_named", lambda name: Recording("replay"))
    run = run_create(author=author, goal_text=PRICE_GOAL)
    advance_run(run.pk)

    replay_json(run.pk)

    assert "result_slice" not in sent["run"]  # no result is held before the first plan
    assert sent["replay"] == sent["run"]


def test_a_replayed_plan_cut_off_at_max_tokens_is_repaired_with_a_higher_limit(author, monkeypatch):
    """The replay repairs a plan as a run does: a reply cut off at its limit gets twice the room."""
    from plans.evals import replay as replay_module
    from plans.llm import Completion, Usage
    from plans.llm.offline import PRICE_GOAL, OfflineModel

    limits = []

    class CutFirstPlan(OfflineModel):
        def complete(self, request, *, on_text=None):
            if request.purpose in ("plan", "repair"):
                limits.append(request.max_tokens)
            if len(limits) == 1:
                return Completion('{"steps": [{"id": 1,', Usage(), "offline", 0, "max_tokens")
            return super().complete(request, on_text=on_text)

    run = run_create(author=author, goal_text=PRICE_GOAL)
    advance_run(run.pk)
    monkeypatch.setattr(replay_module, "model_named", lambda name: CutFirstPlan())

    data = replay_json(run.pk)

    assert limits[1] == 2 * limits[0]
    assert data["route"] == "plan" and data["plan_problems"] == []
