"""Spend and health across every run: what the agent costs and how often it goes wrong."""

from __future__ import annotations

import logging
import threading
from datetime import timedelta

from django.contrib.auth.decorators import login_required, permission_required
from django.core.cache import cache
from django.db import connection
from django.http import HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from plans.guards.circuits import circuit_states
from plans.selectors.costs import COST_WINDOWS, DEFAULT_COST_WINDOW, CostReport, cost_report
from plans.views.params import SignedInRequest, whole_number

# The report scans a month of calls (about 1.5 s at 100,000 runs on SQLite, ten times that at
# a million); a minute-old figure is fine for spend and health, and the page says how old it is.
REPORT_CACHE_SECONDS = 60

logger = logging.getLogger(__name__)
_refreshing: set[int] = set()
_refreshing_lock = threading.Lock()


def _report_for(window: int) -> CostReport:
    """The window's report as last computed: stale ones are served while a thread recomputes.

    Only the first request after a (cache-clearing) restart waits for the scan; nobody waits
    for a refresh.
    """
    key = f"cost-report:{window}"
    report: CostReport | None = cache.get(key)
    if report is None:
        report = cost_report(days=window)
        cache.set(key, report, None)
        return report
    stale = report.generated_at is None or (
        timezone.now() - report.generated_at > timedelta(seconds=REPORT_CACHE_SECONDS)
    )
    if stale:
        _refresh_in_background(window, key)
    return report


def _refresh_in_background(window: int, key: str) -> None:
    with _refreshing_lock:
        if window in _refreshing:
            return
        _refreshing.add(window)

    def refresh() -> None:
        try:
            cache.set(key, cost_report(days=window), None)
        except Exception:
            logger.exception("could not refresh the %s-day cost report", window)
        finally:
            connection.close()  # this thread's own
            with _refreshing_lock:
                _refreshing.discard(window)

    threading.Thread(target=refresh, name=f"cost-report-{window}", daemon=True).start()


@login_required
@permission_required("plans.view_costs", raise_exception=True)
@require_GET
def costs(request: SignedInRequest) -> HttpResponse:
    days = whole_number(request.GET.get("days", ""))
    window = days if days in COST_WINDOWS else DEFAULT_COST_WINDOW
    report = _report_for(window)
    context = {"report": report, "windows": COST_WINDOWS, "breakers": circuit_states()}
    return render(request, "plans/costs.html", context)
