"""The plan graph: nodes, edges and statuses; escaping, sanitising, limits and the cache."""

import json
import shutil
import subprocess
import xml.etree.ElementTree as ET

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache

from plans.models import Approval, Plan, Step
from plans.selectors.runs import AWAITING_ANSWER
from plans.ui import graphs
from plans.ui.graphs import STATUS_COLOURS, GraphError, error_svg, plan_svg, svg_sanitise
from tests.html_safety import DOT_BREAKER, IMG, MULTILINE, SCRIPT

NS = {"svg": "http://www.w3.org/2000/svg"}


@pytest.fixture(autouse=True)
def empty_cache():
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def dot_calls(monkeypatch):
    """Counts the times graphviz is started."""
    calls = []
    real_run = subprocess.run

    def counting_run(*args, **kwargs):
        calls.append(args)
        return real_run(*args, **kwargs)

    monkeypatch.setattr(graphs.subprocess, "run", counting_run)
    return calls


def step(step_id, tool="price", args=None, depends_on=(), status="pending", destructive=False):
    return Step(
        step_id=step_id,
        tool=tool,
        args={"item": "iPhone 16"} if args is None else args,
        depends_on=list(depends_on),
        status=status,
        destructive=destructive,
        round=1,
    )


def price_plan(status_of_3="pending"):
    return [
        step(1, status="succeeded"),
        step(2, args={"item": "AirPods 4"}, status="succeeded"),
        step(3, "calculator", {"expression": "{{1}}+{{2}}"}, [1, 2], status=status_of_3),
    ]


def parse(svg):
    return ET.fromstring(svg)  # noqa: S314 - our own sanitised output


def node(root, step_id):
    found = root.find(f".//svg:g[@id='step-{step_id}']", NS)
    assert found is not None, f"no node step-{step_id}"
    return found


def node_text(root, step_id):
    return "\n".join(
        "".join(text.itertext()) for text in node(root, step_id).iterfind(".//svg:text", NS)
    )


def test_each_step_is_a_node_with_its_id_status_class_tool_and_arguments():
    root = parse(plan_svg(Plan(pk=1), price_plan(status_of_3="running")))

    assert node(root, 1).get("class") == "node step status-succeeded"
    assert node(root, 3).get("class") == "node step status-running"
    assert "3 · calculator" in node_text(root, 3)
    assert 'expression="{{1}}+{{2}}"' in node_text(root, 3)
    assert 'item="AirPods 4"' in node_text(root, 2)


def test_nodes_are_filled_with_the_colour_of_their_status():
    root = parse(plan_svg(Plan(pk=1), price_plan(status_of_3="failed")))

    shape = node(root, 3).find("svg:path", NS)
    assert shape.get("fill") == STATUS_COLOURS["failed"]
    # Every status has its colour, and a question's wait one of its own.
    assert set(STATUS_COLOURS) == {*Step.Status.values, AWAITING_ANSWER}


def test_a_question_waiting_for_its_answer_has_its_own_colour_and_says_so_in_its_tooltip():
    asks = step(1, "ask_human", {"question": "Which colour?"}, status="awaiting_approval")
    root = parse(plan_svg(Plan(pk=1), [asks]))

    assert node(root, 1).get("class") == "node step status-awaiting_answer"
    assert node(root, 1).find(".//svg:path", NS).get("fill") == STATUS_COLOURS[AWAITING_ANSWER]
    title = node(root, 1).find("svg:g/svg:g/svg:title", NS)
    assert title.text == "Waiting for an answer: Which colour?"


def test_each_dependency_is_an_edge_from_the_dependency_to_its_dependant():
    root = parse(plan_svg(Plan(pk=1), price_plan()))

    edges = {g.get("id") for g in root.iterfind(".//svg:g[@class='edge']", NS)}
    assert edges == {"edge-1-3", "edge-2-3"}


def test_destructive_steps_have_a_double_red_border_and_a_warning():
    steps = [
        step(1, "order_total", {"order_id": "A-1001"}),
        step(2, "issue_refund", {"order_id": "A-1001"}, [1], destructive=True),
    ]
    root = parse(plan_svg(Plan(pk=1), steps))

    refund = node(root, 2)
    assert "destructive" in refund.get("class").split()
    borders = refund.findall("svg:polygon", NS)
    assert len(borders) == 2  # peripheries=2
    assert {b.get("stroke") for b in borders} == {graphs.DESTRUCTIVE_BORDER_COLOUR}
    assert "\u26a0 2 · issue_refund" in node_text(root, 2)
    assert "destructive" not in node(root, 1).get("class")


