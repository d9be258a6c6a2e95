"""A deterministic stand-in for a language model: plans the demo goals, answers from outcomes."""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from plans.demo import shapes
from plans.engine.figures import figures
from plans.llm.base import Completion, ModelError, ModelRequest, Usage, estimated_tokens

OFFLINE_MODEL_NAME = "offline"

PRICE_GOAL = "Total price of an iPhone 16 and AirPods 4 in INR"
TRIP_GOAL = "Book a trip from Bengaluru to Goa on 2026-12-19 for 2 nights"
REFUND_GOAL = "Refund order A-1001 for a damaged item"
CONFIRMED_REFUND_GOAL = "Refund order A-1002 for a late delivery once I confirm the amount"
RESEARCH_GOAL = "What makes plan-and-execute agents cheaper than ReAct?"
OFFLINE_DEMO_GOALS: list[str] = [
    PRICE_GOAL,
    TRIP_GOAL,
    REFUND_GOAL,
    CONFIRMED_REFUND_GOAL,
    RESEARCH_GOAL,
]
# A reviewer's "refund 500, not 2499" (the first amount named is the one wanted).
_REQUESTED_AMOUNT = re.compile(r"(?:INR|₹|rs\.?|refund|amount)?\s*(\d[\d,]*)", re.IGNORECASE)
# "... once I confirm the amount": a person confirms the amount (ask_human) before the refund.
_CONFIRM = re.compile(
    r"[\s,]*\b(?:once|after|when|but)\s+(?:I|we|you)\s+(?:confirm|check|ask)\b.*$",
    re.IGNORECASE,
)


# Bookings need a name the goal rarely gives; the reviewer sees (and may edit) it before approval.
DEFAULT_TRAVELLER = "Demo Traveller"
DEFAULT_REFUND_REASON = "requested by customer"

_ORDER_ID = re.compile(r"\b([A-Za-z]-\d{3,})\b")
_DATE = re.compile(r"\b(\d{4}-\d{2}-\d{2})\b")
_NIGHTS = re.compile(r"\b(\d+)\s+nights?\b", re.IGNORECASE)
_ROUTE = re.compile(
    r"\bfrom\s+(.+?)\s+to\s+(.+?)(?=\s+(?:on|for|departing|leaving|in)\b|[,.;?!]|$)",
    re.IGNORECASE,
)
_TRAVELLER = re.compile(r"\b(?:for|passenger|guest)\s+([A-Z][a-z]+(?:\s+[A-Z][a-z]+)*)")
_IPHONE = re.compile(r"\biphone\s*(\d+)?", re.IGNORECASE)
_AIRPODS = re.compile(r"\bairpods\s*(\d+)?", re.IGNORECASE)
_BLOCKED_REASON = re.compile(r"Reason:\s*(.*?)\.?\s*(?:Do not retry\.?)?\s*$", re.DOTALL)
_CHUNKS = re.compile(r"(?<=\s)(?=\S)")


# As the API's prompt cache: a prefix is kept five minutes from its last use, and a prefix
# shorter than the model's minimum is not cached at all.
CACHE_TTL_S = 300.0
CACHE_MIN_TOKENS = 1024


class PromptCache:
    """Which request prefixes were seen lately, so usage reports cache reads and writes as the
    API does: the first call with a prefix writes it, later ones within the TTL read it."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._expires: dict[str, float] = {}

    def usage(self, request: ModelRequest, *, output_tokens: int) -> Usage:
        """The call's usage: its prompt split into uncached input and a cache read or write."""
        total = request.estimated_input_tokens()
        prefix = request.cached_prefix()
        cached = estimated_tokens(prefix)
        if cached < CACHE_MIN_TOKENS:
            return Usage(input_tokens=total, output_tokens=output_tokens)
        key = hashlib.sha256(f"{request.model}\0{prefix}".encode()).hexdigest()
        now = self.clock()
        with self._lock:
            hit = self._expires.get(key, -1.0) > now
            self._expires[key] = now + CACHE_TTL_S  # a read refreshes the entry, as the API's
            if len(self._expires) > 1024:
                self._expires = {k: t for k, t in self._expires.items() if t > now}
        part = {"cache_read_tokens" if hit else "cache_write_tokens": cached}
        return Usage(input_tokens=total - cached, output_tokens=output_tokens, **part)

    def clear(self) -> None:
        with self._lock:
            self._expires.clear()


