"""What every view needs: numbers read from any text, and the run the viewer may see."""

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


# The largest id a database column holds (a signed 64-bit integer).
MAX_ID = 2**63 - 1


def whole_number(text: str, *, maximum: int = MAX_ID) -> int | None:
    """The text as a whole number from 0 to maximum, or None (str.isdigit() also takes '²')."""
    if not (text.isascii() and text.isdecimal()) or len(text) > len(str(maximum)):
        return None
    number = int(text)
    return number if number <= maximum else None


def visible_run_or_404(request: HttpRequest, run_id: int) -> Run:
    """The run, or 404 when it is missing or hidden: whether it exists is itself not shown."""
    run = run_visible_get(user=request.user, run_id=run_id)
    if run is None:
        raise Http404("No such run.")
    return run
