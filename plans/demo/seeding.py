"""Synthetic runs for demos and the large-table checks (manage.py seed_runs).

The runs look like the offline demo goals' runs (plans, steps, tool calls, model calls,
approvals, events) with a spread of outcomes, authors and dates. What a real run computes is
computed here by the same functions: plan validation and rounds, placeholder resolution,
argument hashes and idempotency keys, costs, redaction and the event hash chain. A large
seeding copies most runs from those generated (runs_seed says how). Rows are written in bulk
(COPY on PostgreSQL, prepared INSERTs on SQLite) with explicit ids, so run it against a
database nothing else is writing to.
"""

from __future__ import annotations

import functools
import json
import random
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.color import no_style
from django.db import connection, transaction
from django.db.models import DateTimeField, JSONField, Max, Model
from django.utils import timezone

from plans import engine
from plans.bulk import JSONText, load_rows
from plans.engine import args_sha256, depths, idempotency_key, resolve
from plans.guards.audit import GENESIS, event_chain
from plans.guards.redaction import redacted_json
from plans.journal.rollup import rollup_rebuild
from plans.llm.base import Usage
from plans.llm.pricing import cost_usd
from plans.models import Approval, Goal, ModelCall, Plan, Run, RunEvent, Step, ToolCall
from plans.services.plans import plan_check
from plans.tools import get_registry

ITEMS = ["iPhone 16", "AirPods 4", "MacBook Air M4", "Pixel 10", "Galaxy S25", "iPad Air"]
CITIES = ["Goa", "Mumbai", "Delhi", "Jaipur", "Kochi", "Chennai"]
ORDERS = ["A-1001", "A-1002", "B-2001", "B-2002", "C-3001"]
QUESTIONS = [
    "What makes plan-and-execute agents cheaper than ReAct?",
    "How do plan-and-execute agents handle a failed step?",
    "Why review destructive tool calls before they run?",
]
STATUS_WEIGHTS = {
    Run.Status.COMPLETED: 70,
    Run.Status.FAILED: 8,
    Run.Status.BLOCKED: 5,
    Run.Status.INVALID_PLAN: 4,
    Run.Status.BUDGET_EXHAUSTED: 3,
    Run.Status.CANCELLED: 3,
    # Parked, as a waiting run is: nothing runs until a reviewer decides. No run is seeded
    # running or planning: without a live worker's lease, a worker would take it over as a
    # crashed run's leftover and carry it on.
    Run.Status.AWAITING_APPROVAL: 7,
}
# A large seeding generates one run in N in full; the others copy one of the last originals.
ORIGINALS_FIRST = 1000  # a small seeding is all generated runs
TEMPLATES_KEPT = 64
SQLITE_CACHE_KIB = -512_000  # negative: KiB, not pages
SQLITE_ANALYSIS_ROWS = 2000
REJECT_REASONS = ["amount looks wrong", "customer already refunded", "dates need checking"]

# (id, tool, args, depends_on, destructive, result)
StepSpec = tuple[int, str, dict[str, Any], list[int], bool, Any]


def _price_plan(rng: random.Random) -> tuple[str, list[StepSpec]]:
    a, b = rng.sample(ITEMS, 2)
    pa, pb = rng.randrange(9900, 199900, 100), rng.randrange(9900, 199900, 100)
    return f"Total price of an {a} and {b} in INR", [
        (1, "price", {"item": a}, [], False, pa),
        (2, "price", {"item": b}, [], False, pb),
        (3, "calculator", {"expression": "{{1}}+{{2}}"}, [1, 2], False, pa + pb),
    ]


