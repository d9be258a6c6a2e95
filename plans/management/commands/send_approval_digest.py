"""Email the daily digest of waiting approvals to reviewers who chose it (run it from cron)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from plans.notifications.deliveries import digests_send


class Command(BaseCommand):
    help = "Send each reviewer who chose the daily digest the approvals waiting for them."

    def handle(self, *args: Any, **options: Any) -> None:
        sent = digests_send()
        self.stdout.write(f"{sent} digest email{'s' if sent != 1 else ''} sent")
