"""The answer with its citations as links to the step panel and its unsupported figures marked."""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

from django import template
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from plans.models import Run
from plans.templatetags.agentsite import shown
from plans.ui.charts import spelled_parts

register = template.Library()


@register.filter
def cited_answer(run: Run) -> SafeString:
    """run.answer as HTML: every piece of its text escaped with its hidden characters shown
    (the |shown filter), the check's findings marked up."""
    answer = run.answer or ""
    check: dict[str, Any] = run.answer_check or {}
    # Every piece is escaped with its hidden characters shown; an answer with none (the usual
    # case) is only escaped, once per piece: a 500-step run's answer has a thousand pieces.
    plain = not any(hidden for _, hidden in spelled_parts(answer))
    show: Callable[[str], str] = html.escape if plain else shown
    marks: list[tuple[int, int, str]] = []
    # One reverse for every link: a 500-step run's answer cites hundreds of steps.
    step_url = reverse("plans:step_detail", args=[run.pk, 0]).removesuffix("0/")
    for citation in check.get("citations", []):
        start, end = citation["start"], citation["end"]
        text = answer[start:end]
        html_text: str
        if citation["valid"]:
            url = html.escape(f"{step_url}{int(citation['step'])}/")
            html_text = (
                f'<a class="citation" href="{url}" hx-get="{url}" hx-target="#step-panel">'
                f"{show(text)}</a>"
            )
        else:
            html_text = format_html(
                '<span class="citation citation-invalid" title="{}">{}</span>'
                '<span class="figure-warning" role="note"> (citation not valid: {})</span>',
                citation["reason"],
                shown(text),
                citation["reason"],
            )
        marks.append((start, end, html_text))
    for figure in check.get("unsupported", []):
        start, end = figure["start"], figure["end"]
        flagged = format_html(
            '<mark class="unsupported-figure" title="{}">{}</mark>'
            '<span class="figure-warning" role="note"> (in no step result)</span>',
            "This figure appears in no step result",
            shown(answer[start:end]),
        )
        marks.append((start, end, flagged))
    if any(end > len(answer) for _, end, _ in marks):
        return shown(answer)  # the check was of another text: show the answer plainly
    pieces: list[str] = []
    at = 0
    for start, end, marked in sorted(marks):
        if start < at:
            continue  # overlapping findings: the first one wins
        pieces.append(show(answer[at:start]))
        pieces.append(marked)
        at = end
    pieces.append(show(answer[at:]))
    return mark_safe("".join(pieces))  # noqa: S308  every piece was escaped above
