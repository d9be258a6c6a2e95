"""Review analytics for operators: what waits, time to decide, and how requests end."""

from __future__ import annotations

from django.contrib.auth.decorators import permission_required
from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from plans.engine.text import whole_number
from plans.selectors.reviews import DEFAULT_REVIEW_WINDOW, REVIEW_WINDOWS, review_report
from plans.views.params import SignedInRequest


@permission_required("plans.view_costs", raise_exception=True)
@require_GET
def reviews(request: SignedInRequest) -> HttpResponse:
    days = whole_number(request.GET.get("days", ""))
    window = days if days in REVIEW_WINDOWS else DEFAULT_REVIEW_WINDOW
    context = {"report": review_report(days=window), "windows": REVIEW_WINDOWS}
    return render(request, "plans/reviews.html", context)