def _trip_plan(rng: random.Random) -> tuple[str, list[StepSpec]]:
    city, nights = rng.choice(CITIES), rng.randint(1, 5)
    day = f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    fare, hotel = rng.randrange(3000, 15000), rng.randrange(2000, 9000) * nights
    route = {"origin": "Bengaluru", "destination": city, "date": day}
    return f"Book a trip from Bengaluru to {city} on {day} for {nights} nights", [
        (1, "flight_price", route, [], False, fare),
        (2, "hotel_price", {"city": city, "nights": nights}, [], False, hotel),
        (3, "calculator", {"expression": "{{1}}+{{2}}"}, [1, 2], False, fare + hotel),
        (
            4,
            "book_flight",
            {
                "origin": "Bengaluru",
                "destination": city,
                "date": day,
                "passenger": "Demo Traveller",
                "price_inr": "{{1}}",
            },
            [1, 3],
            True,
            {"status": "booked", "reference": f"FL-{rng.randrange(10**6):06d}"},
        ),
        (
            5,
            "book_hotel",
            {
                "city": city,
                "check_in": day,
                "nights": nights,
                "guest": "Demo Traveller",
                "price_inr": "{{2}}",
            },
            [2, 3],
            True,
            {"status": "booked", "reference": f"HT-{rng.randrange(10**6):06d}"},
        ),
    ]


def _refund_plan(rng: random.Random) -> tuple[str, list[StepSpec]]:
    order = rng.choice(ORDERS)
    total = rng.randrange(500, 9000)
    body = f"We refunded INR {{{{1}}}} for order {order}. Reference: {{{{2}}}}"
    return f"Refund order {order} for a damaged item", [
        (1, "order_total", {"order_id": order}, [], False, total),
        (
            2,
            "issue_refund",
            {"order_id": order, "amount_inr": "{{1}}", "reason": "damaged item"},
            [1],
            True,
            {"status": "refunded", "reference": f"RF-{rng.randrange(10**6):06d}"},
        ),
        (
            3,
            "send_email",
            {"to": f"customer-{order.lower()}@example.com", "subject": "Your refund", "body": body},
            [1, 2],
            True,
            {"status": "sent", "reference": f"EM-{rng.randrange(10**6):06d}"},
        ),
    ]


def _research_plan(rng: random.Random) -> tuple[str, list[StepSpec]]:
    question = rng.choice(QUESTIONS)
    hits = [{"doc": "plan-execute", "title": "Plan-and-execute agents", "cite": "[plan-execute]"}]
    return question, [
        (1, "search", {"query": question[:60]}, [], False, hits),
        (2, "search", {"query": "ReAct agent token cost"}, [], False, hits),
    ]


SHAPES: list[Callable[[random.Random], tuple[str, list[StepSpec]]]] = [
    _price_plan,
    _price_plan,
    _trip_plan,
    _refund_plan,
    _research_plan,
]


