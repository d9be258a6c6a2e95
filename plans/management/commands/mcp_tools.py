"""List the configured MCP servers, their state and their tools with the gating each gets."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from plans.mcp.tools import close_all, server_listings, servers_start
from plans.ui.charts import terminal_text


class Command(BaseCommand):
    help = (
        "Start each MCP server in AGENTSITE_MCP_SERVERS and list its tools as the agent sees "
        "them: registry name, destructive (needs approval) or read-only and what decided it, "
        "time limit."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--no-start", action="store_true", help="report the servers without starting them"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            if not options["no_start"]:
                servers_start(wait=True)
            listings = server_listings(start=False)
        finally:
            close_all()
        if not listings:
            self.stdout.write("no MCP servers are configured (AGENTSITE_MCP_SERVERS)")
            return
        down = 0
        for listing in listings:
            config, state = listing.config, listing.state
            trust = "annotations trusted" if config.trust_annotations else "annotations untrusted"
            line = f"{config.name} ({config.transport}: {config.target}; {trust}): {state.label}"
            if state.detail:
                line += f" - {state.detail}"
                down += 1
            # Names, descriptions and errors are the server's text: printed, never obeyed.
            self._line(line)
            for listed in sorted(listing.tools, key=lambda t: t.name):
                if listed.spec is None:
                    self._line(f"  {listed.registry_name}  NOT USABLE: {listed.problem}")
                    continue
                gating = "destructive (needs approval)" if listed.spec.destructive else "read-only"
                self._line(
                    f"  {listed.registry_name}  {gating} [{listed.gated_by}]  "
                    f"limit {listed.spec.timeout_s:g} s"
                    + (f"  - {listed.spec.description}" if listed.spec.description else "")
                )
            if state.label == "running":
                for key in config.unmatched_overrides([t.name for t in listing.tools]):
                    self._line(f"  note: the 'tools' entry {key!r} matches none of its tools")
        if down:
            raise CommandError(f"{down} of {len(listings)} MCP server(s) could not be started")

    def _line(self, text: str) -> None:
        self.stdout.write(terminal_text(text))