# One per process, like the provider's cache shared by every call with the same prefix.
PROMPT_CACHE = PromptCache()


class OfflineModel:
    """Plans the four demo goals and writes answers from step outcomes, without any network."""

    name = OFFLINE_MODEL_NAME

    def __init__(self, *, latency_ms: float = 0, cache: PromptCache | None = None) -> None:
        # A real model's latency, to measure concurrency honestly (AGENTSITE_OFFLINE_LATENCY_MS).
        self.latency_ms = latency_ms
        self.cache = PROMPT_CACHE if cache is None else cache

    def complete(
        self, request: ModelRequest, *, on_text: Callable[[str], None] | None = None
    ) -> Completion:
        started = time.perf_counter()
        if self.latency_ms > 0:
            time.sleep(self.latency_ms / 1000)
        text = self._reply(request)
        if on_text is not None:
            for chunk in _CHUNKS.split(text):
                if chunk:
                    on_text(chunk)
        usage = self.cache.usage(request, output_tokens=estimated_tokens(text))
        latency_ms = round((time.perf_counter() - started) * 1000)
        return Completion(text=text, usage=usage, model=OFFLINE_MODEL_NAME, latency_ms=latency_ms)

    def _reply(self, request: ModelRequest) -> str:
        goal = request.metadata.get("goal")
        if not isinstance(goal, str):
            raise ModelError("The offline model needs the goal in the request's metadata.")
        if request.purpose == "plan" and request.metadata.get("router"):
            # The router: a goal about the agent itself, or a term it defines, needs no tool.
            direct = direct_reply(goal, list(request.metadata.get("catalog") or []))
            if direct:
                return json.dumps({"steps": [], "answer": direct}, ensure_ascii=False)
        if request.purpose in ("plan", "replan"):
            # A repair request gets the same plan: the demo plans are valid as they stand.
            changes = request.metadata.get("change_requests") or []
            instructions = " ".join(str(c.get("instructions", "")) for c in changes)
            done = list(request.metadata.get("effects_done") or [])
            if any(effect.get("tool") == "issue_refund" for effect in done):
                instructions = ""  # the refund was made: no other amount can be asked now
            plan = plan_for_goal(goal, instructions=instructions) if instructions else None
            plan = plan or plan_for_goal(goal)
            return json.dumps(keeping_effects(plan, done) if done else plan, ensure_ascii=False)
        if request.purpose == "answer":
            done = [
                {**effect, "id": None, "status": "succeeded", "reused_from": effect.get("origin")}
                for effect in request.metadata.get("effects_done") or []
            ]
            return answer_for(goal, list(request.metadata.get("outcomes") or []) + done)
        if request.purpose == "judge":
            return judge_reply(
                goal,
                str(request.metadata.get("answer") or ""),
                list(request.metadata.get("outcomes") or []),
            )
        if request.purpose == "act":
            outcomes = list(request.metadata.get("outcomes") or [])
            return react_turn(goal, outcomes, final=bool(request.metadata.get("final")))
        raise ModelError(f"The offline model cannot handle a {request.purpose!r} request.")


