"""Small server-side SVG charts: built as XML elements, so every label is escaped on output."""

from __future__ import annotations

import functools
import json
import math
import re
import unicodedata
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

SVG_NS = "http://www.w3.org/2000/svg"
FONT = "system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif"
INK = "#344054"
MUTED = "#667085"
GRID = "#eaecf0"
BAR = "#4f6bed"
ET.register_namespace("", SVG_NS)


@dataclass(frozen=True)
class Bar:
    """One bar: its axis label, its value and the tooltip text."""

    label: str
    value: float
    title: str = ""


@dataclass(frozen=True)
class Span:
    """One timeline bar: seconds from the start of the chart, grouped under a heading."""

    group: str
    label: str
    start: float
    end: float
    fill: str
    title: str = ""
    open_ended: bool = False  # still running: drawn to the right edge, hatched


def bar_chart_svg(
    bars: Sequence[Bar],
    *,
    value_label: Callable[[float], str],
    title: str,
    width: int = 1100,
    height: int = 260,
    max_labels: int = 10,
) -> str:
    """A vertical bar chart with a value axis (nice ticks) and every n-th category label."""
    left, right, top, bottom = 64, 12, 14, 34
    plot_w, plot_h = width - left - right, height - top - bottom
    root = _svg(width, height, title, "chart bar-chart")
    top_value, step = nice_scale(max((bar.value for bar in bars), default=0))
    for tick in range(round(top_value / step) + 1):
        value = tick * step
        y = top + plot_h - plot_h * value / top_value
        _line(root, left, y, width - right, y, GRID)
        _text(root, left - 8, y + 4, value_label(value), anchor="end", size=11, fill=MUTED)
    _line(root, left, top + plot_h, width - right, top + plot_h, "#98a2b3")
    if bars:
        slot = plot_w / len(bars)
        bar_w = max(1.0, slot * 0.72)
        every = max(1, math.ceil(len(bars) / max_labels))
        for index, bar in enumerate(bars):
            x = left + slot * index + (slot - bar_w) / 2
            bar_h = plot_h * max(bar.value, 0) / top_value
            rect = ET.SubElement(
                root,
                f"{{{SVG_NS}}}rect",
                {
                    "x": _n(x),
                    "y": _n(top + plot_h - bar_h),
                    "width": _n(bar_w),
                    "height": _n(bar_h),
                    "rx": "2",
                    "fill": BAR,
                    "class": "bar",
                },
            )
            ET.SubElement(rect, f"{{{SVG_NS}}}title").text = visible_text(bar.title or bar.label)
            if index % every == 0 or index == len(bars) - 1:
                _text(root, x + bar_w / 2, height - 12, bar.label, anchor="middle", size=11)
    return ET.tostring(root, encoding="unicode")


def gantt_svg(
    spans: Sequence[Span], *, title: str, width: int = 900, horizon: float | None = None
) -> str:
    """A timeline: one bar per span from start to end, under group headings, with a time axis
    (to `horizon` seconds, when the spans are a page of a longer timeline)."""
    label_w, right, top, row_h = 190, 16, 30, 22
    groups: dict[str, list[Span]] = {}
    for span in spans:
        groups.setdefault(span.group, []).append(span)
    rows = sum(len(members) + 1 for members in groups.values())
    height = top + rows * row_h + 10
    root = _svg(width, height, title, "chart gantt")
    plot_w = width - label_w - right
    latest = max((span.end for span in spans), default=0)
    horizon, step = nice_scale(max(latest, horizon or 0), ticks=6)
    for tick in range(round(horizon / step) + 1):
        x = label_w + plot_w * tick * step / horizon
        _line(root, x, top - 6, x, height - 6, GRID)
        _text(root, x, top - 12, seconds_label(tick * step), anchor="middle", size=11, fill=MUTED)
    y = top
    for group, members in groups.items():
        _text(root, 8, y + 15, group, size=12, weight="600")
        y += row_h
        for span in members:
            _text(root, 20, y + 15, _shorten(span.label, 28), size=11)
            x0 = label_w + plot_w * max(span.start, 0) / horizon
            x1 = label_w + plot_w * max(span.end, span.start) / horizon
            rect = ET.SubElement(
                root,
                f"{{{SVG_NS}}}rect",
                {
                    "x": _n(x0),
                    "y": _n(y + 4),
                    "width": _n(max(x1 - x0, 2.0)),
                    "height": str(row_h - 8),
                    "rx": "3",
                    "fill": span.fill,
                    "stroke": "#475467" if not span.open_ended else "#1d4ed8",
                    "stroke-width": "0.8",
                    "stroke-dasharray": "4 2" if span.open_ended else "none",
                    "class": "span",
                },
            )
            ET.SubElement(rect, f"{{{SVG_NS}}}title").text = visible_text(span.title or span.label)
            y += row_h
    return ET.tostring(root, encoding="unicode")


def nice_scale(maximum: float, *, ticks: int = 4) -> tuple[float, float]:
    """An axis top and tick step of 1, 2 or 5 times a power of ten covering the maximum."""
    if not maximum or maximum <= 0 or not math.isfinite(maximum):
        return 1.0, 0.25
    raw = maximum / ticks
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    return step * math.ceil(maximum / step - 1e-9), step


def usd_label(value: float) -> str:
    """Dollar axis labels: as many decimals as small amounts need, no more."""
    if value == 0:
        return "$0"
    if value >= 100:
        return f"${value:,.0f}"
    if value >= 1:
        return f"${value:,.2f}".rstrip("0").rstrip(".")
    decimals = min(6, max(2, 2 - math.floor(math.log10(value))))
    return f"${value:.{decimals}f}".rstrip("0")


