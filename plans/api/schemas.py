"""The API's request and response bodies (they are also the OpenAPI schema's components)."""

from __future__ import annotations

import re
from datetime import date, datetime
from decimal import ROUND_DOWN, Decimal
from typing import TYPE_CHECKING, Annotated, Any, Literal

from ninja import Field, Schema
from pydantic import ConfigDict, WithJsonSchema, field_validator
from pydantic.config import JsonDict

from plans.models import Run
from plans.notifications.catalog import WEBHOOK_EVENTS
from plans.selectors.runs import RUN_SORTS
from plans.services.questions import ANSWER_MAX_CHARS

if TYPE_CHECKING:  # the literals are built from the model and the selector at run time
    RunStatus = str
    RunSort = str
else:
    RunStatus = Literal[tuple(Run.Status.values)]
    RunSort = Literal[tuple(RUN_SORTS)]

MICRO_DOLLAR = Decimal("0.000001")
DECIMAL_TEXT = r"[0-9]{1,6}(\.[0-9]+)?"
BUDGET_USD_SCHEMA = {
    "anyOf": [
        {"type": "number", "minimum": 0, "exclusiveMaximum": 1_000_000},
        {"type": "string", "pattern": f"^{DECIMAL_TEXT}$"},
    ]
}
# Text the services store: no NUL anywhere, and a goal is not empty once trimmed. Stated in the
# schema for clients; the services check them, with a message that says what is wrong.
NO_NUL = r"^[^\x00]*$"
SOME_TEXT = r"^[^\x00]*[^\s\x00][^\x00]*$"


class Strict(Schema):
    # A misspelt option must be an error, not silently ignored.
    model_config = ConfigDict(extra="forbid")


class RunOptionsIn(Strict):
    require_plan_approval: bool = Field(
        False, description="A reviewer approves the whole plan before any step runs."
    )
    run_dependants_of_failures: bool = Field(
        False, description="Let dependants of a failed step run with the error text."
    )
    budget_usd: Annotated[Decimal, WithJsonSchema(BUDGET_USD_SCHEMA)] | None = Field(
        None, ge=0, lt=1_000_000, description="Model spend cap in USD, kept to 6 decimal places."
    )
    budget_tokens: int | None = Field(None, ge=0, le=2_000_000_000)
    max_parallel_steps: int | None = Field(None, ge=1, le=1000)

    @field_validator("budget_usd", mode="before")
    @classmethod
    def _decimal_text(cls, value: Any) -> Any:
        if isinstance(value, str) and not re.fullmatch(DECIMAL_TEXT, value):
            raise ValueError('a budget as text must be digits, as in "12.50"')
        return value

    @field_validator("budget_usd")
    @classmethod
    def _micro_dollars(cls, value: Decimal | None) -> Decimal | None:
        # Digits past a millionth of a dollar are dropped, not refused: a float such as
        # 12.300000000000001 is a sound budget, and the column keeps 6 places (rounding down
        # keeps it under the limit).
        return None if value is None else value.quantize(MICRO_DOLLAR, rounding=ROUND_DOWN)


class RunCreateIn(Strict):
    goal: str = Field(
        ...,
        min_length=1,
        max_length=2000,
        json_schema_extra={"pattern": SOME_TEXT},
        description="What the agent should do.",
    )
    plan: dict[str, Any] | None = Field(
        None,
        description='A plan to run instead of asking the planner: {"steps": [{id, tool, args, '
        "depends_on}]}; validated like the CLI's --plan-file.",
    )
    # Every option has a default; mypy cannot see Field() defaults through ninja's Schema.
    options: RunOptionsIn = Field(default_factory=lambda: RunOptionsIn())  # type: ignore[call-arg]


class RunListItemOut(Schema):
    id: int
    url: str
    status: str
    goal: str
    author: str
    cost_usd: str
    total_tokens: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    duration_ms: int | None


