"""The run page's context and the fragments its socket pushes: one builder for both."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.auth.context_processors import PermWrapper
from django.template.loader import render_to_string
from django.utils.safestring import mark_safe

from plans.engine.forecast import forecast_error
from plans.models import Plan, Run, Step
from plans.roles import four_eyes_forbids, may_decide
from plans.selectors.approvals import step_decisions
from plans.selectors.audit import neighbour_pages, plan_diff_from_parent
from plans.selectors.plans import (
    plan_shown,
    plan_step_tally,
    plan_steps_list,
    plan_steps_of,
    plan_steps_page,
    run_approval_counts,
    run_priced_apart,
    run_with_goal,
    step_approvals,
    step_calls,
    step_inputs,
    step_question,
)
from plans.selectors.runs import (
    StepProgress,
    run_events_after,
    run_progress_status,
    status_words,
)
from plans.tools.human import ASK_HUMAN
from plans.ui.graphs import MAX_STEPS_DRAWN, STATUS_COLOURS, plan_svg, too_many_steps_svg

# Events after which the whole plan section (graph, steps, problems) is re-rendered.
PLAN_KINDS = frozenset({"plan_created", "plan_invalid"})
ANSWER_KINDS = frozenset({"answer_finished", "answer_checked"})
# A push's timeline rows and last seq: drawn from the events alone, so they go out first.
LIVE_TIMELINE = "plans/run_detail.html#live_timeline"
# What the events changed, one out-of-band swap each, by the id of the element it replaces.
LIVE_PARTS = {
    "plan": "plans/run_detail.html#plan",
    "run-header": "plans/run_detail.html#run_header",
    "run-totals": "plans/run_detail.html#totals",
    "answer": "plans/run_detail.html#answer",
}
# The last event whose changes a page shows: where it resumes after a reconnect.
STATED_SEQ = "plans/run_detail.html#stated_seq"
# The changed steps' rows, swapped one by one: a message of their own, as table rows cannot
# stand beside other elements in one fragment.
STEP_ROWS = "plans/run_detail.html#step_rows"
# Both as one response, for the HTTP catch-up (htmx's own swap unwraps rows in a <template>).
LIVE_UPDATE = "plans/run_detail.html#live_update"
# What a person reads at once: the run page shows a page of its steps (?steps_after=n) and its
# latest events; the audit page has every one. A 500-step run has thousands of events.
RUN_PAGE_STEPS = 50
TIMELINE_SHOWN = 100

# The permission views of a run's pushes. The header's plan decision is all of a push that
# depends on who watches: readers get no form, the goal's author who is also a reviewer gets
# it disabled (four-eyes), other reviewers get it live. One render per view serves every
# socket of that view, so nothing else rendered may depend on the viewer.
READER = "reader"
REVIEWER = "reviewer"
OWN_GOAL_REVIEWER = "own-goal-reviewer"


def push_view(run: Run, viewer: Any) -> str:
    """Which permission view of the run's pushes the viewer gets (as the header decides)."""
    if not may_decide(viewer):
        return READER
    if four_eyes_forbids(run=run, reviewer=viewer, via="web"):
        return OWN_GOAL_REVIEWER
    return REVIEWER


@dataclass(frozen=True)
class LiveState:
    """What a batch of events changed on a run page, for one permission view: out-of-band
    swaps by the id of the element each replaces (LIVE_PARTS), the changed steps' rows, and
    the marker saying the page now shows the batch's changes (sent last)."""

    parts: dict[str, str]
    rows_html: str
    stated_html: str


