"""The evals page: experiments, and two of them side by side with the cases that changed."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required, permission_required
from django.http import HttpResponse
from django.shortcuts import render
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_GET

from plans.engine.text import whole_number
from plans.selectors.evals import experiment_comparison, experiments_recent
from plans.views.params import SignedInRequest

COMPARISON_ID = "comparison"


@login_required
@permission_required("plans.view_costs", raise_exception=True)
@require_GET
def evals(request: SignedInRequest) -> HttpResponse:
    experiments = experiments_recent()
    a_id = whole_number(request.GET.get("a", ""))
    b_id = whole_number(request.GET.get("b", ""))
    if a_id is None and b_id is None and len(experiments) >= 2:
        # By default: the latest experiment against the one before it.
        a_id, b_id = experiments[1].pk, experiments[0].pk
    comparison = None
    problem = ""
    if a_id is not None and b_id is not None:
        comparison = experiment_comparison(a_id=a_id, b_id=b_id)
        if comparison is None:
            problem = f"There is no experiment {a_id} or {b_id} to compare."
    elif request.GET.get("a") or request.GET.get("b"):
        problem = "Pick two experiments to compare."
    context = {
        "experiments": experiments,
        "comparison": comparison,
        "problem": problem,
        "a_id": a_id,
        "b_id": b_id,
        "comparison_id": COMPARISON_ID,
    }
    htmx = request.htmx
    partial = bool(htmx) and htmx.target == COMPARISON_ID and not htmx.history_restore_request
    template = "plans/evals.html#comparison" if partial else "plans/evals.html"
    response = render(request, template, context)
    patch_vary_headers(response, ("HX-Request", "HX-Target"))
    return response