class RunListOut(Schema):
    results: list[RunListItemOut]
    next_cursor: str | None = Field(
        None, description="Pass as ?cursor= for the next page; null on the last page."
    )


class PlanStepOut(Schema):
    id: int
    tool: str
    args: dict[str, Any]
    depends_on: list[int]


class AnswerTokensOut(Schema):
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int


class ForecastOut(Schema):
    model: str = Field(..., description="The answer call's model, priced from the price table.")
    basis: str = Field(
        ...,
        description='What the answer tokens are the median of: "same tools" (past completed '
        'runs with this plan\'s tool set), "all runs", or "default" (no history).',
    )
    samples: int = Field(..., description="How many past answer calls the median is of.")
    answer_tokens: AnswerTokensOut
    spent_usd: str = Field(..., description="The run's model cost when the plan was made.")
    answer_usd: str | None = Field(..., description="The answer call's expected price.")
    model_usd: str | None = Field(..., description="spent_usd + answer_usd: the run's model cost.")
    tools_usd: str = Field(..., description="The plan's calls at their tools' declared costs.")
    tools_undeclared: list[str] = Field(..., description="The plan's tools declaring no cost.")
    problem: str = Field(..., description='Why there is no answer price (""if there is).')


class PlanVersionOut(Schema):
    version: int
    source: str
    is_valid: bool
    problems: list[Any]
    decision: str
    created_at: datetime
    forecast: ForecastOut | None = Field(
        ..., description="The cost forecast made with this version; null for an invalid plan."
    )


class CurrentPlanOut(Schema):
    version: int | None
    valid: bool
    problems: list[Any]
    steps: list[PlanStepOut]


class StepOutcomeOut(Schema):
    status: str
    result: Any = None
    error: str
    round: int
    attempts: int


class TokensOut(Schema):
    input: int
    output: int
    cache_read: int
    cache_write: int


class ModelCallOut(Schema):
    purpose: str
    model: str
    input_tokens: int
    output_tokens: int
    cost_usd: str
    latency_ms: int
    error: str
    created_at: datetime


class RunOut(Schema):
    id: int
    url: str
    status: str
    goal: str
    author: str
    cancel_requested: bool
    plan: CurrentPlanOut
    plan_versions: list[PlanVersionOut]
    rounds: list[list[int]]
    steps: dict[str, StepOutcomeOut]
    answer: str
    route: str = Field(
        ...,
        description='The router\'s decision: "plan", "answer" (no tool needed), "refuse"; "" off.',
    )
    error: str
    model_calls: int
    model_call_list: list[ModelCallOut]
    tokens: TokensOut
    cost_usd: str
    forecast_usd: str | None = Field(
        ...,
        description="The model cost forecast at the first valid plan, to compare with cost_usd.",
    )
    forecast_tools_usd: str | None = Field(
        ..., description="That plan's calls at their tools' declared costs (not in cost_usd)."
    )
    budget_usd: str
    budget_tokens: int
    last_seq: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class EventOut(Schema):
    run: int
    seq: int
    kind: str
    payload: dict[str, Any]
    at: str


class EventsOut(Schema):
    events: list[EventOut]
    last_seq: int = Field(..., description="The run's latest event; ask again with ?after= it.")
    finished: bool = Field(..., description="The run has ended: no event will follow its last.")


class UpstreamResultOut(Schema):
    step: int
    tool: str
    status: str
    result: Any = None
    error: str


class PreviewFactOut(Schema):
    label: str
    value: str


class PreviewOut(Schema):
    """A destructive call's preview of its effect, computed from its target when requested."""

    available: bool = Field(
        ..., description='False: "no preview" (the tool has none, or it failed: see error).'
    )
    summary: str = ""
    facts: list[PreviewFactOut] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    target_version: str | None = Field(
        None,
        description="The target's version it was computed from; the call runs only if "
        "it is unchanged just before the call.",
    )
    error: str = ""


