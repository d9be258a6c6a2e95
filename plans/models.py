"""Goals, runs, plans, steps, approvals and the audit records of every model and tool call."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import F, Func, Q
from django.utils import timezone

from plans.engine import args_match_sha256, preview_version


class MillisecondsBetween(Func):
    """Whole milliseconds from a start to an end timestamp (NULL if either is), for SQL indexes."""

    output_field = models.BigIntegerField()
    arity = 2

    def as_sql(  # type: ignore[override]  # a fixed template: no function or joiner to pass
        self, compiler, connection, **extra_context
    ):
        start, start_params = compiler.compile(self.source_expressions[0])
        end, end_params = compiler.compile(self.source_expressions[1])
        # Immutable on PostgreSQL (timestamptz minus timestamptz), so it may be stored and indexed.
        sql = f"CAST(EXTRACT(EPOCH FROM ({end} - {start})) * 1000 AS BIGINT)"
        return sql, (*end_params, *start_params)

    def as_sqlite(self, compiler, connection, **extra_context):
        start, start_params = compiler.compile(self.source_expressions[0])
        end, end_params = compiler.compile(self.source_expressions[1])
        # julianday() is built in and deterministic: no Django function needed to read the file.
        sql = f"CAST(ROUND((julianday({end}) - julianday({start})) * 86400000) AS INTEGER)"
        return sql, (*end_params, *start_params)


class Goal(models.Model):
    """What an author asked for, with the options that shape its runs."""

    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="goals"
    )
    text = models.TextField()
    run_dependants_of_failures = models.BooleanField(
        default=False, help_text="Let dependants of a failed step run with the error text."
    )
    require_plan_approval = models.BooleanField(
        default=False, help_text="A reviewer approves the whole plan before any step runs."
    )

    class Agent(models.TextChoices):
        PLAN_EXECUTE = "plan_execute", "plan-and-execute"
        REACT = "react", "ReAct"

    agent = models.CharField(
        max_length=20,
        choices=Agent,
        default=Agent.PLAN_EXECUTE,
        help_text="The loop that runs it: one plan then an answer, or a model call per step.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["author", "-created_at"])]

    def __str__(self) -> str:
        return self.text[:80]


# Run.TERMINAL's values, for the index on live runs (a class's Meta cannot see the class).
TERMINAL_STATUSES = [
    "blocked",
    "budget_exhausted",
    "cancelled",
    "completed",
    "failed",
    "invalid_plan",
]


class Run(models.Model):
    """One attempt at a goal: its plans, its steps' outcomes, its answer and what it cost."""

    class Status(models.TextChoices):
        PLANNING = "planning"
        AWAITING_PLAN_APPROVAL = "awaiting_plan_approval"
        RUNNING = "running"
        AWAITING_APPROVAL = "awaiting_approval"
        COMPLETED = "completed"
        FAILED = "failed"
        BLOCKED = "blocked"
        BUDGET_EXHAUSTED = "budget_exhausted"
        INVALID_PLAN = "invalid_plan"
        CANCELLED = "cancelled"

    TERMINAL = frozenset(
        {
            Status.COMPLETED,
            Status.FAILED,
            Status.BLOCKED,
            Status.BUDGET_EXHAUSTED,
            Status.INVALID_PLAN,
            Status.CANCELLED,
        }
    )

    goal = models.ForeignKey(Goal, on_delete=models.CASCADE, related_name="runs")
    status = models.CharField(max_length=24, choices=Status, default=Status.PLANNING)
    answer = models.TextField(blank=True)

    class Route(models.TextChoices):
        NONE = "", "not routed"
        PLAN = "plan"
        ANSWER = "answer", "answered directly"
        REFUSE = "refuse", "refused"

    # The router's decision (AGENTSITE_ROUTER): plan, answer with no tool, or refuse; "" off.
    route = models.CharField(max_length=10, choices=Route, blank=True, default="", db_default="")
    # The mechanical check of the answer (plans.engine.citations): its [step N] citations and
    # the figures it states that appear in no step's result. None until an answer is checked.
    answer_check = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True)

    budget_usd = models.DecimalField(max_digits=12, decimal_places=6)
    budget_tokens = models.PositiveIntegerField()
    max_parallel_steps = models.PositiveIntegerField(default=16)
    cancel_requested = models.BooleanField(default=False)
    trace_id = models.CharField(
        max_length=32,
        blank=True,
        help_text="OpenTelemetry trace id (hex) of the run, kept so a resumed run stays one trace.",
    )

    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    cache_read_tokens = models.PositiveBigIntegerField(default=0)
    cache_write_tokens = models.PositiveBigIntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=14, decimal_places=8, default=Decimal(0))
    # The model cost forecast at the first valid plan (the one a reviewer approves), to set
    # beside cost_usd; the tools' declared costs, apart (they are not in cost_usd).
    forecast_usd = models.DecimalField(max_digits=14, decimal_places=8, null=True, blank=True)
    forecast_tools_usd = models.DecimalField(max_digits=14, decimal_places=8, null=True, blank=True)
    model_call_count = models.PositiveIntegerField(default=0)
    round_count = models.PositiveIntegerField(default=0)

    class Origin(models.TextChoices):
        NONE = "", "new"
        RERUN = "rerun", "re-run of"
        FORK = "fork", "forked from"

    # Lineage: the run this one re-runs (same goal, fresh plan) or forks (a plan version of it,
    # maybe edited). Nothing of the origin carries over: results and approvals are its own.
    origin = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="derived_runs"
    )
    origin_kind = models.CharField(max_length=10, choices=Origin, blank=True, default="")
    origin_plan_version = models.PositiveIntegerField(null=True, blank=True)

    # Denormalised for the runs list: filter by tool without a join per row.
    tools_used = models.JSONField(default=list, blank=True)
    # An eval run: kept for audit and linked from the evals page, hidden from the runs list.
    # Indexed for eval runs only (run_experiment_idx): an index holding every other run's NULL
    # would lure the runs list's "not an eval run" filter away from the index of its order.
    experiment = models.ForeignKey(
        "Experiment",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="runs",
        db_index=False,
    )

    # Event seq allocation, the head of the event hash chain, and the single-writer lease.
    last_seq = models.PositiveBigIntegerField(default=0)
    last_event_hash = models.CharField(max_length=64, blank=True)
    lease_token = models.UUIDField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)

    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Computed by the database whenever either timestamp changes, so the runs list can sort by it.
    duration_ms = models.GeneratedField(
        expression=MillisecondsBetween(F("started_at"), F("finished_at")),
        output_field=models.BigIntegerField(null=True),
        db_persist=True,
    )

    class Meta:
        indexes = [
            models.Index(fields=["-created_at"]),
            models.Index(fields=["duration_ms"], name="run_duration_idx"),
            models.Index(fields=["status", "-created_at"]),
            models.Index(fields=["cost_usd"]),
            models.Index(fields=["lease_expires_at"], name="run_lease_idx"),
            models.Index(
                fields=["experiment"],
                name="run_experiment_idx",
                condition=models.Q(experiment__isnull=False),
            ),
            # The runs still live (waiting, running): the few the nav badge and the inbox join
            # pending approvals to. Without it PostgreSQL scans every run to find them. The
            # statuses are Run.TERMINAL's (a test keeps them equal).
            models.Index(
                fields=["id"],
                name="run_live_idx",
                condition=~models.Q(status__in=TERMINAL_STATUSES),
            ),
            # The runs list (eval runs left out): one index per sort, alone and after a status,
            # so that every page is a range read in order (plans.selectors.runs.runs_page).
            *(
                models.Index(
                    fields=[*lead, column, "id"],
                    name=f"run_list_{'status_' if lead else ''}{name}_idx",
                    condition=models.Q(experiment__isnull=True),
                )
                for lead in ([], ["status"])
                for column, name in (
                    ("created_at", "date"),
                    ("cost_usd", "cost"),
                    ("duration_ms", "duration"),
                )
            ),
        ]
        permissions = [
            ("view_all_runs", "Can see every author's runs"),
            ("view_costs", "Can see the cost and health pages"),
        ]

    def __str__(self) -> str:
        return f"run {self.pk} ({self.status})"

    @property
    def is_terminal(self) -> bool:
        return self.status in self.TERMINAL

    @property
    def total_tokens(self) -> int:
        return (
            self.input_tokens
            + self.output_tokens
            + self.cache_read_tokens
            + self.cache_write_tokens
        )

    @property
    def duration_s(self) -> float | None:
        if self.started_at and self.finished_at:
            return (self.finished_at - self.started_at).total_seconds()
        return None


