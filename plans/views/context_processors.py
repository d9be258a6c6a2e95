"""What every page's navigation needs."""

from collections.abc import Callable

from django.http import HttpRequest

from plans.roles import may_decide
from plans.selectors.approvals import pending_approvals_count


def pending_approvals(request: HttpRequest) -> dict[str, object]:
    """The approvals badge: how many destructive steps wait for a reviewer (reviewers only)."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {
        # Counted only if the page shows it and its view did not (the queue counts it itself).
        "pending_approvals": _Once(lambda: pending_approvals_count(user)),
        "is_reviewer": may_decide(user),
    }


class _Once:
    """A value computed when a template first asks for it, then kept for the page."""

    def __init__(self, compute: Callable[[], int]) -> None:
        self._compute = compute
        self._value: int | None = None

    def __call__(self) -> int:
        if self._value is None:
            self._value = self._compute()
        return self._value
