"""manage.py policy_replay --days 30 [--rules MODULE]: what the rules would have decided."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from plans.guards.approval_rules import Disagreement, rules_load, rules_replay
from plans.ui.charts import terminal_text


class Command(BaseCommand):
    # Read-only, and timed at a million runs: Django's system checks (a second of imports
    # on every start) guard nothing it reads.
    requires_system_checks: list[str] = []
    help = (
        "Replay the approvals asked in the last --days against the approval rules (the "
        "configured ones, or --rules MODULE, repeatable): counts per rule, and the cases where "
        "a rule would have approved what a person rejected (or denied what one approved)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--days", type=int, default=30)
        parser.add_argument("--rules", action="append", metavar="MODULE")
        parser.add_argument("--listed", type=int, default=50, help="cases listed per kind")

    def handle(self, *args: Any, days: int, rules: list[str] | None, listed: int, **options: Any):
        if days < 1:
            raise CommandError(f"--days must be 1 or more, got {days}")
        try:
            loaded = rules_load(rules)
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from exc
        started = time.monotonic()
        replay = rules_replay(loaded, since=timezone.now() - timedelta(days=days), listed=listed)
        took = time.monotonic() - started
        self.stdout.write(
            f"{replay.approvals:,} approval(s) asked in the last {days} day(s), replayed against "
            f"{len(loaded)} rule(s) in {took:.1f} s."
        )
        for tally in replay.tallies.values():
            name = tally.name or "(no rule)"
            self.stdout.write(
                terminal_text(
                    f"  {name}: {tally.matched:,} matched -> {tally.outcome}"
                    + (
                        f"; {tally.decided_otherwise:,} decided otherwise"
                        if tally.decided_otherwise
                        else ""
                    )
                )
            )
        if replay.errors:
            self.stdout.write(f"  {replay.errors:,} call(s) made a rule raise: left to a person.")
        self._cases(
            "Would have approved automatically what a person rejected",
            replay.approve_rejected,
            replay.approve_rejected_count,
        )
        self._cases(
            "Would have denied what a person approved",
            replay.deny_approved,
            replay.deny_approved_count,
        )

    def _cases(self, title: str, cases: list[Disagreement], count: int) -> None:
        shown = f" (the first {len(cases):,} listed)" if len(cases) < count else ""
        self.stdout.write(f"{title}: {f'{count:,}' if count else 'none'}{shown}")
        for case in cases:
            self.stdout.write(
                terminal_text(
                    f"  approval {case.approval_id} (run {case.run_id}) {case.tool} "
                    f"{json.dumps(case.args, ensure_ascii=False, sort_keys=True)}: rule "
                    f"{case.rule}; {case.decided}" + (f": {case.reason}" if case.reason else "")
                )
            )
