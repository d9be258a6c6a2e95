"""Check every run's event hash chain and name each altered, removed or reordered event."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from plans.guards.audit import chain_problems
from plans.models import Run
from plans.ui.charts import terminal_text


class Command(BaseCommand):
    help = "Verify the tamper-evident event log of every run (or of --run ID)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--run", type=int, action="append", help="only this run (repeatable)")

    def handle(self, *args: Any, **options: Any) -> None:
        runs = Run.objects.order_by("pk")
        if options["run"]:
            runs = runs.filter(pk__in=options["run"])
            missing = set(options["run"]) - set(runs.values_list("pk", flat=True))
            if missing:
                raise CommandError(f"no run with id {', '.join(map(str, sorted(missing)))}")
        checked = 0
        problems: list[str] = []
        for run in runs.iterator(chunk_size=500):
            checked += 1
            problems.extend(chain_problems(run))
        for problem in problems:
            # An altered row is the attacker's text: its kind must not rewrite the report.
            self.stderr.write(terminal_text(problem))
        if problems:
            raise CommandError(f"{len(problems)} problem(s) in the audit log of {checked} run(s)")
        self.stdout.write(f"audit log verified: {checked} run(s), every event chain intact")