def test_long_argument_values_are_cut_to_one_line_of_forty_characters():
    root = parse(plan_svg(Plan(pk=1), [step(1, "search", {"query": "word " * 40})]))

    lines = ["".join(text.itertext()) for text in node(root, 1).iterfind(".//svg:text", NS)]
    assert lines[1].startswith('query="word word')
    assert lines[1].endswith("\u2026")
    assert max(len(line) for line in lines) <= graphs.LABEL_LINE_CHARS


def test_hostile_text_in_tools_and_arguments_is_drawn_as_inert_text():
    hostile = step(
        1,
        tool=DOT_BREAKER,
        args={"a": SCRIPT, "b": IMG, f"{DOT_BREAKER}": DOT_BREAKER, "d": MULTILINE},
        status="running",
    )
    svg = plan_svg(Plan(pk=1), [hostile, step(2, depends_on=[1])])
    root = parse(svg)

    assert "<script" not in svg and "<img" not in svg and "<a " not in svg
    assert not [
        (element.tag, name)
        for element in root.iter()
        for name in element.attrib
        if name.lower().startswith("on") or name.endswith("href")
    ]
    # The label did not break out of its node: still two nodes and one edge, no node "x".
    assert len(root.findall(".//svg:g[@class]", NS)) == 1 + 2 + 1  # graph, nodes, edge
    assert root.find(".//svg:g[@id='x']", NS) is None
    text = node_text(root, 1)
    assert '1 · "]; x [label="' in text
    assert 'a="<script>alert(1)</script>"' in text
    assert r'b="\"><img src=x onerror=alert(1)>"' in text
    assert r'"]; x [label="="\"]; x [label=\""' in text
    assert r'd="line one\nline two {braces} }"' in text  # the newline is shown, not obeyed


def test_control_characters_cannot_make_the_svg_malformed():
    svg = plan_svg(Plan(pk=1), [step(1, args={"bell\x07": "nul\x00 \ud800"})])

    assert 'bell\ufffd="nul\\u0000 \ufffd"' in node_text(parse(svg), 1)


def test_drawing_the_same_plan_and_statuses_again_does_not_run_dot(dot_calls):
    first = plan_svg(Plan(pk=1), price_plan())
    second = plan_svg(Plan(pk=1), price_plan())

    assert len(dot_calls) == 1
    assert first == second


def test_a_changed_status_recolours_the_drawing_without_running_dot_again(dot_calls):
    plan_svg(Plan(pk=1), price_plan(status_of_3="pending"))
    redrawn = plan_svg(Plan(pk=1), price_plan(status_of_3="succeeded"))

    assert len(dot_calls) == 1
    assert node(parse(redrawn), 3).get("class") == "node step status-succeeded"
    assert node(parse(redrawn), 3).find("svg:path", NS).get("fill") == STATUS_COLOURS["succeeded"]


@pytest.mark.parametrize("status", [*Step.Status.values, "question"])
def test_a_recoloured_drawing_is_what_graphviz_draws_for_those_statuses(status):
    asks = status == "question"
    steps = [
        *price_plan(status_of_3="awaiting_approval" if asks else status),
        step(4, "issue_refund", {"order_id": "A-1"}, [3], status=status, destructive=True),
        step(5, "ask_human", {"question": "Which?"}, [3], status="failed", destructive=False),
    ]
    steps[2].tool = "ask_human" if asks else steps[2].tool
    steps[4].error = "it broke"  # a tooltip: the node's shapes sit in a group of their own

    drawn = graphs.svg_sanitise(graphs.dot_render(graphs.plan_dot(Plan(pk=1), steps)))

    assert plan_svg(Plan(pk=1), steps) == drawn


def test_a_dot_that_takes_too_long_gives_an_error_box_instead_of_a_crash(monkeypatch):
    monkeypatch.setattr(graphs, "DOT_COMMAND", ("sleep", "10"))
    monkeypatch.setattr(graphs, "DOT_TIMEOUT_S", 0.2)

    svg = plan_svg(Plan(pk=1), price_plan())

    assert "plan-graph-error" in svg
    assert "took longer than 0.2 s" in svg


@pytest.mark.skipif(shutil.which("prlimit") is None, reason="util-linux prlimit is not installed")
def test_dot_runs_under_a_memory_limit(monkeypatch):
    monkeypatch.setattr(graphs, "DOT_MEMORY_BYTES", 1024 * 1024)

    svg = plan_svg(Plan(pk=1), price_plan())

    assert "plan-graph-error" in svg
    assert "graphviz failed" in svg


def test_missing_graphviz_gives_an_error_box(monkeypatch):
    monkeypatch.setattr(graphs, "DOT_COMMAND", ("no-such-dot-program", "-Tsvg"))

    svg = plan_svg(Plan(pk=1), price_plan())

    assert "graphviz is not installed" in svg


