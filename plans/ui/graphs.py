"""The plan graph: DOT built from untrusted step data, drawn by graphviz, sanitised and cached.

Every label is model or user text, so it is HTML-escaped into graphviz HTML-like labels; the
SVG graphviz returns is parsed and rebuilt from an allowlist (no scripts, links, animations or
event handlers) before anyone sees it.
"""

from __future__ import annotations

import hashlib
import html
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Iterable

import graphviz
from django.core.cache import cache
from django.utils.safestring import SafeString, mark_safe

from plans.models import Plan, Step
from plans.ui.charts import shown_json, shown_text
from plans.ui.charts import visible_text as _visible

# Fill colours by step status: the graph, its legend, the timeline and the live page share them.
STATUS_COLOURS: dict[str, str] = {
    "pending": "#eef1f5",
    "running": "#cfe2ff",
    "awaiting_approval": "#ffe7a1",
    "succeeded": "#cdf0d6",
    "failed": "#ffd2cc",
    "skipped": "#dcdfe4",
    "blocked": "#e9d5ff",
}
BORDER_COLOUR = "#475467"
DESTRUCTIVE_BORDER_COLOUR = "#b42318"

DOT_COMMAND: tuple[str, ...] = ("dot", "-Tsvg")
DOT_TIMEOUT_S = 5.0
DOT_MEMORY_BYTES = 512 * 1024 * 1024
MAX_SVG_BYTES = 5 * 1024 * 1024
MAX_STEPS_DRAWN = 300  # dot's layout time grows fast; no real plan comes near this
LABEL_LINE_CHARS = 40
LABEL_MAX_ARGS = 4
CACHE_SECONDS = 24 * 3600
FAILURE_CACHE_SECONDS = 60  # a graph that times out must not cost 5 s of CPU per page view

SVG_NS = "http://www.w3.org/2000/svg"
XLINK_NS = "http://www.w3.org/1999/xlink"
ET.register_namespace("", SVG_NS)
ET.register_namespace("xlink", XLINK_NS)

# What graphviz draws a plan with; anything else (script, a, foreignObject, set, animate*,
# image, use, style, ...) is dropped together with its content.
ALLOWED_ELEMENTS = frozenset(
    {
        "svg",
        "g",
        "title",
        "desc",
        "polygon",
        "polyline",
        "path",
        "ellipse",
        "circle",
        "rect",
        "line",
        "text",
        "tspan",
        "defs",
        "linearGradient",
        "radialGradient",
        "stop",
    }
)
UNSAFE_URL = re.compile(r"(javascript|vbscript|data)\s*:", re.IGNORECASE)


class GraphError(Exception):
    """The graph could not be drawn; the message says why and is shown (escaped) to the user."""


def plan_svg(plan: Plan, steps: Iterable[Step]) -> SafeString:
    """The plan as sanitised inline SVG (or an error box); identical input is drawn once."""
    return mark_safe(_plan_svg(plan, list(steps)))  # noqa: S308 - rebuilt from an allowlist


def _plan_svg(plan: Plan, steps: list[Step]) -> str:
    steps = sorted(steps, key=lambda step: step.step_id)
    if len(steps) > MAX_STEPS_DRAWN:
        return error_svg(
            f"The plan has {len(steps)} steps; graphs are drawn for up to {MAX_STEPS_DRAWN}."
        )
    source = plan_dot(plan, steps)
    key = "plan-svg:" + hashlib.sha256(source.encode()).hexdigest()
    cached = cache.get(key)
    if cached is not None:
        return cached
    try:
        svg = svg_sanitise(dot_render(source))
    except GraphError as error:
        svg = error_svg(f"The plan graph could not be drawn: {error}")
        cache.set(key, svg, FAILURE_CACHE_SECONDS)
        return svg
    cache.set(key, svg, CACHE_SECONDS)
    return svg