def _run_state(run: Run, events: list[dict[str, Any]], *, steps_after: int = 0) -> dict[str, Any]:
    """What the page and a push of a new plan both show of a run: plan, steps, totals, events.

    A plan small enough to draw has every step read (the graph shows them); a larger one only
    its counts and the page of steps shown.
    """
    plan = plan_shown(run)
    statuses, started_round, rounds = plan_step_tally(plan)
    total = sum(statuses.values())
    if total <= MAX_STEPS_DRAWN:
        steps: list[Step] | None = plan_steps_list(plan)
        shown = (steps or [])[steps_after : steps_after + RUN_PAGE_STEPS]
    else:
        steps, shown = None, plan_steps_page(plan, after=steps_after, size=RUN_PAGE_STEPS)
    steps_next_after, steps_previous_after = neighbour_pages(
        after=steps_after, shown=len(shown), total=total, size=RUN_PAGE_STEPS
    )
    return {
        "run": run,
        "plan": plan,
        "steps": steps,  # None: too many to draw
        "steps_total": total,
        "shown_steps": shown,
        "steps_after": steps_after,
        "steps_next_after": steps_next_after,
        "steps_previous_after": steps_previous_after,
        "status_colours": STATUS_COLOURS.items(),
        "totals": run_totals(run, statuses, started_round, rounds),
        "timeline": [timeline_entry(e) for e in events],  # oldest first, rounds as headings
    }


def run_page_context(
    run: Run, *, selected: Step | None = None, steps_after: int = 0
) -> dict[str, Any]:
    # The log first, then the state: what the page shows is then at least as new as the last
    # event it lists, and the socket's pushes after that bring it up to date. (Read the other
    # way round, a change committed in between would show in the timeline but nowhere else.)
    events = run_events_after(run, max(0, run.last_seq - TIMELINE_SHOWN))
    last_seq = events[-1]["seq"] if events else 0
    run.refresh_from_db()
    shown = _run_state(run, events, steps_after=steps_after)
    plan = shown["plan"]
    return {
        **shown,
        "timeline_earlier": events[0]["seq"] - 1 if events else 0,
        "replan": replan_context(plan),
        "graph_svg": graph_svg(plan, shown["steps"]),
        "last_seq": last_seq,
        "ws_url": f"/ws/runs/{run.pk}/?after={last_seq}",
        **(step_panel_context(selected) if selected else {}),
    }


def live_events_context(
    run_id: int, events: list[dict[str, Any]], *, graph: bool = True
) -> dict[str, Any]:
    """Out-of-band swaps bringing a run page up to date with these events (seq ascending).

    A new plan is sent whole; otherwise only the rows of the steps the events name, and the
    totals from a count of the steps per status (a 500-step plan's rows are not read).
    """
    run = run_with_goal(run_id)
    kinds = {event["kind"] for event in events}
    plan_changed = bool(kinds & PLAN_KINDS)
    touched = {event["payload"].get("step") for event in events} - {None}
    if plan_changed:
        shown = _run_state(run, events)
        plan, steps, changed_steps = shown["plan"], shown["steps"], []
    else:
        plan = plan_shown(run)
        statuses, started_round, rounds = plan_step_tally(plan)
        shown = {
            "run": run,
            "plan": plan,
            "totals": run_totals(run, statuses, started_round, rounds),
            "timeline": [timeline_entry(e) for e in events],
        }
        changed_steps = plan_steps_of(plan, touched)
        drawn = bool(touched) and graph and sum(statuses.values()) <= MAX_STEPS_DRAWN
        steps = plan_steps_list(plan) if drawn else None
    return {
        **shown,
        "oob": True,
        "plan_changed": plan_changed,
        "replan": replan_context(plan) if plan_changed else {},
        "changed_steps": changed_steps,
        "graph_svg": graph_svg(plan, steps) if plan_changed or (touched and graph) else "",
        "answer_changed": bool(kinds & ANSWER_KINDS),
        "first_seq": events[0]["seq"],
        "last_seq": events[-1]["seq"],
    }


def live_timeline(events: list[dict[str, Any]]) -> str:
    """The events' timeline rows and the page's last seq (the client's resume point), as
    out-of-band swaps. From the events alone: no database read, the same for every viewer."""
    context = {
        "timeline": [timeline_entry(e) for e in events],
        "first_seq": events[0]["seq"],
        "last_seq": events[-1]["seq"],
        "oob": True,
    }
    return render_to_string(LIVE_TIMELINE, context)