_ABOUT_ME = re.compile(
    r"\b(?:which|what)\s+tools\b|\bwhat\s+can\s+you\s+do\b|\bwho\s+are\s+you\b"
    r"|^\s*(?:hi|hello|hey)\b",
    re.IGNORECASE,
)
_DEFINITION = re.compile(
    r"^\s*what\s+is\s+(?:an?\s+)?(plan[- ]and[- ]execute|react)(?:\s+agents?)?\s*\??\s*$",
    re.IGNORECASE,
)
_GLOSSARY = {
    "plan-and-execute": (
        "Plan-and-execute is an agent design in which a planner model first writes the whole "
        "plan, a graph of tool calls, and an executor then runs it, independent steps in "
        "parallel, before one more model call writes the answer from the results: two model "
        "calls for any number of steps."
    ),
    "react": (
        "ReAct (reason and act) is an agent design in which the model chooses one tool call at "
        "a time, sees its result, and chooses the next: a model call for every step, each "
        "reading every result so far."
    ),
}


def direct_reply(goal: str, catalog: list[Mapping[str, Any]]) -> str:
    """The offline router's answer to a goal that needs no tool, or "" to plan it: what this
    agent is and which tools it has (from the catalog), or what a term it is built on means."""
    if definition := _DEFINITION.match(goal):
        term = definition.group(1).lower().replace(" ", "-")
        return _GLOSSARY["react" if term == "react" else "plan-and-execute"]
    if not _ABOUT_ME.search(goal):
        return ""
    tools = sorted(catalog, key=lambda tool: str(tool.get("name", "")))
    listed = "; ".join(
        f"{tool.get('name')} ({str(tool.get('description', '')).split('. ')[0].rstrip('.')})"
        for tool in tools
    )
    gated = _joined([str(tool.get("name")) for tool in tools if tool.get("destructive")])
    answer = (
        "I am a plan-and-execute agent: I plan a goal as tool steps, run them and answer from "
        f"their results. My tools: {listed}."
    )
    if gated:
        answer += f" Calls of {gated} change things, so each waits for a reviewer's approval."
    return answer


def keeping_effects(plan: dict[str, Any], done: list[Mapping[str, Any]]) -> dict[str, Any]:
    """The plan with no effect redone: a step of a tool that already acted, written with other
    literal arguments (a reviewer's "refund 500" after 2499 was refunded), is given the
    arguments the effect was made with, so the executor takes its result instead of acting.

    Arguments with placeholders are left as they are: they resolve as they did before.
    """
    steps = [dict(step) for step in plan.get("steps", [])]
    taken: set[int] = set()
    for effect in done:
        for index, step in enumerate(steps):
            if index in taken or step.get("tool") != effect.get("tool") or step.get("repeat"):
                continue
            taken.add(index)
            if "{{" not in json.dumps(step.get("args")) and step.get("args") != effect.get("args"):
                step["args"] = effect.get("args")
            break
    return {**plan, "steps": steps}


def goal_kind(goal: str) -> str | None:
    """Which demo the goal is: "refund", "trip", "price", "research" or None."""
    text = goal.lower()
    if "refund" in text and _ORDER_ID.search(goal):
        return "refund"
    if ("trip" in text or "book" in text) and any(w in text for w in ("flight", "hotel", "goa")):
        return "trip"
    if "trip" in text and _ROUTE.search(goal):
        return "trip"
    if "iphone" in text or "airpods" in text:
        return "price"
    if (
        "plan-and-execute" in text
        or "plan and execute" in text
        or re.search(r"\breact\b", text)
        or "agent" in text
    ):
        return "research"
    return None


def plan_for_goal(goal: str, *, instructions: str = "") -> dict[str, Any]:
    """The plan JSON the offline model replies with; no steps and a reason for other goals.

    A reviewer's instructions naming an amount ("refund 500, not 2499") set a refund's amount.
    """
    kind = goal_kind(goal)
    amount = _REQUESTED_AMOUNT.search(instructions)
    if kind == "refund" and amount:
        return _refund_plan(goal, amount=int(amount.group(1).replace(",", "")))
    if kind == "price":
        return _price_plan(goal)
    if kind == "trip":
        return _trip_plan(goal)
    if kind == "refund":
        return _refund_plan(goal)
    if kind == "research":
        return _research_plan(goal)
    listed = "; ".join(f'"{demo}"' for demo in OFFLINE_DEMO_GOALS)
    return {
        "steps": [],
        "reason": (
            f"The offline model plans only these demo goals: {listed}. "
            "Set ANTHROPIC_API_KEY to plan other goals with Claude."
        ),
    }


