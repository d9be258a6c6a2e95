"""Handing the agent a goal, and the run page: plan review, live steps, answer, cancel."""

from __future__ import annotations

from django.conf import settings
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect

from plans.engine.text import whole_number
from plans.llm import OFFLINE_DEMO_GOALS
from plans.models import Goal
from plans.roles import may_submit_goals
from plans.selectors.plans import plan_current, plan_shown, step_get
from plans.selectors.runs import run_events_after, runs_progress, runs_recent_of
from plans.services.approvals import ApprovalRefused
from plans.services.changes import plan_changes_request
from plans.services.plans import plan_decide
from plans.services.runs import (
    NOT_AN_AUTHOR,
    GoalRejected,
    run_cancel,
    run_create,
    run_start,
)
from plans.ui.run_page import LIVE_UPDATE, live_events_context, run_page_context, step_panel_context
from plans.views.forms import PlanDecisionForm
from plans.views.params import SignedInRequest, visible_run_or_404
from plans.views.refusals import refusal_status

RECENT_RUNS = 10


@require_http_methods(["GET", "POST"])
def new_goal(request: SignedInRequest) -> HttpResponse:
    """The goal form; a submitted goal becomes a started run and the browser goes to its page."""
    may_submit = may_submit_goals(request.user)
    goal_text, error, status = "", "", 200
    if request.method == "POST":
        # A suggestion button carries its goal in its own field, so the textbox needs no JS.
        goal_text = request.POST.get("suggestion") or request.POST.get("goal", "")
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
                via="web",
            )
        except GoalRejected as rejected:
            error, status = str(rejected), refusal_status(rejected)
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
    }
    if request.htmx:  # the form alone, after a refused goal
        return render(request, "plans/new_goal.html#goal_form", context, status=status)
    recent = list(runs_recent_of(request.user, limit=RECENT_RUNS))
    context |= {"recent_runs": recent, "progress": runs_progress([run.pk for run in recent])}
    return render(request, "plans/new_goal.html", context, status=status)


@require_GET
def run_detail(request: SignedInRequest, run_id: int) -> HttpResponse:
    """The plan to review and the run as it happens (the page then follows a websocket)."""
    run = visible_run_or_404(request, run_id)
    # A page of the steps at a time (?steps_after=n): a 500-step plan is not read at once.
    steps_after = whole_number(request.GET.get("steps_after", "")) or 0
    context = run_page_context(run, steps_after=steps_after)
    return render(request, "plans/run_detail.html", context)


@require_GET
def step_detail(request: SignedInRequest, run_id: int, step_id: int) -> HttpResponse:
    """One step in full: arguments, inputs, result, approvals, attempts (side panel or page)."""
    run = visible_run_or_404(request, run_id)
    plan = plan_shown(run)
    if plan is None:
        raise Http404("This run has no plan yet.")
    step = step_get(plan, step_id)
    if step is None:
        raise Http404("No such step.")
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
        status, error = refusal_status(refused), str(refused)
    run.refresh_from_db()
    if request.htmx:
        context = {"run": run, "plan": plan_current(run), "plan_error": error}
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
    events = run_events_after(run, after)
    if not events:
        return HttpResponse(status=204)
    # With the request: the header's plan decision is for those who may decide.
    return render(request, LIVE_UPDATE, live_events_context(run.pk, events))
