"""The run lease: one worker advances a run at a time, and a worker that lost it cannot write.

A lease is valid until its expiry. The holder extends it by heartbeat (every third of the lease)
and with every batch it commits; every write is fenced on the token and the expiry (see
plans.journal.events.append_events), so a worker paused past its lease writes nothing more, even
if no other worker has taken the run yet.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connections, router
from django.utils import timezone

from plans.bulk import KeptConnection, column_sql, connection_lost
from plans.models import Run

logger = logging.getLogger(__name__)


@dataclass(eq=False)
class Lease:
    run_id: int
    token: uuid.UUID
    seconds: float
    lost: threading.Event = field(default_factory=threading.Event)
    released: bool = False
    # Monotonic time until which the lease is surely still held: a lease's length after the
    # start of its last successful take, renewal or fenced commit. Checked before every call
    # starts, so a worker paused past it starts nothing, even before its keeper finds out.
    valid_until: float = 0.0

    def extend_from(self, started: float) -> None:
        """A renewal or fenced commit that began at monotonic time started succeeded."""
        if started + self.seconds > self.valid_until:
            self.valid_until = started + self.seconds

    def past_deadline(self) -> bool:
        return self.lost.is_set() or time.monotonic() >= self.valid_until


def lease_seconds() -> float:
    return float(settings.AGENTSITE_LEASE_SECONDS)


def lease_holder() -> str:
    """Who is taking a lease: host, process and thread (a worker thread is named by its id)."""
    return f"{socket.gethostname()}:{os.getpid()}:{threading.current_thread().name}"


def lease_acquire(run_id: int, *, seconds: float | None = None) -> Lease | None:
    """Take the run's lease if it is free or expired; None when another worker holds it."""
    seconds = seconds or lease_seconds()
    token = uuid.uuid4()
    started = time.monotonic()
    now = timezone.now()
    taken = _take_if_free(run_id, token, now, now + timedelta(seconds=seconds))
    if taken != 1:
        return None
    # Events carry the token they were written under; this line says whose it is.
    logger.debug("run %s: lease %s taken by %s", run_id, token, lease_holder())
    return Lease(run_id, token, seconds, valid_until=started + seconds)


def _take_if_free(run_id: int, token: uuid.UUID, now: datetime, expires_at: datetime) -> int:
    """Rows updated (0 or 1) by taking an unfinished run's lease that is free or expired.

    As SQL built once, not the ORM: it starts every advance, and building the query cost more
    than running it.
    """
    alias = router.db_for_write(Run)
    connection = connections[alias]
    prepare_token = Run._meta.get_field("lease_token").get_db_prep_save
    prepare_time = Run._meta.get_field("lease_expires_at").get_db_prep_save
    params = [prepare_token(token, connection), prepare_time(expires_at, connection), run_id]
    params += [str(status) for status in Run.TERMINAL] + [prepare_time(now, connection)]
    with connection.cursor() as cursor:
        cursor.execute(_take_if_free_sql(alias), params)
        return cursor.rowcount


@functools.cache
def _take_if_free_sql(alias: str) -> str:
    """params: token, expiry, run id, each terminal status, now."""
    quote = connections[alias].ops.quote_name
    meta = Run._meta
    token_col, expiry_col, status_col, pk_col = (
        column_sql(meta, quote, name)
        for name in ("lease_token", "lease_expires_at", "status", "id")
    )
    terminal = ", ".join(["%s"] * len(Run.TERMINAL))
    return (
        f"UPDATE {quote(meta.db_table)} SET {token_col} = %s, {expiry_col} = %s "  # noqa: S608
        f"WHERE {pk_col} = %s AND {status_col} NOT IN ({terminal}) "
        f"AND ({token_col} IS NULL OR {expiry_col} < %s)"
    )


def lease_renew(lease: Lease) -> bool:
    """Extend an unexpired lease; False (and lease.lost set) once it expired or was taken."""
    started = time.monotonic()
    now = timezone.now()
    renewed = Run.objects.filter(
        pk=lease.run_id, lease_token=lease.token, lease_expires_at__gt=now
    ).update(lease_expires_at=now + timedelta(seconds=lease.seconds))
    if renewed == 1:
        lease.extend_from(started)
    else:
        lease.lost.set()
        # No token at all: the run's own last commit let the lease go (finished or parked)
        # a moment before its advancer marked it released; nothing went wrong.
        if (
            not lease.released
            and Run.objects.filter(pk=lease.run_id, lease_token__isnull=False).exists()
        ):
            logger.warning("run %s: lease %s expired or was taken over", lease.run_id, lease.token)
    return renewed == 1


