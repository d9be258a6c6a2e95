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

import dataclasses
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
from django.db import connection, reset_queries, transaction
from django.db.models import DateTimeField, JSONField, Max, Model
from django.utils import timezone

from plans.bulk import JSONText, load_rows
from plans.demo import shapes
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
# Runs whose rows are held before they are written (a run's rows are ~20 KB as dicts).
FLUSH_RUNS = 500
# Negative: KiB, not pages. SQLite's page cache is most of the seeding's memory: it fills up
# to this whatever the count, so the peak stays bounded (512 MB made 100k runs peak at 640 MB;
# 64 MB made 1M peak at 207 MB, 32 MB at 169 MB, with no more CPU).
SQLITE_CACHE_KIB = -32_000
SQLITE_ANALYSIS_ROWS = 2000
REJECT_REASONS = ["amount looks wrong", "customer already refunded", "dates need checking"]


# A demo goal: its text, its plan (plans.demo.shapes), and per step the value drawn for what
# the tool returns (a price, a booking's reference), drawn up front in a fixed order.
Demo = tuple[str, dict[str, Any], dict[int, Any]]


def _price_goal(rng: random.Random) -> Demo:
    a, b = rng.sample(ITEMS, 2)
    drawn = {1: rng.randrange(9900, 199900, 100), 2: rng.randrange(9900, 199900, 100)}
    return f"Total price of an {a} and {b} in INR", shapes.price_plan([a, b]), drawn


def _trip_goal(rng: random.Random) -> Demo:
    city, nights = rng.choice(CITIES), rng.randint(1, 5)
    day = f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    fare, hotel = rng.randrange(3000, 15000), rng.randrange(2000, 9000) * nights
    drawn = {1: fare, 2: hotel, 4: _reference(rng, "FL"), 5: _reference(rng, "HT")}
    plan = shapes.trip_plan(
        origin="Bengaluru", destination=city, day=day, nights=nights, traveller="Demo Traveller"
    )
    return f"Book a trip from Bengaluru to {city} on {day} for {nights} nights", plan, drawn


def _refund_goal(rng: random.Random) -> Demo:
    order = rng.choice(ORDERS)
    drawn = {1: _order_total(rng), 2: _reference(rng, "RF"), 3: _reference(rng, "EM")}
    customer = f"customer-{order.lower().replace('-', '')}@example.com"
    plan = shapes.refund_plan(order_id=order, reason="damaged item", customer=customer)
    return f"Refund order {order} for a damaged item", plan, drawn


def _order_total(rng: random.Random) -> int:
    """An order's total (what its refund asks for), across the demo shop's rule thresholds
    (plans.demo.approval_rules): mostly ₹500-9,000, some over ₹50,000 (two reviewers), a few
    over ₹5,00,000 (denied), so that policy_replay has every rule to match."""
    share = rng.random()
    if share < 0.9:
        return rng.randrange(500, 9000)
    if share < 0.98:
        return rng.randrange(50_001, 200_000)
    return rng.randrange(500_001, 900_000)


def _research_goal(rng: random.Random) -> Demo:
    question = rng.choice(QUESTIONS)
    return question, shapes.research_plan([question[:60], "ReAct agent token cost"]), {}


GOALS: list[Callable[[random.Random], Demo]] = [
    _price_goal,
    _price_goal,
    _trip_goal,
    _refund_goal,
    _research_goal,
]


def _reference(rng: random.Random, prefix: str) -> str:
    return f"{prefix}-{rng.randrange(10**6):06d}"


def _result(tool: str, args: dict[str, Any], inputs: list[Any], drawn: Any) -> Any:
    """What the demo tool returns for these (resolved) arguments, in its declared shape."""
    if tool in ("price", "flight_price", "hotel_price", "order_total"):
        return drawn
    if tool == "calculator":  # the demo plans only add their inputs up
        return sum(inputs)
    if tool in ("book_flight", "book_hotel"):
        return {"status": "booked", "reference": drawn, **args}
    if tool == "issue_refund":
        refund = {"order_id": args["order_id"], "amount_inr": args["amount_inr"]}
        return {"status": "refunded", "reference": drawn, **refund}
    if tool == "send_email":
        return {"status": "sent", "reference": drawn, "to": args["to"]}
    if tool == "search":
        hit = {"doc": "plan-execute", "title": "Plan-and-execute agents", "cite": "[plan-execute]"}
        return [hit]
    raise ValueError(f"the seeder has no demo result for {tool!r}")


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
            # Streamed: rows go to the database every FLUSH_RUNS runs, in the batch's one
            # transaction, so what is held at once does not grow with the batch (nor the count).
            with transaction.atomic():
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
                    if (number + 1 - done) % FLUSH_RUNS == 0:
                        rows.insert()
                        rows = _Rows()
                        # With DEBUG on (manage.py's default) Django logs every statement, up
                        # to 9,000 of them: the log, not the rows, would grow with the count.
                        reset_queries()
                rows.insert()
                reset_queries()
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


