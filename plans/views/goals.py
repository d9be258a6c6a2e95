"""Handing the agent a goal, and the run page: plan review, live steps, answer, cancel."""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any

from django.conf import settings
from django.contrib.auth.context_processors import PermWrapper
from django.db.models import Count, Q
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect

from plans.journal.events import event_message
from plans.llm import OFFLINE_DEMO_GOALS
from plans.models import Approval, Goal, Plan, Run, RunEvent, Step
from plans.roles import may_submit_goals
from plans.selectors.approvals import step_decisions
from plans.selectors.audit import plan_diff_from_parent
from plans.selectors.runs import StepProgress
from plans.services.approvals import ApprovalRefused
from plans.services.changes import plan_changes_request
from plans.services.plans import plan_current, plan_decide
from plans.services.runs import GoalRejected, run_cancel, run_create, run_start
from plans.ui.graphs import STATUS_COLOURS, plan_svg
from plans.views.approvals import refusal_status
from plans.views.forms import PlanDecisionForm
from plans.views.params import SignedInRequest, visible_run_or_404, whole_number

RECENT_RUNS = 10
NOT_AN_AUTHOR = (
    "Only authors can hand the agent a goal. Ask an administrator to add you to the "
    "“authors” group."
)
# Events after which the whole plan section (graph, steps, problems) is re-rendered.
PLAN_KINDS = frozenset({"plan_created", "plan_invalid"})
LIVE_EVENTS = "plans/run_detail.html#live_events"


@require_http_methods(["GET", "POST"])
def new_goal(request: SignedInRequest) -> HttpResponse:
    """The goal form; a submitted goal becomes a started run and the browser goes to its page."""
    may_submit = may_submit_goals(request.user)
    goal_text, error, status = "", "", 200
    if request.method == "POST":
        # A suggestion button carries its goal in its own field, so the textbox needs no JS.
        goal_text = request.POST.get("suggestion") or request.POST.get("goal", "")
        if not may_submit:
            error, status = NOT_AN_AUTHOR, 403
        else:
            try:
                run = run_create(
                    author=request.user,
                    goal_text=goal_text,
                    require_plan_approval=request.POST.get("require_plan_approval") == "1",
                    agent=(
                        Goal.Agent.REACT
                        if request.POST.get("agent") == Goal.Agent.REACT
                        else Goal.Agent.PLAN_EXECUTE
                    ),
                )
            except GoalRejected as rejected:
                error, status = str(rejected), 422
            else:
                run_start(run)
                url = reverse("plans:run_detail", args=[run.pk])
                return HttpResponseClientRedirect(url) if request.htmx else redirect(url)
    context = {
        "goal_text": goal_text,
        "require_plan_approval": request.POST.get("require_plan_approval") == "1",
        "agent": request.POST.get("agent", Goal.Agent.PLAN_EXECUTE),
        "error": error,
        "may_submit": may_submit,
        "not_an_author": NOT_AN_AUTHOR,
        "suggestions": OFFLINE_DEMO_GOALS if settings.AGENTSITE_MODEL_BACKEND == "offline" else [],
        "recent_runs": Run.objects.filter(goal__author=request.user)
        .select_related("goal")
        .order_by("-created_at")[:RECENT_RUNS],
    }
    template = "plans/new_goal.html#goal_form" if request.htmx else "plans/new_goal.html"
    return render(request, template, context, status=status)


@require_GET
def run_detail(request: SignedInRequest, run_id: int) -> HttpResponse:
    """The plan to review and the run as it happens (the page then follows a websocket)."""
    run = visible_run_or_404(request, run_id)
    return render(request, "plans/run_detail.html", run_page_context(run))


@require_GET
def step_detail(request: SignedInRequest, run_id: int, step_id: int) -> HttpResponse:
    """One step in full: arguments, inputs, result, approvals, attempts (side panel or page)."""
    run = visible_run_or_404(request, run_id)
    plan = plan_shown(run)
    if plan is None:
        raise Http404("This run has no plan yet.")
    step = get_object_or_404(Step, plan=plan, step_id=step_id)
    if request.htmx:
        return render(request, "plans/run_detail.html#step_panel", step_panel_context(step))
    return render(request, "plans/run_detail.html", run_page_context(run, selected=step))


@require_POST
def run_cancel_view(request: SignedInRequest, run_id: int) -> HttpResponse:
    """Stop a run (anyone who may see it may stop it): nothing new starts; in-flight steps end."""
    run = visible_run_or_404(request, run_id)
    run = run_cancel(run=run, user=request.user)
    if request.htmx:
        return render(request, "plans/run_detail.html#run_header", {"run": run})
    return redirect("plans:run_detail", run_id=run.pk)