def seconds_label(value: float) -> str:
    if value == 0:
        return "0"
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 120:
        return f"{value:g} s"
    return f"{value / 60:g} min"


def _svg(width: int, height: int, title: str, css_class: str) -> ET.Element:
    root = ET.Element(
        f"{{{SVG_NS}}}svg",
        {
            "width": str(width),
            "height": str(height),
            "viewBox": f"0 0 {width} {height}",
            "role": "img",
            "class": css_class,
            "font-family": FONT,
        },
    )
    ET.SubElement(root, f"{{{SVG_NS}}}title").text = visible_text(title)
    return root


def _line(root: ET.Element, x1: float, y1: float, x2: float, y2: float, stroke: str) -> None:
    ET.SubElement(
        root,
        f"{{{SVG_NS}}}line",
        {"x1": _n(x1), "y1": _n(y1), "x2": _n(x2), "y2": _n(y2), "stroke": stroke},
    )


def _text(
    root: ET.Element,
    x: float,
    y: float,
    text: str,
    *,
    anchor: str = "start",
    size: int = 12,
    fill: str = INK,
    weight: str = "400",
) -> None:
    element = ET.SubElement(
        root,
        f"{{{SVG_NS}}}text",
        {
            "x": _n(x),
            "y": _n(y),
            "text-anchor": anchor,
            "font-size": str(size),
            "font-weight": weight,
            "fill": fill,
        },
    )
    element.text = visible_text(text)


def shown_json(value: Any, *, indent: int | None = None) -> str:
    r"""JSON of value for people to read, hidden characters written as \u escapes.

    A reviewer decides on exact arguments: "\u202egnp.exe" must not pass for "exe.png". The
    escapes are JSON's own, so the text still reads back as the same value.
    """
    separators = None if indent else (",", ":")
    text = json.dumps(value, indent=indent, separators=separators, ensure_ascii=False, default=str)
    return shown_text(text)


def shown_text(text: str) -> str:
    """The text with its hidden characters written as \\u escapes (see shown_json)."""
    return _NON_ASCII.sub(_shown, text)


_NON_ASCII = re.compile(r"[^\x00-\x7f]")
# Characters that change how the text around them looks without showing themselves: format
# characters (bidi overrides such as U+202E, zero-width ones), line/paragraph separators and
# the C1 controls (U+0080-U+009F: U+009B is a terminal's one-byte CSI); JSON escapes the ASCII
# control characters itself.
_HIDDEN_CATEGORIES = frozenset({"Cf", "Zl", "Zp", "Cc"})


def _shown(match: re.Match[str]) -> str:
    return _shown_char(match.group())


@functools.lru_cache(maxsize=4096)
def _shown_char(char: str) -> str:
    if unicodedata.category(char) not in _HIDDEN_CATEGORIES:
        return char
    return json.dumps(char)[1:-1]  # "\u202e"; a surrogate pair beyond the BMP


def hidden_char(char: str) -> bool:
    """Whether char changes or hides what text shows without showing itself.

    Format characters (bidi controls, zero-width ones, tags), line and paragraph separators,
    control characters other than tab and newline, surrogates and non-characters.
    """
    if char in "\t\n":
        return False
    category = unicodedata.category(char)
    return category in ("Cf", "Zl", "Zp", "Cc", "Cs") or char in ("\ufffe", "\uffff")


def spelled_char(char: str) -> str:
    """A hidden character as people can see it: "⟨U+202E⟩"."""
    return f"\u27e8U+{ord(char):04X}\u27e9"


_CANDIDATE = re.compile(r"[^\x20-\x7e\n]")


def spelled_text(text: str) -> str:
    """The text with every hidden character spelled out (for titles and other plain text)."""
    return _CANDIDATE.sub(
        lambda match: spelled_char(match.group()) if hidden_char(match.group()) else match.group(),
        text,
    )


def terminal_text(text: str, *, one_line: bool = True) -> str:
    """Text from a model, a tool or a server made safe to print on a terminal.

    Every control character (ESC, CR, backspace...) and hidden one (bidi controls, zero-width)
    is spelled out as "⟨U+001B⟩", so the text can neither move the cursor, erase or recolour
    what is printed, nor read in another order; ``one_line`` spells newlines too, so a value
    cannot start a line of its own. JSON output uses shown_json instead.
    """
    spelled = spelled_text(text)
    return spelled.replace("\n", spelled_char("\n")) if one_line else spelled


def spelled_parts(text: str) -> list[tuple[str, bool]]:
    """The text as (piece, hidden) pairs: runs of ordinary text and single hidden characters."""
    parts: list[tuple[str, bool]] = []
    start = 0
    for match in _CANDIDATE.finditer(text):
        if hidden_char(match.group()):
            if match.start() > start:
                parts.append((text[start : match.start()], False))
            parts.append((match.group(), True))
            start = match.end()
    if start < len(text):
        parts.append((text[start:], False))
    return parts


def visible_text(text: str) -> str:
    """Text XML accepts: control characters, surrogates and non-characters become \ufffd."""
    return _XML_UNFIT.sub("\ufffd", text)


# Unicode's control characters (category Cc), surrogates (Cs) and the two non-characters XML
# refuses: one regular expression, not a category lookup per character of every label.
_XML_UNFIT = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _n(value: float) -> str:
    return f"{value:.1f}"