class SupersededOut(Schema):
    """The approval this request replaces: approved, but its target changed before the call."""

    approval: int
    reviewer: str | None
    decided_at: datetime | None
    preview: PreviewOut
    changes: list[str] = Field(..., description="What changed since that approval.")


class ApprovalRuleOut(Schema):
    name: str = Field(..., description="The approval rule that matched the call.")
    version: str = Field(..., description="The hash of the rule's source when it matched.")
    outcome: str = Field(..., description="approve, require, route or deny ('' if not applied).")
    error: str = Field("", description="Why the rule was not applied (a person decides).")


class ApprovalProgressOut(Schema):
    needed: int = Field(..., description="Distinct approvals of the same arguments it needs.")
    counted: int = Field(..., description="Approvals of the current arguments so far.")
    approved_by: list[str]


class ApprovalClaimOut(Schema):
    by: str
    since: datetime
    until: datetime = Field(..., description="When the claim lapses.")


class ApprovalOut(Schema):
    id: int
    run: int
    run_url: str
    goal: str
    author: str
    step: int
    round: int
    tool: str
    args: dict[str, Any]
    args_sha256: str = Field(..., description="Send it back with the decision: it must match.")
    requested_at: datetime
    inputs: list[UpstreamResultOut]
    preview: PreviewOut
    preview_token: str = Field(
        ...,
        description="Send it back with the decision to be held to this preview: if the "
        "approval's preview is another by then, nothing is decided (409 preview_unseen).",
    )
    supersedes: SupersededOut | None = Field(
        None,
        description="Set when this is asked again because the target changed: both "
        "previews, side by side, and what changed.",
    )
    rule: ApprovalRuleOut | None = Field(None, description="None: no approval rule matched.")
    progress: ApprovalProgressOut
    groups: list[str] = Field(..., description="Only their members decide it (none: anyone).")
    may_decide: bool = Field(..., description="Whether you may decide it (routing, four-eyes).")
    claim: ApprovalClaimOut | None = Field(None, description="A reviewer's live claim on it.")
    deadline: datetime = Field(..., description="When it expires if nobody decides it.")
    escalated_to: list[str] = Field(..., description="Groups it was escalated to (if it was).")


class ClaimIn(Strict):
    take_over: bool = Field(False, description="Take another reviewer's live claim over.")


class QuestionOut(Schema):
    """An ask_human question waiting for your answer: its answer becomes the step's result."""

    id: int
    run: int
    run_url: str
    goal: str
    author: str
    step: int
    question: str
    choices: list[str] = Field(..., description="Answer with one of these (none: any text).")
    audience: str = Field(..., description="Who is asked: author (the run's), or a role.")
    asked_at: datetime
    deadline: datetime = Field(..., description="When it expires unanswered: its step fails.")


class AnswerIn(Strict):
    answer: str = Field(
        ...,
        min_length=1,
        max_length=ANSWER_MAX_CHARS,
        json_schema_extra={"pattern": SOME_TEXT},
        description="The answer: one of the choices, if it has any; a number when it reads as "
        "one becomes the step's result as a number.",
    )


class AnsweredOut(Schema):
    id: int
    run: int
    step: int
    state: str = Field(..., description="answered")
    answer: str
    answered_by: str
    answered_at: datetime


class ApprovalChoiceIn(Strict):
    id: int = Field(..., ge=1, le=2**63 - 1)
    args_sha256: str = Field(
        ..., min_length=64, max_length=64, description="The hash of the arguments you saw."
    )
    args: dict[str, Any] | None = Field(
        None, description="Edited arguments to approve instead (validated like the inbox's)."
    )
    preview_token: str | None = Field(
        None,
        max_length=64,
        description="The token of the preview you saw with the arguments: the approval's "
        "preview_token, or, for edited arguments of a tool with a preview, the one a 409 "
        "preview_unseen handed you with their preview (required for such an edit).",
    )


