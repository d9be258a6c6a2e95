"""Numbers as the audit and cost pages show them (dollars, tokens, durations and rates), and
the audit's stored values."""

import json
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

from django import template
from django.utils import timezone
from django.utils.formats import number_format
from django.utils.html import format_html
from django.utils.safestring import SafeString

from plans.ui.charts import shown_json, shown_text

register = template.Library()

# A value whose JSON is this short stays on one line: read at a glance, and written by json's C
# encoder (an indented one goes through its Python encoder, which took most of the time a
# 500-step run's audit page spent on its values).
JSON_ONE_LINE = 60
# Longer values (a tool's whole web page, say) are collapsed: a 500-step run's arguments and
# results otherwise make a page of megabytes to scroll through.
JSON_COLLAPSED_OVER = 300
JSON_PREVIEW_CHARS = 120
# A value longer than this (a 500-step plan's event, a tool's whole report) stays on one line,
# wrapped: indenting it costs json's Python encoder more than the rest of its row.
JSON_INDENTED_MAX = 10_000
_ONE_LINE = json.JSONEncoder(ensure_ascii=False, default=str)


@register.filter
def json_block(value: Any) -> SafeString:
    """The value's JSON in a <pre>, hidden characters shown: on one line if short or very long,
    else indented; if long, a one-line preview opening onto the whole."""
    compact = shown_text(_ONE_LINE.encode(value))
    if len(compact) <= JSON_ONE_LINE:
        return format_html('<pre class="json">{}</pre>', compact)
    text = shown_json(value, indent=2) if len(compact) <= JSON_INDENTED_MAX else compact
    if len(text) <= JSON_COLLAPSED_OVER:
        return format_html('<pre class="json">{}</pre>', text)
    preview = " ".join(compact[: JSON_PREVIEW_CHARS * 2].split())[:JSON_PREVIEW_CHARS]
    return format_html(
        '<details class="json-long"><summary><code>{}…</code> '
        '<span class="muted small">{} characters</span></summary><pre class="json">{}</pre>'
        "</details>",
        preview,
        f"{len(text):,}",
        text,
    )


@register.filter
def time_of_day(value: Any) -> SafeString:
    """<time> with the full ISO time, showing the time of day to the microsecond.

    Written directly: with truncatechars, Django's date filter (twice a row) was a sixth of a
    500-step run's audit rendering."""
    if value is None:
        return SafeString("")  # as the date filter wrote nothing
    local = timezone.localtime(value)
    return format_html(
        '<time datetime="{}">{}</time>', local.isoformat(), local.strftime("%H:%M:%S.%f")
    )


@register.filter
def short_hash(value: Any, shown: int = 12) -> str:
    """The first `shown` characters of a hash or key and an ellipsis (its title has it whole)."""
    text = str(value or "")
    return text if len(text) <= shown + 1 else f"{text[:shown]}…"


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
