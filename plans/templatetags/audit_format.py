"""Numbers as the audit and cost pages show them: dollars, tokens, durations and rates."""

from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

from django import template
from django.utils.formats import number_format
from django.utils.html import format_html
from django.utils.safestring import SafeString

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


@register.filter
def money(value: Any) -> SafeString:
    """Dollars as people read them, the exact amount in a tooltip.

    Cents from a cent up ($1,234.57); four significant figures below it ($0.0001235), since
    one model call costs a fraction of a cent; "—" for no amount.
    """
    try:
        amount = Decimal(str(value))
    except (InvalidOperation, ValueError, TypeError):
        return format_html("{}", "—")
    if not amount.is_finite():
        return format_html("{}", "—")
    exact = format(amount.normalize(), "f") if amount else "0"
    size = abs(amount)
    if size == 0 or size >= Decimal("0.01"):
        cents = amount.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
        shown = number_format(cents, decimal_pos=2, force_grouping=True)
    else:
        places = 3 - size.adjusted()  # adjusted(): the power of ten of the leading digit
        rounded = amount.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)
        shown = format(rounded, "f").rstrip("0")
    text = f"-${shown[1:]}" if shown.startswith("-") else f"${shown}"
    sign = "-" if amount < 0 else ""
    return format_html(
        '<span class="money" title="{} exactly">{}</span>', f"{sign}${exact.lstrip('-')}", text
    )