@require_POST
def plan_decide_view(request: SignedInRequest, run_id: int) -> HttpResponse:
    """A reviewer approves or rejects the whole plan (the plan-approval policy)."""
    run = visible_run_or_404(request, run_id)
    plan = plan_current(run)
    if plan is None:
        raise Http404("This run has no plan to decide on.")
    form = PlanDecisionForm(request.POST)
    if not form.is_valid():
        return HttpResponse("expected a decision: approve or reject", status=400)
    status, error = 200, ""
    approve, reason = form.approve, form.cleaned_data["reason"]
    try:
        if form.changes:
            plan_changes_request(plan=plan, reviewer=request.user, instructions=reason)
        else:
            plan_decide(plan=plan, reviewer=request.user, approve=approve, reason=reason)
    except ApprovalRefused as refused:
        status, error = refusal_status(request, approve or form.changes, reason), str(refused)
    run.refresh_from_db()
    if request.htmx:
        context = {"run": run, "plan_error": error}
        return render(request, "plans/run_detail.html#run_header", context, status=status)
    if error:
        context = {**run_page_context(run), "plan_error": error}
        return render(request, "plans/run_detail.html", context, status=status)
    return redirect("plans:run_detail", run_id=run.pk)


@require_GET
def run_events(request: SignedInRequest, run_id: int) -> HttpResponse:
    """The updates for every event after ?after=N, as the websocket would push them."""
    run = visible_run_or_404(request, run_id)
    after = whole_number(request.GET.get("after", "0"))
    if after is None:
        return HttpResponse("after must be a whole number", status=400)
    events = [event_message(e) for e in RunEvent.objects.filter(run=run, seq__gt=after)]
    if not events:
        return HttpResponse(status=204)
    # With the request: the header's plan decision is for those who may decide.
    return render(request, LIVE_EVENTS, live_events_context(run.pk, events))


# --- shared with the websocket consumer -----------------------------------------------------


def plan_shown(run: Run) -> Plan | None:
    """The plan the run page shows: the current valid one, else the latest (invalid) attempt."""
    return plan_current(run) or run.plans.order_by("-version").first()


def run_page_context(run: Run, *, selected: Step | None = None) -> dict[str, Any]:
    # The log first, then the state: what the page shows is then at least as new as the last
    # event it lists, and the socket's pushes after that bring it up to date. (Read the other
    # way round, a change committed in between would show in the timeline but nowhere else.)
    events = [event_message(e) for e in run.events.all()]
    last_seq = events[-1]["seq"] if events else 0
    run.refresh_from_db()
    plan = plan_shown(run)
    steps = list(plan.steps.all()) if plan else []
    return {
        "run": run,
        "plan": plan,
        "steps": steps,
        "replan": replan_context(plan),
        "graph_svg": graph_svg(plan, steps),
        "status_colours": STATUS_COLOURS.items(),
        "totals": run_totals(run, steps),
        "timeline": [timeline_entry(e) for e in events],  # oldest first, rounds as headings
        "last_seq": last_seq,
        "ws_url": f"/ws/runs/{run.pk}/?after={last_seq}",
        **(step_panel_context(selected) if selected else {}),
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
    run = Run.objects.get(pk=run_id)
    plan = plan_shown(run)
    svg = graph_svg(plan, list(plan.steps.all()) if plan else [])
    if not svg:
        return ""
    return render_to_string("plans/run_detail.html#graph", {"graph_svg": svg, "oob": True})


def live_events_context(
    run_id: int, events: list[dict[str, Any]], *, graph: bool = True
) -> dict[str, Any]:
    """Out-of-band swaps bringing a run page up to date with these events (seq ascending)."""
    run = Run.objects.select_related("goal__author").get(pk=run_id)
    plan = plan_shown(run)
    steps = list(plan.steps.all()) if plan else []
    kinds = {event["kind"] for event in events}
    plan_changed = bool(kinds & PLAN_KINDS)
    touched = {event["payload"].get("step") for event in events} - {None}
    return {
        "oob": True,
        "run": run,
        "plan": plan,
        "steps": steps,
        "plan_changed": plan_changed,
        "replan": replan_context(plan) if plan_changed else {},
        "steps_changed": bool(touched) and not plan_changed,
        "graph_svg": graph_svg(plan, steps) if plan_changed or (touched and graph) else "",
        "status_colours": STATUS_COLOURS.items(),
        "answer_changed": bool(kinds & {"answer_finished", "answer_checked"}),
        "totals": run_totals(run, steps),
        "timeline": [timeline_entry(e) for e in events],  # oldest first, rounds as headings
        "first_seq": events[0]["seq"],
        "last_seq": events[-1]["seq"],
    }


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
    approvals = run.approvals.aggregate(
        requested=Count("pk"),
        decided=Count("pk", filter=~Q(decision=Approval.Decision.PENDING)),
    )
    return {
        "tokens": run.total_tokens,
        "cost_usd": run.cost_usd,
        "model_calls": run.model_call_count,
        "round": run.round_count,
        "rounds": max((s.round for s in steps), default=0),
        "approvals_requested": approvals["requested"],
        "approvals_decided": approvals["decided"],
        "progress": StepProgress.of(Counter(step.status for step in steps)),
    }


def step_panel_context(step: Step) -> dict[str, Any]:
    dependencies = Step.objects.filter(plan_id=step.plan_id, step_id__in=step.depends_on)
    return {
        "selected": step,
        "selected_inputs": list(dependencies),
        "selected_approvals": list(step.approvals.select_related("reviewer")),
        "selected_calls": list(step.tool_calls.order_by("attempt")),
    }


def timeline_entry(event: dict[str, Any]) -> dict[str, Any]:
    at = event["at"]
    return {**event, "at": datetime.fromisoformat(at) if isinstance(at, str) else at}