def _price_plan(goal: str) -> dict[str, Any]:
    items = []
    if match := _IPHONE.search(goal):
        items.append(f"iPhone {match.group(1) or '16'}")
    if match := _AIRPODS.search(goal):
        items.append(f"AirPods {match.group(1) or '4'}")
    return shapes.price_plan(items)


def _trip_plan(goal: str) -> dict[str, Any]:
    route = _ROUTE.search(goal)
    date = _DATE.search(goal)
    nights = _NIGHTS.search(goal)
    missing = [
        name
        for name, found in (
            ("where from and to", route),
            ("the date (YYYY-MM-DD)", date),
            ("the number of nights", nights),
        )
        if not found
    ]
    if missing or route is None or date is None or nights is None:
        return {
            "steps": [],
            "reason": (
                f'The offline model needs {_joined(missing)} to plan a trip, as in "{TRIP_GOAL}".'
            ),
        }
    origin, destination = route.group(1).strip(), route.group(2).strip()
    day, night_count = date.group(1), int(nights.group(1))
    traveller = _TRAVELLER.search(goal)
    name = traveller.group(1) if traveller else DEFAULT_TRAVELLER
    return shapes.trip_plan(
        origin=origin, destination=destination, day=day, nights=night_count, traveller=name
    )


def _refund_plan(goal: str, *, amount: int | None = None) -> dict[str, Any]:
    confirm = _CONFIRM.search(goal)
    if confirm:
        goal = goal[: confirm.start()]
    match = _ORDER_ID.search(goal)
    assert match is not None  # goal_kind checked it
    order_id = match.group(1).upper()
    reason_match = re.search(
        r"\bfor\s+(?:an?\s+|the\s+)?(.+?)[\s.?!]*$", goal[match.end() :], re.IGNORECASE
    )
    reason = reason_match.group(1) if reason_match else DEFAULT_REFUND_REASON
    customer = f"customer-{order_id.lower().replace('-', '')}@example.com"
    if confirm and amount is None:
        return shapes.confirmed_refund_plan(order_id=order_id, reason=reason, customer=customer)
    return shapes.refund_plan(order_id=order_id, reason=reason, customer=customer, amount=amount)


def _research_plan(goal: str) -> dict[str, Any]:
    text = goal.lower()
    if goal.strip() == RESEARCH_GOAL:
        queries = ["plan-and-execute agent cost", "ReAct agent model calls"]
    else:
        first = goal.strip().rstrip("?.! ")[:200]
        second = (
            "ReAct agent model calls"
            if re.search(r"\breact\b", text)
            else "plan-and-execute agent trade-offs"
        )
        queries = [first, second]
    return shapes.research_plan(queries)


# --- ReAct -------------------------------------------------------------------------------


def react_turn(goal: str, outcomes: list[Mapping[str, Any]], *, final: bool = False) -> str:
    """The next ReAct reply: the demo plan's next call, seen through the observations so far.

    It knows no more than the planner does: the calls are the plan's, taken one per turn with
    earlier results written in, and a call whose inputs failed is not made.
    """
    plan = plan_for_goal(goal)
    if not plan["steps"]:
        return json.dumps({"answer": plan.get("reason", "")}, ensure_ascii=False)
    observed = iter(outcomes)
    results: dict[int, Any] = {}
    succeeded: set[int] = set()
    for step in plan["steps"]:
        if not all(dep in succeeded for dep in step["depends_on"]):
            continue  # an input failed or was declined: this call cannot be made
        outcome = next(observed, None)
        if outcome is None:
            if final:
                break
            args = _substituted(step["args"], results)
            return json.dumps({"tool": step["tool"], "args": args}, ensure_ascii=False)
        results[step["id"]] = outcome.get("result")
        if outcome.get("status") == "succeeded":
            succeeded.add(step["id"])
    return json.dumps({"answer": answer_for(goal, outcomes)}, ensure_ascii=False)