def live_state(run_id: int, events: list[dict[str, Any]], viewer: Any) -> LiveState:
    """What these events changed, as the run is now, for one permission view (push_view): any
    viewer of that view may get it. The header and totals always; a new plan whole; the answer
    once it changed; the rows of the steps the events name. A step change's graph is not in
    it (graph_fragment sends it after)."""
    # No request over a socket, so no context processors: add what the auth one would.
    context = {
        **live_events_context(run_id, events, graph=False),
        "user": viewer,
        "perms": PermWrapper(viewer),
    }
    shown = {
        "plan": context["plan_changed"],
        "run-header": True,
        "run-totals": True,
        "answer": context["answer_changed"],
    }
    parts: dict[str, str] = {
        element: render_to_string(LIVE_PARTS[element], context)
        for element, changed in shown.items()
        if changed
    }
    rows = render_to_string(STEP_ROWS, context) if context["changed_steps"] else ""
    stated = render_to_string(STATED_SEQ, context)
    return LiveState(parts=parts, rows_html=rows, stated_html=stated)


def live_fragment_needs_graph(events: list[dict[str, Any]]) -> bool:
    """Whether a push without its graph (live_state) leaves one to send (graph_fragment)."""
    kinds = {event["kind"] for event in events}
    touched = {event["payload"].get("step") for event in events} - {None}
    return bool(touched) and not kinds & PLAN_KINDS


def graph_fragment(run_id: int) -> str:
    """The run's graph as it is now, as an out-of-band swap ("" if it has none, or is a plan
    too large to draw: the page's note on that does not change)."""
    plan = plan_shown(run_with_goal(run_id))
    if plan is not None and sum(plan_step_tally(plan)[0].values()) > MAX_STEPS_DRAWN:
        return ""
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


def graph_svg(plan: Plan | None, steps: list[Step] | None) -> str:
    """The plan drawn with what became of each step; an invalid plan drawn as proposed.

    steps=None: a plan of more than MAX_STEPS_DRAWN steps, whose steps were not all read.
    """
    if plan is None or (plan.is_valid and not steps and steps is not None):
        return ""
    if steps is None:
        return mark_safe(too_many_steps_svg(plan.steps.count()))  # noqa: S308 - error_svg
    # Only a destructive step's node shows its decision.
    decisions = step_decisions(plan) if any(step.destructive for step in steps) else {}
    # plan_svg escapes every label and strips scripts and links: the markup is ours to inline.
    return mark_safe(plan_svg(plan, steps, decisions=decisions))  # noqa: S308


def run_totals(
    run: Run, statuses: Mapping[str, int], started_round: int, rounds: int
) -> dict[str, Any]:
    """The totals bar and the header's progress, from the steps counted per progress status."""
    approvals = run_approval_counts(run)
    progress = StepProgress.of(dict(statuses))
    state = run_progress_status(run.status, progress)
    return {
        "tokens": run.total_tokens,
        "cost_usd": run.cost_usd,
        "forecast_usd": run.forecast_usd,
        "forecast_tools_usd": run.forecast_tools_usd,
        **_forecast_error(run),
        "model_calls": run.model_call_count,
        **run_priced_apart(run),
        "round": started_round,
        "rounds": rounds,
        "approvals_requested": approvals["requested"],
        "approvals_decided": approvals["decided"],
        "progress": progress,
        "status_state": state,
        "status_text": status_words(state),
    }


def _forecast_error(run: Run) -> dict[str, Any]:
    """How far the forecast was off, once the run has ended (before, the cost still grows)."""
    if run.forecast_usd is None or not run.is_terminal:
        return {"forecast_error": None}
    error = forecast_error(run.forecast_usd, run.cost_usd)
    return {"forecast_error": error, "forecast_off": None if error is None else abs(error)}


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
