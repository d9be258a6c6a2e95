"""The run lease: one worker advances a run at a time, and a worker that lost it cannot write.

A lease is valid until its expiry. The holder extends it by heartbeat (every third of the lease)
and with every batch it commits; every write is fenced on the token and the expiry (see
plans.events.append_events), so a worker paused past its lease writes nothing more, even if no
other worker has taken the run yet.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connections, router
from django.utils import timezone

from plans.models import Run

logger = logging.getLogger(__name__)


@dataclass(eq=False)
class Lease:
    run_id: int
    token: uuid.UUID
    seconds: float
    lost: threading.Event = field(default_factory=threading.Event)
    released: bool = False


def lease_seconds() -> float:
    return float(settings.AGENTSITE_LEASE_SECONDS)


def lease_holder() -> str:
    """Who is taking a lease: host, process and thread (a worker thread is named by its id)."""
    return f"{socket.gethostname()}:{os.getpid()}:{threading.current_thread().name}"


def lease_acquire(run_id: int, *, seconds: float | None = None) -> Lease | None:
    """Take the run's lease if it is free or expired; None when another worker holds it."""
    seconds = seconds or lease_seconds()
    token = uuid.uuid4()
    now = timezone.now()
    taken = _take_if_free(run_id, token, now, now + timedelta(seconds=seconds))
    if taken != 1:
        return None
    # Events carry the token they were written under; this line says whose it is.
    logger.debug("run %s: lease %s taken by %s", run_id, token, lease_holder())
    return Lease(run_id, token, seconds)


def _take_if_free(run_id: int, token: uuid.UUID, now: datetime, expires_at: datetime) -> int:
    """Rows updated (0 or 1) by taking an unfinished run's lease that is free or expired.

    As SQL, not the ORM: it starts every advance, and building the query cost more than
    running it.
    """
    connection = connections[router.db_for_write(Run)]
    quote = connection.ops.quote_name
    fields = {name: Run._meta.get_field(name) for name in ("lease_token", "lease_expires_at")}
    token_col, expiry_col = (quote(field.column) for field in fields.values())
    id_col, status_col = quote(Run._meta.pk.column), quote(Run._meta.get_field("status").column)
    terminal = ", ".join(["%s"] * len(Run.TERMINAL))
    sql = (
        f"UPDATE {quote(Run._meta.db_table)} SET {token_col} = %s, {expiry_col} = %s "  # noqa: S608
        f"WHERE {id_col} = %s AND {status_col} NOT IN ({terminal}) "
        f"AND ({token_col} IS NULL OR {expiry_col} < %s)"
    )
    prepare_token = fields["lease_token"].get_db_prep_save
    prepare_time = fields["lease_expires_at"].get_db_prep_save
    params = [prepare_token(token, connection), prepare_time(expires_at, connection), run_id]
    params += [str(status) for status in Run.TERMINAL] + [prepare_time(now, connection)]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount


def lease_renew(lease: Lease) -> bool:
    """Extend an unexpired lease; False (and lease.lost set) once it expired or was taken."""
    now = timezone.now()
    renewed = Run.objects.filter(
        pk=lease.run_id, lease_token=lease.token, lease_expires_at__gt=now
    ).update(lease_expires_at=now + timedelta(seconds=lease.seconds))
    if renewed != 1:
        lease.lost.set()
        if not lease.released:
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
    handed = []
    now = timezone.now()
    for lease in leases_held():
        lease.lost.set()
        expired = Run.objects.filter(
            pk=lease.run_id, lease_token=lease.token, lease_expires_at__gt=now
        ).update(lease_expires_at=now)
        if expired:
            handed.append(lease.run_id)
    return handed


class Heartbeat:
    """Renews a lease from a background thread while the run is being advanced."""

    def __init__(self, lease: Lease) -> None:
        self.lease = lease
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._beat, name=f"lease-{lease.run_id}", daemon=True
        )

    def __enter__(self) -> Heartbeat:
        with _held_lock:
            _held[self.lease.token] = self.lease
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        with _held_lock:
            _held.pop(self.lease.token, None)

    def _beat(self) -> None:
        try:
            while not self._stop.wait(self.lease.seconds / 3):
                if self.lease.released or self.lease.lost.is_set():
                    return
                if not lease_renew(self.lease):
                    return
        finally:
            connections.close_all()
