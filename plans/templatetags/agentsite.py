"""Template filters for showing run data: JSON exactly as stored, readable."""

import json
from typing import Any

from django import template

register = template.Library()


@register.filter
def pretty_json(value: Any) -> str:
    """Indented JSON of a stored value (the template escapes it like any other text)."""
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


@register.filter
def status_label(status: str) -> str:
    """A status as people write it: "awaiting_approval" -> "awaiting approval"."""
    return str(status).replace("_", " ")
