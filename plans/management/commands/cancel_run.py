"""Cancel a run from the command line, through the same service as the run page's button."""

from __future__ import annotations

import time
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from plans.models import Run
from plans.services.runs import run_cancel


class Command(BaseCommand):
    help = (
        "Cancel RUN_ID: no new step starts; steps in flight finish and are recorded; "
        "the run ends cancelled."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id", type=int)
        parser.add_argument("--by", default="", help="username recorded as cancelling it")
        parser.add_argument(
            "--wait",
            type=float,
            default=0,
            metavar="SECONDS",
            help="wait up to this long for the run to end, then print how it ended",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        run = Run.objects.filter(pk=options["run_id"]).first()
        if run is None:
            raise CommandError(f"There is no run {options['run_id']}.")
        user = None
        if options["by"]:
            user = get_user_model().objects.filter(username=options["by"]).first()
            if user is None:
                raise CommandError(f"There is no user {options['by']!r}.")
        if run.is_terminal:
            self.stdout.write(f"run {run.pk} already ended: {run.status}")
            return
        run = run_cancel(run=run, user=user)
        self.stdout.write(f"run {run.pk}: cancel requested; steps in flight finish first")
        if options["wait"] <= 0:
            return
        deadline = time.monotonic() + options["wait"]
        while not run.is_terminal and time.monotonic() < deadline:
            time.sleep(0.2)
            run.refresh_from_db()
        if not run.is_terminal:
            raise CommandError(f"run {run.pk} is still {run.status} after {options['wait']:g}s")
        self.stdout.write(f"run {run.pk} ended: {run.status}")