def plan_dot(plan: Plan, steps: list[Step]) -> str:
    """DOT source for the plan: a node per step, an edge from each dependency to its dependant.

    The graphviz package writes the DOT and quotes every attribute value; labels are HTML-like
    (``<...>``, which it leaves as they are), so their text is escaped here.
    """
    font = "Helvetica,Arial,sans-Serif"
    dot = graphviz.Digraph(
        "plan",
        graph_attr={
            "id": f"plan-graph-{int(plan.pk or 0)}",
            "rankdir": "TB",
            "bgcolor": "transparent",
            "nodesep": "0.35",
            "ranksep": "0.45",
            "margin": "0",
            "fontname": font,
        },
        node_attr={
            "shape": "box",
            "style": "rounded,filled",
            "fontname": font,
            "fontsize": "11",
            "color": BORDER_COLOUR,
            "penwidth": "1.2",
            "margin": "0.14,0.07",
        },
        edge_attr={"color": "#98a2b3", "arrowsize": "0.7", "penwidth": "1.1"},
    )
    known = {step.step_id for step in steps}
    for step in steps:
        status = step.status if step.status in STATUS_COLOURS else "pending"
        classes = f"step status-{status}" + (" destructive" if step.destructive else "")
        attributes = {
            "id": f"step-{int(step.step_id)}",
            "class": classes,
            "fillcolor": STATUS_COLOURS[status],
        }
        if step.destructive:
            attributes |= {
                "shape": "box",
                "style": "filled,bold",
                "peripheries": "2",
                "color": DESTRUCTIVE_BORDER_COLOUR,
            }
        dot.node(f"s{int(step.step_id)}", f"<{_node_label(step)}>", **attributes)
    for step in steps:
        for dependency in step.depends_on or []:
            if isinstance(dependency, int) and dependency in known:
                dot.edge(
                    f"s{dependency}",
                    f"s{int(step.step_id)}",
                    id=f"edge-{dependency}-{int(step.step_id)}",
                )
    return dot.source


def _node_label(step: Step) -> str:
    """A graphviz HTML-like label: escaped text lines, left-aligned, with our own markup only."""
    glyph = "\u26a0 " if step.destructive else ""
    title = f"{glyph}{int(step.step_id)} \u00b7 {_shorten(_visible(step.tool))}"
    lines = [f"<B>{html.escape(title)}</B>"]
    args = step.args if isinstance(step.args, dict) else {"args": step.args}
    for name, value in list(args.items())[:LABEL_MAX_ARGS]:
        text = f"{_visible(shown_text(str(name)))}={_visible(shown_json(value))}"
        lines.append(html.escape(_shorten(text)))
    if len(args) > LABEL_MAX_ARGS:
        lines.append(html.escape(f"+{len(args) - LABEL_MAX_ARGS} more"))
    if step.destructive:
        lines.append('<FONT COLOR="#b42318">destructive: needs approval</FONT>')
    return '<BR ALIGN="LEFT"/>'.join(lines) + '<BR ALIGN="LEFT"/>'


