"""Template filters for showing run data: JSON exactly as stored, readable."""

import datetime
import unicodedata
from collections.abc import Mapping
from typing import Any

from django import template
from django.utils import timezone
from django.utils.html import conditional_escape, format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.timesince import timesince

from plans.models import Run, RunEvent
from plans.roles import four_eyes_forbids, may_decide, routing_forbids
from plans.selectors import approvals as approval_selectors
from plans.selectors.runs import (
    DERIVED_SHOWN,
    StepProgress,
    progress_status,
    run_progress_status,
    runs_derived,
    status_words,
)
from plans.ui.charts import shown_json, spelled_char, spelled_parts, spelled_text
from plans.ui.effects import effect_note as _effect_note

register = template.Library()


@register.filter(is_safe=False)
def shown(value: Any, plain: str = "") -> SafeString:
    """Untrusted text (goals, answers, errors, reasons) escaped, hidden characters made visible.

    "Pay \u202egnp.exe" would read "Pay exe.png": each bidi control, zero-width or other
    invisible character is shown as a marked "⟨U+202E⟩" instead, and the rest as it is.
    ``shown:'plain'`` spells them without markup, for attributes such as title.
    """
    if value is None:
        return SafeString("")
    if plain:
        return conditional_escape(spelled_text(str(value)))
    pieces = []
    for piece, hidden in spelled_parts(str(value)):
        if hidden:
            name = unicodedata.name(piece, "invisible character")
            pieces.append(
                format_html(
                    '<mark class="hidden-char" title="{}">{}</mark>', name, spelled_char(piece)
                )
            )
        else:
            pieces.append(conditional_escape(piece))
    return format_html_join("", "{}", ((piece,) for piece in pieces))


@register.filter
def pretty_json(value: Any) -> str:
    """Indented JSON of a stored value, hidden characters shown (see plans.ui.charts.shown_json)."""
    return shown_json(value, indent=2)


@register.filter
def capped_count(count: int) -> str:
    """A waiting count as the badge shows it: "1,000+" past the count's cap."""
    cap = approval_selectors.WAITING_COUNT_CAP
    return f"{cap:,}+" if count > cap else str(count)


@register.filter
def effect_note(step: Any) -> str:
    """What became of an effect across plan versions: "done in v1 (step 2), not repeated"."""
    return _effect_note(step)


@register.filter
def status_label(status: str) -> str:
    """A status as people write it: "awaiting_approval" -> "awaiting approval", a question's
    wait ("awaiting_answer") -> "waiting for an answer"."""
    return status_words(status)


@register.filter
def run_state(run: Run, progress: StepProgress | None) -> str:
    """The run's status as its pill shows it (class and, through status_label, words): a run
    parked only on questions waits for an answer, not an approval."""
    return run_progress_status(run.status, progress)


@register.filter
def derived_runs(run: Run, viewer: Any) -> dict[str, Any]:
    """The run's forks and re-runs the viewer may see: {"runs": [...], "more": bool}."""
    if viewer is None or not getattr(viewer, "is_authenticated", False):
        return {"runs": [], "more": False}
    runs = runs_derived(run=run, user=viewer)
    return {"runs": runs[:DERIVED_SHOWN], "more": len(runs) > DERIVED_SHOWN}


@register.filter
def step_state(step: Any) -> str:
    """A step's status as its pill shows it: a question (ask_human) waits for an answer."""
    return progress_status(step.status, step.tool)


@register.filter
def step_status(step: Any) -> str:
    """A step's status in words: a question (ask_human) waits for an answer, not an approval."""
    return status_words(progress_status(step.status, step.tool))


_EVENT_KINDS = frozenset(RunEvent.Kind.values)


# Echoes of what the other events already say: folded away unless "Show every event" is ticked.
_NOISE_KINDS = frozenset(
    {
        RunEvent.Kind.RUN_STATUS,
        RunEvent.Kind.RUN_RESUMED,
        RunEvent.Kind.RUN_STARTED,
        RunEvent.Kind.ROUND_FINISHED,
    }
)


