"""Replay a past run on a model and prompt version, its recorded tool results standing in for
the tools (none is called), and print the diff against the original."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.urls import reverse

from plans.evals.replay import (
    CURRENT_PROMPTS,
    ReplayError,
    replay_lines,
    replay_save,
    run_replay,
)
from plans.models import Run
from plans.ui.charts import terminal_text


class Command(BaseCommand):
    help = (
        "Re-plan and re-answer RUN_ID on --model with --prompt-version; tools are served from "
        "the run's recorded results, never called. Prints the diff against the original."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id", type=int)
        parser.add_argument("--model", required=True, help='"offline" or a Claude model name')
        parser.add_argument(
            "--prompt-version",
            default=CURRENT_PROMPTS,
            help="the prompts' version (eval_planner prints it); 'current' for this checkout's",
        )
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    def handle(self, *args: Any, **options: Any) -> None:
        run = Run.objects.select_related("goal").filter(pk=options["run_id"]).first()
        if run is None:
            raise CommandError(f"There is no run {options['run_id']}.")
        try:
            replay = run_replay(
                run=run, wanted_prompt_version=options["prompt_version"], model=options["model"]
            )
        except ReplayError as error:
            raise CommandError(str(error)) from error
        stored = replay_save(replay)
        if options["json"]:
            data = {**replay.as_json(), "replay_id": stored.pk}
            self.stdout.write(json.dumps(data, indent=2, default=str))
            return
        # The lines quote the model's and the tools' text.
        for line in replay_lines(replay):
            self.stdout.write(terminal_text(line))
        path = reverse("plans:run_replay", args=[run.pk, stored.pk])
        self.stdout.write(f"stored as replay {stored.pk}: {path}")
