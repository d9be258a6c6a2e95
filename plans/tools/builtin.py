"""Built-in demo tools: an offline Indian electronics and travel shop, plus a small library.

Everything is deterministic and local: prices, orders, rates, fares and documents come from
``plans/tools/data``; side effects (emails, refunds, bookings) are recorded in the ledger.
"""

from __future__ import annotations

import datetime
import difflib
import functools
import hashlib
import json
import logging
import math
import re
import smtplib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from pathlib import Path
from typing import Annotated, Any, Literal, TypedDict, cast

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.mail import send_mail as django_send_mail
from django.core.validators import validate_email
from django.db import OperationalError

from plans.engine import Preview
from plans.models import LedgerEntry, ToolCall
from plans.tools.calculator import evaluate
from plans.tools.errors import ToolError
from plans.tools.ledger import once, reference_for
from plans.tools.registry import tool
from plans.tools.schema import Between

logger = logging.getLogger(__name__)

DATA_DIR = Path(__file__).resolve().parent / "data"

Currency = Literal["INR", "USD", "EUR", "GBP"]

# Fixed demo rates in INR per unit, not market data: conversions must be reproducible.
INR_PER_UNIT: dict[str, Decimal] = {
    "INR": Decimal(1),
    "USD": Decimal("88.00"),
    "EUR": Decimal("102.00"),
    "GBP": Decimal("117.00"),
}

# Results are floats, exact to the cent only below about 9e13, and the steepest rate is 117:1.
MAX_CONVERTIBLE_AMOUNT = 10**11
MAX_NIGHTS = 30
MAX_SEARCH_HITS = 10
# In the schemas too, so a plan asking for a value outside them is invalid before it runs.
Nights = Annotated[int, Between(1, MAX_NIGHTS)]
SearchHits = Annotated[int, Between(1, MAX_SEARCH_HITS)]
Rupees = Annotated[int, Between(low=1)]
SNIPPET_WORDS = 30
TITLE_BOOST = 3

# A database hiccup (SQLite busy, a dropped PostgreSQL connection) rolls the ledger write back,
# and the idempotency key makes the retry safe.
_LEDGER_RETRYABLE: tuple[type[BaseException], ...] = (OperationalError,)
_EMAIL_RETRYABLE = (
    *_LEDGER_RETRYABLE,
    ConnectionError,
    TimeoutError,
    smtplib.SMTPConnectError,
    smtplib.SMTPServerDisconnected,
)


# What the side-effect tools return: the planner may name their fields, as in "{{2.reference}}",
# and validation checks such a placeholder against these.
class SearchHit(TypedDict):
    doc: str
    title: str
    snippet: str
    cite: str


class EmailSent(TypedDict):
    status: str
    reference: str
    to: str


class Refund(TypedDict):
    status: str
    reference: str
    order_id: str
    amount_inr: int


class FlightBooking(TypedDict):
    status: str
    reference: str
    origin: str
    destination: str
    date: str
    passenger: str
    price_inr: int


class HotelBooking(TypedDict):
    status: str
    reference: str
    city: str
    check_in: str
    nights: int
    guest: str
    price_inr: int


# --- data ----------------------------------------------------------------------------------


@functools.cache
def _load(name: str) -> Any:
    return json.loads((DATA_DIR / name).read_text(encoding="utf-8"))


def _key(text: str) -> str:
    """Lookup key: case and whitespace do not matter ("iphone16" finds "iPhone 16")."""
    return "".join(text.lower().split())


def _index[T](entries: list[tuple[list[str], T]]) -> dict[str, T]:
    index: dict[str, T] = {}
    for names, value in entries:
        for name in names:
            if _key(name) in index:
                raise ValueError(f"demo data: {name!r} is listed twice")
            index[_key(name)] = value
    return index


@functools.cache
def _catalog() -> dict[str, tuple[str, int]]:
    items = _load("catalog.json")["items"]
    return _index([([item["name"]], (item["name"], item["price_inr"])) for item in items])


@functools.cache
def _orders() -> dict[str, dict[str, Any]]:
    return _index([([order["id"]], order) for order in _load("orders.json")["orders"]])


@dataclass(frozen=True)
class City:
    name: str
    code: str
    lat: float
    lon: float
    hotel_nightly_inr: int


