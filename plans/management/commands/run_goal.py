"""Run a goal from the command line through the same services the dashboard uses."""

from __future__ import annotations

import codecs
import sys
import time
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from plans.engine import json_type_name
from plans.engine.parsing import JSONUnreadable, read_json
from plans.models import Approval, Goal, Run
from plans.runtime.advance import advance_run
from plans.selectors.plans import plan_current
from plans.services.approvals import approvals_decide
from plans.services.plans import plan_decide
from plans.services.runs import GoalRejected, goal_clean, run_create, run_summary
from plans.ui.charts import shown_json, terminal_text

EXIT_INVALID_PLAN = 2
EXIT_NOT_COMPLETED = 3
EXIT_USAGE = 64  # sysexits' EX_USAGE; argparse's own 2 would read as "invalid plan"
CLI_USERNAME = "cli"


class Command(BaseCommand):
    help = "Plan and run GOAL (or run --plan-file), printing the outcome."

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        refuse = parser.error

        def usage_error(message: str) -> None:
            if not parser.called_from_command_line:
                refuse(message)  # a CommandError for call_command
            parser.print_usage(sys.stderr)
            parser.exit(EXIT_USAGE, f"{parser.prog}: error: {message}\n")

        parser.error = usage_error  # type: ignore[method-assign]
        return parser

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("goal", help="what the agent should achieve")
        parser.add_argument(
            "--plan-file", type=Path, help='a JSON {"steps": [...]} plan; skips the planner'
        )
        decisions = parser.add_mutually_exclusive_group()
        decisions.add_argument(
            "--approve-all", action="store_true", help="approve every destructive step"
        )
        decisions.add_argument(
            "--reject-destructive", action="store_true", help="reject every destructive step"
        )
        parser.add_argument("--json", action="store_true", help="print one JSON object")
        parser.add_argument(
            "--author",
            default=CLI_USERNAME,
            help=f"an existing user to submit as (default: {CLI_USERNAME}, created when missing)",
        )
        parser.add_argument(
            "--agent",
            choices=Goal.Agent.values,
            default=Goal.Agent.PLAN_EXECUTE,
            help="the agent loop: plan_execute (default) or react",
        )
        parser.add_argument(
            "--require-plan-approval",
            action="store_true",
            help="hold the plan for a reviewer's decision before any step runs",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        plan_data = None
        if options["plan_file"] is not None:
            plan_data, problem = _plan_from_text(_read_plan_file(options["plan_file"]))
            if problem:
                # No run is created: run_create takes a plan of None to mean "ask the planner".
                try:
                    goal_clean(options["goal"])
                except GoalRejected as error:
                    raise CommandError(str(error)) from error
                self._report_problems(None, [problem], as_json=options["json"])
                sys.exit(EXIT_INVALID_PLAN)
        author = _author(options["author"])
        try:
            run = run_create(
                author=author,
                goal_text=options["goal"],
                plan_data=plan_data,
                require_plan_approval=options["require_plan_approval"],
                agent=options["agent"],
            )
        except (GoalRejected, ValueError) as error:
            raise CommandError(str(error)) from error

        while not run.is_terminal:
            if advance_run(run.pk) == "busy":
                time.sleep(0.5)  # another worker holds the run; its lease will run out
            run.refresh_from_db()
            if run.status == Run.Status.AWAITING_PLAN_APPROVAL and options["approve_all"]:
                plan = plan_current(run)
                assert plan is not None  # a run awaits a plan's approval only once it has one
                plan_decide(plan=plan, reviewer=None, approve=True, via="cli", resume=False)
                continue
            if run.status != Run.Status.AWAITING_APPROVAL:
                if run.status == Run.Status.AWAITING_PLAN_APPROVAL:
                    break
                continue
            pending = list(run.approvals.filter(decision=Approval.Decision.PENDING))
            if not pending or not (options["approve_all"] or options["reject_destructive"]):
                break
            approvals_decide(
                approvals=pending,
                reviewer=None,
                approve=options["approve_all"],
                reason="" if options["approve_all"] else "rejected from the command line",
                via="cli",
                resume=False,
            )
        self._report(run, as_json=options["json"])
        if run.status == Run.Status.INVALID_PLAN:
            sys.exit(EXIT_INVALID_PLAN)
        if run.status != Run.Status.COMPLETED:
            sys.exit(EXIT_NOT_COMPLETED)

    def _report(self, run: Run, *, as_json: bool) -> None:
        summary = run_summary(run)
        if run.status == Run.Status.INVALID_PLAN:
            self._report_problems(run.pk, summary["plan"]["problems"], as_json=as_json)
            return
        # Results, answers and errors are a model's, a tool's or a server's text: shown, never
        # obeyed by the terminal (an ESC or a CR could rewrite the lines above them).
        if as_json:
            self.stdout.write(shown_json(summary, indent=2))
            return
        self.stdout.write(f"run {run.pk}: {run.status}")
        for depth, step_ids in enumerate(summary["rounds"], start=1):
            self.stdout.write(f"round {depth}:")
            for step_id in step_ids:
                step = summary["steps"][str(step_id)]
                outcome = step["error"] if step["status"] != "succeeded" else step["result"]
                self.stdout.write(f"  step {step_id} {step['status']}: {shown_json(outcome)}")
        if run.answer:
            self.stdout.write("")
            self.stdout.write(terminal_text(run.answer, one_line=False))
        if run.error:
            self.stdout.write(terminal_text(f"error: {run.error}"))
        tokens = summary["tokens"]
        self.stdout.write(
            f"\n{summary['model_calls']} model calls, "
            f"{tokens['input']} in / {tokens['output']} out / "
            f"{tokens['cache_read']} cached tokens, "
            f"${summary['cost_usd']:.6f}"
        )

    def _report_problems(self, run_id: int | None, problems: list[str], *, as_json: bool) -> None:
        """An invalid plan: of a run, or (run_id None) of a plan file no run was created for."""
        status = Run.Status.INVALID_PLAN
        if as_json:
            report = {"run_id": run_id, "status": status, "problems": problems}
            self.stdout.write(shown_json(report, indent=2))
            return
        self.stdout.write(
            f"{status} (no run created)" if run_id is None else f"run {run_id}: {status}"
        )
        self.stdout.write("The plan is invalid:")
        for problem in problems:
            self.stdout.write(terminal_text(f"  - {problem}"))


def _author(username: str) -> Any:
    """The user to submit as; only the default one is created (a typo must not be)."""
    users = get_user_model().objects
    if username == CLI_USERNAME:
        return users.get_or_create(username=username)[0]
    try:
        return users.get(username=username)
    except users.model.DoesNotExist:
        raise CommandError(f"there is no user {username!r} to submit as") from None


def _read_plan_file(path: Path) -> str:
    """The file's text, without a UTF-8 byte-order mark; CommandError if it cannot be read."""
    try:
        data = path.read_bytes()
    except FileNotFoundError as error:
        raise CommandError(f"plan file {path} does not exist") from error
    except OSError as error:
        raise CommandError(f"plan file {path} cannot be read: {error.strerror}") from error
    bom = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    try:
        return data[bom:].decode("utf-8")
    except UnicodeDecodeError as error:
        raise CommandError(
            f"plan file {path} is not UTF-8 text: byte {error.object[error.start]:#04x} "
            f"at offset {bom + error.start}"
        ) from error


def _plan_from_text(text: str) -> tuple[dict[str, Any] | None, str]:
    """The plan file's object, or None and the problem that makes it no plan at all."""
    try:
        data = read_json(text)
    except JSONUnreadable as error:
        empty = " (the file is empty)" if not text.strip() else ""
        return None, f"the plan file {error}{empty}"
    if not isinstance(data, dict):
        return None, (
            f'the plan file must hold a JSON object with a "steps" list, got {json_type_name(data)}'
        )
    return data, ""
