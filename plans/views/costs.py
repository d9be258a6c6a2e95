"""Spend and health across every run: what the agent costs and how often it goes wrong."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required, permission_required
from django.core.cache import cache
from django.http import HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from plans.guards.circuits import circuit_states
from plans.selectors.costs import COST_WINDOWS, DEFAULT_COST_WINDOW, cost_report
from plans.views.params import SignedInRequest, whole_number

# The report scans a month of calls (about 1.5 s at 100,000 runs on SQLite); a minute-old
# figure is fine for spend and health, and the page says how old it is.
REPORT_CACHE_SECONDS = 60


@login_required
@permission_required("plans.view_costs", raise_exception=True)
@require_GET
def costs(request: SignedInRequest) -> HttpResponse:
    days = whole_number(request.GET.get("days", ""))
    window = days if days in COST_WINDOWS else DEFAULT_COST_WINDOW
    report = cache.get_or_set(
        f"cost-report:{window}:{timezone.localdate()}",
        lambda: cost_report(days=window),
        REPORT_CACHE_SECONDS,
    )
    context = {"report": report, "windows": COST_WINDOWS, "breakers": circuit_states()}
    return render(request, "plans/costs.html", context)
