"""The notifier: a thread of its own per process, fed after commit, sending on a small pool.

Run events reach it through journal.events' after-commit hook: the committing thread (often the
executor's) only puts them on a queue. The notifier turns them into delivery rows, and sends
whatever is due on its pool, at most AGENTSITE_NOTIFY_PER_TARGET at a time to one endpoint (or
to the mail server), so a hanging endpoint holds a few threads of its own and nothing else: not
a run, not another endpoint. Rows are claimed before sending, so processes share the work, and
retries due later are found by polling the table.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.conf import settings
from django.db import (
    DEFAULT_DB_ALIAS,
    InterfaceError,
    OperationalError,
    close_old_connections,
    connections,
)
from django.utils import timezone

from plans.bulk import KeptConnection
from plans.journal.events import on_events_committed
from plans.notifications.catalog import NOTIFYING_KINDS
from plans.notifications.deliveries import (
    deliveries_due,
    deliveries_for_events,
    delivery_attempt,
    delivery_claim,
)
from plans.notifications.models import Delivery

logger = logging.getLogger(__name__)

Batch = tuple[int, list[dict[str, Any]]]  # a run's committed events


class Notifier:
    """Owns the queue of committed events, the scheduling thread and the sending pool."""

    def __init__(self) -> None:
        self._events: queue.SimpleQueue[tuple[int, list[dict[str, Any]]] | None] = (
            queue.SimpleQueue()
        )
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._in_flight: Counter[str] = Counter()
        self._in_flight_ids: set[int] = set()
        self._stopping = threading.Event()

    # --- fed from any thread ---

    def events_committed(self, run_id: int, events: list[dict[str, Any]]) -> None:
        """The after-commit hook: cheap, never blocks, never touches the database."""
        if not settings.AGENTSITE_NOTIFICATIONS:
            return
        if not any(event["kind"] in NOTIFYING_KINDS for event in events):
            return
        self._events.put((run_id, events))
        self.ensure_started()

    def wake(self) -> None:
        """Look for due deliveries now (e.g. after a re-send)."""
        if not settings.AGENTSITE_NOTIFICATIONS:
            return
        self.ensure_started()
        self._events.put(None)

    def ensure_started(self) -> None:
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stopping.clear()
            self._pool = ThreadPoolExecutor(
                max_workers=settings.AGENTSITE_NOTIFY_THREADS, thread_name_prefix="notify-send"
            )
            self._thread = threading.Thread(target=self._serve, name="notifier", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """End the notifier thread and its pool (sends in flight finish first)."""
        with self._lock:
            thread, pool = self._thread, self._pool
            self._thread = self._pool = None
        if thread is None:
            return
        self._stopping.set()
        self._events.put(None)
        thread.join(timeout)
        if pool is not None:
            pool.shutdown(wait=True)

    def wait_idle(self, timeout: float) -> bool:
        """For tests and the benchmark: True once nothing is queued, in flight or due soon."""
        import time

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                busy = bool(self._in_flight_ids) or not self._events.empty()
            if not busy and not Delivery.objects.filter(status=Delivery.Status.PENDING).exists():
                return True
            time.sleep(0.05)
        return False

    # --- the notifier thread ---

    def _serve(self) -> None:
        poll_s = settings.AGENTSITE_NOTIFY_POLL_S
        # The thread keeps its connection between rounds (one per process, as the lease
        # keeper does); one the server dropped while it idled is replaced before the round.
        kept = KeptConnection("the notifier")
        while not self._stopping.is_set():
            try:
                item = self._events.get(timeout=poll_s)
            except queue.Empty:
                item = None
            look = item is None  # a poll, a wake or a freed slot: look for due rows
            try:
                batches = [item] if item is not None else []
                while True:  # everything else already queued, in one go
                    try:
                        more = self._events.get_nowait()
                    except queue.Empty:
                        break
                    if more is not None:
                        batches.append(more)
                    else:
                        look = True
                # Events are checked for even a second after the last round: a connection
                # lost in the middle of their round could lose their notifications.
                kept.check(always=bool(batches))
                self._round_or_wait(batches, look=look)
            except Exception:
                logger.exception("the notifier failed a round; it goes on")
                close_old_connections()

    def _round_or_wait(self, batches: list[Batch], *, look: bool) -> None:
        """A round, once connected; with the database away, its events wait on the queue for
        the next round rather than being dropped (nothing of theirs was written yet)."""
        try:
            connections[DEFAULT_DB_ALIAS].ensure_connection()
        except (OperationalError, InterfaceError) as error:
            logger.warning("the notifier cannot reach the database (%s); its events wait", error)
            for batch in batches:
                self._events.put(batch)
            self._stopping.wait(settings.AGENTSITE_NOTIFY_POLL_S)
            return
        self._round(batches, look=look)

    def _round(self, batches: list[Batch], *, look: bool) -> None:
        for run_id, events in batches:
            if deliveries_for_events(run_id, events):
                look = True
        # Most committed events call for nothing: then there is nothing new to send, and the
        # executor's threads keep the interpreter and the database to themselves.
        if look and not self._stopping.is_set():
            self._send_due()

    def _send_due(self) -> None:
        now = timezone.now()
        per_target = settings.AGENTSITE_NOTIFY_PER_TARGET
        hold_s = settings.AGENTSITE_WEBHOOK_TIMEOUT_S * 2 + 30
        with self._lock:
            full = {target for target, count in self._in_flight.items() if count >= per_target}
        busy_endpoints = {int(t.split("-", 1)[1]) for t in full if t.startswith("endpoint-")}
        due = deliveries_due(
            now, limit=200, busy_endpoints=busy_endpoints, mail_busy="mail" in full
        )
        for delivery in due:
            target = _target(delivery)
            with self._lock:
                if delivery.pk in self._in_flight_ids or self._in_flight[target] >= per_target:
                    continue
            if not delivery_claim(delivery, now, hold_s=hold_s):
                continue  # another process took it
            with self._lock:
                pool = self._pool
                if pool is None:
                    return  # stopping: the claim runs out and the row is sent later
                self._in_flight[target] += 1
                self._in_flight_ids.add(delivery.pk)
            pool.submit(self._send, delivery, target)

    def _send(self, delivery: Delivery, target: str) -> None:
        try:
            delivery_attempt(delivery)
        except Exception:
            logger.exception("delivery %s could not be attempted", delivery.pk)
            # Left claimed: it is tried again when the claim runs out.
        finally:
            close_old_connections()
            with self._lock:
                self._in_flight[target] -= 1
                self._in_flight_ids.discard(delivery.pk)
            if not self._stopping.is_set():
                self._events.put(None)  # a slot is free: look again


def _target(delivery: Delivery) -> str:
    return f"endpoint-{delivery.endpoint_id}" if delivery.endpoint_id else "mail"


notifier = Notifier()


def install() -> None:
    """Register the notifier on the run event log's after-commit hook (from AppConfig.ready)."""
    on_events_committed(notifier.events_committed)


def notifier_start() -> None:
    """Start the notifier now (servers and workers do, so retries due after a restart go out)."""
    if settings.AGENTSITE_NOTIFICATIONS:
        notifier.ensure_started()
