"""The token history a plan's cost forecast is drawn from."""

from __future__ import annotations

from plans.engine.forecast import TOKEN_KEYS, AnswerSample
from plans.models import ModelCall, Run

# The latest answers only: recent prompts and models say more about the next answer.
HISTORY_LIMIT = 200


def answer_history(*, model: str) -> list[AnswerSample]:
    """The latest finished answer calls with this model, of completed runs, with their runs'
    tool sets."""
    rows = (
        ModelCall.objects.filter(
            purpose=ModelCall.Purpose.ANSWER,
            model=model,
            state=ModelCall.State.FINISHED,
            error="",
            run__status=Run.Status.COMPLETED,
        )
        .order_by("-created_at", "-pk")
        .values_list(*TOKEN_KEYS, "run__tools_used")[:HISTORY_LIMIT]
    )
    return [
        AnswerSample(
            tools=frozenset(row[-1] or ()),
            tokens=dict(zip(TOKEN_KEYS, row[:-1], strict=True)),
        )
        for row in rows
    ]