def test_a_plan_too_large_to_draw_gets_an_error_box_without_running_dot(dot_calls):
    steps = [step(i) for i in range(1, graphs.MAX_STEPS_DRAWN + 2)]

    svg = plan_svg(Plan(pk=1), steps)

    assert "plan-graph-error" in svg
    assert not dot_calls


def test_error_boxes_escape_their_message():
    svg = error_svg(f"graphviz failed: {SCRIPT} {IMG}")
    root = parse(svg)

    assert "<script" not in svg and "<img" not in svg
    assert SCRIPT in "".join(root.itertext())


def test_the_sanitiser_keeps_drawing_and_drops_everything_that_can_run_or_link():
    hostile = (
        '<?xml version="1.0"?>\n'
        '<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" '
        'onload="alert(1)">'
        "<script>alert(1)</script>"
        '<g id="step-1" class="node" onclick="alert(1)" style="fill:url(javascript:alert(1))">'
        '<a xlink:href="javascript:alert(1)"><text>link</text></a>'
        '<polygon points="0,0 1,1" fill="red" onmouseover="alert(1)"/>'
        '<set attributeName="onclick" to="alert(1)"/>'
        '<animate attributeName="href" to="javascript:alert(1)"/>'
        '<animateTransform attributeName="transform"/>'
        "<foreignObject><div>html</div></foreignObject>"
        '<image href="data:image/svg+xml;base64,PHN2Zz4="/>'
        '<use xlink:href="#x"/>'
        '<text fill="javascript :alert(1)" x="1">kept</text>'
        "<style>*{}</style>"
        "</g></svg>"
    )

    clean = svg_sanitise(hostile)
    root = parse(clean)

    tags = {element.tag.rpartition("}")[2] for element in root.iter()}
    # The link became an inert group (its title, empty here, is all that is kept of it).
    assert tags == {"svg", "g", "polygon", "text", "title"}
    attributes = {name for element in root.iter() for name in element.attrib}
    assert not {name for name in attributes if name.startswith("on") or "href" in name}
    assert "style" not in node(root, 1).attrib
    kept = next(text for text in root.iterfind(".//svg:text", NS) if text.text == "kept")
    assert "fill" not in kept.attrib
    assert "alert" not in clean and "<?xml" not in clean


def test_a_tooltip_link_becomes_a_group_with_a_title_and_nothing_that_links():
    svg = (
        '<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink">'
        '<g id="step-1" class="node"><a xlink:title="Skipped: step 1 failed" '
        'xlink:href="javascript:alert(1)" target="_top"><text>1</text></a></g></svg>'
    )

    root = parse(svg_sanitise(svg))

    group = node(root, 1).find("svg:g", NS)
    assert group.attrib == {"class": "tooltip"}
    assert group.find("svg:title", NS).text == "Skipped: step 1 failed"
    assert group.find("svg:text", NS).text == "1"


def test_entities_declared_in_a_document_type_are_never_expanded():
    entities = '<!DOCTYPE svg [<!ENTITY a "lol"><!ENTITY b "&a;&a;&a;&a;">]>'
    before = f'{entities}<svg xmlns="http://www.w3.org/2000/svg"><text>&b;</text></svg>'
    inside = f'<svg xmlns="http://www.w3.org/2000/svg">{entities}<text>&b;</text></svg>'

    # Before the root it is cut off with the prolog, so &b; is unknown; inside it is refused.
    with pytest.raises(GraphError, match="malformed"):
        svg_sanitise(before)
    with pytest.raises(GraphError, match="document type"):
        svg_sanitise(inside)


def approval(decision, *, reviewer="rita", args=None, requested=None, via=""):
    requested = {"order_id": "A-1001", "amount_inr": 2499} if requested is None else requested
    return Approval(
        decision=decision,
        reviewer=User(username=reviewer) if reviewer else None,
        requested_args=requested,
        args=requested if args is None else args,
        via=via,
    )


def refund_steps(status):
    return [
        step(1, "order_total", {"order_id": "A-1001"}, status="succeeded"),
        step(2, "issue_refund", {"order_id": "A-1001"}, [1], status=status, destructive=True),
    ]


@pytest.mark.parametrize(
    ("status", "decision", "says"),
    [
        ("awaiting_approval", None, "destructive: needs approval"),
        ("succeeded", approval("approved"), "\u2713 approved by rita"),
        (
            "succeeded",
            approval("approved", args={"order_id": "A-1001", "amount_inr": 1000}),
            "\u2713 approved with edits by rita",
        ),
        ("blocked", approval("rejected"), "\u2717 rejected by rita"),
        # run_goal --approve-all: no person, and not "the system" either.
        (
            "succeeded",
            approval("approved", reviewer=None, via="cli"),
            "\u2713 approved by the command line",
        ),
        ("blocked", approval("expired", reviewer=None), "\u2717 expired: not decided in time"),
        ("skipped", None, "destructive: skipped"),
    ],
)
def test_a_destructive_node_says_what_became_of_it(status, decision, says):
    decisions = {} if decision is None else {2: decision}
    root = parse(plan_svg(Plan(pk=1), refund_steps(status), decisions=decisions))

    text = node_text(root, 2)
    assert says in text
    if decision is not None:
        assert "needs approval" not in text