class Plan(models.Model):
    """A version of a run's plan; a replan is a new version pointing at its parent."""

    class Source(models.TextChoices):
        PLANNER = "planner"
        REPLAN = "replan"
        FILE = "file", "plan file"

    class Decision(models.TextChoices):
        NONE = "", "undecided"
        APPROVED = "approved"
        REJECTED = "rejected"

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="plans")
    version = models.PositiveIntegerField()
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT)
    source = models.CharField(max_length=20, choices=Source, default=Source.PLANNER)
    raw_output = models.TextField(blank=True, help_text="The planner's text exactly as returned.")
    is_valid = models.BooleanField(default=False)
    problems = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # Set when the plan-approval policy applies: a reviewer's decision on the whole plan.
    decision = models.CharField(max_length=10, choices=Decision, blank=True, default=Decision.NONE)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="plan_decisions",
    )
    decision_reason = models.TextField(blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    # Reviewers' requests for changes to this version: [{step, tool, instructions, reviewer,
    # at}]. The next version is planned with them, delimited as reviewer text.
    change_requests = models.JSONField(default=list, blank=True)
    # What the run was forecast to cost when this version was planned (plans.services.forecasts):
    # spent so far, the answer call's expected tokens and price, the tools' declared costs.
    forecast = models.JSONField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "version"], name="plan_version_unique_per_run"),
        ]
        ordering = ["run", "version"]

    def __str__(self) -> str:
        return f"plan v{self.version} of run {self.run_id}"


