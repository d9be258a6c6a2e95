"""manage.py cost_rollup --rebuild | --check: the costs page's rollup against the raw rows."""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from plans.journal.rollup import rollup_drift, rollup_rebuild
from plans.ui.charts import terminal_text


class Command(BaseCommand):
    help = (
        "Rebuild the costs rollup from the model calls, tool calls, approvals and runs (after a "
        "bulk load), or check it: --check exits 1 naming each bucket that differs."
    )

    def add_arguments(self, parser: Any) -> None:
        action = parser.add_mutually_exclusive_group(required=True)
        action.add_argument("--rebuild", action="store_true", help="recompute every bucket")
        action.add_argument("--check", action="store_true", help="compare, change nothing")

    def handle(self, *args: Any, rebuild: bool, check: bool, **options: Any) -> None:
        started = time.monotonic()
        if rebuild:
            rollup_rebuild()
            self.stdout.write(f"Rebuilt the costs rollup in {time.monotonic() - started:.1f} s.")
            return
        drift = rollup_drift()
        for line in drift:
            self.stdout.write(
                terminal_text(line)
            )  # bucket keys: model names as providers gave them
        if drift:
            raise CommandError(f"{len(drift)} rollup bucket(s) differ from the raw rows")
        self.stdout.write("The costs rollup matches the raw rows.")
