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
from collections.abc import Iterable, Mapping
from itertools import pairwise
from typing import Any

import graphviz
from django.core.cache import cache
from django.utils.safestring import SafeString, mark_safe

from plans.engine import PlanParseError, parse_planner_output
from plans.models import Approval, Plan, Step
from plans.selectors.runs import AWAITING_ANSWER, progress_status, status_words
from plans.ui.charts import shown_json, shown_text
from plans.ui.charts import visible_text as _visible
from plans.ui.effects import effect_note

# Fill colours by step status (progress_status: a question's wait is its own): the graph, its
# legend, the timeline and the live page share them.
STATUS_COLOURS: dict[str, str] = {
    "pending": "#eef1f5",
    "running": "#cfe2ff",
    "awaiting_approval": "#ffe7a1",
    AWAITING_ANSWER: "#c9eef4",
    "succeeded": "#cdf0d6",
    "failed": "#ffd2cc",
    "skipped": "#dcdfe4",
    "blocked": "#e9d5ff",
}
BORDER_COLOUR = "#475467"
DESTRUCTIVE_BORDER_COLOUR = "#b42318"

# How a node is drawn before _recoloured gives it its status (what graphviz writes for it).
LAYOUT_STATUS = "pending"
_NODE_OPENING = '<g id="step-'
_LAYOUT_CLASS = f' class="node step status-{LAYOUT_STATUS}'
_LAYOUT_FILL = f'fill="{STATUS_COLOURS[LAYOUT_STATUS]}"'

DOT_COMMAND: tuple[str, ...] = ("dot", "-Tsvg")
DOT_TIMEOUT_S = 5.0
DOT_MEMORY_BYTES = 512 * 1024 * 1024
MAX_SVG_BYTES = 5 * 1024 * 1024
MAX_STEPS_DRAWN = 300  # dot's layout time grows fast; no real plan comes near this
LABEL_LINE_CHARS = 40
DESTRUCTIVE_LINE_CHARS = 60
LABEL_MAX_ARGS = 4  # a destructive step lists every argument: a reviewer must see them all
TOOLTIP_CHARS = 500
PROBLEM_COLOUR = "#d92d20"
# "step 3: ..." or "step at position 2: ...": which step a stored problem is about.
_PROBLEM_STEP = re.compile(r"^step (\d+):")
_PROBLEM_POSITION = re.compile(r"^step at position (\d+):")
_MISSING_DEPENDENCY = re.compile(r"depends on step (\d+), which does not exist")
_CYCLE = re.compile(r"^cycle: ([\d\s\->]+)$")
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


def plan_svg(
    plan: Plan, steps: Iterable[Step], *, decisions: Mapping[int, Approval] | None = None
) -> SafeString:
    """The plan as sanitised inline SVG (or an error box); identical input is drawn once.

    decisions (each step's latest approval, plans.selectors.approvals.step_decisions) let a
    destructive node say who approved, edited or rejected it. An invalid plan, which has no
    steps, is drawn as the planner proposed it with its problems marked.
    """
    steps = list(steps)
    if not plan.is_valid and not steps:
        return mark_safe(_invalid_plan_svg(plan))  # noqa: S308 - rebuilt from an allowlist
    return mark_safe(_plan_svg(plan, steps, decisions or {}))  # noqa: S308 - as above


def _plan_svg(plan: Plan, steps: list[Step], decisions: Mapping[int, Approval]) -> str:
    steps = sorted(steps, key=lambda step: step.step_id)
    if len(steps) > MAX_STEPS_DRAWN:
        return too_many_steps_svg(len(steps))
    # A status changes a node's class and fill, never where anything is: graphviz lays the plan
    # out once with every node as a pending one, and each state is that drawing recoloured.
    layout = _drawn(plan_dot(plan, steps, decisions, layout=True))
    return _recoloured(layout, {int(step.step_id): _drawn_status(step) for step in steps})


def too_many_steps_svg(count: int) -> str:
    """What is drawn in place of a plan of more than MAX_STEPS_DRAWN steps."""
    return error_svg(f"The plan has {count} steps; graphs are drawn for up to {MAX_STEPS_DRAWN}.")


def _drawn(source: str) -> str:
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


def _drawn_status(step: Step) -> str:
    """The status a step's node is coloured by."""
    status = progress_status(step.status, step.tool)
    return status if status in STATUS_COLOURS else LAYOUT_STATUS