class Step(models.Model):
    """One node of a plan: a tool call whose arguments may use results of its dependencies."""

    class Status(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        AWAITING_APPROVAL = "awaiting_approval"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        SKIPPED = "skipped"
        BLOCKED = "blocked"

    FINISHED = frozenset({Status.SUCCEEDED, Status.FAILED, Status.SKIPPED, Status.BLOCKED})

    plan = models.ForeignKey(Plan, on_delete=models.CASCADE, related_name="steps")
    step_id = models.PositiveIntegerField(help_text="The id the plan gives the step.")
    tool = models.CharField(max_length=100)
    args = models.JSONField(default=dict)
    depends_on = models.JSONField(default=list)
    destructive = models.BooleanField(default=False)
    round = models.PositiveIntegerField(help_text="Depth in the DAG; roots are round 1.")

    status = models.CharField(max_length=20, choices=Status, default=Status.PENDING)
    resolved_args = models.JSONField(null=True, blank=True)
    idempotency_key = models.CharField(
        max_length=64,
        blank=True,
        help_text="A destructive step's key, kept before its first call so retries reuse it.",
    )
    result = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True)
    attempts = models.PositiveIntegerField(default=0)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    reused_from = models.CharField(
        max_length=100,
        blank=True,
        default="",
        db_default="",
        help_text="Where its result came from when an identical pure call was reused, not rerun, "
        "or where its effect already happened (an earlier plan version's identical call).",
    )
    repeat = models.BooleanField(
        default=False,
        db_default=False,
        help_text="The plan marked it a new effect: an earlier version's identical call is not "
        "continued but made again, under a key of its own.",
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["plan", "step_id"], name="step_id_unique_per_plan"),
        ]
        indexes = [models.Index(fields=["tool"])]
        ordering = ["plan", "step_id"]

    def __str__(self) -> str:
        return f"step {self.step_id} ({self.tool})"

    @property
    def duration_s(self) -> float | None:
        if self.started_at and self.finished_at:
            return (self.finished_at - self.started_at).total_seconds()
        return None

    @property
    def effective_args(self) -> Any:
        """The arguments as resolved for the call, or as planned while they are not."""
        return self.resolved_args if self.resolved_args is not None else self.args


