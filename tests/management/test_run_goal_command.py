"""manage.py run_goal: the headless path through the same services as the dashboard."""

import json
import os
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from plans.models import Goal, LedgerEntry, ModelCall, Run, RunEvent, ToolCall
from tests.engine.engine_catalog import SEED_PLAN

pytestmark = pytest.mark.django_db(transaction=True)

CYCLIC_PLAN = {
    "steps": [
        {"id": 1, "tool": "price", "args": {"item": "iPhone 16"}, "depends_on": [2]},
        {"id": 2, "tool": "price", "args": {"item": "AirPods 4"}, "depends_on": [1]},
    ]
}


def run_goal(*args):
    """(exit code, parsed --json output)."""
    out = StringIO()
    try:
        call_command("run_goal", *args, "--json", stdout=out)
        code = 0
    except SystemExit as exit_:
        code = exit_.code
    return code, json.loads(out.getvalue())


def test_the_seed_plan_file_yields_the_seed_results_in_two_rounds(tmp_path):
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(SEED_PLAN))

    code, out = run_goal(
        "Total price of an iPhone 16 and AirPods 4 in INR", "--plan-file", str(plan_file)
    )

    assert code == 0
    assert out["status"] == "completed"
    assert out["rounds"] == [[1, 2], [3]]
    assert [out["steps"][k]["result"] for k in ("1", "2", "3")] == [79900, 12900, 92800]
    assert out["plan"]["version"] == 1


def test_the_cyclic_plan_exits_2_naming_the_cycle_and_calls_no_tool(tmp_path):
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(CYCLIC_PLAN))

    code, out = run_goal("cyclic", "--plan-file", str(plan_file))

    assert code == 2
    assert out["status"] == "invalid_plan"
    assert any("cycle: 1 -> 2 -> 1" in problem for problem in out["problems"])
    assert not ToolCall.objects.exists()


def test_an_invalid_plan_reports_every_problem_at_once(tmp_path):
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(
        json.dumps(
            {
                "steps": [
                    {"id": 1, "tool": "teleport", "args": {}, "depends_on": []},
                    {"id": 2, "tool": "price", "args": {"sku": 3}, "depends_on": [9]},
                    {
                        "id": 3,
                        "tool": "calculator",
                        "args": {"expression": "{{1}}"},
                        "depends_on": [3],
                    },
                ]
            }
        )
    )

    code, out = run_goal("bad plan", "--plan-file", str(plan_file))

    problems = "\n".join(out["problems"])
    assert code == 2
    assert "teleport" in problems and "price" in problems  # unknown tool, listing allowed ones
    assert "sku" in problems and "item" in problems  # unexpected and missing arguments
    assert "9" in problems  # unknown dependency
    assert "step 3" in problems  # self-dependency and the placeholder to a non-dependency


def test_the_offline_price_goal_runs_end_to_end_with_two_model_calls():
    code, out = run_goal("Total price of an iPhone 16 and AirPods 4 in INR")

    run = Run.objects.get(pk=out["run_id"])
    assert code == 0
    assert out["model_calls"] == 2
    assert "92800" in out["answer"]
    assert out["tokens"]["input"] > 0 and out["tokens"]["output"] > 0
    assert set(ModelCall.objects.filter(run=run).values_list("purpose", flat=True)) == {
        "plan",
        "answer",
    }
    assert ToolCall.objects.filter(run=run).count() == 3
    assert RunEvent.objects.filter(run=run, kind="step_finished").count() == 3
    assert run.plans.get().raw_output  # the planner's text is kept


def test_a_destructive_step_without_a_decision_leaves_the_run_awaiting_approval():
    code, out = run_goal("Book a trip from Bengaluru to Goa on 2026-12-19 for 2 nights")

    assert code == 3
    assert out["status"] == "awaiting_approval"
    assert not LedgerEntry.objects.exists()


