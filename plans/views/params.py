"""What every view needs: the signed-in request, and the run the viewer may see."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.http import Http404, HttpRequest
from django_htmx.middleware import HtmxDetails

from plans.models import Run
from plans.selectors.runs import run_visible_get


class SignedInRequest(HttpRequest):
    """A request past LoginRequiredMiddleware and django-htmx's middleware."""

    user: User
    htmx: HtmxDetails


def visible_run_or_404(request: HttpRequest, run_id: int) -> Run:
    """The run, or 404 when it is missing or hidden: whether it exists is itself not shown."""
    run = run_visible_get(user=request.user, run_id=run_id)
    if run is None:
        raise Http404("No such run.")
    return run