class Approval(models.Model):
    """A reviewer's decision on one destructive call, bound to the hash of its exact arguments."""

    class Decision(models.TextChoices):
        PENDING = "pending"
        APPROVED = "approved"
        REJECTED = "rejected"
        EXPIRED = "expired"
        # Approved, but the call's target changed before it ran: the call did not run, and a
        # fresh request (superseding this one) waits for a new decision.
        STALE = "stale"

    class Via(models.TextChoices):
        """Where a decision came from: a reviewer's page, the command line, or the sweeper."""

        NONE = "", "not decided"
        WEB = "web"
        API = "api"
        CLI = "cli", "command line"
        TTL = "ttl", "time limit"
        RULE = "rule", "approval rule"
        EMAIL = "email", "e-mail link"

    class RuleOutcome(models.TextChoices):
        """What the approval rule that matched the call decided (plans.engine.approval_rules)."""

        NONE = "", "no rule"
        APPROVE = "approve", "approved by the rule"
        REQUIRE = "require", "distinct reviewers required"
        ROUTE = "route", "routed to groups"
        DENY = "deny", "denied by the rule"

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="approvals")
    step = models.ForeignKey(Step, on_delete=models.CASCADE, related_name="approvals")
    tool = models.CharField(max_length=100)
    requested_args = models.JSONField(help_text="The resolved arguments the executor asked about.")
    args = models.JSONField(help_text="The arguments decided on (a reviewer may edit them).")
    args_sha256 = models.CharField(max_length=64)
    decision = models.CharField(max_length=10, choices=Decision, default=Decision.PENDING)
    reviewer = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT
    )
    via = models.CharField(max_length=10, choices=Via, blank=True)
    reason = models.TextField(blank=True)
    # Set when the approval is built, not when saved: a rule decides it at that very moment.
    requested_at = models.DateTimeField(default=timezone.now, editable=False)
    decided_at = models.DateTimeField(null=True, blank=True)
    # The tool's preview of the effect of `args` (plans.engine.previews): taken when this was
    # requested, and again for a reviewer's edit; null for a tool without one, {"error"} when it
    # failed. Its target version is what the call is held to at launch.
    preview = models.JSONField(null=True, blank=True)
    # A request made again because the target changed after this one's approval went stale.
    supersedes = models.OneToOneField(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="superseded_by"
    )
    # For a request made again: what changed since the approval it supersedes (sentences).
    changes = models.JSONField(default=list, blank=True)
    # The approval rule that matched the call when it was asked about, and its version; kept
    # with the outcome so a later change of the rules never changes what was decided.
    rule = models.CharField(max_length=80, blank=True)
    rule_version = models.CharField(max_length=12, blank=True)
    rule_outcome = models.CharField(max_length=10, choices=RuleOutcome, blank=True)
    rule_error = models.TextField(blank=True, help_text="Why the matching rule was not applied.")
    # Who may decide: this many distinct approvals on the same arguments, from members of these
    # groups (none named: anyone who may decide approvals).
    approvals_needed = models.PositiveSmallIntegerField(default=1)
    groups = models.JSONField(default=list, blank=True)
    # When it expires undecided, if its rule set a ttl; else AGENTSITE_APPROVAL_TTL_S after it
    # was asked, as that setting is now (Approval.deadline).
    expires_at = models.DateTimeField(null=True, blank=True)
    # Chasing a person's decision (the rule's remind_after / escalate_after): when, and done.
    # A reminder goes out at remind_at, then every remind_every after the last one, until the
    # request is decided, escalated or expires (remind_at null: no reminder due).
    remind_at = models.DateTimeField(null=True, blank=True)
    remind_every = models.DurationField(null=True, blank=True)
    reminded_at = models.DateTimeField(null=True, blank=True, help_text="The last reminder.")
    reminders = models.PositiveIntegerField(default=0, help_text="Reminders sent so far.")
    escalate_at = models.DateTimeField(null=True, blank=True)
    escalate_to = models.JSONField(default=list, blank=True)
    escalated_at = models.DateTimeField(null=True, blank=True)
    # "I'm on it": who claimed it and when (lapsing after AGENTSITE_APPROVAL_CLAIM_S).
    claimed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="approvals_claimed",
    )
    claimed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["step"],
                condition=Q(decision="pending"),
                name="one_pending_approval_per_step",
            ),
        ]
        indexes = [
            models.Index(fields=["decision", "-requested_at"]),
            # A run's requests by decision, and (with their time, read from the index alone)
            # what waits now on the live runs: /reviews/ at a million runs.
            models.Index(
                fields=["run", "decision", "requested_at"], name="approval_run_decision_idx"
            ),
            # The inbox and the badge: the waiting requests, newest first, with their runs
            # (PostgreSQL reads them from the index alone; 100 -> 33 ms at 28,000 waiting).
            models.Index(
                fields=["-requested_at", "-id", "run"],
                condition=Q(decision="pending"),
                name="approval_waiting_idx",
            ),
            # The rules page's match counts.
            models.Index(
                fields=["rule", "rule_version", "decision"],
                condition=~Q(rule=""),
                name="approval_rule_idx",
            ),
        ]
        permissions = [("decide_approval", "Can approve or reject destructive steps")]

    def __str__(self) -> str:
        return f"{self.decision} {self.tool} for run {self.run_id}"

    @property
    def target_version(self) -> str | None:
        """The target version its reviewer saw in the preview; None without a preview."""
        return preview_version(self.preview)

    def authorises(self, *, tool: str, args: Mapping[str, Any], step_id: int) -> bool:
        """Approved, and bound to exactly this call of this step (so of this run): the last
        check before a destructive tool."""
        return (
            self.decision == self.Decision.APPROVED
            and self.step_id == step_id
            and self.tool == tool
            and args_match_sha256(self.args_sha256, tool, args)
        )

    @property
    def deadline(self) -> datetime:
        """When it expires if nobody decides it."""
        if self.expires_at is not None:
            return self.expires_at
        return self.requested_at + timedelta(seconds=settings.AGENTSITE_APPROVAL_TTL_S)

    @property
    def claim_until(self) -> datetime | None:
        """When the live claim lapses; None if nobody holds one now."""
        if self.claimed_by_id is None or self.claimed_at is None:
            return None
        until = self.claimed_at + timedelta(seconds=settings.AGENTSITE_APPROVAL_CLAIM_S)
        return until if until > timezone.now() else None

    @property
    def decided_by_rule(self) -> bool:
        return self.via == self.Via.RULE

    def settled_words(self) -> str:
        """Why this request can no longer be decided, in a person's words; empty while pending.
        A decision is final: every way of deciding refuses with these words."""
        if self.decision == self.Decision.PENDING:
            return ""
        if self.decision == self.Decision.EXPIRED:
            return f"This {self.tool} request expired before anyone decided it; it stays blocked."
        if self.decision == self.Decision.STALE:
            return (
                f"This {self.tool} approval went stale: its target changed before the call, "
                "which did not run. Decide the fresh request instead."
            )
        who = self.reviewer.get_username() if self.reviewer else self.via or "someone"
        return f"This {self.tool} step was already {self.decision} by {who}; a decision is final."

    @property
    def current_votes(self) -> list[ApprovalVote]:
        """The approvals counted so far: those of the current arguments and of the preview shown
        with them (prefetch "votes")."""
        version = self.target_version or ""
        return [
            vote
            for vote in self.votes.all()
            if vote.args_sha256 == self.args_sha256 and vote.target_version == version
        ]

    @property
    def approvals_counted(self) -> int:
        return len(self.current_votes)


class ApprovalVote(models.Model):
    """One reviewer's approval of an approval's arguments as they were (hash), and of the target
    version their preview showed, towards its approvals_needed; an edit changes the arguments
    and takes their preview again, so earlier votes stop counting."""

    approval = models.ForeignKey(Approval, on_delete=models.CASCADE, related_name="votes")
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT)
    args_sha256 = models.CharField(max_length=64)
    args = models.JSONField()
    # The target version of the preview shown with the arguments ("" without one).
    target_version = models.CharField(max_length=200, blank=True, default="", db_default="")
    edited = models.BooleanField(default=False)
    via = models.CharField(max_length=10, choices=Approval.Via)
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            # Concurrent approvals by one reviewer count once, whatever the race.
            models.UniqueConstraint(
                fields=["approval", "reviewer", "args_sha256", "target_version"],
                name="one_vote_per_reviewer_args_and_version",
            ),
        ]
        ordering = ["at", "pk"]

    def __str__(self) -> str:
        return f"{self.reviewer_id} approved {self.approval_id}"


