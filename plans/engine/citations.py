"""The mechanical check of an answer: are its [step N] citations real, and its figures sourced?

A citation is valid when the step exists and succeeded. A figure (a number, a currency amount,
a date) is supported when the same value appears in some step's result, in the arguments a
step was actually called with (a person's answer or a reviewer's edit is a fact of the run), in
a step's error, or is a step's number; otherwise it is flagged. Pure Python: it reads plain
outcomes, not database rows.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from plans.engine.figures import figures

CITATION = re.compile(r"\[\s*step\s+(\d+)\s*\]", re.IGNORECASE)
# A date, or a number (grouped by commas or not, maybe with decimals), not glued to a word: the
# 1001 of "A-1001" or the 16 of "iPhone 16" is part of a name, not a figure.
FIGURE = re.compile(
    r"(?P<date>\b\d{4}-\d{2}-\d{2}\b)"
    r"|(?<![\w.\-/])(?P<number>\d{1,3}(?:,\d{2,3})+(?:\.\d+)?|\d+(?:\.\d+)?)(?![\w\-/]|\.\d)"
)


@dataclass(frozen=True)
class Citation:
    step: int
    valid: bool
    reason: str  # why it is not valid ("" when it is)
    start: int
    end: int


@dataclass(frozen=True)
class Figure:
    text: str
    start: int
    end: int


@dataclass
class AnswerCheck:
    citations: list[Citation] = field(default_factory=list)
    unsupported: list[Figure] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.unsupported and all(c.valid for c in self.citations)

    def summary(self, *, listed: int = 20) -> dict[str, Any]:
        """Counts and the first invalid citations: what an event needs, not every span."""
        invalid = [c for c in self.citations if not c.valid]
        return {
            "ok": self.ok,
            "cited": len(self.citations),
            "citations_invalid": [{"step": c.step, "reason": c.reason} for c in invalid[:listed]],
            "citations_invalid_count": len(invalid),
            "figures_unsupported": len(self.unsupported),
        }

    def as_json(self) -> dict[str, Any]:
        return {
            # By hand, not dataclasses.asdict (a deep copy): a 500-step answer has hundreds.
            "citations": [
                {
                    "step": c.step,
                    "valid": c.valid,
                    "reason": c.reason,
                    "start": c.start,
                    "end": c.end,
                }
                for c in self.citations
            ],
            "unsupported": [
                {"text": f.text, "start": f.start, "end": f.end} for f in self.unsupported
            ],
            "ok": self.ok,
        }


def answer_check(answer: str, outcomes: Iterable[Mapping[str, Any]]) -> AnswerCheck:
    """Check an answer against the outcomes it was written from ({id, status, args, result})."""
    by_id = {int(o["id"]): o for o in outcomes if isinstance(o.get("id"), int)}
    check = AnswerCheck()
    cited_spans: list[tuple[int, int]] = []
    for match in CITATION.finditer(answer):
        step_id = int(match.group(1))
        outcome = by_id.get(step_id)
        if outcome is None:
            reason = f"there is no step {step_id}"
        elif outcome.get("status") != "succeeded":
            reason = f"step {step_id} {outcome.get('status') or 'did not succeed'}"
        else:
            reason = ""
        check.citations.append(Citation(step_id, not reason, reason, match.start(), match.end()))
        cited_spans.append((match.start(), match.end()))
    known = _known_values(by_id.values())
    # Both scans run left to right, so one pointer into the spans keeps this linear: a
    # 500-step answer has hundreds of citations and hundreds of figures.
    span = 0
    for match in FIGURE.finditer(answer):
        at = match.start()
        while span < len(cited_spans) and cited_spans[span][1] <= at:
            span += 1
        if span < len(cited_spans) and cited_spans[span][0] <= at:
            continue  # the N of a citation
        if _value(match.group(0)) not in known:
            check.unsupported.append(Figure(match.group(0), at, match.end()))
    return check


def _value(text: str) -> str:
    """A figure as compared: a date as written, a number as plans.engine.figures reads it."""
    if _DATE.fullmatch(text):
        return text
    return _plain(text)


def _plain(number: str) -> str:
    plain = number.replace(",", "")
    if "." in plain:
        plain = plain.rstrip("0").rstrip(".")
    return plain


_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def _known_values(outcomes: Iterable[Mapping[str, Any]]) -> set[str]:
    """Every figure in the steps' results, the arguments they were called with and their
    errors, and the steps' own numbers: "Step 3 failed: [Errno 111]" states facts of the run."""
    known: set[str] = set()
    for outcome in outcomes:
        _collect(outcome.get("id"), known)
        for value in (outcome.get("result"), outcome.get("args"), outcome.get("error")):
            _collect(value, known)
    return known


def _collect(value: Any, known: set[str]) -> None:
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, int):
        known.add(str(value))
    elif isinstance(value, float):
        known.add(_plain(repr(value)) if "e" not in repr(value) else repr(value))
    elif isinstance(value, str):
        known.update(figures(value))  # numbers inside names count too: they are in the result
        known.update(_DATE.findall(value))
    elif isinstance(value, Mapping):
        for item in value.values():
            _collect(item, known)
    elif isinstance(value, list | tuple):
        for item in value:
            _collect(item, known)