@functools.cache
def _cities() -> dict[str, City]:
    entries = []
    for raw in _load("travel.json")["cities"]:
        city = City(raw["name"], raw["code"], raw["lat"], raw["lon"], raw["hotel_nightly_inr"])
        entries.append(([city.name, city.code, *raw["aliases"]], city))
    return _index(entries)


def _unknown(kind: str, given: str, index: dict[str, Any], display: Callable[[Any], str]) -> str:
    names = sorted({display(value) for value in index.values()}, key=str.lower)
    close = difflib.get_close_matches(_key(given), list(index), n=3, cutoff=0.5)
    if close:
        suggestions = list(dict.fromkeys(display(index[key]) for key in close))
        return f"unknown {kind} {given!r}; did you mean: {', '.join(suggestions)}?"
    return f"unknown {kind} {given!r}; known {kind}s: {', '.join(names)}"


def _item(name: str) -> tuple[str, int]:
    found = _catalog().get(_key(name))
    if found is None:
        raise ToolError(_unknown("item", name, _catalog(), lambda entry: entry[0]))
    return found


def _order(order_id: str) -> dict[str, Any]:
    found = _orders().get(_key(order_id))
    if found is None:
        raise ToolError(_unknown("order", order_id, _orders(), lambda order: order["id"]))
    return found


def _city(name: str) -> City:
    found = _cities().get(_key(name))
    if found is None:
        raise ToolError(_unknown("city", name, _cities(), lambda city: city.name))
    return found


def _date(value: str, what: str) -> str:
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", value.strip()):
        try:
            return datetime.date.fromisoformat(value.strip()).isoformat()
        except ValueError:
            pass
    raise ToolError(f"{what} must be a date written YYYY-MM-DD, got {value!r}")


def _text(value: str, what: str, *, max_length: int) -> str:
    text = value.strip()
    if not text:
        raise ToolError(f"{what} must not be empty")
    if len(text) > max_length:
        raise ToolError(f"{what} is too long ({len(text)} characters; the limit is {max_length})")
    return text


def _positive(value: int, what: str) -> int:
    if value <= 0:
        raise ToolError(f"{what} must be a positive number of rupees, got {value}")
    return value


def _nights(value: int) -> int:
    if not 1 <= value <= MAX_NIGHTS:
        raise ToolError(f"nights must be between 1 and {MAX_NIGHTS}, got {value}")
    return value


def _fare(origin: City, destination: City, day: str) -> int:
    if origin == destination:
        raise ToolError(f"origin and destination are both {origin.name}")
    # Rounded great-circle distance, so the fare never depends on libm's last digit.
    lat1, lon1, lat2, lon2 = map(
        math.radians, (origin.lat, origin.lon, destination.lat, destination.lon)
    )
    a = (
        math.sin((lat2 - lat1) / 2) ** 2
        + math.cos(lat1) * math.cos(lat2) * math.sin((lon2 - lon1) / 2) ** 2
    )
    km = round(2 * 6371 * math.asin(math.sqrt(a)))
    # The day's demand: a stable pseudo-random factor in [0.8, 1.4) per route and date.
    digest = hashlib.sha256(f"{origin.code}>{destination.code}@{day}".encode()).digest()
    spread = Decimal(int.from_bytes(digest[:4], "big")) / Decimal(2**32)
    base = Decimal(1500) + Decimal("3.5") * km
    return int((base * (Decimal("0.8") + Decimal("0.6") * spread)).to_integral_value(ROUND_HALF_UP))


# --- lookups ---------------------------------------------------------------------------------


@tool(pure=True)
def price(item: str) -> int:
    """Price in INR (whole rupees) of one item from the shop's catalog of phones, audio,
    laptops, tablets, wearables and travel gear.

    Args:
        item: the product name, e.g. "iPhone 16"; case and spacing do not matter
    """
    return _item(item)[1]


@tool(pure=True)
def calculator(expression: str) -> int | float:
    """Evaluate an arithmetic expression with + - * / // % ** and parentheses; whole-number
    results come back as integers.

    Args:
        expression: the arithmetic, e.g. "79900 + 12900" or "(1200 * 3) / 4"
    """
    return evaluate(expression)