class DecisionLinkUse(models.Model):
    """The one use of a reviewer's e-mail decision links for an approval's arguments: the
    unique key makes a second use (a reload, a race, the other link) fail to insert."""

    approval = models.ForeignKey(Approval, on_delete=models.CASCADE, related_name="link_uses")
    reviewer = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+"
    )
    args_sha256 = models.CharField(max_length=64)
    decision = models.CharField(max_length=10, choices=Approval.Decision)
    used_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["approval", "reviewer", "args_sha256"], name="decision_link_used_once"
            )
        ]

    def __str__(self) -> str:
        return f"{self.reviewer_id} {self.decision} approval {self.approval_id} by e-mail"


class HumanQuestion(models.Model):
    """A question an ``ask_human`` step put to a person; the answer becomes the step's result."""

    class State(models.TextChoices):
        PENDING = "pending"
        ANSWERED = "answered"
        EXPIRED = "expired"

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="questions")
    step = models.ForeignKey(Step, on_delete=models.CASCADE, related_name="questions")
    question = models.TextField()
    choices = models.JSONField(default=list, blank=True)
    # A role (a Django group's name) or "author": the run's author.
    audience = models.CharField(max_length=150, default="author")
    state = models.CharField(max_length=10, choices=State, default=State.PENDING)
    answer = models.TextField(blank=True)
    answered_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="answered_questions",
    )
    asked_at = models.DateTimeField(auto_now_add=True)
    answered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["step"], name="one_question_per_step"),
        ]
        indexes = [models.Index(fields=["state", "-asked_at"])]

    def __str__(self) -> str:
        return f"{self.state} question for run {self.run_id}"

    @property
    def deadline(self) -> datetime:
        """When it expires if nobody answers it (AGENTSITE_APPROVAL_TTL_S after it was asked)."""
        return self.asked_at + timedelta(seconds=settings.AGENTSITE_APPROVAL_TTL_S)


class RunEvent(models.Model):
    """Append-only log of everything that happened in a run; seq is contiguous per run."""

    class Kind(models.TextChoices):
        RUN_CREATED = "run_created"
        ROUTED = "routed"  # the router's decision: plan, answer directly, or refuse
        PLAN_CREATED = "plan_created"
        PLAN_INVALID = "plan_invalid"
        PLAN_APPROVAL_REQUESTED = "plan_approval_requested"
        PLAN_DECIDED = "plan_decided"
        RUN_STARTED = "run_started"
        RUN_RESUMED = "run_resumed"
        RUN_RECOVERED = "run_recovered"
        RUN_STATUS = "run_status"
        ROUND_STARTED = "round_started"
        ROUND_FINISHED = "round_finished"
        STEP_PLANNED = "step_planned"  # a ReAct turn chose its next call
        STEP_STARTED = "step_started"
        STEP_RETRYING = "step_retrying"
        STEP_OUTCOME_UNKNOWN = "step_outcome_unknown"
        STEP_RECONCILED = "step_reconciled"  # a timed-out call's outcome, found by its key
        TOOL_CALL_LATE = "tool_call_late"  # a timed-out call's own outcome, arriving after
        STEP_FINISHED = "step_finished"
        APPROVAL_REQUESTED = "approval_requested"
        APPROVAL_DECIDED = "approval_decided"
        APPROVAL_STALE = "approval_stale"  # the target changed since approval: not called
        APPROVAL_COUNTED = "approval_counted"  # one of the n distinct approvals a rule requires
        APPROVAL_CLAIMED = "approval_claimed"  # "I'm on it" (or an explicit takeover)
        APPROVAL_REMINDED = "approval_reminded"  # its rule's remind_after passed undecided
        APPROVAL_ESCALATED = "approval_escalated"  # its rule's escalate_after: more groups decide
        QUESTION_ASKED = "question_asked"  # an ask_human step waits for a person
        QUESTION_ANSWERED = "question_answered"  # answered, or expired unanswered
        CHANGES_REQUESTED = "changes_requested"  # a reviewer sent instructions: replan
        ANSWER_CHECKED = "answer_checked"  # its citations and figures, checked against results
        RUN_PARKED = "run_parked"
        MODEL_CALL_STARTED = "model_call_started"
        MODEL_CALL = "model_call"
        MODEL_CALL_INTERRUPTED = "model_call_interrupted"
        RATE_LIMITED = "rate_limited"
        REPLAN_STARTED = "replan_started"
        ANSWER_FINISHED = "answer_finished"
        ANSWER_INCOMPLETE = "answer_incomplete"
        BUDGET_EXHAUSTED = "budget_exhausted"
        CANCEL_REQUESTED = "cancel_requested"
        RUN_FINISHED = "run_finished"

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="events")
    seq = models.PositiveBigIntegerField()
    kind = models.CharField(max_length=40, choices=Kind)
    payload = models.JSONField(default=dict)
    at = models.DateTimeField()
    # Tamper evidence: each event's hash covers its content and its predecessor's hash.
    prev_hash = models.CharField(max_length=64, blank=True)
    hash = models.CharField(max_length=64, blank=True)
    # The run lease its writer held (a worker's log names the holder); empty for services.
    lease_token = models.UUIDField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "seq"], name="event_seq_unique_per_run"),
        ]
        ordering = ["run", "seq"]

    def __str__(self) -> str:
        return f"#{self.seq} {self.kind}"


