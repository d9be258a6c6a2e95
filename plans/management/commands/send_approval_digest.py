"""Email the digest of waiting approvals to reviewers who chose it, now: for those who prefer
cron to the workers' sweep (then set AGENTSITE_APPROVAL_DIGEST_S=0, or both send it)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from plans.notifications.deliveries import digests_send


class Command(BaseCommand):
    help = "Send each reviewer who chose the daily digest the approvals waiting for them."

    def handle(self, *args: Any, **options: Any) -> None:
        sent = digests_send()
        self.stdout.write(f"{sent} digest email{'s' if sent != 1 else ''} sent")