@tool(pure=True)
def convert_currency(amount: float, from_currency: Currency, to_currency: Currency) -> float:
    """Convert an amount between INR, USD, EUR and GBP at the shop's fixed rates, rounded to
    2 decimal places.

    Args:
        amount: the amount in from_currency
        from_currency: the currency of amount
        to_currency: the currency wanted
    """
    for code in (from_currency, to_currency):
        if code not in INR_PER_UNIT:
            raise ToolError(f"unknown currency {code!r}; use one of {', '.join(INR_PER_UNIT)}")
    try:
        value = Decimal(str(amount))
    except InvalidOperation:
        raise ToolError(f"amount must be a number, got {amount!r}") from None
    if not value.is_finite():
        raise ToolError(f"amount must be a finite number, got {amount!r}")
    if abs(value) > MAX_CONVERTIBLE_AMOUNT:
        raise ToolError(
            f"amount {amount!r} is too large to convert; the limit is "
            f"{MAX_CONVERTIBLE_AMOUNT:,} either side of zero"
        )
    converted = value * INR_PER_UNIT[from_currency] / INR_PER_UNIT[to_currency]
    rounded = converted.quantize(Decimal("0.01"), ROUND_HALF_UP)
    # A tiny negative amount rounds to -0.00, which would come back as -0.0.
    return 0.0 if rounded.is_zero() else float(rounded)


@tool
def order_total(order_id: str) -> int:
    """Total paid in INR for a demo shop order.

    Args:
        order_id: the order id, e.g. "A-1001"
    """
    return _order(order_id)["total_inr"]


# A fare search is a paid API in the shape this demo stands for: its call has a price.
@tool(cost_usd="0.002")
def flight_price(origin: str, destination: str, date: str) -> int:
    """Economy fare in INR for one passenger on a domestic flight between two Indian cities
    on a given day.

    Args:
        origin: the departure city or airport code, e.g. "Bengaluru" or "BLR"
        destination: the arrival city or airport code, e.g. "Goa"
        date: the departure date, YYYY-MM-DD
    """
    return _fare(_city(origin), _city(destination), _date(date, "date"))


@tool
def hotel_price(city: str, nights: Nights) -> int:
    """Total price in INR of a standard hotel room in an Indian city for a number of nights.

    Args:
        city: the city, e.g. "Goa"
        nights: how many nights, 1 to 30
    """
    return _city(city).hotel_nightly_inr * _nights(nights)


# --- search ----------------------------------------------------------------------------------

_WORD = re.compile(r"[a-z0-9]+", re.IGNORECASE)
_STOPWORDS = frozenset(
    (  # noqa: SIM905 - a word list reads better as text
        "a an and are as at be by can do does for from has have how i if in is it its of on or "
        "so than that the their then there these this to was what when where which who why will "
        "with you your"
    ).split()
)


def _term(word: str) -> str:
    # Just enough folding that "agents" finds "agent" and "retries" finds "retry".
    word = word.lower()
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def _terms(text: str) -> list[str]:
    return [_term(w) for w in _WORD.findall(text) if w.lower() not in _STOPWORDS]


@dataclass(frozen=True)
class _Doc:
    id: str
    title: str
    text: str
    words: tuple[tuple[str, int, int], ...]  # (term, start, end) for every word of the text
    body_tf: Counter[str]
    title_tf: Counter[str]


@functools.cache
def _library() -> tuple[_Doc, ...]:
    docs = []
    for raw in _load("docs.json")["documents"]:
        words = tuple((_term(m.group()), m.start(), m.end()) for m in _WORD.finditer(raw["text"]))
        docs.append(
            _Doc(
                id=raw["id"],
                title=raw["title"],
                text=raw["text"],
                words=words,
                body_tf=Counter(_terms(raw["text"])),
                title_tf=Counter(_terms(raw["title"])),
            )
        )
    return tuple(docs)


def _snippet(doc: _Doc, query: set[str]) -> str:
    hits = [i for i, (term, _, _) in enumerate(doc.words) if term in query] or [0]
    # The window of SNIPPET_WORDS words holding the most query words, opened a little early.
    best = max(hits, key=lambda i: (sum(1 for j in hits if i <= j < i + SNIPPET_WORDS), -i))
    first = max(0, min(best - 3, len(doc.words) - SNIPPET_WORDS))
    last = min(len(doc.words), first + SNIPPET_WORDS) - 1
    start, end = doc.words[first][1], doc.words[last][2]
    if end < len(doc.text) and doc.text[end] in ".,;:!?)":
        end += 1
    prefix = "…" if start > 0 else ""
    suffix = "…" if end < len(doc.text) else ""
    return f"{prefix}{doc.text[start:end]}{suffix}"


