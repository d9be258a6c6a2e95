"""Numbers as the audit and cost pages show them: dollars, tokens, durations and rates."""

from decimal import Decimal, InvalidOperation
from typing import Any

from django import template
from django.utils.formats import number_format

register = template.Library()


@register.filter
def usd(value: Any, places: int = 6) -> str:
    """$0.000123 — six decimals by default (model calls cost fractions of a cent)."""
    try:
        amount = Decimal(str(value))
    except (InvalidOperation, ValueError, TypeError):
        return ""
    text = number_format(amount, decimal_pos=int(places), force_grouping=True)
    return f"-${text[1:]}" if text.startswith("-") else f"${text}"


@register.filter
def tokens(value: Any) -> str:
    """A whole count with thousands separators: 12,345."""
    if value is None or value == "":
        return ""
    try:
        return number_format(round(float(value)), force_grouping=True)
    except (ValueError, TypeError):
        return ""


@register.filter
def duration_ms(value: Any) -> str:
    """Milliseconds in the largest sensible unit: 850 ms, 12.4 s, 3 min 05 s, 2 h 03 min."""
    if value is None or value == "":
        return "—"
    try:
        ms = float(value)
    except (ValueError, TypeError):
        return "—"
    if ms < 1000:
        return f"{ms:.0f} ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, seconds = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


@register.filter
def percent(value: Any) -> str:
    """A 0..1 rate as 12.5%; no rate (nothing to divide by) as a dash."""
    if value is None or value == "":
        return "—"
    return f"{float(value) * 100:.1f}%"