def runs_seed(
    *,
    count: int,
    authors: int = 5,
    days: int = 60,
    seed: int = 1,
    batch: int = 2000,
    originals_every: int = 1,
    originals_first: int = ORIGINALS_FIRST,
    now: datetime | None = None,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Create `count` synthetic runs; returns how many were created.

    The first `originals_first` runs and then one in `originals_every` are generated in full
    (their event logs included); each of the others copies the rows of one of the last
    originals (goal, plan, steps, approvals, model and tool calls, costs and outcome) under a
    new author and dates, without an event log. Generating a run costs ~10x what copying one
    does: this is what lets a million runs be seeded in minutes.
    """
    rng = random.Random(seed)
    now = now or timezone.now()
    users = _seed_authors(authors)
    models = [name for name in settings.AGENTSITE_MODEL_PRICES if name != "offline"] or list(
        settings.AGENTSITE_MODEL_PRICES
    )
    ids = _IdAllocator()
    templates: deque[dict[type[Model], list[dict[str, Any]]]] = deque(maxlen=TEMPLATES_KEPT)
    done = 0
    with _large_cache():
        while done < count:
            size = min(batch, count - done)
            rows = _Rows()
            for number in range(done, done + size):
                author = rng.choice(users)
                if number < originals_first or number % originals_every == 0:
                    mark = rows.mark()
                    _one_run(rows, ids, rng, now=now, days=days, author=author, models=models)
                    templates.append(_template(rows.since(mark)))
                else:
                    template = rng.choice(templates)
                    status = template[Run][0]["status"]
                    created_at = _created_at(rng, status, now=now, days=days)
                    _copied_run(rows, ids, template, created_at=created_at, author=author)
            with transaction.atomic():
                rows.insert()
            done += size
            if progress:
                progress(done)
    _reset_sequences()
    # Rows loaded around the services: the costs rollup is summed afresh from them.
    rollup_rebuild()
    tables_analyze()
    return done


def _seed_authors(count: int) -> list[Any]:
    users = []
    user_model = get_user_model()
    for number in range(1, count + 1):
        user, created = user_model.objects.get_or_create(username=f"seed-author-{number}")
        if created:
            user.set_unusable_password()
            user.save(update_fields=["password"])
        users.append(user)
    return users


class _IdAllocator:
    """Explicit primary keys, continuing after the largest existing one in each table."""

    def __init__(self) -> None:
        self.next: dict[type[Model], int] = {}

    def __call__(self, model: type[Model]) -> int:
        if model not in self.next:
            self.next[model] = (model._default_manager.aggregate(top=Max("pk"))["top"] or 0) + 1
        value = self.next[model]
        self.next[model] = value + 1
        return value


class _Rows:
    def __init__(self) -> None:
        self.by_model: dict[type[Model], list[dict[str, Any]]] = {
            model: [] for model in (Goal, Run, Plan, Step, Approval, ModelCall, ToolCall, RunEvent)
        }

    def mark(self) -> dict[type[Model], int]:
        return {model: len(rows) for model, rows in self.by_model.items()}

    def since(self, mark: dict[type[Model], int]) -> dict[type[Model], list[dict[str, Any]]]:
        return {model: rows[mark[model] :] for model, rows in self.by_model.items()}

    def add(self, model: type[Model], row: dict[str, Any]) -> None:
        self.by_model[model].append(row)

    def insert(self) -> None:
        for model, rows in self.by_model.items():
            if rows:
                load_rows(model, _with_defaults(model, rows))


def _with_defaults(model: type[Model], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Fill, in place, the columns the generator does not know about with their defaults (models
    grow)."""
    defaults = _defaults(model)
    complete = len(defaults) + 1  # and the id
    for row in rows:
        if len(row) < complete:
            for name, value in defaults.items():
                row.setdefault(name, value)
    return rows


@functools.cache
def _defaults(model: type[Model]) -> dict[str, Any]:
    """Each column's default but the id's (the seeding's time for auto_now columns)."""
    defaults = {}
    for field in model._meta.concrete_fields:
        if field.primary_key or field.generated:
            continue
        if getattr(field, "auto_now", False) or getattr(field, "auto_now_add", False):
            defaults[field.attname] = timezone.now()
        else:
            defaults[field.attname] = field.get_default()
    return defaults


def _created_at(rng: random.Random, status: str, *, now: datetime, days: int) -> datetime:
    oldest_s: float = days * 86400
    if status == Run.Status.AWAITING_APPROVAL:
        # Still waiting: younger than the approval time limit, or the sweeper would expire it.
        oldest_s = min(oldest_s, settings.AGENTSITE_APPROVAL_TTL_S / 2)
    return now - timedelta(seconds=rng.uniform(60, max(oldest_s, 61)))


# The copied tables in an order that has each row's parents first, and in each the columns
# naming a seeded row: the copies get new ids and point at their own copied parents.
_LINKS: dict[type[Model], dict[str, type[Model]]] = {
    Goal: {"id": Goal},
    Run: {"id": Run, "goal_id": Goal},
    Plan: {"id": Plan, "run_id": Run},
    Step: {"id": Step, "plan_id": Plan},
    Approval: {"id": Approval, "run_id": Run, "step_id": Step},
    ModelCall: {"id": ModelCall, "run_id": Run},
    ToolCall: {"id": ToolCall, "run_id": Run, "step_id": Step},
}


def _template(
    rows: dict[type[Model], list[dict[str, Any]]],
) -> dict[type[Model], list[dict[str, Any]]]:
    """A generated run's rows with their defaults filled and JSON encoded once, for copies."""
    for model, model_rows in rows.items():
        json_names = {
            field.attname for field in model._meta.concrete_fields if isinstance(field, JSONField)
        }
        _with_defaults(model, model_rows)
        for row in model_rows:
            for name in json_names & row.keys():
                if row[name] is not None and type(row[name]) is not JSONText:
                    row[name] = JSONText(json.dumps(row[name]))
    return {model: rows[model] for model in _LINKS}


def _copied_run(
    rows: _Rows,
    ids: _IdAllocator,
    template: dict[type[Model], list[dict[str, Any]]],
    *,
    created_at: datetime,
    author: Any,
) -> None:
    """Another run like the template: new ids, author and dates; no event log."""
    shift = created_at - template[Run][0]["created_at"]
    new_ids: dict[tuple[type[Model], int], int] = {}
    registry = get_registry()
    for model, links in _LINKS.items():
        dates = _datetime_names(model)
        for row in template[model]:
            copy = dict(row)
            for name, target in links.items():
                if name == "id":
                    copy["id"] = new_ids[target, row["id"]] = ids(model)
                else:
                    copy[name] = new_ids[target, row[name]]
            for name in dates:
                if copy.get(name) is not None:
                    copy[name] += shift
            rows.add(model, copy)
    goal, run = rows.by_model[Goal][-1], rows.by_model[Run][-1]
    goal["author_id"] = author.pk
    run["last_seq"], run["last_event_hash"] = 0, ""
    calls = rows.by_model[ToolCall]
    for call in calls[len(calls) - len(template[ToolCall]) :]:
        if registry[call["tool"]].destructive:
            args = json.loads(call["args"])
            call["idempotency_key"] = idempotency_key(call["tool"], args, run_id=run["id"], step="")


@functools.cache
def _datetime_names(model: type[Model]) -> tuple[str, ...]:
    return tuple(
        field.attname for field in model._meta.concrete_fields if isinstance(field, DateTimeField)
    )


def _one_run(
    rows: _Rows,
    ids: _IdAllocator,
    rng: random.Random,
    *,
    now: datetime,
    days: int,
    author: Any,
    models: list[str],
) -> None:
    status = rng.choices(list(STATUS_WEIGHTS), weights=list(STATUS_WEIGHTS.values()))[0]
    goal_text, specs = rng.choice(SHAPES)(rng)
    destructive = [spec for spec in specs if spec[4]]
    if status == Run.Status.BLOCKED and not destructive:
        status = Run.Status.FAILED
    if status == Run.Status.AWAITING_APPROVAL and not destructive:
        status = Run.Status.COMPLETED
    created_at = _created_at(rng, status, now=now, days=days)
    goal_id, run_id = ids(Goal), ids(Run)
    rows.add(
        Goal,
        {
            "id": goal_id,
            "author_id": author.pk,
            "text": goal_text,
            "run_dependants_of_failures": False,
            "created_at": created_at,
        },
    )
    events: list[tuple[str, dict[str, Any], datetime]] = [
        ("run_created", {"goal": goal_text, "author": author.get_username()}, created_at)
    ]
    usage_total = [0, 0, 0, 0]
    cost_total = Decimal(0)
    calls = 0

    def model_call(purpose: str, at: datetime, inputs: int, outputs: int) -> None:
        nonlocal cost_total, calls
        model = rng.choice(models)
        prices = dict(settings.AGENTSITE_MODEL_PRICES[model])
        cache_read = rng.choice([0, 0, inputs // 2])
        usage = Usage(input_tokens=inputs, output_tokens=outputs, cache_read_tokens=cache_read)
        cost = cost_usd(usage, prices)
        rows.add(
            ModelCall,
            {
                "id": ids(ModelCall),
                "run_id": run_id,
                "purpose": purpose,
                "model": model,
                "input_tokens": inputs,
                "output_tokens": outputs,
                "cache_read_tokens": cache_read,
                "cache_write_tokens": 0,
                "prices": prices,
                "cost_usd": cost,
                "latency_ms": rng.randint(400, 6000),
                "error": "",
                "created_at": at,
            },
        )
        usage_total[0] += inputs
        usage_total[1] += outputs
        usage_total[2] += cache_read
        cost_total += cost
        calls += 1

    started_at = created_at + timedelta(milliseconds=rng.randint(20, 400))
    finished_at: datetime | None = None
    answer = error = ""
    rounds = 0
    tools_used: list[str] = []
    clock = started_at + timedelta(milliseconds=rng.randint(800, 4000))
    model_call("plan", clock, rng.randint(1500, 3200), rng.randint(120, 420))
    plan_id = ids(Plan)
    valid = status != Run.Status.INVALID_PLAN
    rows.add(
        Plan,
        {
            "id": plan_id,
            "run_id": run_id,
            "version": 1,
            "parent_id": None,
            "source": "planner",
            "raw_output": "" if not valid else '{"steps": [...]}',
            "is_valid": valid,
            "problems": [] if valid else ["step 2: unknown tool 'teleport' (allowed: price)"],
            "created_at": clock,
        },
    )
    if not valid:
        error = "step 2: unknown tool 'teleport' (allowed: price)"
        events.append(("plan_invalid", {"version": 1, "problems": [error]}, clock))
        finished_at = clock
    else:
        tools_used = sorted({spec[1] for spec in specs})
        events.append(("plan_created", {"version": 1, "source": "planner"}, clock))
        events.append(("run_started", {}, clock))
        clock, rounds = _steps(rows, ids, rng, status, specs, run_id, plan_id, clock)
        if status in (Run.Status.COMPLETED, Run.Status.FAILED, Run.Status.BLOCKED):
            clock += timedelta(milliseconds=rng.randint(600, 5000))
            model_call("answer", clock, rng.randint(900, 2600), rng.randint(90, 520))
            answer = f"Done: {goal_text}."
        if status == Run.Status.BUDGET_EXHAUSTED:
            error = "The next model call would exceed the run's budget of $0.50."
        if status in Run.TERMINAL:
            finished_at = clock + timedelta(milliseconds=rng.randint(5, 80))
    if finished_at:
        events.append(("run_finished", {"status": status}, finished_at))
    # Stored as plans.journal.events stores them, so verify_audit accepts seeded runs.
    stored = [(kind, *redacted_json(payload), at) for kind, payload, at in events]
    chain = event_chain(
        run_id=run_id,
        first_seq=1,
        prev_hash=GENESIS,
        entries=((kind, payload_json, at) for kind, _, payload_json, at in stored),
    )
    prev_hash = GENESIS
    for (kind, payload, _, at), (seq, prev, digest) in zip(stored, chain, strict=True):
        rows.add(
            RunEvent,
            {
                "id": ids(RunEvent),
                "run_id": run_id,
                "seq": seq,
                "kind": kind,
                "payload": payload,
                "at": at,
                "prev_hash": prev,
                "hash": digest,
            },
        )
        prev_hash = digest
    rows.add(
        Run,
        {
            "id": run_id,
            "goal_id": goal_id,
            "status": status,
            "answer": answer,
            "error": error,
            "budget_usd": Decimal("0.50"),
            "budget_tokens": 200000,
            "max_parallel_steps": 16,
            "cancel_requested": status == Run.Status.CANCELLED,
            "input_tokens": usage_total[0],
            "output_tokens": usage_total[1],
            "cache_read_tokens": usage_total[2],
            "cache_write_tokens": usage_total[3],
            "cost_usd": cost_total,
            "model_call_count": calls,
            "round_count": rounds,
            "tools_used": tools_used,
            "last_seq": len(events),
            "last_event_hash": prev_hash,
            "lease_token": None,
            "lease_expires_at": None,
            "created_at": created_at,
            "started_at": started_at,
            "finished_at": finished_at,
        },
    )


def _steps(
    rows: _Rows,
    ids: _IdAllocator,
    rng: random.Random,
    status: str,
    specs: list[StepSpec],
    run_id: int,
    plan_id: int,
    clock: datetime,
) -> tuple[datetime, int]:
    """Step rows (with tool calls and approvals) whose outcomes fit the run's status."""
    depth = _depths(specs)
    outcome: dict[int, str] = {}
    results: dict[int, Any] = {}  # what succeeded steps returned, for their dependants' args
    failing = rng.choice([spec[0] for spec in specs if not spec[4]])
    first_destructive = next((spec[0] for spec in specs if spec[4]), None)
    rounds_run = 0
    for round_no in sorted(set(depth.values())):
        round_end = clock
        for step_id, tool, args, deps, destructive, result in specs:
            if depth[step_id] != round_no:
                continue
            upstream = [outcome[d] for d in deps]
            state = "succeeded"
            reason = ""
            if any(o != "succeeded" for o in upstream):
                waiting = any(o in ("pending", "awaiting_approval") for o in upstream)
                state = "pending" if waiting else "skipped"
                if not waiting:
                    reason = f"skipped: depends on step {deps[0]}, which did not succeed"
            elif status == Run.Status.FAILED and step_id == failing:
                state, reason = "failed", "the demo service is offline"
            elif status == Run.Status.BLOCKED and step_id == first_destructive:
                state, reason = "blocked", rng.choice(REJECT_REASONS)
            elif status == Run.Status.AWAITING_APPROVAL and step_id == first_destructive:
                state = "awaiting_approval"
            elif status == Run.Status.CANCELLED and round_no > 1:
                state, reason = "skipped", "skipped: the run was cancelled"
            outcome[step_id] = state
            ran = state in ("succeeded", "failed")
            if state == "succeeded":
                results[step_id] = result
            # As a run does: a step whose dependencies all succeeded has its arguments resolved.
            resolved = resolve(args, results) if all(d in results for d in deps) else args
            took = timedelta(milliseconds=rng.randint(15, 900))
            step_start = clock + timedelta(milliseconds=rng.randint(1, 30)) if ran else None
            step_end = step_start + took if step_start else None
            if step_end:
                round_end = max(round_end, step_end)
            row_id = ids(Step)
            rows.add(
                Step,
                {
                    "id": row_id,
                    "plan_id": plan_id,
                    "step_id": step_id,
                    "tool": tool,
                    "args": args,
                    "depends_on": deps,
                    "destructive": destructive,
                    "round": round_no,
                    "status": state,
                    "resolved_args": (
                        resolved if ran or state in ("awaiting_approval", "blocked") else None
                    ),
                    "result": result if state == "succeeded" else None,
                    "error": reason if state in ("failed", "blocked", "skipped") else "",
                    "attempts": 1 if ran else 0,
                    "started_at": step_start,
                    "finished_at": step_end,
                },
            )
            if destructive and state in ("succeeded", "blocked", "awaiting_approval"):
                decision = {"succeeded": "approved", "blocked": "rejected"}.get(state, "pending")
                rows.add(
                    Approval,
                    {
                        "id": ids(Approval),
                        "run_id": run_id,
                        "step_id": row_id,
                        "tool": tool,
                        "requested_args": resolved,
                        "args": resolved,
                        "args_sha256": args_sha256(tool, resolved),
                        "decision": decision,
                        "reviewer_id": None,
                        "via": "cli" if decision != "pending" else "",
                        "reason": reason if decision == "rejected" else "",
                        "requested_at": clock,
                        "decided_at": clock + took if decision != "pending" else None,
                    },
                )
            if state in ("succeeded", "failed"):
                rows.add(
                    ToolCall,
                    {
                        "id": ids(ToolCall),
                        "run_id": run_id,
                        "step_id": row_id,
                        "tool": tool,
                        "attempt": 1,
                        "args": resolved,
                        "result": result if state == "succeeded" else None,
                        "error": reason if state == "failed" else "",
                        # As the executor keys calls: a destructive one per run and step.
                        "idempotency_key": (
                            idempotency_key(tool, resolved, run_id=run_id, step="")
                            if destructive
                            else args_sha256(tool, resolved)
                        ),
                        "started_at": step_start,
                        "duration_ms": took.total_seconds() * 1000,
                    },
                )
        started = [outcome[spec[0]] for spec in specs if depth[spec[0]] == round_no]
        if any(state in ("succeeded", "failed") for state in started):
            rounds_run = round_no
        clock = round_end
    return clock, rounds_run


_DEPTHS: dict[tuple[Any, ...], dict[int, int]] = {}


def _depths(specs: list[StepSpec]) -> dict[int, int]:
    """Each step's round, the plan validated once per shape (its arguments differ in values)."""
    shape = tuple((spec[0], spec[1], tuple(spec[3]), spec[4]) for spec in specs)
    if shape not in _DEPTHS:
        _DEPTHS[shape] = depths(_validated(specs))
    return _DEPTHS[shape]


def _validated(specs: list[StepSpec]) -> engine.Plan:
    """The engine's plan of the specs, validated against the registered tools like any plan."""
    data = {
        "steps": [
            {"id": step_id, "tool": tool, "args": args, "depends_on": deps}
            for step_id, tool, args, deps, _, _ in specs
        ]
    }
    plan, problems = plan_check(data, max_steps=None)
    if plan is None:
        raise ValueError(f"a demo plan is invalid: {'; '.join(problems)}")
    registry = get_registry()
    destructive = {spec[1] for spec in specs if spec[4]}
    if destructive != {spec[1] for spec in specs if registry[spec[1]].destructive}:
        raise ValueError(f"demo steps marked destructive ({destructive}) disagree with the tools")
    return plan


@contextmanager
def _large_cache() -> Iterator[None]:
    """SQLite keeps 2 MB of pages by default: too few for the indexes of millions of rows, whose
    pages then go back and forth to the file on every insert."""
    if connection.vendor != "sqlite":
        yield
        return
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA cache_size")
        (before,) = cursor.fetchone()
        cursor.execute(f"PRAGMA cache_size = {SQLITE_CACHE_KIB}")
        try:
            yield
        finally:
            cursor.execute(f"PRAGMA cache_size = {int(before)}")


def tables_analyze() -> None:
    """Give the query planner statistics of the tables just loaded: without them it guesses
    (SQLite never gathers them by itself; PostgreSQL's autovacuum does, but minutes later)."""
    tables = [model._meta.db_table for model in (Goal, Run, Plan, Step, Approval, ModelCall)]
    tables += [ToolCall._meta.db_table, RunEvent._meta.db_table]
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            # A sample of each index (as PRAGMA optimize takes), not a read of the whole file.
            cursor.execute(f"PRAGMA analysis_limit = {SQLITE_ANALYSIS_ROWS}")
        for table in tables:
            cursor.execute(f"ANALYZE {connection.ops.quote_name(table)}")


def _reset_sequences() -> None:
    """PostgreSQL's id sequences must continue after the explicit ids (SQLite needs nothing)."""
    statements = connection.ops.sequence_reset_sql(
        no_style(), [Goal, Run, Plan, Step, Approval, ModelCall, ToolCall, RunEvent]
    )
    if statements:
        with connection.cursor() as cursor:
            for statement in statements:
                cursor.execute(statement)
