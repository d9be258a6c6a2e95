"""Template filters for the human-in-the-loop controls."""

from __future__ import annotations

from typing import Any

from django import template

from plans.models import Run
from plans.selectors.approvals import changes_refusal as refusal_for

register = template.Library()

# Whom an ask_human question is for, as a sentence names them ("Waiting for an answer from ...").
_AUDIENCE_WORDS = {
    "author": "the run's author",
    "reviewers": "a reviewer",
    "operators": "an operator",
}


@register.filter
def changes_refusal(run: Run) -> str:
    """Why "Request changes" is not offered for this run ("" when it is)."""
    return refusal_for(run)


@register.filter
def audience_words(audience: Any) -> str:
    """ "author" -> "the run's author", "reviewers" -> "a reviewer"."""
    return _AUDIENCE_WORDS.get(str(audience), f"the {audience}")


@register.filter
def parked_words(payload: dict[str, Any]) -> str:
    """What a parked run waits on, in words: a decision on steps or a plan, a person's answer."""
    awaiting = payload.get("awaiting")
    if not isinstance(awaiting, list):
        return f"Waiting for a decision on {awaiting}"
    questions = [q for q in payload.get("questions") or [] if isinstance(q, dict)]
    asked = {q.get("step") for q in questions}
    decisions = [step for step in awaiting if step not in asked]
    parts = []
    if decisions:
        ids = ", ".join(str(step) for step in decisions)
        parts.append(f"a decision on step{'s' if len(decisions) != 1 else ''} {ids}")
    for question in questions:
        who = audience_words(question.get("audience", "author"))
        parts.append(f"an answer from {who} (step {question.get('step')})")
    return "Waiting for " + " and ".join(parts)