_WHOLE_PLACEHOLDER = re.compile(r"^\{\{(\d+)\}\}$")
_PLACEHOLDER = re.compile(r"\{\{(\d+)\}\}")


def _substituted(value: Any, results: Mapping[int, Any]) -> Any:
    """Earlier results written into the arguments, as a ReAct model copies them over."""
    if isinstance(value, dict):
        return {key: _substituted(item, results) for key, item in value.items()}
    if isinstance(value, list):
        return [_substituted(item, results) for item in value]
    if not isinstance(value, str):
        return value
    if whole := _WHOLE_PLACEHOLDER.match(value):
        return results.get(int(whole.group(1)))
    return _PLACEHOLDER.sub(lambda m: _value_text(results.get(int(m.group(1)))), value)


# --- Judging -----------------------------------------------------------------------------

# Words that claim a side effect happened, with the tool that would have made it.
_CLAIMS = {"refunded": "issue_refund", "booked": "book_", "emailed": "send_email"}


def judge_reply(goal: str, answer: str, outcomes: list[Mapping[str, Any]]) -> str:
    """A rule-of-thumb grade on the judge rubric: figures traced, failures named, no false claims.

    A stand-in so the judge path runs offline; it reads the answer no deeper than these rules.
    """
    text = answer.strip()
    sources = [goal] + [
        json.dumps([o.get("id"), o.get("args"), o.get("result"), o.get("error")], default=str)
        for o in outcomes
    ]
    known = set().union(*(figures(source) for source in sources))
    unsupported = figures(text) - known
    groundedness = 5 if not unsupported else 3 if len(unsupported) == 1 else 1
    if not text:
        completeness = 1
    elif not outcomes or any(
        _used_in(o.get("result"), text) for o in outcomes if o.get("status") == "succeeded"
    ):
        completeness = 5
    else:
        completeness = 3
    troubles = [o for o in outcomes if o.get("status") != "succeeded"]
    named = [o for o in troubles if f"Step {o.get('id')}" in text or str(o.get("tool")) in text]
    candour = 5 if len(named) == len(troubles) else 3 if named else 1
    lowered = text.lower()
    for word, tool in _CLAIMS.items():
        made = any(
            str(o.get("tool", "")).startswith(tool) and o.get("status") == "succeeded"
            for o in outcomes
        )
        if word in lowered and not made and "not " + word not in lowered:
            candour = 1
    reason = (
        f"{len(unsupported)} unsupported figure(s); "
        f"{len(named)} of {len(troubles)} unsuccessful call(s) named"
    )
    verdict = {
        "groundedness": groundedness,
        "completeness": completeness,
        "candour": candour,
        "reason": reason,
    }
    return json.dumps(verdict)


def _used_in(result: Any, text: str) -> bool:
    """Whether the answer draws on the result: its figures, its reference or a citation of it."""
    reference = _reference(result) if result not in (None, "") else ""
    if figures(_value_text(result)) & figures(text) or (reference and reference in text):
        return True
    hits = result if isinstance(result, list) else []
    return any(isinstance(hit, Mapping) and str(hit.get("cite")) in text for hit in hits)


# --- Answers -----------------------------------------------------------------------------