def lease_release(lease: Lease) -> None:
    Run.objects.filter(pk=lease.run_id, lease_token=lease.token).update(
        lease_token=None, lease_expires_at=None
    )
    lease.released = True


# Leases this process is renewing, so a worker shutting down can hand them over at once.
_held: dict[uuid.UUID, Lease] = {}
_held_lock = threading.Lock()


def leases_held() -> list[Lease]:
    with _held_lock:
        return list(_held.values())


def leases_hand_over() -> list[int]:
    """Expire every lease this process holds now, so other workers need not wait them out."""
    return [lease.run_id for lease in leases_held() if lease_hand_over(lease)]


def lease_hand_over(lease: Lease) -> bool:
    """Expire the lease now if it is still held, so another worker may take the run at once."""
    lease.lost.set()
    now = timezone.now()
    expired = Run.objects.filter(
        pk=lease.run_id, lease_token=lease.token, lease_expires_at__gt=now
    ).update(lease_expires_at=now)
    return expired == 1


class Heartbeat:
    """Keeps a lease renewed while the run is being advanced (by the process's keeper thread)."""

    def __init__(self, lease: Lease) -> None:
        self.lease = lease

    def __enter__(self) -> Heartbeat:
        _keeper.hold(self.lease)
        return self

    def __exit__(self, *exc: object) -> None:
        _keeper.let_go(self.lease)


class _LeaseKeeper:
    """One thread renewing every lease this process holds, each a third of the way through.

    Shared rather than a thread per run: starting and joining one cost more than a short run's
    steps. It exits after IDLE_EXIT_S holding nothing, and the next hold() starts it again.
    """

    IDLE_EXIT_S = 30.0

    def __init__(self) -> None:
        self._changed = threading.Condition(_held_lock)
        self._due: dict[uuid.UUID, float] = {}  # token -> monotonic time of its next renewal
        self._thread: threading.Thread | None = None
        self._connection = KeptConnection("the lease keeper")

    def hold(self, lease: Lease) -> None:
        with self._changed:
            _held[lease.token] = lease
            self._due[lease.token] = time.monotonic() + lease.seconds / 3
            if self._thread is None:
                self._thread = threading.Thread(target=self._keep, name="lease-keeper", daemon=True)
                self._thread.start()
            self._changed.notify()

    def let_go(self, lease: Lease) -> None:
        with self._changed:
            _held.pop(lease.token, None)
            self._due.pop(lease.token, None)

    def _keep(self) -> None:
        try:
            while due := self._wait_for_due():
                self._connection.check()
                for lease in due:
                    if lease.released or lease.lost.is_set() or not self._renew_or_retry(lease):
                        self.let_go(lease)  # nothing more to keep; Heartbeat's exit is a no-op
                        continue
                    with self._changed:
                        if lease.token in self._due:
                            self._due[lease.token] = time.monotonic() + lease.seconds / 3
        finally:
            connections.close_all()

    @staticmethod
    def _renew_or_retry(lease: Lease) -> bool:
        """Renew the lease; False once it is lost. A failed renewal is kept for its next turn."""
        try:
            try:
                return lease_renew(lease)
            except Exception:
                if not connection_lost():
                    raise
                return lease_renew(lease)  # dropped since its check: once more, reconnected
        except Exception as error:
            # A locked or unreachable database must neither end the keeper, which renews every
            # lease of the process, nor give up a lease that may still be valid; one that
            # expires meanwhile is found lost by the next renewal.
            logger.warning(
                "run %s: lease %s not renewed, trying again in %.1fs: %r",
                lease.run_id,
                lease.token,
                lease.seconds / 3,
                error,
            )
            connections.close_all()  # reconnect on the next renewal
            return True

    def _wait_for_due(self) -> list[Lease]:
        """The leases due for renewal, once there are any; [] to exit after idling."""
        with self._changed:
            while True:
                if not self._due:
                    if not self._changed.wait(self.IDLE_EXIT_S) and not self._due:
                        self._thread = None
                        return []
                    continue
                now = time.monotonic()
                due = [_held[token] for token, at in self._due.items() if at <= now]
                if due:
                    return due
                self._changed.wait(min(self._due.values()) - now)


_keeper = _LeaseKeeper()
