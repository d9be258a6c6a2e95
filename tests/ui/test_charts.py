"""Server-side SVG charts: bars, timelines, axes, and labels that stay text."""

import xml.etree.ElementTree as ET

import pytest

from plans.ui.charts import (
    Bar,
    Span,
    bar_chart_svg,
    gantt_svg,
    nice_scale,
    seconds_label,
    usd_label,
)
from tests.html_safety import IMG, SCRIPT

NS = {"svg": "http://www.w3.org/2000/svg"}


def parse(svg):
    return ET.fromstring(svg)  # noqa: S314 - our own output


def texts(root):
    return ["".join(element.itertext()) for element in root.iterfind(".//svg:text", NS)]


def test_a_bar_chart_has_one_bar_per_value_with_its_tooltip():
    bars = [Bar("Nov 1", 0.5, "Nov 1: $0.5"), Bar("Nov 2", 0.0), Bar("Nov 3", 1.0)]

    root = parse(bar_chart_svg(bars, value_label=usd_label, title="Spend"))

    rects = root.findall("svg:rect[@class='bar']", NS)
    assert len(rects) == 3
    assert [rect.find("svg:title", NS).text for rect in rects] == ["Nov 1: $0.5", "Nov 2", "Nov 3"]
    heights = [float(rect.get("height")) for rect in rects]
    assert heights[1] == 0 and heights[2] == pytest.approx(2 * heights[0])


def test_the_value_axis_covers_the_largest_bar_with_labelled_ticks():
    root = parse(bar_chart_svg([Bar("a", 0.037)], value_label=usd_label, title="Spend"))

    assert texts(root)[:5] == ["$0", "$0.01", "$0.02", "$0.03", "$0.04"]


def test_category_labels_are_thinned_out_when_there_are_many_bars():
    bars = [Bar(f"day {n}", n) for n in range(1, 31)]

    root = parse(bar_chart_svg(bars, value_label=str, title="Spend", max_labels=10))

    labels = [text for text in texts(root) if text.startswith("day")]
    assert labels[0] == "day 1" and labels[-1] == "day 30"
    assert len(labels) <= 11


def test_an_empty_chart_still_draws_its_axis():
    root = parse(bar_chart_svg([], value_label=usd_label, title="Nothing yet"))

    assert root.find("svg:title", NS).text == "Nothing yet"
    assert "$0" in texts(root)
    assert not root.findall("svg:rect[@class='bar']", NS)


def test_chart_labels_and_tooltips_are_text_not_markup():
    svg = bar_chart_svg([Bar(SCRIPT, 1.0, IMG)], value_label=usd_label, title=SCRIPT)
    root = parse(svg)

    assert "<script" not in svg and "<img" not in svg
    assert SCRIPT in texts(root)
    assert root.find("svg:rect/svg:title", NS).text == IMG
    assert not [name for element in root.iter() for name in element.attrib if name.startswith("on")]


def test_a_timeline_draws_each_span_under_its_group_in_proportion_to_time():
    spans = [
        Span("Round 1", "1 · price", 0.0, 1.0, "#cdf0d6"),
        Span("Round 1", "2 · price", 0.0, 2.0, "#cdf0d6"),
        Span("Round 2", "3 · calculator", 2.0, 2.5, "#ffd2cc", title="step 3 failed"),
    ]

    root = parse(gantt_svg(spans, title="Timeline"))

    rects = root.findall("svg:rect[@class='span']", NS)
    widths = [float(rect.get("width")) for rect in rects]
    starts = [float(rect.get("x")) for rect in rects]
    assert widths[1] == pytest.approx(2 * widths[0], rel=0.01)
    assert starts[2] == pytest.approx(starts[0] + widths[1], rel=0.01)
    assert rects[2].get("fill") == "#ffd2cc"
    assert rects[2].find("svg:title", NS).text == "step 3 failed"
    labels = texts(root)
    assert labels.index("Round 1") < labels.index("1 · price") < labels.index("Round 2")
    assert "0" in labels and "1 s" in labels  # the time axis


def test_a_span_still_running_is_drawn_open_ended():
    root = parse(
        gantt_svg([Span("Round 1", "1 · slow", 0, 3, "#cfe2ff", open_ended=True)], title="t")
    )

    assert root.find("svg:rect[@class='span']", NS).get("stroke-dasharray") == "4 2"


def test_timeline_labels_are_text_not_markup():
    svg = gantt_svg([Span(SCRIPT, IMG, 0, 1, "#fff", title=SCRIPT)], title="t")

    assert "<script" not in svg and "<img" not in svg
    assert SCRIPT in texts(parse(svg))


@pytest.mark.parametrize(
    ("maximum", "expected"),
    [(0, (1.0, 0.25)), (0.037, (0.04, 0.01)), (7, (8, 2)), (100, (100, 25)), (0.9, (1.0, 0.25))],
)
def test_axis_scales_use_round_steps(maximum, expected):
    top, step = nice_scale(maximum)

    assert (top, step) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("value", "label"),
    [(0, "$0"), (0.000123, "$0.000123"), (0.05, "$0.05"), (2.5, "$2.5"), (1234, "$1,234")],
)
def test_dollar_axis_labels_are_as_short_as_the_amount_allows(value, label):
    assert usd_label(value) == label


def test_second_labels_switch_units():
    assert [seconds_label(v) for v in (0, 0.25, 1.5, 300)] == ["0", "250 ms", "1.5 s", "5 min"]


def test_visible_text_replaces_exactly_the_characters_xml_refuses():
    import unicodedata

    from plans.ui.charts import visible_text

    for code in range(0x20000):  # every plane with Cc or Cs characters, and the next
        char = chr(code)
        refused = unicodedata.category(char) in ("Cc", "Cs") or char in ("\ufffe", "\uffff")
        assert visible_text(f"a{char}b") == ("a\ufffdb" if refused else f"a{char}b"), hex(code)