def test_a_destructive_node_lists_every_argument_the_reviewer_decides_on():
    args = {
        "origin": "Delhi",
        "destination": "Goa",
        "date": "2026-12-20",
        "passenger": "Asha Rao",
        "price_inr": 6120,
    }
    booking = step(1, "book_flight", args, destructive=True, status="awaiting_approval")
    root = parse(plan_svg(Plan(pk=1), [booking]))

    text = node_text(root, 1)
    assert "price_inr=6120" in text
    assert "more" not in text


def test_a_skipped_or_blocked_node_says_why_in_its_tooltip():
    skipped = step(2, depends_on=[1], status="skipped")
    skipped.error = "skipped: step 1 failed"
    root = parse(plan_svg(Plan(pk=1), [step(1, status="failed"), skipped]))

    title = node(root, 2).find("svg:g/svg:g/svg:title", NS)
    assert title.text == "Skipped: step 1 failed"
    assert node(root, 1).find("svg:g/svg:g/svg:title", NS) is None  # no error, no tooltip


def test_an_invalid_plan_is_drawn_as_proposed_with_its_problems_marked():
    proposed = {
        "steps": [
            {"id": 1, "tool": "price", "args": {"item": "iPhone 16"}, "depends_on": [3]},
            {"id": 2, "tool": "nope", "args": {}, "depends_on": [9]},
            {"id": 3, "tool": "price", "args": {"item": "AirPods"}, "depends_on": [1]},
        ]
    }
    problems = [
        "step 2: unknown tool 'nope' (allowed: price)",
        "step 2: depends on step 9, which does not exist",
        "cycle: 1 -> 3 -> 1",
    ]
    plan = Plan(pk=7, is_valid=False, raw_output=json.dumps(proposed), problems=problems)

    root = parse(plan_svg(plan, []))

    classes = {g.get("id"): g.get("class") for g in root.iterfind(".//svg:g[@id]", NS)}
    assert classes["proposed-2"] == "node step proposed invalid"
    assert classes["proposed-1"] == "node step proposed"
    assert "missing-9" in classes
    invalid_edges = {g.get("id") for g in root.iterfind(".//svg:g[@class='edge invalid']", NS)}
    assert invalid_edges == {"edge-9-2", "edge-3-1", "edge-1-3"}
    note = "".join(root.find(".//svg:g[@id='plan-problems']", NS).itertext())
    assert "3 problems" in note and "unknown tool" in note
    assert "2 \u00b7 nope" in "".join(root.find(".//svg:g[@id='proposed-2']", NS).itertext())


def test_an_unreadable_invalid_plan_gets_an_error_box_saying_why():
    plan = Plan(pk=8, is_valid=False, raw_output="no json here", problems=["no plan"])

    assert "could not be read as a plan" in plan_svg(plan, [])


def test_a_destructive_node_shows_its_preview_in_the_tooltip_as_plain_text():
    decision = approval("pending", reviewer=None)
    decision.preview = {
        "summary": f"Refund ₹2,499 {DOT_BREAKER}",
        "facts": [["Refunded to", SCRIPT], ["Note", MULTILINE]],
        "warnings": [IMG],
        "target_version": "v1",
    }
    decision.changes = ["Already refunded: ₹0 → ₹500"]
    root = parse(plan_svg(Plan(pk=1), refund_steps("awaiting_approval"), decisions={2: decision}))

    title = node(root, 2).find("svg:g/svg:g/svg:title", NS).text
    assert title.splitlines() == [
        f"Preview: Refund ₹2,499 {DOT_BREAKER}",
        f"Refunded to: {SCRIPT}",
        "Note: line one",
        "line two {braces} }",
        f"\u26a0 {IMG}",
        "Changed since approved: Already refunded: ₹0 → ₹500",
    ]
    assert not root.findall(".//svg:script", NS)


def test_a_destructive_node_without_a_preview_says_so_in_its_tooltip():
    failed = approval("pending", reviewer=None)
    failed.preview = {"error": "timed out after 5s"}
    root = parse(plan_svg(Plan(pk=1), refund_steps("awaiting_approval"), decisions={2: failed}))

    assert node(root, 2).find("svg:g/svg:g/svg:title", NS).text == "No preview: timed out after 5s"