def _shorten(text: str, limit: int = LABEL_LINE_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def dot_render(source: str) -> str:
    """Run dot on the source with a time and memory limit; GraphError if it fails."""
    command = list(DOT_COMMAND)
    if shutil.which(command[0]) is None:
        raise GraphError(f"graphviz is not installed ({command[0]!r} was not found)")
    # prlimit applies the limits and execs dot (same pid, so the timeout kills dot itself);
    # subprocess's preexec_fn would do it in Python after fork, which is unsafe with threads.
    prlimit = shutil.which("prlimit")
    if prlimit:
        command = [prlimit, f"--as={DOT_MEMORY_BYTES}", "--", *command]
    try:
        completed = subprocess.run(  # noqa: S603 - fixed argv, the DOT source goes to stdin
            command,
            input=source.encode(),
            capture_output=True,
            timeout=DOT_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as timeout:
        raise GraphError(f"graphviz took longer than {DOT_TIMEOUT_S:g} s") from timeout
    except OSError as error:
        raise GraphError(f"graphviz could not be started ({error.strerror})") from error
    if completed.returncode != 0:
        detail = completed.stderr.decode(errors="replace").strip().splitlines()
        reason = detail[0][:200] if detail else f"exit status {completed.returncode}"
        raise GraphError(f"graphviz failed: {reason}")
    if len(completed.stdout) > MAX_SVG_BYTES:
        raise GraphError("graphviz produced an unreasonably large drawing")
    return completed.stdout.decode("utf-8", errors="replace")


def svg_sanitise(text: str) -> str:
    """Rebuild SVG from an allowlist: no prolog, DTD, scripts, links, animation or handlers."""
    start = text.find("<svg")
    if start < 0:
        raise GraphError("graphviz returned no SVG")
    body = text[start:]
    # Without a DTD the parser knows only XML's five entities: nothing can expand.
    if "<!doctype" in body.lower() or "<!entity" in body.lower():
        raise GraphError("the SVG declares a document type")
    try:
        root = ET.fromstring(body)  # noqa: S314 - DTDs refused above, so no entity expansion
    except ET.ParseError as error:
        raise GraphError(f"graphviz returned malformed SVG ({error})") from error
    if root.tag != f"{{{SVG_NS}}}svg":
        raise GraphError("graphviz returned something other than SVG")
    _clean_element(root)
    root.set("role", "img")
    root.set("class", "plan-graph")
    return ET.tostring(root, encoding="unicode")


def _clean_element(element: ET.Element) -> None:
    _clean_attributes(element)
    for child in list(element):
        tag = child.tag if isinstance(child.tag, str) else ""
        namespace, _, name = tag.rpartition("}")
        if namespace != f"{{{SVG_NS}" or name not in ALLOWED_ELEMENTS:
            element.remove(child)
            continue
        _clean_element(child)


def _clean_attributes(element: ET.Element) -> None:
    for attribute, value in list(element.attrib.items()):
        name = attribute.rpartition("}")[2].lower()
        squeezed = re.sub(r"[\s\x00-\x1f]+", "", value)
        if (
            name.startswith("on")
            or name.endswith("href")
            or UNSAFE_URL.search(squeezed)
            or (name == "style" and "url(" in squeezed.lower())
        ):
            del element.attrib[attribute]


def error_svg(message: str) -> str:
    """A small SVG box stating why there is no graph (the text is escaped by the serialiser)."""
    lines = _wrap(_visible(message), 70)[:6]
    height = 24 + 18 * len(lines)
    root = ET.Element(
        f"{{{SVG_NS}}}svg",
        {
            "width": "520",
            "height": str(height),
            "viewBox": f"0 0 520 {height}",
            "role": "img",
            "class": "plan-graph plan-graph-error",
        },
    )
    ET.SubElement(
        root,
        f"{{{SVG_NS}}}rect",
        {
            "x": "0.5",
            "y": "0.5",
            "width": "519",
            "height": str(height - 1),
            "rx": "6",
            "fill": "#fff4f2",
            "stroke": DESTRUCTIVE_BORDER_COLOUR,
        },
    )
    for index, line in enumerate(lines):
        text = ET.SubElement(
            root,
            f"{{{SVG_NS}}}text",
            {
                "x": "14",
                "y": str(28 + 18 * index),
                "font-family": "Helvetica,Arial,sans-serif",
                "font-size": "13",
                "fill": "#7a271a",
            },
        )
        text.text = line
    return ET.tostring(root, encoding="unicode")


def _wrap(text: str, width: int) -> list[str]:
    lines: list[str] = []
    current = ""
    for word in text.split():
        while len(word) > width:
            if current:
                lines.append(current)
                current = ""
            lines.append(word[:width])
            word = word[width:]
        if current and len(current) + 1 + len(word) > width:
            lines.append(current)
            current = word
        else:
            current = f"{current} {word}" if current else word
    if current:
        lines.append(current)
    return lines or [""]
