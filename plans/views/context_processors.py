"""What every page's navigation needs."""

from functools import cache, partial

from django.http import HttpRequest

from plans.roles import may_decide
from plans.selectors.approvals import pending_approvals_count


def pending_approvals(request: HttpRequest) -> dict[str, object]:
    """The approvals badge: how many destructive steps wait for a reviewer (reviewers only)."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {
        # Counted when the page first shows it (templates call it), once, and not at all if
        # its view counted it itself (the queue does).
        "pending_approvals": cache(partial(pending_approvals_count, user)),
        "is_reviewer": may_decide(user),
    }