@register.filter
def event_is_noise(event: Mapping[str, Any]) -> bool:
    """Whether the timeline folds this event by default: a routine kind, or a declined call
    whose changes_requested event, next to it, says the same with the reviewer's words."""
    if event["kind"] == RunEvent.Kind.APPROVAL_DECIDED:
        return bool(event["payload"].get("changes_requested"))
    return event["kind"] in _NOISE_KINDS


@register.filter
def event_template(kind: str) -> str:
    """The template that words one timeline event, chosen by its kind."""
    return f"plans/events/{kind if kind in _EVENT_KINDS else 'other'}.html"


@register.filter
def decision_forbidden(run: Run, viewer: Any) -> bool:
    """Whether the four-eyes rule (plans.roles) keeps viewer from deciding this run's steps."""
    if not getattr(viewer, "is_authenticated", False):
        return False
    return four_eyes_forbids(run=run, reviewer=viewer, via="web")


@register.filter
def routed_away(approval: Any, viewer: Any) -> bool:
    """Whether an approval rule routed this approval to groups the viewer is not in."""
    return routing_forbids(user=viewer, groups=approval.groups)


@register.filter(name="may_decide")
def may_decide_filter(viewer: Any) -> bool:
    """Whether viewer is a reviewer (plans.roles.may_decide)."""
    return may_decide(viewer)


FRESH = datetime.timedelta(minutes=1)


@register.filter
def ago(moment: datetime.datetime | None) -> str:
    """ "just now" under a minute (never "0 minutes ago"), else "5 minutes ago"."""
    if moment is None:
        return ""
    if timezone.now() - moment < FRESH:
        return "just now"
    return f"{timesince(moment)} ago"


@register.filter
def waiting(moment: datetime.datetime | None) -> str:
    """How long a request has waited: "asked just now", else "waiting 5 minutes"."""
    if moment is None:
        return ""
    if timezone.now() - moment < FRESH:
        return "asked just now"
    return f"waiting {timesince(moment)}"


@register.filter
def lookup(mapping: Any, key: Any) -> Any:
    """mapping[key], or None: for dicts a view builds by id (e.g. each run's progress)."""
    try:
        return mapping.get(key)
    except AttributeError:
        return None


FOLD_LINES = 8
FOLD_CHARS = 480  # one long string is one JSON line, but wraps to many on the page


@register.simple_tag
def folded_json(value: Any, *key_parts: Any) -> SafeString:
    """Indented JSON (as pretty_json) cut to its first lines, with a "Show all" toggle.

    Pure CSS (a checkbox and its label), so it keeps working in fragments the socket swaps in.
    """
    text = pretty_json(value)
    key = "-".join(str(part) for part in key_parts)  # unique on the page: "result-3"
    lines = text.count("\n") + 1
    if lines <= FOLD_LINES and len(text) <= FOLD_CHARS:
        return format_html('<pre class="json">{}</pre>', text)
    size = f"{lines} lines" if lines > FOLD_LINES else f"{len(text):,} characters"
    return format_html(
        '<div class="folded"><input type="checkbox" id="fold-{key}" class="fold-toggle">'
        '<pre class="json">{text}</pre>'
        '<label for="fold-{key}" class="fold-label"><span class="fold-more">Show all ({size})'
        '</span><span class="fold-less">Show less</span></label></div>',
        key=key,
        text=text,
        size=size,
    )


@register.filter
def waiting_for(awaiting: Any) -> str:
    """What a parked run waits on: steps (a list of ids) or a plan ("plan v2")."""
    if isinstance(awaiting, list):
        ids = ", ".join(str(step) for step in awaiting)
        return f"step{'s' if len(awaiting) != 1 else ''} {ids}"
    return str(awaiting)
