"""The run page's context and the fragments its socket pushes: one builder for both."""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any

from django.contrib.auth.context_processors import PermWrapper
from django.template.loader import render_to_string
from django.utils.safestring import mark_safe

from plans.models import Plan, Run, Step
from plans.selectors.approvals import step_decisions
from plans.selectors.audit import plan_diff_from_parent
from plans.selectors.plans import (
    plan_shown,
    plan_steps_list,
    run_approval_counts,
    run_priced_apart,
    step_approvals,
    step_calls,
    step_inputs,
    step_question,
)
from plans.selectors.runs import StepProgress, progress_status, run_events_after, run_get
from plans.tools.human import ASK_HUMAN
from plans.ui.graphs import STATUS_COLOURS, plan_svg

# Events after which the whole plan section (graph, steps, problems) is re-rendered.
PLAN_KINDS = frozenset({"plan_created", "plan_invalid"})
LIVE_EVENTS = "plans/run_detail.html#live_events"


def _run_state(run: Run, events: list[dict[str, Any]]) -> tuple[Plan | None, list[Step], dict]:
    """What the page and its pushes both show of a run: its plan, steps, totals and events."""
    plan = plan_shown(run)
    steps = plan_steps_list(plan)
    return (
        plan,
        steps,
        {
            "run": run,
            "plan": plan,
            "steps": steps,
            "status_colours": STATUS_COLOURS.items(),
            "totals": run_totals(run, steps),
            "timeline": [timeline_entry(e) for e in events],  # oldest first, rounds as headings
        },
    )


def run_page_context(run: Run, *, selected: Step | None = None) -> dict[str, Any]:
    # The log first, then the state: what the page shows is then at least as new as the last
    # event it lists, and the socket's pushes after that bring it up to date. (Read the other
    # way round, a change committed in between would show in the timeline but nowhere else.)
    events = run_events_after(run, 0)
    last_seq = events[-1]["seq"] if events else 0
    run.refresh_from_db()
    plan, steps, shown = _run_state(run, events)
    return {
        **shown,
        "replan": replan_context(plan),
        "graph_svg": graph_svg(plan, steps),
        "last_seq": last_seq,
        "ws_url": f"/ws/runs/{run.pk}/?after={last_seq}",
        **(step_panel_context(selected) if selected else {}),
    }


def live_events_context(
    run_id: int, events: list[dict[str, Any]], *, graph: bool = True
) -> dict[str, Any]:
    """Out-of-band swaps bringing a run page up to date with these events (seq ascending)."""
    run = run_get(run_id)
    plan, steps, shown = _run_state(run, events)
    kinds = {event["kind"] for event in events}
    plan_changed = bool(kinds & PLAN_KINDS)
    touched = {event["payload"].get("step") for event in events} - {None}
    return {
        **shown,
        "oob": True,
        "plan_changed": plan_changed,
        "replan": replan_context(plan) if plan_changed else {},
        "steps_changed": bool(touched) and not plan_changed,
        "graph_svg": graph_svg(plan, steps) if plan_changed or (touched and graph) else "",
        "answer_changed": bool(kinds & {"answer_finished", "answer_checked"}),
        "first_seq": events[0]["seq"],
        "last_seq": events[-1]["seq"],
    }


def live_fragment(
    run_id: int, events: list[dict[str, Any]], viewer: Any, *, graph: bool = True
) -> str:
    """A socket's push for one viewer: the header it re-sends offers forms by permission.

    graph=False leaves a step change's graph out (graph_fragment sends it after), so the
    event is not held up by the graph's drawing; a new plan is always sent whole.
    """
    # No request over a socket, so no context processors: add what the auth one would.
    context = {
        **live_events_context(run_id, events, graph=graph),
        "user": viewer,
        "perms": PermWrapper(viewer),
    }
    return render_to_string(LIVE_EVENTS, context)


def live_fragment_needs_graph(events: list[dict[str, Any]]) -> bool:
    """Whether a push without its graph (live_fragment(graph=False)) leaves one to send."""
    kinds = {event["kind"] for event in events}
    touched = {event["payload"].get("step") for event in events} - {None}
    return bool(touched) and not kinds & PLAN_KINDS


def graph_fragment(run_id: int) -> str:
    """The run's graph as it is now, as an out-of-band swap ("" if it has none)."""
    run = run_get(run_id)
    plan = plan_shown(run)
    svg = graph_svg(plan, plan_steps_list(plan))
    if not svg:
        return ""
    return render_to_string("plans/run_detail.html#graph", {"graph_svg": svg, "oob": True})


def replan_context(plan: Plan | None) -> dict[str, Any]:
    """For a replanned version: its diff against the version it replaced, and the reviewers'
    requests for changes that led to it (shown before anything of it runs)."""
    diff = plan_diff_from_parent(plan)
    if diff is None or plan is None or plan.parent is None:
        return {}
    return {"diff": diff, "change_requests": plan.parent.change_requests}


def answer_delta_fragment(text: str) -> str:
    """A piece of the answer as it streams, appended (escaped) to the answer box."""
    return render_to_string("plans/run_detail.html#answer_delta", {"text": text})


def graph_svg(plan: Plan | None, steps: list[Step]) -> str:
    """The plan drawn with what became of each step; an invalid plan drawn as proposed."""
    if plan is None or (plan.is_valid and not steps):
        return ""
    # plan_svg escapes every label and strips scripts and links: the markup is ours to inline.
    return mark_safe(plan_svg(plan, steps, decisions=step_decisions(plan)))  # noqa: S308


def run_totals(run: Run, steps: list[Step]) -> dict[str, Any]:
    approvals = run_approval_counts(run)
    progress = StepProgress.of(Counter(progress_status(step.status, step.tool) for step in steps))
    return {
        "tokens": run.total_tokens,
        "cost_usd": run.cost_usd,
        "model_calls": run.model_call_count,
        **run_priced_apart(run),
        # Of the plan shown: a replanned version that has not started is at no round yet,
        # whatever rounds an earlier version reached.
        "round": max((s.round for s in steps if s.status != Step.Status.PENDING), default=0),
        "rounds": max((s.round for s in steps), default=0),
        "approvals_requested": approvals["requested"],
        "approvals_decided": approvals["decided"],
        "progress": progress,
        "status_text": _status_text(run, progress),
    }


def _status_text(run: Run, progress: StepProgress) -> str:
    """The run's status in words: a run that waits only for a person's answer says so."""
    if run.status == Run.Status.AWAITING_APPROVAL and progress.answers and not progress.waiting:
        return "waiting for an answer"
    return run.status.replace("_", " ")


def step_panel_context(step: Step) -> dict[str, Any]:
    return {
        "selected": step,
        "selected_inputs": step_inputs(step),
        "selected_approvals": step_approvals(step),
        "selected_calls": step_calls(step),
        "selected_question": step_question(step) if step.tool == ASK_HUMAN else None,
    }


def timeline_entry(event: dict[str, Any]) -> dict[str, Any]:
    at = event["at"]
    return {**event, "at": datetime.fromisoformat(at) if isinstance(at, str) else at}
