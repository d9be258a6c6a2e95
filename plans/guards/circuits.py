"""Circuit breakers per tool, shared through the database by every run and worker process.

Closed: calls go through. After AGENTSITE_BREAKER_FAILURES consecutive failures the circuit
opens: calls are answered at once with "tool unavailable (circuit open)". After the cooldown
one caller wins the half-open probe; its success closes the circuit, its failure reopens it.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta

from django.conf import settings
from django.db.models import F
from django.utils import timezone

from plans.models import CircuitBreaker

State = CircuitBreaker.State
CIRCUIT_OPEN_MESSAGE = "tool unavailable (circuit open)"

# A closed circuit is re-read at most this often per process: the common case costs no query.
CLOSED_CACHE_S = 1.0
_closed_until: dict[str, float] = {}
_lock = threading.Lock()


def circuit_admits(tool: str) -> bool:
    """May a call to this tool go ahead now? (Wins the half-open probe when one is due.)"""
    with _lock:
        if _closed_until.get(tool, 0.0) > time.monotonic():
            return True
    breaker = CircuitBreaker.objects.filter(tool=tool).first()
    if breaker is None or breaker.state == State.CLOSED:
        _remember_closed(tool)
        return True
    cooldown_over = timezone.now() - timedelta(seconds=settings.AGENTSITE_BREAKER_COOLDOWN_S)
    if breaker.state == State.OPEN and breaker.opened_at and breaker.opened_at <= cooldown_over:
        # Exactly one caller moves open -> half-open; it makes the probe call.
        won = CircuitBreaker.objects.filter(
            pk=breaker.pk, state=State.OPEN, opened_at=breaker.opened_at
        ).update(state=State.HALF_OPEN)
        return won == 1
    return False


def circuit_record(tool: str, *, failed: bool, error: str = "") -> None:
    """Count a call's outcome; writes only when the breaker's state or count changes."""
    if not failed:
        with _lock:
            known_closed = _closed_until.get(tool, 0.0) > time.monotonic()
        if not known_closed:
            CircuitBreaker.objects.filter(tool=tool).exclude(
                state=State.CLOSED, consecutive_failures=0
            ).update(state=State.CLOSED, consecutive_failures=0, opened_at=None)
            _remember_closed(tool)
        return
    with _lock:
        _closed_until.pop(tool, None)
    breaker, _ = CircuitBreaker.objects.get_or_create(tool=tool)
    CircuitBreaker.objects.filter(pk=breaker.pk).update(
        consecutive_failures=F("consecutive_failures") + 1, last_error=error[:2000]
    )
    threshold = settings.AGENTSITE_BREAKER_FAILURES
    # A failed probe reopens at once; otherwise open when the streak reaches the threshold.
    CircuitBreaker.objects.filter(pk=breaker.pk).filter(state=State.HALF_OPEN).update(
        state=State.OPEN, opened_at=timezone.now()
    )
    CircuitBreaker.objects.filter(
        pk=breaker.pk, state=State.CLOSED, consecutive_failures__gte=threshold
    ).update(state=State.OPEN, opened_at=timezone.now())


def circuit_states() -> list[CircuitBreaker]:
    """Every tool's breaker, for the health page."""
    return list(CircuitBreaker.objects.order_by("tool"))


def _remember_closed(tool: str) -> None:
    with _lock:
        _closed_until[tool] = time.monotonic() + CLOSED_CACHE_S


def reset_cache() -> None:
    with _lock:
        _closed_until.clear()
