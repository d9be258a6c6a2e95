"""Run again and fork from a plan: a new run linked to the one it came from."""

from __future__ import annotations

from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from plans.engine.text import whole_number
from plans.roles import may_submit_goals
from plans.selectors.plans import plans_valid
from plans.services.forks import fork_preview, plan_json_of, run_fork, run_rerun
from plans.services.runs import GoalRejected
from plans.views.params import SignedInRequest, visible_run_or_404
from plans.views.refusals import refusal_status


@require_http_methods(["GET", "POST"])
def run_again(request: SignedInRequest, run_id: int) -> HttpResponse:
    """GET: what running the goal again would repeat (the fork page's preview of the origin's
    last plan); POST: the same goal, planned afresh, as a new run."""
    origin = visible_run_or_404(request, run_id)
    error, status = "", 200
    if request.method == "POST":
        try:
            run = run_rerun(origin=origin, author=request.user)
        except GoalRejected as refused:
            error, status = str(refused), refusal_status(refused)
        else:
            return redirect("plans:run_detail", run_id=run.pk)
    plans = plans_valid(origin)
    last = plans[-1] if plans else None
    context = {
        "run": origin,
        "last_plan": last,
        "preview": fork_preview(origin=origin, plan_text=plan_json_of(last)) if last else None,
        "error": error,
        "may_submit": may_submit_goals(request.user),
    }
    return render(request, "plans/run_again.html", context, status=status)


@require_http_methods(["GET", "POST"])
def fork(request: SignedInRequest, run_id: int) -> HttpResponse:
    """The plan version's JSON in an editor with its problems and a preview; POST runs it."""
    origin = visible_run_or_404(request, run_id)
    plans = plans_valid(origin)
    asked = whole_number(request.GET.get("version", "") or request.POST.get("version", ""))
    chosen = next((p for p in plans if p.version == asked), plans[-1] if plans else None)
    error, status = "", 200
    if request.method == "POST":
        plan_text = request.POST.get("plan", "")
        try:
            run = run_fork(
                origin=origin,
                author=request.user,
                plan_text=plan_text,
                version=chosen.version if chosen else None,
            )
        except GoalRejected as refused:
            error, status = str(refused), refusal_status(refused)
        else:
            return redirect("plans:run_detail", run_id=run.pk)
    else:
        plan_text = plan_json_of(chosen) if chosen else '{"steps": []}'
    context = {
        "run": origin,
        "versions": plans,
        "chosen": chosen,
        "plan_text": plan_text,
        "preview": fork_preview(origin=origin, plan_text=plan_text),
        "error": error,
        "may_submit": may_submit_goals(request.user),
    }
    return render(request, "plans/run_fork.html", context, status=status)


@require_POST
def fork_check(request: SignedInRequest, run_id: int) -> HttpResponse:
    """Live validation as the plan is edited: the problems list and the preview."""
    origin = visible_run_or_404(request, run_id)
    preview = fork_preview(origin=origin, plan_text=request.POST.get("plan", ""))
    return render(request, "plans/run_fork.html#fork_check", {"run": origin, "preview": preview})