@tool(pure=True)
def search(query: str, limit: SearchHits = 3) -> list[SearchHit]:
    """Search the shop's library (agent design notes and shop policies) and return cited
    snippets; cite a hit in an answer by its "cite" text, e.g. [refund-policy].

    Args:
        query: words to look for
        limit: how many hits at most, 1 to 10
    """
    if not query.strip():
        raise ToolError("the search query is empty")
    if not 1 <= limit <= MAX_SEARCH_HITS:
        raise ToolError(f"limit must be between 1 and {MAX_SEARCH_HITS}, got {limit}")
    terms = set(_terms(query))
    if not terms:
        raise ToolError(f"the search query {query!r} has only common words; add a subject")
    scored = []
    for order, doc in enumerate(_library()):
        score = sum(doc.body_tf[t] + TITLE_BOOST * doc.title_tf[t] for t in terms)
        if score:
            scored.append((-score, order, doc))
    return [
        {"doc": doc.id, "title": doc.title, "snippet": _snippet(doc, terms), "cite": f"[{doc.id}]"}
        for _, _, doc in sorted(scored)[:limit]
    ]


# --- previews: what a side effect would do, read from the ledger, never acting -------------


def _rupees(amount: int) -> str:
    """₹ with Indian digit grouping: ₹2,499, ₹92,800, ₹1,00,000."""
    sign, digits = ("-", str(-amount)) if amount < 0 else ("", str(amount))
    head, tail = digits[:-3], digits[-3:]
    groups: list[str] = []
    while len(head) > 2:
        head, group = head[:-2], head[-2:]
        groups.insert(0, group)
    grouped = ",".join([g for g in [head, *groups] if g] + [tail])
    return f"{sign}₹{grouped}"


def _ledger_version(entries: list[LedgerEntry]) -> str:
    """A target version for the ledger entries an effect depends on: changes with any of them."""
    digest = hashlib.sha256()
    for entry in entries:
        digest.update(f"{entry.pk}:{entry.reference}:{'result' in entry.details};".encode())
    return f"{len(entries)}:{digest.hexdigest()[:16]}"


def _by_run(entries: list[LedgerEntry]) -> dict[str, int]:
    """Which run made each ledger entry (by idempotency key), where one did."""
    keys = [entry.idempotency_key for entry in entries]
    calls = ToolCall.objects.filter(idempotency_key__in=keys).values_list("idempotency_key", "run")
    return dict(calls) if keys else {}


def _made_by(entry: LedgerEntry, runs: dict[str, int]) -> str:
    run = runs.get(entry.idempotency_key)
    return f"{entry.reference}, run #{run}" if run else entry.reference


def _earlier(kind: str, key: str, **details: Any) -> list[LedgerEntry]:
    """Effects of this kind on the same target, but for this very call's own (by its key)."""
    lookups = {f"details__{name}": value for name, value in details.items()}
    entries = LedgerEntry.objects.filter(kind=kind, **lookups).exclude(idempotency_key=key)
    return list(entries.order_by("pk"))


def _refund_preview(order_id: str, amount_inr: int, reason: str, idempotency_key: str) -> Preview:
    order = _order(order_id)
    earlier = _earlier("refund", idempotency_key, order_id=order["id"])
    runs = _by_run(earlier)
    refunded = sum(int(entry.details["amount_inr"]) for entry in earlier)
    total = int(order["total_inr"])
    left_after = total - refunded - amount_inr
    paid_with = order.get("paid_with", "the original payment method")
    history = "; ".join(
        f"{_rupees(int(e.details['amount_inr']))} ({_made_by(e, runs)})" for e in earlier
    )
    warnings = []
    if left_after < 0:
        warnings.append(
            f"only {_rupees(total - refunded)} is left to refund: this refund will be refused"
        )
    elif left_after == 0 and refunded == 0:
        warnings.append("this refunds the whole order")
    elif left_after == 0:
        warnings.append("this refunds everything that is left of the order")
    if refunded:
        warnings.append(f"{_rupees(refunded)} of this order was refunded already")
    return Preview(
        summary=(
            f"Refund {_rupees(amount_inr)} of {_rupees(total)} to {paid_with}; "
            f"already refunded {_rupees(refunded)}"
        ),
        facts=[
            ("Order total", _rupees(total)),
            ("Already refunded", _rupees(refunded)),
            ("Left after this refund", _rupees(max(left_after, 0))),
            ("Refunded to", paid_with),
            ("Earlier refunds", history or "none"),
        ],
        warnings=warnings,
        target_version=f"refunds {_ledger_version(earlier)}",
    )


