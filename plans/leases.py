"""The run lease: one worker advances a run at a time, and a worker that lost it cannot write."""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db import connections
from django.db.models import Q
from django.utils import timezone

from plans.models import Run


@dataclass
class Lease:
    run_id: int
    token: uuid.UUID
    seconds: float
    lost: threading.Event = field(default_factory=threading.Event)
    released: bool = False


def lease_seconds() -> float:
    return float(settings.AGENTSITE_LEASE_SECONDS)


def lease_acquire(run_id: int, *, seconds: float | None = None) -> Lease | None:
    """Take the run's lease if it is free or expired; None when another worker holds it."""
    seconds = seconds or lease_seconds()
    token = uuid.uuid4()
    now = timezone.now()
    taken = (
        Run.objects.filter(pk=run_id)
        .exclude(status__in=Run.TERMINAL)
        .filter(Q(lease_token__isnull=True) | Q(lease_expires_at__lt=now))
        .update(lease_token=token, lease_expires_at=now + timedelta(seconds=seconds))
    )
    return Lease(run_id, token, seconds) if taken == 1 else None


def lease_renew(lease: Lease) -> bool:
    """Extend the lease; False (and lease.lost set) when it was taken over."""
    renewed = Run.objects.filter(pk=lease.run_id, lease_token=lease.token).update(
        lease_expires_at=timezone.now() + timedelta(seconds=lease.seconds)
    )
    if renewed != 1:
        lease.lost.set()
    return renewed == 1


def lease_release(lease: Lease) -> None:
    Run.objects.filter(pk=lease.run_id, lease_token=lease.token).update(
        lease_token=None, lease_expires_at=None
    )


class Heartbeat:
    """Renews a lease from a background thread while the run is being advanced."""

    def __init__(self, lease: Lease) -> None:
        self.lease = lease
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._beat, name=f"lease-{lease.run_id}", daemon=True
        )

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _beat(self) -> None:
        try:
            while not self._stop.wait(self.lease.seconds / 3):
                if not lease_renew(self.lease):
                    return
        finally:
            connections.close_all()