class _Spend:
    """A seeded run's model calls, as rows, and what they add up to."""

    def __init__(self, rows: _Rows, ids: _IdAllocator, rng: random.Random, run_id: int) -> None:
        self.rows, self.ids, self.rng, self.run_id = rows, ids, rng, run_id
        self.tokens = [0, 0, 0, 0]  # input, output, cache read, cache write
        self.cost = Decimal(0)
        self.calls = 0

    def call(
        self, purpose: str, at: datetime, inputs: int, outputs: int, models: list[str]
    ) -> None:
        model = self.rng.choice(models)
        prices = dict(settings.AGENTSITE_MODEL_PRICES[model])
        cache_read = self.rng.choice([0, 0, inputs // 2])
        usage = Usage(input_tokens=inputs, output_tokens=outputs, cache_read_tokens=cache_read)
        cost = cost_usd(usage, prices)
        self.rows.add(
            ModelCall,
            {
                "id": self.ids(ModelCall),
                "run_id": self.run_id,
                "purpose": purpose,
                "model": model,
                "input_tokens": inputs,
                "output_tokens": outputs,
                "cache_read_tokens": cache_read,
                "cache_write_tokens": 0,
                "prices": prices,
                "cost_usd": cost,
                "latency_ms": self.rng.randint(400, 6000),
                "error": "",
                "created_at": at,
            },
        )
        self.tokens[0] += inputs
        self.tokens[1] += outputs
        self.tokens[2] += cache_read
        self.cost += cost
        self.calls += 1


@dataclasses.dataclass
class _Ending:
    """How a seeded run ended (or where it stands), for its run row."""

    finished_at: datetime | None = None
    answer: str = ""
    error: str = ""
    rounds: int = 0
    tools_used: list[str] = dataclasses.field(default_factory=list)


INVALID_PROBLEM = "step 2: unknown tool 'teleport' (allowed: price)"


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
    goal_text, plan, drawn = rng.choice(GOALS)(rng)
    registry = get_registry()
    destructive = {s["id"] for s in plan["steps"] if registry[s["tool"]].destructive}
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
    spend = _Spend(rows, ids, rng, run_id)
    started_at = created_at + timedelta(milliseconds=rng.randint(20, 400))
    clock = started_at + timedelta(milliseconds=rng.randint(800, 4000))
    spend.call("plan", clock, rng.randint(1500, 3200), rng.randint(120, 420), models)
    valid = status != Run.Status.INVALID_PLAN
    plan_id = _plan_row(rows, ids, run_id, valid=valid, at=clock)
    if not valid:
        events.append(("plan_invalid", {"version": 1, "problems": [INVALID_PROBLEM]}, clock))
        ending = _Ending(finished_at=clock, error=INVALID_PROBLEM)
    else:
        events.append(("plan_created", {"version": 1, "source": "planner"}, clock))
        events.append(("run_started", {}, clock))
        run = _Seeding(rows, ids, rng, status, run_id, plan_id, destructive, drawn)
        clock, rounds = run.steps(plan["steps"], clock)
        ending = _ended(rng, status, clock, spend, goal_text, models)
        ending.rounds, ending.tools_used = rounds, sorted({s["tool"] for s in plan["steps"]})
    if ending.finished_at:
        events.append(("run_finished", {"status": status}, ending.finished_at))
    last_hash = _event_rows(rows, ids, run_id, events)
    times = (created_at, started_at)
    rows.add(Run, _run_row(run_id, goal_id, status, ending, spend, len(events), last_hash, times))


def _run_row(
    run_id: int,
    goal_id: int,
    status: str,
    ending: _Ending,
    spend: _Spend,
    events: int,
    last_hash: str,
    times: tuple[datetime, datetime],
) -> dict[str, Any]:
    created_at, started_at = times
    return {
        "id": run_id,
        "goal_id": goal_id,
        "status": status,
        "answer": ending.answer,
        "error": ending.error,
        "budget_usd": Decimal("0.50"),
        "budget_tokens": 200000,
        "max_parallel_steps": 16,
        "cancel_requested": status == Run.Status.CANCELLED,
        "input_tokens": spend.tokens[0],
        "output_tokens": spend.tokens[1],
        "cache_read_tokens": spend.tokens[2],
        "cache_write_tokens": spend.tokens[3],
        "cost_usd": spend.cost,
        "model_call_count": spend.calls,
        "round_count": ending.rounds,
        "tools_used": ending.tools_used,
        "last_seq": events,
        "last_event_hash": last_hash,
        "lease_token": None,
        "lease_expires_at": None,
        "created_at": created_at,
        "started_at": started_at,
        "finished_at": ending.finished_at,
    }


def _plan_row(rows: _Rows, ids: _IdAllocator, run_id: int, *, valid: bool, at: datetime) -> int:
    plan_id = ids(Plan)
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
            "problems": [] if valid else [INVALID_PROBLEM],
            "created_at": at,
        },
    )
    return plan_id


