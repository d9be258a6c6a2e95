"""manage.py policy_check: load the approval rule modules and say what is wrong with them."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from plans.guards.approval_rules import rule_modules, rules_check, rules_load
from plans.ui.charts import terminal_text


class Command(BaseCommand):
    help = (
        "Validate the approval rule modules (AGENTSITE_APPROVAL_RULE_MODULES, or --rules): "
        "each imports, defines rules, names registered tools and existing groups. Lists the "
        "rules in the order they are tried; exits 1 on any problem."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--rules", action="append", metavar="MODULE", help="check this module instead"
        )

    def handle(self, *args: Any, rules: list[str] | None, **options: Any) -> None:
        modules = rules or rule_modules()
        if not modules:
            self.stdout.write(
                "No approval rule modules are configured: every destructive call waits for "
                "one reviewer."
            )
            return
        try:
            loaded = rules_load(modules)
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from exc
        for number, one in enumerate(loaded, 1):
            tools = ", ".join(sorted(one.tools)) or "every destructive tool"
            self.stdout.write(
                terminal_text(
                    f"{number}. {one.name} (version {one.version}, {one.module}): "
                    f"{tools} -> {one.outcome.describe()}"
                )
            )
        problems = rules_check(loaded)
        for problem in problems:
            self.stderr.write(terminal_text(problem))
        if problems:
            raise CommandError(f"{len(problems)} problem(s) in the approval rules")
        self.stdout.write(
            self.style.SUCCESS(f"{len(loaded)} rule(s) in {len(modules)} module(s): OK")
        )