class ModelCall(models.Model):
    """One call to a language model, with the usage and the prices it was charged at."""

    class State(models.TextChoices):
        STARTED = "started"  # on record before it is made, at its estimate
        FINISHED = "finished"
        INTERRUPTED = "interrupted"  # its worker died during it: counted at its estimate

    class Purpose(models.TextChoices):
        PLAN = "plan"
        REPLAN = "replan"
        ANSWER = "answer"
        ACT = "act"  # one ReAct turn: the next tool call, or the answer

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="model_calls")
    purpose = models.CharField(max_length=10, choices=Purpose)
    model = models.CharField(max_length=100)
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    cache_read_tokens = models.PositiveIntegerField(default=0)
    cache_write_tokens = models.PositiveIntegerField(default=0)
    cache_write_1h_tokens = models.PositiveIntegerField(
        default=0, db_default=0, help_text="The part of the cache writes kept for one hour."
    )
    web_search_requests = models.PositiveIntegerField(default=0, db_default=0)
    web_fetch_requests = models.PositiveIntegerField(default=0, db_default=0)
    prices = models.JSONField(help_text="USD per million tokens charged for this call.")
    cost_usd = models.DecimalField(max_digits=14, decimal_places=8)
    latency_ms = models.PositiveIntegerField()
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # Recorded as started (at its estimate) before a billed call is made, and finished after;
    # one a dead worker left started is marked interrupted and still counts at its estimate.
    state = models.CharField(
        max_length=12,
        choices=State,
        default=State.FINISHED,
        db_default=State.FINISHED,
    )
    estimated_usd = models.DecimalField(max_digits=14, decimal_places=8, default=0, db_default=0)

    class Meta:
        indexes = [
            models.Index(fields=["run", "created_at"]),
            models.Index(fields=["created_at"]),
            models.Index(fields=["model", "created_at"]),
        ]

    def __str__(self) -> str:
        return f"{self.purpose} via {self.model}"


class ToolCall(models.Model):
    """One invocation of a tool for a step (a retry is another attempt)."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="tool_calls")
    step = models.ForeignKey(Step, on_delete=models.CASCADE, related_name="tool_calls")
    tool = models.CharField(max_length=100)
    attempt = models.PositiveIntegerField()
    args = models.JSONField()
    result = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True)
    idempotency_key = models.CharField(max_length=64)
    started_at = models.DateTimeField()
    duration_ms = models.FloatField()
    # A call given up on as timed out may still finish: what it returned, and when, if it did.
    late_result = models.JSONField(null=True, blank=True)
    late_error = models.TextField(blank=True, default="", db_default="")
    late_arrived_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["step", "attempt"], name="tool_call_attempt_unique"),
        ]
        indexes = [
            models.Index(fields=["run", "started_at"]),
            models.Index(fields=["tool", "started_at"]),
            models.Index(fields=["idempotency_key"]),
        ]

    def __str__(self) -> str:
        return f"{self.tool} attempt {self.attempt}"


class ToolPreview(models.Model):
    """One run of a destructive tool's preview hook: before a decision, or re-checked at launch.

    Recorded like a call but never one: a preview has no effect, no key and no attempt.
    """

    class Purpose(models.TextChoices):
        REQUEST = "request", "before the decision"
        EDIT = "edit", "of a reviewer's edit"
        LAUNCH = "launch", "re-checked before the call"

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="tool_previews")
    step = models.ForeignKey(Step, on_delete=models.CASCADE, related_name="tool_previews")
    tool = models.CharField(max_length=100)
    purpose = models.CharField(max_length=10, choices=Purpose)
    args = models.JSONField()
    # The hash of the arguments it was taken for, before `args` was redacted: an approval's.
    args_sha256 = models.CharField(max_length=64, blank=True, default="", db_default="")
    preview = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True)
    started_at = models.DateTimeField()
    duration_ms = models.FloatField()

    class Meta:
        indexes = [models.Index(fields=["run", "started_at"])]

    def __str__(self) -> str:
        return f"{self.tool} preview ({self.purpose})"


class CircuitBreaker(models.Model):
    """A tool's availability, shared by every run and process: closed, open or half-open."""

    class State(models.TextChoices):
        CLOSED = "closed"
        OPEN = "open"
        HALF_OPEN = "half_open"

    tool = models.CharField(max_length=100, unique=True)
    state = models.CharField(max_length=10, choices=State, default=State.CLOSED)
    consecutive_failures = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    opened_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.tool}: {self.state}"


