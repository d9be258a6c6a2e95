"""An e-mail's decision link: GET shows the request and asks to confirm (mail scanners fetch
links, so a GET never decides); the POST decides through the same service as the inbox."""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods

from plans.engine import preview_token
from plans.models import Approval
from plans.selectors.approvals import approval_inputs
from plans.services.approvals import ApprovalRefused
from plans.services.decision_links import (
    LinkRefused,
    approval_decide_by_link,
    decision_link_check,
    decision_link_read,
)
from plans.ui.effects import effect_line
from plans.views.params import SignedInRequest
from plans.views.refusals import refusal_status

TEMPLATE = "plans/email_decision.html"


@never_cache
@require_http_methods(["GET", "POST"])
def email_decision(request: SignedInRequest, token: str) -> HttpResponse:
    # Signed out, LoginRequiredMiddleware sends the reader to sign in and back here: the link
    # names its reviewer but does not stand in for them (README, "Deciding from an e-mail").
    try:
        link = decision_link_read(token)
        approval = decision_link_check(link=link, user=request.user)
    except LinkRefused as refused:
        return _refusal(request, refused)
    context: dict[str, Any] = {"link": link, **_shown(approval)}
    if request.method == "GET":
        return render(request, TEMPLATE, context)
    reason = request.POST.get("reason", "")
    try:
        decided = approval_decide_by_link(
            link=link,
            reviewer=request.user,
            reason=reason,
            seen_preview=request.POST.get("preview", ""),
        )
    except LinkRefused as refused:
        return _refusal(request, refused)
    except ApprovalRefused as refused:
        # e.g. a reject without a reason, or a preview taken again since the page was shown:
        # the same page again, as the approval is now, with what was typed.
        approval.refresh_from_db()
        context.update(_shown(approval), error=str(refused), reason=reason)
        return render(request, TEMPLATE, context, status=refusal_status(refused))
    return render(request, TEMPLATE, {"link": link, "decided": decided, **_shown(decided)})


def _shown(approval: Approval) -> dict[str, Any]:
    return {
        "approval": approval,
        "run": approval.run,
        "inputs": approval_inputs([approval])[approval.pk],
        "effect": effect_line(approval.tool, approval.args),
        "preview_token": preview_token(approval.args_sha256, approval.preview),
    }


# How each refusal answers: gone for good (410) or not yours (403); a bad link is a 400.
LINK_STATUS = {
    "link_invalid": 400,
    "link_expired": 410,
    "link_gone": 410,
    "link_used": 410,
    "link_decided": 410,
    "link_stale": 409,
    "link_other_user": 403,
    "not_a_reviewer": 403,
}


def _refusal(request: SignedInRequest, refused: LinkRefused) -> HttpResponse:
    context = {"refused": refused, "code": refused.code}
    return render(request, TEMPLATE, context, status=LINK_STATUS.get(refused.code, 409))