def test_approve_all_books_each_trip_leg_once():
    code, out = run_goal(
        "Book a trip from Bengaluru to Goa on 2026-12-19 for 2 nights", "--approve-all"
    )

    assert code == 0, out
    assert out["status"] == "completed"
    assert LedgerEntry.objects.filter(kind="flight").count() == 1
    assert LedgerEntry.objects.filter(kind="hotel").count() == 1


def test_reject_destructive_blocks_the_refund_and_exits_3():
    code, out = run_goal("Refund order A-1001 for a damaged item", "--reject-destructive")

    assert code == 3
    assert out["status"] == "blocked"
    assert out["steps"]["2"]["status"] == "blocked"
    assert out["steps"]["2"]["result"].startswith("BLOCKED: a reviewer declined issue_refund.")
    assert out["steps"]["3"]["status"] == "skipped"
    assert not LedgerEntry.objects.exists()


def test_a_tiny_token_budget_stops_the_run_and_keeps_partial_results(settings, tmp_path):
    settings.AGENTSITE_RUN_BUDGET_TOKENS = 300
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(SEED_PLAN))

    code, out = run_goal(
        "Total price of an iPhone 16 and AirPods 4 in INR", "--plan-file", str(plan_file)
    )

    assert code == 3
    assert out["status"] == "budget_exhausted"
    assert out["steps"]["3"]["result"] == 92800  # the work done is kept
    assert out["model_calls"] == 0
    assert "token" in out["error"]


def test_a_plan_file_holding_an_unpaired_surrogate_exits_2_naming_it(tmp_path):
    plan_file = tmp_path / "plan.json"
    # JSON may spell a lone surrogate; it decodes to text that no database can store.
    plan_file.write_text(
        '{"steps": [{"id": 1, "tool": "calculator", "args": {"expression": "1+1 \\ud800"}}]}'
    )

    code, out = run_goal("surrogate", "--plan-file", str(plan_file))

    assert code == 2
    assert out["status"] == "invalid_plan"
    assert out["problems"] == [
        "step 1: holds text that cannot be stored: an unpaired surrogate ('\\ud800')"
    ]
    run = Run.objects.get()
    assert run.status == "invalid_plan"
    assert "\\ud800" in run.plans.get().raw_output  # kept, written as an escape
    assert not ToolCall.objects.exists()


def test_a_goal_holding_an_unpaired_surrogate_is_refused_and_nothing_is_stored():
    # What Python makes of undecodable bytes in a command-line argument.
    refused = r"cannot be stored: an unpaired surrogate \('\\udcff'\)"
    with pytest.raises(CommandError, match=refused):
        call_command("run_goal", "price of \udcff", "--json", stdout=StringIO())

    assert not Run.objects.exists()


def test_a_plan_file_holding_a_nul_character_exits_2_naming_it(tmp_path):
    plan_file = tmp_path / "plan.json"
    plan_file.write_text('{"steps": [{"id": 1, "tool": "price", "args": {"item": "a\\u0000b"}}]}')

    code, out = run_goal("nul", "--plan-file", str(plan_file))

    assert code == 2
    assert out["problems"] == [
        "step 1: holds text that cannot be stored: a NUL character ('\\x00')"
    ]


@pytest.mark.parametrize(
    ("write", "refusal"),
    [
        (None, r"plan file .*missing\.json does not exist"),
        (b'{"steps": [\xff]}', r"is not UTF-8 text: byte 0xff at offset 11"),
        (b'\xef\xbb\xbf{"steps": [\xff]}', r"is not UTF-8 text: byte 0xff at offset 14"),
        ("directory", r"cannot be read: Is a directory"),
    ],
)
def test_a_plan_file_that_cannot_be_read_is_refused_saying_why(tmp_path, write, refusal):
    path = tmp_path / "missing.json"
    if write == "directory":
        path.mkdir()
    elif write is not None:
        path.write_bytes(write)

    with pytest.raises(CommandError, match=refusal):
        call_command("run_goal", "x", "--plan-file", str(path), "--json", stdout=StringIO())

    assert not Run.objects.exists()