# A rejection says why: stated in the schema too, so a client's validator knows it first.
REJECTING: JsonDict = {"properties": {"decision": {"const": "reject"}}, "required": ["decision"]}
REASON_TO_REJECT: JsonDict = {
    "if": REJECTING,
    "then": {"properties": {"reason": {"pattern": r"\S"}}, "required": ["reason"]},
}
# ... and edited arguments only go with an approval.
NO_EDIT_TO_REJECT: JsonDict = {
    "if": REJECTING,
    "then": {
        "properties": {
            "reason": {"pattern": r"\S"},
            "approvals": {"items": {"properties": {"args": {"type": "null"}}}},
        },
        "required": ["reason"],
    },
}


class DecisionIn(Strict):
    model_config = ConfigDict(extra="forbid", json_schema_extra=NO_EDIT_TO_REJECT)

    decision: Literal["approve", "reject"]
    reason: str = Field(
        "",
        max_length=2000,
        json_schema_extra={"pattern": NO_NUL},
        description="Required to reject.",
    )
    approvals: list[ApprovalChoiceIn] = Field(..., min_length=1, max_length=100)


class DecidedOut(Schema):
    id: int
    run: int
    tool: str
    decision: str
    args: dict[str, Any]
    args_sha256: str
    edited: bool
    reviewer: str
    reason: str
    decided_at: datetime | None
    progress: ApprovalProgressOut = Field(
        ..., description="Still pending after an approval: counted towards the n it needs."
    )


class DecisionOut(Schema):
    decided: list[DecidedOut]


class PlanDecisionIn(Strict):
    model_config = ConfigDict(extra="forbid", json_schema_extra=REASON_TO_REJECT)

    decision: Literal["approve", "reject"]
    reason: str = Field(
        "",
        max_length=2000,
        json_schema_extra={"pattern": NO_NUL},
        description="Required to reject.",
    )
    version: int = Field(..., ge=1, le=2**31, description="The plan version you reviewed.")


class RunFiltersIn(Schema):
    status: RunStatus | None = None
    author: str | None = Field(None, max_length=150)
    date_from: date | None = None
    date_to: date | None = None
    tool: str | None = Field(None, max_length=100)
    sort: RunSort = "-date"
    cursor: str | None = Field(None, max_length=500)
    limit: int = Field(50, ge=1, le=200)


# --- webhooks -------------------------------------------------------------------------------

if TYPE_CHECKING:
    WebhookEvent = str
else:
    WebhookEvent = Literal[tuple(WEBHOOK_EVENTS)]


class WebhookEndpointIn(Strict):
    url: str = Field(..., min_length=1, max_length=500, description="http(s); public addresses.")
    events: list[WebhookEvent] = Field(..., min_length=1, description="The event types wanted.")
    secret: str = Field("", max_length=200, description="Signs each delivery; empty: generated.")
    active: bool = True
    description: str = Field("", max_length=200)


class WebhookEndpointPatch(Strict):
    url: str | None = Field(None, min_length=1, max_length=500)
    events: list[WebhookEvent] | None = Field(None, min_length=1)
    secret: str | None = Field(None, min_length=1, max_length=200, description="A new secret.")
    active: bool | None = None
    description: str | None = Field(None, max_length=200)


class WebhookEndpointOut(Schema):
    id: int
    url: str
    events: list[str]
    active: bool
    description: str
    created_by: str | None
    created_at: datetime


class WebhookEndpointCreatedOut(WebhookEndpointOut):
    secret: str | None = Field(None, description="Shown in this answer only, when it was set.")


class DeliveryOut(Schema):
    id: int
    endpoint: int | None
    event_id: str
    event_type: str
    run: int | None
    status: str
    attempts: int
    last_status_code: int | None
    last_error: str
    last_latency_ms: int | None
    created_at: datetime
    finished_at: datetime | None