def _ended(
    rng: random.Random,
    status: str,
    clock: datetime,
    spend: _Spend,
    goal_text: str,
    models: list[str],
) -> _Ending:
    """The answer (and its model call) of a run whose steps ran, and when it finished."""
    ending = _Ending()
    if status in (Run.Status.COMPLETED, Run.Status.FAILED, Run.Status.BLOCKED):
        clock += timedelta(milliseconds=rng.randint(600, 5000))
        spend.call("answer", clock, rng.randint(900, 2600), rng.randint(90, 520), models)
        ending.answer = f"Done: {goal_text}."
    if status == Run.Status.BUDGET_EXHAUSTED:
        ending.error = "The next model call would exceed the run's budget of $0.50."
    if status in Run.TERMINAL:
        ending.finished_at = clock + timedelta(milliseconds=rng.randint(5, 80))
    return ending


def _event_rows(
    rows: _Rows, ids: _IdAllocator, run_id: int, events: list[tuple[str, dict[str, Any], datetime]]
) -> str:
    """The run's event log, stored as plans.journal.events stores it (so verify_audit accepts
    seeded runs); returns the last event's hash."""
    stored = [(kind, *redacted_json(payload), at) for kind, payload, at in events]
    chain = event_chain(
        run_id=run_id,
        first_seq=1,
        prev_hash=GENESIS,
        entries=((kind, payload_json, at) for kind, _, payload_json, at in stored),
    )
    last_hash = GENESIS
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
        last_hash = digest
    return last_hash


