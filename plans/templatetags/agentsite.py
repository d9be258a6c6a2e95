"""Template filters for showing run data: JSON exactly as stored, readable."""

from typing import Any

from django import template

from plans.models import RunEvent
from plans.ui.charts import shown_json

register = template.Library()


@register.filter
def pretty_json(value: Any) -> str:
    """Indented JSON of a stored value, hidden characters shown (see plans.ui.charts.shown_json)."""
    return shown_json(value, indent=2)


@register.filter
def status_label(status: str) -> str:
    """A status as people write it: "awaiting_approval" -> "awaiting approval"."""
    return str(status).replace("_", " ")


_EVENT_KINDS = frozenset(RunEvent.Kind.values)


@register.filter
def event_template(kind: str) -> str:
    """The template that words one timeline event, chosen by its kind."""
    return f"plans/events/{kind if kind in _EVENT_KINDS else 'other'}.html"