class RateBucket(models.Model):
    """A token bucket shared by every process (the global model-call rate limit)."""

    name = models.CharField(max_length=50, unique=True)
    tokens = models.FloatField()
    refilled_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.name}: {self.tokens:.2f}"


class LedgerEntry(models.Model):
    """The demo tools' side effects (refunds, bookings, emails), once per idempotency key."""

    kind = models.CharField(max_length=20)
    idempotency_key = models.CharField(max_length=64, unique=True)
    details = models.JSONField()
    reference = models.CharField(max_length=40, default="", blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name_plural = "ledger entries"

    def __str__(self) -> str:
        return f"{self.kind} {self.reference}"


class Experiment(models.Model):
    """One eval_planner pass over a case suite: which agent, model and prompts, and how it did."""

    label = models.CharField(max_length=200, blank=True)
    agent = models.CharField(max_length=20, choices=Goal.Agent)
    model = models.CharField(max_length=100)
    prompt_version = models.CharField(max_length=16, help_text="Hash of the prompts used.")
    cases_file = models.CharField(max_length=300)
    cases_version = models.CharField(max_length=40)
    repeat = models.PositiveIntegerField(default=1)
    # Per category and overall: {"passed", "trials", "rate", "low", "high"} (Wilson 95%).
    summary = models.JSONField(default=dict, blank=True)
    trials = models.PositiveIntegerField(default=0)
    passed = models.PositiveIntegerField(default=0)
    model_calls = models.PositiveIntegerField(default=0)
    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    cache_read_tokens = models.PositiveBigIntegerField(default=0)
    cache_write_tokens = models.PositiveBigIntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=14, decimal_places=8, default=Decimal(0))
    wall_ms = models.PositiveBigIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["-created_at"])]

    def __str__(self) -> str:
        return f"experiment {self.pk} ({self.agent}, {self.model})"

    @property
    def pass_rate(self) -> float | None:
        return self.passed / self.trials if self.trials else None


class EvalResult(models.Model):
    """One case, one attempt, in an experiment: pass or fail, why, and what it cost."""

    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="results")
    case_id = models.CharField(max_length=100)
    category = models.CharField(max_length=40)
    attempt = models.PositiveIntegerField(default=1)
    run = models.ForeignKey(
        Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="eval_results"
    )
    passed = models.BooleanField()
    failures = models.JSONField(default=list, blank=True, help_text="The failed predicates.")
    model_calls = models.PositiveIntegerField(default=0)
    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    cache_read_tokens = models.PositiveBigIntegerField(default=0)
    cache_write_tokens = models.PositiveBigIntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=14, decimal_places=8, default=Decimal(0))
    wall_ms = models.PositiveBigIntegerField(default=0)
    judge = models.JSONField(null=True, blank=True, help_text="The judge's verdict, if asked.")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["experiment", "case_id", "attempt"], name="eval_result_unique_attempt"
            ),
        ]
        ordering = ["experiment", "category", "case_id", "attempt"]

    def __str__(self) -> str:
        return f"{self.case_id} #{self.attempt}: {'pass' if self.passed else 'fail'}"


# --- the costs page's rollup -------------------------------------------------------------
# Sums per site-local day (timezone.localdate), kept current in the transaction that writes what
# they sum (plans.journal.rollup), so the costs page reads a few hundred rows instead of scanning
# a window of calls and runs. Counters are signed: a rollup that drifted (rows loaded in bulk
# without `manage.py cost_rollup --rebuild`) shows up in `--check`, never as a failed write.
# A transaction adds to them in one order (plans.journal.rollup.ROLLUPS, keys sorted), so two
# writers adding to the same buckets wait for each other but never deadlock.


class SpendRollup(models.Model):
    """Model calls made on a day, by the runs' author and the model: calls, tokens and cost."""

    day = models.DateField()
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+", db_index=False
    )
    model = models.CharField(max_length=100)
    calls = models.BigIntegerField(default=0, db_default=0)
    input_tokens = models.BigIntegerField(default=0, db_default=0)
    output_tokens = models.BigIntegerField(default=0, db_default=0)
    cache_read_tokens = models.BigIntegerField(default=0, db_default=0)
    cache_write_tokens = models.BigIntegerField(default=0, db_default=0)
    # Priced apart (plans.llm.pricing): the part of the cache writes kept for an hour, and
    # server-side web searches.
    cache_write_1h_tokens = models.BigIntegerField(default=0, db_default=0)
    web_search_requests = models.BigIntegerField(default=0, db_default=0)
    cost_usd = models.DecimalField(
        max_digits=20, decimal_places=8, default=Decimal(0), db_default=Decimal(0)
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["day", "author", "model"], name="spend_rollup_key")
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.author_id} {self.model}: {self.cost_usd}"