class _Seeding:
    """A seeded run's steps (with their tool calls and approvals), outcomes fitting its status."""

    def __init__(
        self,
        rows: _Rows,
        ids: _IdAllocator,
        rng: random.Random,
        status: str,
        run_id: int,
        plan_id: int,
        destructive: set[int],
        drawn: dict[int, Any],
    ) -> None:
        self.rows, self.ids, self.rng, self.status = rows, ids, rng, status
        self.run_id, self.plan_id, self.destructive, self.drawn = (
            run_id,
            plan_id,
            destructive,
            drawn,
        )
        self.outcome: dict[int, str] = {}
        self.results: dict[int, Any] = {}  # what succeeded steps returned, for their dependants

    def steps(self, steps: list[dict[str, Any]], clock: datetime) -> tuple[datetime, int]:
        """Every step's rows, round by round; returns the clock after them and rounds run."""
        depth = _depths(steps)
        self.failing = self.rng.choice([s["id"] for s in steps if s["id"] not in self.destructive])
        self.first_destructive = min(self.destructive, default=None)
        rounds_run = 0
        for round_no in sorted(set(depth.values())):
            round_end = clock
            for step in steps:
                if depth[step["id"]] == round_no:
                    round_end = max(round_end, self._step(step, round_no, clock))
            started = [self.outcome[s["id"]] for s in steps if depth[s["id"]] == round_no]
            if any(state in ("succeeded", "failed") for state in started):
                rounds_run = round_no
            clock = round_end
        return clock, rounds_run

    def _state(self, step: dict[str, Any], round_no: int) -> tuple[str, str]:
        """The step's state and its reason, from its dependencies' and the run's status."""
        step_id, deps = step["id"], step["depends_on"]
        upstream = [self.outcome[d] for d in deps]
        if any(o != "succeeded" for o in upstream):
            if any(o in ("pending", "awaiting_approval") for o in upstream):
                return "pending", ""
            return "skipped", f"skipped: depends on step {deps[0]}, which did not succeed"
        if self.status == Run.Status.FAILED and step_id == self.failing:
            return "failed", "the demo service is offline"
        if self.status == Run.Status.BLOCKED and step_id == self.first_destructive:
            return "blocked", self.rng.choice(REJECT_REASONS)
        if self.status == Run.Status.AWAITING_APPROVAL and step_id == self.first_destructive:
            return "awaiting_approval", ""
        if self.status == Run.Status.CANCELLED and round_no > 1:
            return "skipped", "skipped: the run was cancelled"
        return "succeeded", ""

    def _step(self, step: dict[str, Any], round_no: int, clock: datetime) -> datetime:
        """The step's row, approval and tool call; returns when it finished (or clock)."""
        step_id, tool, args, deps = step["id"], step["tool"], step["args"], step["depends_on"]
        state, reason = self._state(step, round_no)
        self.outcome[step_id] = state
        ran = state in ("succeeded", "failed")
        # As a run does: a step whose dependencies all succeeded has its arguments resolved.
        ready = all(d in self.results for d in deps)
        resolved = resolve(args, self.results) if ready else args
        result = None
        if state == "succeeded":
            inputs = [self.results[d] for d in deps]
            result = _result(tool, resolved, inputs, self.drawn.get(step_id))
            self.results[step_id] = result
        took = timedelta(milliseconds=self.rng.randint(15, 900))
        step_start = clock + timedelta(milliseconds=self.rng.randint(1, 30)) if ran else None
        step_end = step_start + took if step_start else None
        destructive = step_id in self.destructive
        row_id = self.ids(Step)
        self.rows.add(
            Step,
            {
                "id": row_id,
                "plan_id": self.plan_id,
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
                "result": result,
                "error": reason if state in ("failed", "blocked", "skipped") else "",
                "attempts": 1 if ran else 0,
                "started_at": step_start,
                "finished_at": step_end,
            },
        )
        if destructive and state in ("succeeded", "blocked", "awaiting_approval"):
            self._approval(row_id, tool, resolved, state, reason, clock, took)
        if ran:
            error = reason if state == "failed" else ""
            self._tool_call(row_id, tool, resolved, result, error, step_start, took, destructive)
        return step_end or clock

    def _tool_call(
        self,
        step_row: int,
        tool: str,
        args: dict[str, Any],
        result: Any,
        error: str,
        started_at: datetime | None,
        took: timedelta,
        destructive: bool,
    ) -> None:
        self.rows.add(
            ToolCall,
            {
                "id": self.ids(ToolCall),
                "run_id": self.run_id,
                "step_id": step_row,
                "tool": tool,
                "attempt": 1,
                "args": args,
                "result": result,
                "error": error,
                # As the executor keys calls: a destructive one per run and step.
                "idempotency_key": (
                    idempotency_key(tool, args, run_id=self.run_id, step="")
                    if destructive
                    else args_sha256(tool, args)
                ),
                "started_at": started_at,
                "duration_ms": took.total_seconds() * 1000,
            },
        )

    def _approval(
        self,
        step_row: int,
        tool: str,
        args: dict[str, Any],
        state: str,
        reason: str,
        clock: datetime,
        took: timedelta,
    ) -> None:
        decision = {"succeeded": "approved", "blocked": "rejected"}.get(state, "pending")
        self.rows.add(
            Approval,
            {
                "id": self.ids(Approval),
                "run_id": self.run_id,
                "step_id": step_row,
                "tool": tool,
                "requested_args": args,
                "args": args,
                "args_sha256": args_sha256(tool, args),
                "decision": decision,
                "reviewer_id": None,
                "via": "cli" if decision != "pending" else "",
                "reason": reason if decision == "rejected" else "",
                "requested_at": clock,
                "decided_at": clock + took if decision != "pending" else None,
            },
        )


_DEPTHS: dict[tuple[Any, ...], dict[int, int]] = {}


def _depths(steps: list[dict[str, Any]]) -> dict[int, int]:
    """Each step's round, the plan validated once per shape (its arguments differ in values)."""
    shape = tuple((s["id"], s["tool"], tuple(s["depends_on"])) for s in steps)
    if shape not in _DEPTHS:
        plan, problems = plan_check({"steps": steps}, max_steps=None)
        if plan is None:
            raise ValueError(f"a demo plan is invalid: {'; '.join(problems)}")
        _DEPTHS[shape] = depths(plan)
    return _DEPTHS[shape]


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