def _email_preview(to: str, subject: str, body: str, idempotency_key: str) -> Preview:
    to = to.strip()
    subject, body = subject.strip(), body.strip()
    sender = settings.DEFAULT_FROM_EMAIL
    sent = _earlier("email", idempotency_key, to=to)
    runs = _by_run(sent)
    warnings = []
    if sent:
        last = sent[-1]
        warnings.append(
            f"{to} was emailed {len(sent)} time(s) already (last: {_made_by(last, runs)}, "
            f"subject {last.details.get('subject', '')!r})"
        )
    message = f"From: {sender}\nTo: {to}\nSubject: {subject}\n\n{body}"
    return Preview(
        summary=f"Send {subject!r} to {to} ({len(body):,} characters)",
        facts=[("Message as sent", message), ("Emails to this address so far", str(len(sent)))],
        warnings=warnings,
        # The message is the target: earlier e-mails are worth a warning, not a new decision
        # (two identical e-mails may be meant).
        target_version="message " + hashlib.sha256(message.encode()).hexdigest()[:16],
    )


def _booking_preview(
    kind: str, quote: int, price_inr: int, what: str, args: dict[str, Any], key: str
) -> Preview:
    same = _earlier(kind, key, **args)
    runs = _by_run(same)
    holds = quote == price_inr
    warnings = []
    if not holds:
        warnings.append(
            f"the price is {_rupees(quote)} now, not the quoted {_rupees(price_inr)}: the "
            "booking will be refused"
        )
    if same:
        warnings.append("already booked: " + "; ".join(_made_by(entry, runs) for entry in same))
    return Preview(
        summary=f"Book {what} at {_rupees(quote)}" + ("" if holds else " (quote out of date)"),
        facts=[
            ("Price now", _rupees(quote)),
            ("Quoted", _rupees(price_inr)),
            ("Quote holds", holds),
            ("Same bookings so far", str(len(same))),
        ],
        warnings=warnings,
        target_version=f"price {quote}; bookings {_ledger_version(same)}",
    )


def _flight_preview(
    origin: str, destination: str, date: str, passenger: str, price_inr: int, idempotency_key: str
) -> Preview:
    departure, arrival = _city(origin), _city(destination)
    day = _date(date, "date")
    fare = _fare(departure, arrival, day)
    route = {"origin": departure.name, "destination": arrival.name, "date": day}
    what = f"{departure.name} → {arrival.name} on {day} for {passenger.strip()}"
    route["passenger"] = passenger.strip()
    return _booking_preview("flight", fare, price_inr, what, route, idempotency_key)


def _hotel_preview(
    city: str, check_in: str, nights: int, guest: str, price_inr: int, idempotency_key: str
) -> Preview:
    place = _city(city)
    day = _date(check_in, "check_in")
    quote = place.hotel_nightly_inr * _nights(nights)
    what = f"{nights} night(s) in {place.name} from {day} for {guest.strip()}"
    stay = {"city": place.name, "check_in": day, "nights": nights, "guest": guest.strip()}
    return _booking_preview("hotel", quote, price_inr, what, stay, idempotency_key)


# --- side effects, once per idempotency key (plans.tools.ledger) ---------------------------


@tool(destructive=True, timeout_s=30, retryable=_EMAIL_RETRYABLE, preview=_email_preview)
def send_email(to: str, subject: str, body: str, idempotency_key: str) -> EmailSent:
    """Send a plain-text email from the shop (once per idempotency key).

    Args:
        to: the recipient's email address
        subject: a one-line subject
        body: the message text
    """
    to = to.strip()
    try:
        validate_email(to)
    except ValidationError:
        raise ToolError(f"{to!r} is not an email address") from None
    subject = _text(subject, "subject", max_length=200)
    if "\n" in subject or "\r" in subject:
        raise ToolError("subject must be a single line")
    body = _text(body, "body", max_length=20_000)
    reference = reference_for("EM", idempotency_key)
    result = {"status": "sent", "reference": reference, "to": to}

    def deliver() -> None:
        django_send_mail(subject, body, None, [to], fail_silently=False)

    args = {"to": to, "subject": subject, "body": body}
    return cast(EmailSent, once("email", idempotency_key, args, result, deliver=deliver))


