"""Previews of a destructive call's effect: their shape, their stored form, and what changed.

A tool's preview hook returns a Preview computed from the target's current state; its
``target_version`` changes whenever the target does, which is what binds an approval to the
state its reviewer saw (the rule that uses it is plans.runtime.gate.approval_target_stale).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from plans.engine.policies import canonical_json

# What a preview may hold, so that a card stays a card: longer text is cut, saying so.
SUMMARY_MAX_CHARS = 300
FACTS_MAX = 12
FACT_MAX_CHARS = 300
WARNINGS_MAX = 6
TARGET_VERSION_MAX_CHARS = 200


@dataclass(frozen=True)
class Preview:
    """What a destructive call would do, computed without doing it.

    facts: labelled values, as a mapping or (label, value) pairs, in the order shown;
    target_version: an opaque string that changes whenever the call's target changes.
    """

    summary: str
    facts: Mapping[str, Any] | Iterable[tuple[str, Any]] = field(default_factory=tuple)
    warnings: Iterable[str] = field(default_factory=tuple)
    target_version: str = ""


class PreviewInvalid(ValueError):
    """A preview hook returned something that is not a Preview (the message says what)."""


def preview_data(preview: Any) -> dict[str, Any]:
    """The stored (JSON) form of a hook's answer; PreviewInvalid if it is not a Preview."""
    if not isinstance(preview, Preview):
        raise PreviewInvalid(f"the preview hook returned {type(preview).__name__}, not a Preview")
    if not isinstance(preview.summary, str) or not preview.summary.strip():
        raise PreviewInvalid("the preview's summary must be a non-empty string")
    if not isinstance(preview.target_version, str):
        raise PreviewInvalid(
            f"the preview's target_version must be a string, got "
            f"{type(preview.target_version).__name__}"
        )
    raw_facts = preview.facts.items() if isinstance(preview.facts, Mapping) else preview.facts
    facts = []
    for entry in raw_facts:
        if not (isinstance(entry, tuple | list) and len(entry) == 2):
            raise PreviewInvalid(f"a preview fact must be a (label, value) pair, got {entry!r}")
        label, value = entry
        facts.append([_cut(str(label), 80), _cut(_fact_text(value), FACT_MAX_CHARS)])
    warnings = [_cut(str(warning), FACT_MAX_CHARS) for warning in preview.warnings]
    return {
        "summary": _cut(preview.summary.strip(), SUMMARY_MAX_CHARS),
        "facts": facts[:FACTS_MAX],
        "warnings": warnings[:WARNINGS_MAX],
        "target_version": _cut(preview.target_version, TARGET_VERSION_MAX_CHARS),
    }


def preview_failed(error: str) -> dict[str, Any]:
    """The stored form of a preview that could not be had: shown as "no preview: <error>"."""
    return {"error": error or "the preview failed"}


def preview_version(preview: Mapping[str, Any] | None) -> str | None:
    """The target version a stored preview was computed from; None when there is none."""
    if not preview or "error" in preview:
        return None
    version = preview.get("target_version")
    return version if isinstance(version, str) else None


def preview_token(args_sha256: str, preview: Mapping[str, Any] | None) -> str:
    """What a reviewer was shown of a call: its arguments (their hash) and the target version
    of their preview, or that there was none. A decision names it to be bound to what it saw.

    The version, not the whole preview: a hook may word its facts differently each time, but
    the version is what the call is held to. Two targets may share a version; not two calls.
    """
    seen = canonical_json([args_sha256, preview_version(preview)])
    return hashlib.sha256(seen.encode()).hexdigest()[:32]


def preview_changes(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> list[str]:
    """What differs between two stored previews, fact by fact, as short sentences."""
    if not before or "error" in before:
        return ["there was no preview when it was approved"]
    if not after or "error" in after:
        error = (after or {}).get("error", "no preview")
        return [f"the preview could not be taken again ({error})"]
    old = {label: value for label, value in before.get("facts", [])}
    new = {label: value for label, value in after.get("facts", [])}
    changes = [
        f"{label}: {old[label]} → {new[label]}"
        for label in new
        if label in old and old[label] != new[label]
    ]
    changes += [f"{label}: now {new[label]}" for label in new if label not in old]
    changes += [f"{label}: no longer shown (was {old[label]})" for label in old if label not in new]
    added = [w for w in after.get("warnings", []) if w not in before.get("warnings", [])]
    changes += [f"new warning: {warning}" for warning in added]
    if not changes and before.get("summary") != after.get("summary"):
        changes.append(f"now: {after.get('summary')}")
    if not changes:
        changes.append("the target's version changed (its facts read the same)")
    return changes


def _fact_text(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[: limit - 1]}…"