def answer_for(goal: str, outcomes: list[Mapping[str, Any]]) -> str:
    """Deterministic prose from the outcomes alone; names every step that did not succeed."""
    if not outcomes:
        return "No steps ran, so there are no results to answer the goal with."
    kind = goal_kind(goal)
    headline = {
        "price": _price_answer,
        "trip": _trip_answer,
        "refund": _refund_answer,
        "research": _research_answer,
    }.get(kind or "", _listing_answer)(outcomes)
    if not headline:
        headline = _listing_answer(outcomes)
    used = [o for o in outcomes if o.get("status") == "succeeded" and isinstance(o.get("id"), int)]
    if used:
        headline += " Sources: " + ", ".join(f"[step {o['id']}]" for o in used) + "."
    problems = " ".join(_problem_sentence(o) for o in outcomes if o.get("status") != "succeeded")
    return f"{headline}\n\n{problems}" if problems else headline


def _succeeded(outcomes: list[Mapping[str, Any]], tool: str) -> list[Mapping[str, Any]]:
    return [o for o in outcomes if o.get("tool") == tool and o.get("status") == "succeeded"]


def _first(outcomes: list[Mapping[str, Any]], tool: str) -> Mapping[str, Any] | None:
    return next((o for o in outcomes if o.get("tool") == tool), None)


def _args(outcome: Mapping[str, Any]) -> Mapping[str, Any]:
    args = outcome.get("args")
    return args if isinstance(args, Mapping) else {}