def _recoloured(layout: str, statuses: Mapping[int, str]) -> str:
    """The layout (every node drawn as a pending one) with each node in its status's class and
    fill colour: the node's group opens with its id and class, and the first fill in it is its
    shape's (text has no fill of that colour; labels are escaped, so none can open a group)."""
    parts = layout.split(_NODE_OPENING)
    for index in range(1, len(parts)):
        step_id, quote, rest = parts[index].partition('"')
        status = statuses.get(int(step_id), LAYOUT_STATUS) if step_id.isdigit() else LAYOUT_STATUS
        if status == LAYOUT_STATUS or not rest.startswith(_LAYOUT_CLASS):
            continue
        rest = f' class="node step status-{status}' + rest.removeprefix(_LAYOUT_CLASS)
        rest = rest.replace(_LAYOUT_FILL, f'fill="{STATUS_COLOURS[status]}"', 1)
        parts[index] = step_id + quote + rest
    return _NODE_OPENING.join(parts)


def plan_dot(
    plan: Plan,
    steps: list[Step],
    decisions: Mapping[int, Approval] | None = None,
    *,
    layout: bool = False,
) -> str:
    """DOT source for the plan: a node per step, an edge from each dependency to its dependant.

    The graphviz package writes the DOT and quotes every attribute value (tooltips are plain
    text); labels are HTML-like (``<...>``, which it leaves as they are), so their text is
    escaped here. layout=True draws every node as a pending one (see _recoloured).
    """
    decisions = decisions or {}
    dot = _digraph(plan)
    known = {step.step_id for step in steps}
    for step in steps:
        status = LAYOUT_STATUS if layout else _drawn_status(step)
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
        tooltip = _tooltip(step, decisions.get(step.step_id))
        if tooltip:
            attributes["tooltip"] = tooltip
        label = _node_label(step, decisions.get(step.step_id))
        dot.node(f"s{int(step.step_id)}", f"<{label}>", **attributes)
    for step in steps:
        for dependency in step.depends_on or []:
            if isinstance(dependency, int) and dependency in known:
                dot.edge(
                    f"s{dependency}",
                    f"s{int(step.step_id)}",
                    id=f"edge-{dependency}-{int(step.step_id)}",
                )
    return dot.source


