"""Template filters for the human-in-the-loop controls."""

from __future__ import annotations

from django import template

from plans.models import Run
from plans.selectors.approvals import changes_refusal as refusal_for

register = template.Library()


@register.filter
def changes_refusal(run: Run) -> str:
    """Why "Request changes" is not offered for this run ("" when it is)."""
    return refusal_for(run)