def _number(value: Any) -> str:
    """A number as plain digits (92800), never reformatted."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _inr(value: Any, *, grouped: bool = False) -> str:
    """An INR amount in plain digits; a headline total also gets digit grouping alongside."""
    plain = f"INR {_number(value)}"
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    if grouped and numeric and abs(value) >= 1000:
        digits = f"{value:,.0f}" if float(value).is_integer() else f"{value:,}"
        return f"{plain} ({digits})"
    return plain


def _value_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return _number(value)
    return json.dumps(value, ensure_ascii=False, default=str)


def _reference(result: Any) -> str:
    if isinstance(result, Mapping) and result.get("reference"):
        return str(result["reference"])
    return _value_text(result)


def _joined(items: list[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def _problem_sentence(outcome: Mapping[str, Any]) -> str:
    label = f"Step {outcome.get('id')} ({outcome.get('tool')})"
    status = outcome.get("status")
    text = _value_text(outcome.get("error") or outcome.get("result") or "").strip()
    if status == "blocked":
        match = _BLOCKED_REASON.search(text)
        reason = (match.group(1) if match else text).strip().rstrip(".")
        return f"{label} was declined by a reviewer, so it did not run. Reason: {reason}."
    if status == "failed":
        return f"{label} failed: {text.rstrip('.')}."
    if status == "skipped":
        detail = text.removeprefix("skipped:").strip().rstrip(".")
        return f"{label} was skipped: {detail}." if detail else f"{label} was skipped."
    return f"{label} did not finish (status {status})."


def _price_answer(outcomes: list[Mapping[str, Any]]) -> str:
    prices = [
        (str(_args(o).get("item", "?")), o.get("result")) for o in _succeeded(outcomes, "price")
    ]
    each = _joined([f"{item} costs INR {_number(value)}" for item, value in prices])
    totals = _succeeded(outcomes, "calculator")
    if totals and len(prices) > 1:
        items = _joined([item for item, _ in prices])
        return (
            f"The total price of {items} is {_inr(totals[0].get('result'), grouped=True)}. {each}."
        )
    if totals:
        return f"The total price is {_inr(totals[0].get('result'), grouped=True)}."
    if len(prices) == 1:
        item, value = prices[0]
        return f"The price of {item} is {_inr(value)}."
    if prices:
        return f"The total could not be worked out. {each}."
    return ""


def _trip_answer(outcomes: list[Mapping[str, Any]]) -> str:
    sentences = []
    for outcome in _succeeded(outcomes, "flight_price"):
        args = _args(outcome)
        sentences.append(
            f"The flight from {args.get('origin')} to {args.get('destination')} on "
            f"{args.get('date')} costs {_inr(outcome.get('result'))}."
        )
    for outcome in _succeeded(outcomes, "hotel_price"):
        args = _args(outcome)
        sentences.append(
            f"The hotel in {args.get('city')} for {args.get('nights')} nights costs "
            f"{_inr(outcome.get('result'))}."
        )
    for outcome in _succeeded(outcomes, "calculator"):
        sentences.append(f"The trip totals {_inr(outcome.get('result'), grouped=True)}.")
    for tool, what in (("book_flight", "flight"), ("book_hotel", "hotel")):
        booked = _succeeded(outcomes, tool)
        for outcome in booked:
            reference = _reference(outcome.get("result"))
            earlier = _done_earlier(outcome).replace("issued", "booked")
            sentences.append(f"The {what} is booked (reference {reference}{earlier}).")
        booking = _first(outcomes, tool)
        if booking is not None and not booked:
            sentences.append(_not_done(booking, f"The {what} was not booked."))
    return " ".join(sentences)


def _refund_answer(outcomes: list[Mapping[str, Any]]) -> str:
    sentences = []
    for outcome in _succeeded(outcomes, "order_total"):
        sentences.append(
            f"Order {_args(outcome).get('order_id')} totals {_inr(outcome.get('result'))}."
        )
    refunds = _succeeded(outcomes, "issue_refund")
    for outcome in refunds:
        args = _args(outcome)
        sentences.append(
            f"Refunded {_inr(args.get('amount_inr'))} for order {args.get('order_id')} "
            f"(reference {_reference(outcome.get('result'))}{_done_earlier(outcome)})."
        )
    refund = _first(outcomes, "issue_refund")
    if refund is not None and not refunds:
        sentences.append(_not_done(refund, "The refund was not issued."))
    for outcome in _succeeded(outcomes, "send_email"):
        sentences.append(f"The customer was emailed at {_args(outcome).get('to')}.")
    return " ".join(sentences)


def _not_done(outcome: Mapping[str, Any], sentence: str) -> str:
    """The sentence, unless the call may have acted all the same (its outcome is unknown)."""
    if "outcome unknown" in str(outcome.get("error") or ""):
        return f"Whether step {outcome.get('id')} ({outcome.get('tool')}) acted is not known."
    return sentence


def _done_earlier(outcome: Mapping[str, Any]) -> str:
    """ "; issued in plan v1, not repeated" for an effect an earlier plan version made."""
    origin = str(outcome.get("reused_from") or "")
    if not origin.startswith("plan v"):
        return ""
    return f"; issued in {origin.rsplit(' step ', 1)[0]}, not repeated"


def _research_answer(outcomes: list[Mapping[str, Any]]) -> str:
    seen: set[str] = set()
    findings = []
    for outcome in _succeeded(outcomes, "search"):
        hits = outcome.get("result")
        for hit in hits if isinstance(hits, list) else []:
            if not isinstance(hit, Mapping):
                continue
            doc = str(hit.get("doc", ""))
            if doc in seen:
                continue
            seen.add(doc)
            cite = hit.get("cite") or f"[{doc}]"
            snippet = str(hit.get("snippet", "")).strip().rstrip(".")
            title = str(hit.get("title", "")).strip()
            findings.append(f"- {title}: {snippet} {cite}." if title else f"- {snippet} {cite}.")
    if findings:
        return "From the documents found:\n" + "\n".join(findings)
    if _succeeded(outcomes, "search"):
        return "The searches found no documents on this."
    return ""


def _listing_answer(outcomes: list[Mapping[str, Any]]) -> str:
    results = [
        f"step {o.get('id')} ({o.get('tool')}) returned {_value_text(o.get('result'))}"
        for o in outcomes
        if o.get("status") == "succeeded"
    ]
    if not results:
        return "No step succeeded, so the goal could not be answered."
    return "Results: " + "; ".join(results) + "."
