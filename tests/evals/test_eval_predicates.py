"""Predicates over a run's plan, trajectory and answer, and the cases file that names them."""

import json

import pytest

from plans.evals.cases import (
    CATEGORIES,
    DEFAULT_CASES,
    Case,
    CasesInvalid,
    suite_from_data,
    suite_load,
)
from plans.evals.predicates import (
    StepRecord,
    ToolCallRecord,
    Trajectory,
    case_failures,
    figures,
)

PRICE_STEPS = (
    StepRecord(1, "price", "succeeded", {"item": "iPhone 16"}, 79900, "", False),
    StepRecord(2, "price", "succeeded", {"item": "AirPods 4"}, 12900, "", False),
    StepRecord(3, "calculator", "succeeded", {"expression": "79900+12900"}, 92800, "", False),
)


def trajectory(**changes):
    base = {
        "goal": "Total price of an iPhone 16 and AirPods 4 in INR",
        "status": "completed",
        "refused": False,
        "plan_valid": True,
        "planned_tools": ("price", "calculator"),
        "planned_destructive": False,
        "plan_size": 3,
        "steps": PRICE_STEPS,
        "tool_calls": tuple(ToolCallRecord(s.tool, False, False) for s in PRICE_STEPS),
        "answer": "The total is INR 92800 (92,800). iPhone 16 costs INR 79900.",
    }
    return Trajectory(**{**base, **changes})


def case(**sections):
    return Case(id="c", category="demo", goal="g", **sections)


def test_a_run_that_meets_every_predicate_has_no_failures():
    expect = case(
        plan={"valid": True, "tools_used": ["price", "calculator"], "max_steps": 3},
        trajectory={"status": "completed", "no_failed_step": True, "max_tool_calls": 3},
        answer={"contains": ["92800"], "figures_supported": True},
    )

    assert case_failures(expect, trajectory()) == []


def test_each_failed_predicate_is_named_with_what_was_seen():
    expect = case(
        plan={"tools_used": ["convert_currency"], "max_steps": 2, "destructive": True},
        trajectory={"max_tool_calls": 1, "never_called": ["calculator"]},
        answer={"contains": ["907.95"], "not_contains": ["92800"]},
    )

    failures = case_failures(expect, trajectory())

    assert failures == [
        "plan.tools_used: convert_currency not planned (planned: price, calculator)",
        "plan.max_steps: 3 steps, at most 2 expected",
        "plan.destructive: no destructive step was planned",
        "trajectory.max_tool_calls: 3 tool calls, at most 1 expected",
        "trajectory.never_called: calculator was called",
        "answer.contains: '907.95' is not in the answer",
        "answer.not_contains: '92800' is in the answer",
    ]


def test_a_figure_no_step_produced_is_unsupported():
    made_up = trajectory(answer="The total is INR 95000, of which 79900 is the phone.")

    failures = case_failures(case(answer={"figures_supported": True}), made_up)

    assert failures == ["answer.figures_supported: 95000 not found in any step"]


def test_figures_are_compared_without_grouping_or_trailing_zeros():
    assert figures("INR 92,800 (1,23,456) and 907.50 or 12.0") == {"92800", "123456", "907.5", "12"}


def test_a_destructive_call_without_a_matching_approval_fails_the_trajectory():
    unapproved = trajectory(tool_calls=(ToolCallRecord("issue_refund", True, False),))

    failures = case_failures(case(trajectory={"approved_destructive_only": True}), unapproved)

    assert failures == ["trajectory.approved_destructive_only: issue_refund ran unapproved"]


def test_citing_requires_a_citation_a_search_step_returned():
    hits = [{"doc": "budgets", "cite": "[budgets]", "title": "t", "snippet": "s"}]
    searched = (StepRecord(1, "search", "succeeded", {"query": "q"}, hits, "", False),)
    expect = case(answer={"cites": True})

    assert case_failures(expect, trajectory(steps=searched, answer="Budgets [budgets].")) == []
    assert case_failures(expect, trajectory(steps=searched, answer="Made up [other].")) == [
        "answer.cites: the answer cites no document a search step returned"
    ]


def test_a_refusal_is_told_apart_from_a_plan():
    refused = trajectory(refused=True, planned_tools=(), steps=(), tool_calls=(), plan_size=0)

    assert case_failures(case(plan={"refused": True}), refused) == []
    assert case_failures(case(plan={"refused": True}), trajectory()) == [
        "plan.refused: the agent did not decline (it used price, calculator)"
    ]


def test_the_committed_suite_has_at_least_30_cases_in_every_category():
    suite = suite_load(DEFAULT_CASES)

    assert len(suite.cases) >= 30
    assert suite.categories == list(CATEGORIES)
    assert suite.version


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ({"id": "x", "category": "demo", "goal": "g"}, "case 'x' has no predicates"),
        ({"id": "x", "category": "nope", "goal": "g", "plan": {"valid": True}}, "category 'nope'"),
        (
            {"id": "x", "category": "demo", "goal": "g", "plan": {"vaild": True}},
            "plan.vaild is not",
        ),
        ({"id": "x", "category": "demo", "goal": "g", "plan": {"max_steps": "3"}}, "wrong type"),
        ({"id": "x", "category": "demo", "plan": {"valid": True}}, "case 'x' has no goal"),
        ({"category": "demo", "goal": "g"}, "case 1 has no id"),
    ],
)
def test_a_bad_case_is_refused_naming_the_problem(raw, problem):
    with pytest.raises(CasesInvalid, match=problem):
        suite_from_data({"cases": [raw]})


def test_a_cases_file_that_is_not_json_is_refused_with_its_line(tmp_path):
    path = tmp_path / "cases.json"
    path.write_text('{"cases": [\n  oops]}')

    with pytest.raises(CasesInvalid, match="line 2"):
        suite_load(path)


def test_two_cases_with_one_id_are_refused():
    one = {"id": "x", "category": "demo", "goal": "g", "plan": {"valid": True}}

    with pytest.raises(CasesInvalid, match="appears twice"):
        suite_from_data(json.loads(json.dumps({"cases": [one, one]})))


def test_a_goal_the_router_answered_directly_fails_a_case_that_expects_a_plan():
    case = Case(id="c", category="demo", goal="g", plan={"tools_used": ["price"]})
    direct = trajectory(route="answer", planned_tools=(), steps=(), tool_calls=(), model_calls=1)

    assert "router: the goal was answered directly, with no plan or tool" in case_failures(
        case, direct
    )
    assert case_failures(case, trajectory(route="plan")) == []


def test_a_router_case_names_the_route_it_expects_and_the_model_calls_allowed():
    case = Case(
        id="c",
        category="router",
        goal="Which tools can you use?",
        trajectory={"route": "answer", "max_model_calls": 1},
    )

    assert case_failures(case, trajectory(route="answer", model_calls=1)) == []
    assert case_failures(case, trajectory(route="plan", model_calls=2)) == [
        "trajectory.route: the router chose plan, expected answer",
        "trajectory.max_model_calls: 2 model calls, at most 1 expected",
    ]
    assert case_failures(case, trajectory(route="", model_calls=1)) == [
        "trajectory.route: the router chose nothing, expected answer"
    ]


def test_the_suite_has_router_cases_for_each_decision():
    suite = suite_load(DEFAULT_CASES)
    routes = {c.trajectory.get("route") for c in suite.cases if c.category == "router"}
    assert routes == {"answer", "plan", "refuse"}