def assert_nothing_was_created_or_run():
    assert not Goal.objects.exists()
    assert not Run.objects.exists()
    assert not ModelCall.objects.exists()
    assert not ToolCall.objects.exists()
    assert not LedgerEntry.objects.exists()


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        *(
            (content, f'must hold a JSON object with a "steps" list, got {got}')
            for content, got in [
                (b"null", "null"),
                (b"[]", "array"),
                (b'"text"', "string"),
                (b"3", "integer"),
                (b"true", "boolean"),
            ]
        ),
        (b'{"steps": [}', "is not valid JSON: Expecting value at line 1 column 12"),
        (b"not json", "is not valid JSON: Expecting value at line 1 column 1"),
        (b'{"steps": []}\n{"steps": []}', "is not valid JSON: Extra data at line 2 column 1"),
        (b"", "is not valid JSON: Expecting value at line 1 column 1 (the file is empty)"),
        (b" \n", "is not valid JSON: Expecting value at line 2 column 1 (the file is empty)"),
        (b'{"steps": ' + b"[" * 100_000, "is nested too deeply to read"),
        (
            b'{"steps": [{"id": ' + b"9" * 5000 + b"}]}",
            "cannot be read: an integer has more than 4,300 digits",
        ),
    ],
)
def test_a_plan_file_that_holds_no_plan_object_is_an_invalid_plan_and_nothing_runs(
    tmp_path, content, problem
):
    plan_file = tmp_path / "plan.json"
    plan_file.write_bytes(content)

    # The offline planner would plan (and --approve-all would execute) a refund and an email.
    code, out = run_goal(
        "Refund order A-1001 for a damaged item", "--plan-file", str(plan_file), "--approve-all"
    )

    assert code == 2
    assert out == {
        "run_id": None,
        "status": "invalid_plan",
        "problems": [f"the plan file {problem}"],
    }
    assert_nothing_was_created_or_run()


def test_an_unreadable_plan_file_is_reported_as_text_without_a_traceback(tmp_path):
    plan_file = tmp_path / "plan.json"
    plan_file.write_text("null")
    out = StringIO()

    with pytest.raises(SystemExit) as exit_:
        call_command("run_goal", "x", "--plan-file", str(plan_file), stdout=out)

    assert exit_.value.code == 2
    assert out.getvalue().splitlines() == [
        "invalid_plan (no run created)",
        "The plan is invalid:",
        '  - the plan file must hold a JSON object with a "steps" list, got null',
    ]


def test_a_rejected_goal_is_named_before_a_plan_file_that_holds_no_plan(tmp_path):
    plan_file = tmp_path / "plan.json"
    plan_file.write_text("null")

    with pytest.raises(CommandError, match="The goal is empty"):
        call_command("run_goal", "  ", "--plan-file", str(plan_file), "--json", stdout=StringIO())

    assert not Run.objects.exists()


def test_a_plan_file_starting_with_a_utf8_byte_order_mark_is_read(tmp_path):
    plan_file = tmp_path / "plan.json"
    plan_file.write_bytes(b"\xef\xbb\xbf" + json.dumps(SEED_PLAN).encode())

    code, out = run_goal(
        "Total price of an iPhone 16 and AirPods 4 in INR", "--plan-file", str(plan_file)
    )

    assert code == 0, out
    assert out["steps"]["3"]["result"] == 92800


def test_an_author_that_does_not_exist_is_refused_not_created(django_user_model):
    with pytest.raises(CommandError, match="there is no user 'nosuchuser' to submit as"):
        call_command("run_goal", "Total price of an iPhone 16", "--author", "nosuchuser")

    assert not django_user_model.objects.filter(username="nosuchuser").exists()


def test_a_usage_error_exits_64_not_the_invalid_plan_code(tmp_path):
    # Run as a shell does: argparse's own exit code, 2, would read as "invalid plan".
    env = {**os.environ, "AGENTSITE_SQLITE_PATH": str(tmp_path / "db.sqlite3")}
    result = subprocess.run(
        [sys.executable, "manage.py", "run_goal", "x", "--approve-all", "--reject-destructive"],
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert result.returncode == 64
    assert "not allowed with argument --approve-all" in result.stderr
