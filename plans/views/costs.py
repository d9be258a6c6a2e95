"""Spend and health across every run: what the agent costs and how often it goes wrong."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required, permission_required
from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from plans.engine.text import whole_number
from plans.guards.circuits import circuit_states
from plans.selectors.costs import COST_WINDOWS, DEFAULT_COST_WINDOW, cost_report
from plans.ui.reports import cost_daily_svg
from plans.views.params import SignedInRequest


@login_required
@permission_required("plans.view_costs", raise_exception=True)
@require_GET
def costs(request: SignedInRequest) -> HttpResponse:
    # Read from the rollup on every request (milliseconds at a million runs): nothing cached.
    days = whole_number(request.GET.get("days", ""))
    window = days if days in COST_WINDOWS else DEFAULT_COST_WINDOW
    report = cost_report(days=window)
    context = {
        "report": report,
        "daily_svg": cost_daily_svg(report),
        "windows": COST_WINDOWS,
        "breakers": circuit_states(),
    }
    return render(request, "plans/costs.html", context)