def _digraph(plan: Plan) -> graphviz.Digraph:
    font = "Helvetica,Arial,sans-Serif"
    return graphviz.Digraph(
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


def _node_label(step: Step, decision: Approval | None = None) -> str:
    """A graphviz HTML-like label: escaped text lines, left-aligned, with our own markup only.

    A destructive step shows the arguments it will run with (resolved, once known), all of them,
    and what became of it: waiting, approved (by whom, edited or not), rejected or expired.
    """
    args: Any = step.args
    if step.destructive and step.resolved_args is not None:
        args = decision.args if decision is not None else step.resolved_args
    lines = _arg_lines(step.tool, step.step_id, args, destructive=step.destructive)
    note = effect_note(step)
    if step.destructive and step.reused_from:
        # Settled by an earlier version's identical call: nothing was asked or called again.
        lines.append(f'<FONT COLOR="#475467">{html.escape(note)}</FONT>')
    elif step.destructive:
        lines.append(_decision_line(step, decision))
    if note and not step.reused_from:
        lines.append(f'<FONT COLOR="{DESTRUCTIVE_BORDER_COLOUR}">{html.escape(note)}</FONT>')
    return '<BR ALIGN="LEFT"/>'.join(lines) + '<BR ALIGN="LEFT"/>'


def _arg_lines(tool: Any, step_id: Any, args: Any, *, destructive: bool) -> list[str]:
    glyph = "\u26a0 " if destructive else ""
    title = f"{glyph}{_visible(shown_text(str(step_id)))} \u00b7 {_shorten(_visible(str(tool)))}"
    lines = [f"<B>{html.escape(title)}</B>"]
    args = args if isinstance(args, dict) else {"args": args}
    shown = list(args.items()) if destructive else list(args.items())[:LABEL_MAX_ARGS]
    limit = DESTRUCTIVE_LINE_CHARS if destructive else LABEL_LINE_CHARS
    for name, value in shown:
        text = f"{_visible(shown_text(str(name)))}={_visible(shown_json(value))}"
        lines.append(html.escape(_shorten(text, limit)))
    if len(args) > len(shown):
        lines.append(html.escape(f"+{len(args) - len(shown)} more"))
    return lines


def _decision_line(step: Step, decision: Approval | None) -> str:
    """What became of a destructive step, in the colour of its outcome."""
    decided = decision is not None and decision.decision != Approval.Decision.PENDING
    if not decided or decision is None:
        if step.status in ("pending", "awaiting_approval", "running"):
            needs = "needs approval"
            if decision is not None and decision.approvals_needed > 1:
                # A two-person (n-of-m) rule: how far along it is.
                needs = f"{decision.approvals_counted} of {decision.approvals_needed} approvals"
            return f'<FONT COLOR="{DESTRUCTIVE_BORDER_COLOUR}">destructive: {needs}</FONT>'
        return f'<FONT COLOR="#475467">destructive: {html.escape(status_words(step.status))}</FONT>'
    if decision.decided_by_rule:
        who = f"rule {decision.rule}"
    elif decision.reviewer is not None:
        who = decision.reviewer.get_username()
    else:  # no person on record: say where it was decided ("the command line", "the time limit")
        who = f"the {decision.get_via_display()}" if decision.via else "the system"
    who = html.escape(_shorten(_visible(shown_text(who)), 48 if decision.decided_by_rule else 30))
    if decision.decision == Approval.Decision.APPROVED:
        edited = " with edits" if decision.args != decision.requested_args else ""
        return f'<FONT COLOR="#067647">\u2713 approved{edited} by {who}</FONT>'
    if decision.decision == Approval.Decision.STALE:
        return f'<FONT COLOR="{DESTRUCTIVE_BORDER_COLOUR}">\u2717 stale: target changed</FONT>'
    if decision.decision == Approval.Decision.EXPIRED:
        return (
            f'<FONT COLOR="{DESTRUCTIVE_BORDER_COLOUR}">\u2717 expired: not decided in time</FONT>'
        )
    return f'<FONT COLOR="{DESTRUCTIVE_BORDER_COLOUR}">\u2717 rejected by {who}</FONT>'


def _tooltip(step: Step, decision: Approval | None = None) -> str:
    """Why a step did not run or failed, the question a step waits to have answered, and a
    destructive step's preview of its effect, as plain text for the node's tooltip (graphviz
    quotes it; the SVG is sanitised after)."""
    lines = []
    if step.error:
        why = {"skipped": "Skipped", "blocked": "Blocked", "failed": "Failed"}.get(step.status, "")
        error = str(step.error)
        said = error.lower().startswith(why.lower())
        lines.append(f"{why}: {error}" if why and not said else error[:1].upper() + error[1:])
    if progress_status(step.status, step.tool) == AWAITING_ANSWER:
        args = step.resolved_args if step.resolved_args is not None else step.args
        question = args.get("question") if isinstance(args, dict) else None
        waiting = status_words(AWAITING_ANSWER).capitalize()
        lines.append(f"{waiting}: {question}" if question else waiting)
    if step.destructive and decision is not None:
        lines += _preview_lines(decision)
    # Line by line: a line break is kept as one (what a title shows), other controls are not.
    text = "\n".join(_visible(shown_text(line)) for line in "\n".join(lines).split("\n"))
    return _shorten(text, TOOLTIP_CHARS)


def _preview_lines(decision: Approval) -> list[str]:
    preview = decision.preview
    if preview is None:
        return ["No preview"]
    if not isinstance(preview, dict) or "error" in preview:
        error = preview.get("error") if isinstance(preview, dict) else "unreadable"
        return [f"No preview: {error}"]
    lines = [f"Preview: {preview.get('summary', '')}"]
    lines += [f"{label}: {value}" for label, value in preview.get("facts", [])]
    lines += [f"\u26a0 {warning}" for warning in preview.get("warnings", [])]
    if decision.changes:
        lines.append("Changed since approved: " + "; ".join(map(str, decision.changes)))
    return lines


def _invalid_plan_svg(plan: Plan) -> str:
    """The plan as the planner proposed it, offending steps and edges marked, problems beside."""
    try:
        data = parse_planner_output(plan.raw_output)
    except PlanParseError as error:
        return error_svg(f"The planner's reply could not be read as a plan: {error}")
    raw_steps = data.get("steps")
    if not isinstance(raw_steps, list) or not raw_steps:
        return error_svg("The plan has no steps: " + "; ".join(map(str, plan.problems or [])))
    if len(raw_steps) > MAX_STEPS_DRAWN:
        return too_many_steps_svg(len(raw_steps))
    return _drawn(invalid_plan_dot(plan, raw_steps))


def invalid_plan_dot(plan: Plan, raw_steps: list[Any]) -> str:
    """DOT of a plan that failed validation, drawn from the steps as proposed."""
    problems = [str(problem) for problem in plan.problems or []]
    offending_ids = {int(m.group(1)) for p in problems if (m := _PROBLEM_STEP.match(p))}
    offending_positions = {int(m.group(1)) for p in problems if (m := _PROBLEM_POSITION.match(p))}
    cycle_edges: set[tuple[int, int]] = set()
    for problem in problems:
        match = _CYCLE.match(problem)
        if match:
            chain = [int(part) for part in re.findall(r"\d+", match.group(1))]
            # "1 -> 3": step 1 depends on step 3, drawn as an edge from 3 to 1.
            cycle_edges |= {(after, before) for before, after in pairwise(chain)}
    dot = _digraph(plan)
    nodes: dict[Any, str] = {}
    for position, raw in enumerate(raw_steps, 1):
        raw = raw if isinstance(raw, dict) else {}
        step_id = raw.get("id")
        name = f"s{step_id}" if _is_id(step_id) and step_id not in nodes else f"p{position}"
        if _is_id(step_id):
            nodes.setdefault(step_id, name)
        bad = position in offending_positions or (_is_id(step_id) and step_id in offending_ids)
        label_id = step_id if step_id is not None else f"#{position}"
        lines = _arg_lines(raw.get("tool", "?"), label_id, raw.get("args", {}), destructive=False)
        if bad:
            lines.append(f'<FONT COLOR="{PROBLEM_COLOUR}">\u2717 see the problems</FONT>')
        attributes = {
            "id": f"proposed-{position}",
            "class": "step proposed" + (" invalid" if bad else ""),
            "fillcolor": "#fff4f2" if bad else STATUS_COLOURS["pending"],
        }
        if bad:
            attributes |= {"color": PROBLEM_COLOUR, "penwidth": "2"}
            mine = [p for p in problems if _about(p, step_id, position)]
            attributes["tooltip"] = _shorten(_visible(shown_text("\n".join(mine))), TOOLTIP_CHARS)
        dot.node(name, "<" + '<BR ALIGN="LEFT"/>'.join(lines) + '<BR ALIGN="LEFT"/>>', **attributes)
    missing: set[int] = set()
    for position, raw in enumerate(raw_steps, 1):
        if not isinstance(raw, dict) or not isinstance(raw.get("depends_on"), list):
            continue
        step_id = raw.get("id")
        target = nodes.get(step_id) if _is_id(step_id) else f"p{position}"
        for dependency in raw["depends_on"]:
            if not _is_id(dependency) or target is None:
                continue
            if dependency not in nodes:
                missing.add(dependency)
                dot.node(
                    f"missing{dependency}",
                    f"step {dependency}\n(does not exist)",
                    id=f"missing-{dependency}",
                    style="dashed",
                    color=PROBLEM_COLOUR,
                    fontcolor=PROBLEM_COLOUR,
                )
                source = f"missing{dependency}"
            else:
                source = nodes[dependency]
            wrong = dependency in missing or (dependency, step_id) in cycle_edges
            edge: dict[str, str] = {"id": f"edge-{dependency}-{position}"}
            if wrong or dependency == step_id:
                edge |= {"color": PROBLEM_COLOUR, "penwidth": "2", "style": "dashed"}
                edge["class"] = "invalid"
            dot.edge(source, target, **edge)
    note = [f"<B>{len(problems)} problem{'s' if len(problems) != 1 else ''}</B>"] + [
        html.escape(_shorten(_visible(shown_text(p)), 90)) for p in problems[:12]
    ]
    if len(problems) > 12:
        note.append(html.escape(f"+{len(problems) - 12} more"))
    dot.node(
        "problems",
        "<" + '<BR ALIGN="LEFT"/>'.join(note) + '<BR ALIGN="LEFT"/>>',
        id="plan-problems",
        shape="note",
        fillcolor="#fff4f2",
        color=PROBLEM_COLOUR,
        fontcolor="#7a271a",
    )
    return dot.source


def _is_id(value: Any) -> bool:
    return type(value) is int and value > 0


def _about(problem: str, step_id: Any, position: int) -> bool:
    return problem.startswith((f"step {step_id}:", f"step at position {position}:"))


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
        if namespace == f"{{{SVG_NS}" and name == "a":
            _tooltip_group(child)
        elif namespace != f"{{{SVG_NS}" or name not in ALLOWED_ELEMENTS:
            element.remove(child)
            continue
        _clean_element(child)


def _tooltip_group(link: ET.Element) -> None:
    """graphviz wraps a node with a tooltip in <a xlink:title>: a plain <g> with a <title> instead.

    Nothing of the link is kept but the text of its title, so it cannot navigate or run.
    """
    title = link.get(f"{{{XLINK_NS}}}title", "")
    link.tag = f"{{{SVG_NS}}}g"
    link.attrib.clear()
    link.set("class", "tooltip")
    element = ET.Element(f"{{{SVG_NS}}}title")
    element.text = title
    link.insert(0, element)


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