class RunRollup(models.Model):
    """Runs created on a day by an author, by where they stand now (moved as their status does)."""

    day = models.DateField()
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+", db_index=False
    )
    runs = models.BigIntegerField(default=0, db_default=0)
    finished = models.BigIntegerField(default=0, db_default=0)
    budget_exhausted = models.BigIntegerField(default=0, db_default=0)
    completed = models.BigIntegerField(default=0, db_default=0)
    completed_tokens = models.BigIntegerField(default=0, db_default=0)
    # Finished runs with a cost forecast, their forecasts and what they actually cost.
    forecasted = models.BigIntegerField(default=0, db_default=0)
    forecast_usd = models.DecimalField(
        max_digits=20, decimal_places=8, default=Decimal(0), db_default=Decimal(0)
    )
    forecast_actual_usd = models.DecimalField(
        max_digits=20, decimal_places=8, default=Decimal(0), db_default=Decimal(0)
    )

    class Meta:
        constraints = [models.UniqueConstraint(fields=["day", "author"], name="run_rollup_key")]

    def __str__(self) -> str:
        return f"{self.day} {self.author_id}: {self.runs} runs"


class TokenRollup(models.Model):
    """Completed runs created on a day, by their tokens rounded down to two significant figures:
    a histogram from which the page reads the median and p95 (rounded the same way)."""

    day = models.DateField()
    tokens = models.BigIntegerField(help_text="The bucket: tokens rounded down to 2 figures.")
    runs = models.BigIntegerField(default=0, db_default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["day", "tokens"], name="token_rollup_key")]

    def __str__(self) -> str:
        return f"{self.day} ~{self.tokens} tokens: {self.runs} runs"


class PlannedToolRollup(models.Model):
    """Runs created on a day whose plan uses a tool: how many, and what they cost so far."""

    day = models.DateField()
    tool = models.CharField(max_length=100)
    runs = models.BigIntegerField(default=0, db_default=0)
    cost_usd = models.DecimalField(
        max_digits=20, decimal_places=8, default=Decimal(0), db_default=Decimal(0)
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["day", "tool"], name="planned_tool_rollup_key")
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.tool}: {self.runs} runs planning it"


class ToolRollup(models.Model):
    """Tool calls started on a day, by tool: how many, how many failed, how long they took."""

    day = models.DateField()
    tool = models.CharField(max_length=100)
    calls = models.BigIntegerField(default=0, db_default=0)
    errors = models.BigIntegerField(default=0, db_default=0)
    duration_ms = models.FloatField(default=0.0, db_default=0.0, help_text="Summed over the calls.")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["day", "tool"], name="tool_rollup_key")]

    def __str__(self) -> str:
        return f"{self.day} {self.tool}: {self.calls} calls"


class ApprovalRollup(models.Model):
    """Approvals decided by a reviewer on a day (expired ones were never decided)."""

    day = models.DateField(unique=True)
    decided = models.BigIntegerField(default=0, db_default=0)
    rejected = models.BigIntegerField(default=0, db_default=0)

    def __str__(self) -> str:
        return f"{self.day}: {self.rejected} of {self.decided} rejected"


class ReviewRollup(models.Model):
    """Approval requests settled on a day, by tool and by the rule that decided or routed them
    (blank: none, a reviewer from `reviewers`): approved, rejected, expired, and how many of
    those decisions a rule made with no person."""

    day = models.DateField()
    tool = models.CharField(max_length=100)
    rule = models.CharField(max_length=200, blank=True, default="", db_default="")
    approved = models.BigIntegerField(default=0, db_default=0)
    rejected = models.BigIntegerField(default=0, db_default=0)
    expired = models.BigIntegerField(default=0, db_default=0)
    auto = models.BigIntegerField(default=0, db_default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["day", "tool", "rule"], name="review_rollup_key")
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.tool} {self.rule or '-'}"


class ReviewWaitRollup(models.Model):
    """People's decisions on a day, by what they count under (a tool, a group of the reviewer,
    the reviewer) and their wait in whole seconds rounded down to two significant figures: a
    histogram from which the analytics page reads time to decide, p50 and p95."""

    class Dimension(models.TextChoices):
        TOOL = "tool"
        GROUP = "group"
        REVIEWER = "reviewer"

    day = models.DateField()
    dimension = models.CharField(max_length=10, choices=Dimension)
    key = models.CharField(max_length=150, help_text="The tool, the group's name, the user's id.")
    wait_s = models.BigIntegerField(help_text="The bucket: seconds rounded down to 2 figures.")
    decisions = models.BigIntegerField(default=0, db_default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["day", "dimension", "key", "wait_s"], name="review_wait_rollup_key"
            )
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.dimension}={self.key} ~{self.wait_s}s: {self.decisions}"


# The integrations' records live with their packages; imported here so the app registers them.
from plans.api.models import ApiToken, IdempotencyKey  # noqa: E402, F401
from plans.notifications.models import (  # noqa: E402, F401
    Delivery,
    DigestPeriod,
    NotificationPreference,
    WebhookEndpoint,
)


class RunReplay(models.Model):
    """A past run re-planned and re-answered on recorded tool results (plans.evals.replay):
    no tool was called; its diff against the original is kept to be read later."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="replays")
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    model = models.CharField(max_length=100)
    prompt_version = models.CharField(max_length=40)
    route = models.CharField(max_length=20)
    steps = models.JSONField(default=list)
    diff = models.JSONField(default=dict)
    not_recorded = models.PositiveIntegerField(default=0)
    model_calls = models.PositiveIntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=14, decimal_places=8, default=Decimal(0))
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return f"replay {self.pk} of run {self.run_id} on {self.model}"
