"""manage.py seed_runs N: bulk-create N synthetic runs (plans.demo.seeding).

A million runs take a few minutes: one run in --originals-every is generated in full, the
others copy its rows under new ids, authors and dates (COPY on PostgreSQL).
"""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from plans.demo.seeding import runs_seed

# Far enough back for any report window, and well within what dates can hold.
MAX_DAYS = 36_500


class Command(BaseCommand):
    help = "Bulk-create N synthetic runs (plans, steps, calls, approvals) for demos and checks."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("count", type=int, help="how many runs to create")
        parser.add_argument("--authors", type=int, default=5, help="spread over this many authors")
        parser.add_argument("--days", type=int, default=60, help="created within the last N days")
        parser.add_argument("--seed", type=int, default=1, help="same seed, same runs")
        parser.add_argument("--batch", type=int, default=5000, help="runs per transaction")
        parser.add_argument(
            "--originals-every",
            type=int,
            default=10,
            help="generate one run in N in full (with its event log); copy the others' rows",
        )

    def handle(
        self,
        *args: Any,
        count: int,
        authors: int,
        days: int,
        seed: int,
        batch: int,
        originals_every: int,
        **options: Any,
    ) -> None:
        if min(count, authors, days, batch, originals_every) < 1:
            raise CommandError(
                "count, --authors, --days, --batch and --originals-every must be positive"
            )
        if days > MAX_DAYS:
            raise CommandError(f"--days goes back at most {MAX_DAYS:,} days, got {days:,}")
        started = time.monotonic()
        created = runs_seed(
            count=count,
            authors=authors,
            days=days,
            seed=seed,
            batch=batch,
            originals_every=originals_every,
            progress=lambda done: self.stdout.write(f"  {done:,} / {count:,} runs"),
        )
        self.stdout.write(
            self.style.SUCCESS(
                f"Created {created:,} runs in {time.monotonic() - started:.1f} s "
                f"for {authors} author(s) over the last {days} day(s)."
            )
        )