@tool(destructive=True, timeout_s=30, retryable=_LEDGER_RETRYABLE, preview=_refund_preview)
def issue_refund(order_id: str, amount_inr: Rupees, reason: str, idempotency_key: str) -> Refund:
    """Refund part or all of a demo order to the customer's original payment method (once per
    idempotency key); refunds of an order never exceed what was paid for it.

    Args:
        order_id: the order id, e.g. "A-1001"
        amount_inr: the amount to refund in whole rupees
        reason: why, in a few words
    """
    order = _order(order_id)
    amount_inr = _positive(amount_inr, "amount_inr")
    reason = _text(reason, "reason", max_length=500)
    reference = reference_for("RF", idempotency_key)
    result = {
        "status": "refunded",
        "reference": reference,
        "order_id": order["id"],
        "amount_inr": amount_inr,
    }

    def check_total(entry: LedgerEntry) -> None:
        # Runs inside the ledger transaction, after this refund's entry was added.
        earlier = LedgerEntry.objects.filter(kind="refund", details__order_id=order["id"])
        refunded = sum(e.details["amount_inr"] for e in earlier.exclude(pk=entry.pk))
        if refunded + amount_inr > order["total_inr"]:
            left = order["total_inr"] - refunded
            raise ToolError(
                f"order {order['id']} was paid INR {order['total_inr']} and INR {refunded} has "
                f"been refunded already; at most INR {left} can still be refunded"
            )

    args = {"order_id": order["id"], "amount_inr": amount_inr, "reason": reason}
    return cast(Refund, once("refund", idempotency_key, args, result, check=check_total))


@tool(destructive=True, timeout_s=30, retryable=_LEDGER_RETRYABLE, preview=_flight_preview)
def book_flight(
    origin: str,
    destination: str,
    date: str,
    passenger: str,
    price_inr: Rupees,
    idempotency_key: str,
) -> FlightBooking:
    """Book an economy seat at the fare quoted by flight_price (once per idempotency key).

    Args:
        origin: the departure city or airport code
        destination: the arrival city or airport code
        date: the departure date, YYYY-MM-DD
        passenger: the traveller's full name
        price_inr: the fare quoted by flight_price for this route and date
    """
    departure, arrival = _city(origin), _city(destination)
    day = _date(date, "date")
    passenger = _text(passenger, "passenger", max_length=100)
    price_inr = _positive(price_inr, "price_inr")
    fare = _fare(departure, arrival, day)
    if price_inr != fare:
        raise ToolError(
            f"the fare from {departure.name} to {arrival.name} on {day} is INR {fare}, not "
            f"INR {price_inr}; quote it with flight_price before booking"
        )
    args = {
        "origin": departure.name,
        "destination": arrival.name,
        "date": day,
        "passenger": passenger,
        "price_inr": price_inr,
    }
    result = {"status": "booked", "reference": reference_for("FL", idempotency_key), **args}
    return cast(FlightBooking, once("flight", idempotency_key, args, result))


@tool(destructive=True, timeout_s=30, retryable=_LEDGER_RETRYABLE, preview=_hotel_preview)
def book_hotel(
    city: str, check_in: str, nights: Nights, guest: str, price_inr: Rupees, idempotency_key: str
) -> HotelBooking:
    """Book a standard hotel room at the price quoted by hotel_price (once per idempotency key).

    Args:
        city: the city
        check_in: the arrival date, YYYY-MM-DD
        nights: how many nights, 1 to 30
        guest: the guest's full name
        price_inr: the total quoted by hotel_price for this city and number of nights
    """
    place = _city(city)
    day = _date(check_in, "check_in")
    nights = _nights(nights)
    guest = _text(guest, "guest", max_length=100)
    price_inr = _positive(price_inr, "price_inr")
    quote = place.hotel_nightly_inr * nights
    if price_inr != quote:
        raise ToolError(
            f"{nights} night(s) in {place.name} cost INR {quote}, not INR {price_inr}; quote "
            "them with hotel_price before booking"
        )
    args = {
        "city": place.name,
        "check_in": day,
        "nights": nights,
        "guest": guest,
        "price_inr": price_inr,
    }
    result = {"status": "booked", "reference": reference_for("HT", idempotency_key), **args}
    return cast(HotelBooking, once("hotel", idempotency_key, args, result))
