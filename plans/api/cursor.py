"""Keyset cursors for the runs list: a page starts after the last row of the one before it."""

from __future__ import annotations

import base64
import json
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from django.db.models import Q, QuerySet

from plans.api.errors import ApiError
from plans.models import Run

# The sort's leading field; every sort ends with the primary key in the same direction.
SORT_FIELDS = {
    "date": "created_at",
    "cost": "cost_usd",
    "duration": "duration_ms",  # null (unfinished) sorts last in both directions
}


def cursor_for(run: Run, sort: str) -> str:
    field = SORT_FIELDS[sort.lstrip("-")]
    value = getattr(run, field)
    if isinstance(value, datetime):
        value = value.isoformat()
    elif isinstance(value, Decimal):
        value = format(value, "f")
    data = json.dumps({"s": sort, "v": value, "pk": run.pk}, separators=(",", ":"))
    return base64.urlsafe_b64encode(data.encode()).decode().rstrip("=")


def after_cursor(runs: QuerySet[Run], sort: str, cursor: str) -> QuerySet[Run]:
    """The rows that come after the cursor's row in this sort."""
    value, pk = _read(cursor, sort)
    field = SORT_FIELDS[sort.lstrip("-")]
    descending = sort.startswith("-")
    beyond, pk_beyond = ("lt", "lt") if descending else ("gt", "gt")
    if value is None:  # among the nulls at the end: only the pk orders them
        return runs.filter(Q(**{f"{field}__isnull": True, f"pk__{pk_beyond}": pk}))
    later = Q(**{f"{field}__{beyond}": value}) | Q(**{field: value, f"pk__{pk_beyond}": pk})
    if field == "duration_ms":
        later |= Q(duration_ms__isnull=True)
    return runs.filter(later)


def _read(cursor: str, sort: str) -> tuple[Any, int]:
    invalid = ApiError(422, "invalid_cursor", "The cursor is not one this list gave out.")
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        data = json.loads(base64.urlsafe_b64decode(padded.encode("ascii")))
        value, pk = data["v"], data["pk"]
        if data["s"] != sort or not isinstance(pk, int) or isinstance(pk, bool):
            raise ValueError(sort)
        field = SORT_FIELDS[sort.lstrip("-")]
        if value is not None:
            if field == "created_at":
                value = datetime.fromisoformat(value)
            elif field == "cost_usd":
                value = Decimal(value)
                if not value.is_finite():
                    raise ValueError(value)
            elif not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(value)
        if not 0 < pk < 2**63 or (isinstance(value, int) and abs(value) >= 2**63):
            raise ValueError(pk)
    except (ValueError, KeyError, TypeError, InvalidOperation, UnicodeError) as error:
        raise invalid from error
    return value, pk
