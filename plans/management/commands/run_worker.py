"""A worker process: advances queued runs on several threads and sweeps for lost ones."""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import sys
import threading
import time
from types import FrameType
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections

from plans.journal.leases import leases_hand_over, leases_held
from plans.mcp import mcp_servers_start
from plans.notifications.dispatch import notifier_start
from plans.runtime.sweeper import start_sweeper_thread, sweep_once, task_abandon
from plans.runtime.worker import (
    RunWorker,
    gc_tune_for_serving,
    start_worker_threads,
    worker_id_prefix,
)

logger = logging.getLogger("plans.runtime.worker")


class Command(BaseCommand):
    help = (
        "Advance queued runs: THREADS runs at a time (each runs its independent steps in "
        "parallel), plus the sweeper that recovers runs of dead workers. SIGTERM or Ctrl-C: "
        "take no new run, let running ones reach a stop for up to --grace seconds, then hand "
        "their leases to other workers; a second signal hands them over at once."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--threads", type=int, default=8, help="runs advanced at once (default: 8)"
        )
        parser.add_argument(
            "--grace",
            type=float,
            default=10.0,
            help="seconds a stopping worker waits for its runs to finish or park (default: 10)",
        )
        parser.add_argument(
            "--no-sweeper", action="store_true", help="leave crash recovery to other processes"
        )
        parser.add_argument(
            "--no-listen",
            action="store_true",
            help="poll only, without wake-ups from other processes (for comparison)",
        )
        parser.add_argument("--worker-id", default="", help="id prefix (default: host-pid)")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["threads"] < 1:
            raise CommandError(f"--threads must be at least 1, got {options['threads']}")
        if not 0 <= options["grace"] < float("inf"):  # also refuses nan
            raise CommandError(f"--grace must be 0 or more seconds, got {options['grace']:g}")
        stopping = threading.Event()
        signals = {"count": 0}

        def on_signal(signum: int, frame: FrameType | None) -> None:
            signals["count"] += 1
            stopping.set()

        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, on_signal)
        # `kill -USR1 <pid>` prints what every thread is doing, to see where a run is stuck.
        faulthandler.register(signal.SIGUSR1, all_threads=True)

        if options["verbosity"] >= 2:
            # Among others: which worker took which lease (events carry the lease's token).
            logging.getLogger("plans").setLevel(logging.DEBUG)
        prefix = options["worker_id"] or worker_id_prefix()
        workers = start_worker_threads(
            options["threads"], prefix=prefix, listen=not options["no_listen"]
        )
        sweeper = None if options["no_sweeper"] else start_sweeper_thread()
        notifier_start()  # emails and webhooks for the events these workers commit
        mcp_servers_start()  # in the background: the first run need not wait for them
        gc_tune_for_serving()
        logger.info(
            "worker process %s: %d threads, sweeper %s, database %s",
            prefix,
            len(workers),
            "off" if sweeper is None else "on",
            connections["default"].vendor,
        )
        while not stopping.wait(0.5):
            pass
        if sweeper is not None:
            sweeper.set()
        self._stop(workers, grace=options["grace"], signals=signals)

    def _stop(self, workers: list[RunWorker], *, grace: float, signals: dict[str, int]) -> None:
        for worker in workers:
            worker.stop()
        # With the spare threads that took runs while others waited.
        workers = [*workers, *(w for w in workers[0].group.live() if w.spare)] if workers else []
        busy = [worker for worker in workers if worker.running_task]
        logger.info("stopping: waiting up to %gs for %d running runs", grace, len(busy))
        deadline = time.monotonic() + grace
        while (
            any(worker.running_task for worker in workers)
            and time.monotonic() < deadline
            and signals["count"] < 2
        ):
            time.sleep(0.05)
        handed = leases_hand_over() if leases_held() else []
        for worker in workers:
            task = worker.current
            if task is not None:
                task_abandon(task.pk, f"worker {worker.worker_id} shut down before the run stopped")
        if handed:
            # Queue them now rather than at the next sweep elsewhere.
            try:
                sweep_once()
            except Exception:
                logger.exception("could not re-queue the runs handed over")
            logger.warning("stopping: handed runs %s over to other workers", handed)
        logger.info("stopped")
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        # Threads of abandoned tool calls may still be blocked; nothing is left to wait for.
        os._exit(0)
