"""Destructive demo tools: validated, recorded in the ledger, done once per idempotency key."""

import smtplib
import threading
import time

import pytest
from django.core import mail
from django.db import OperationalError, connection, connections
from django.db.models import QuerySet

from plans.models import LedgerEntry
from plans.tools import ToolError, get_registry, ledger
from plans.tools import builtin as builtin_tools
from plans.tools.builtin import (
    book_flight,
    book_hotel,
    flight_price,
    hotel_price,
    issue_refund,
    send_email,
)

pytestmark = pytest.mark.django_db


def email(key: str = "key-email-1", **overrides) -> dict:
    args = {
        "to": "customer-a1001@example.com",
        "subject": "Your refund",
        "body": "We refunded INR 2499 for order A-1001.",
        **overrides,
    }
    return send_email(**args, idempotency_key=key)


def test_send_email_sends_once_per_key_and_repeats_return_the_first_result():
    first = email()
    again = email()
    assert first == again
    assert first["status"] == "sent"
    assert first["reference"].startswith("EM-")
    assert len(mail.outbox) == 1
    assert LedgerEntry.objects.count() == 1
    entry = LedgerEntry.objects.get()
    assert entry.kind == "email"
    assert entry.idempotency_key == "key-email-1"
    assert entry.reference == first["reference"]


def test_send_email_delivers_the_message_as_written():
    email()
    message = mail.outbox[0]
    assert message.to == ["customer-a1001@example.com"]
    assert message.subject == "Your refund"
    assert message.body == "We refunded INR 2499 for order A-1001."
    assert message.from_email == "agent@agentsite.localhost"


def test_a_new_key_sends_a_new_email():
    first = email("key-a")
    second = email("key-b")
    assert first["reference"] != second["reference"]
    assert len(mail.outbox) == 2
    assert LedgerEntry.objects.count() == 2


def test_the_executor_path_through_the_spec_is_idempotent_too():
    spec = get_registry()["send_email"]
    args = {"to": "a@example.com", "subject": "Hi", "body": "Hello"}
    first = spec.call(args, idempotency_key="spec-key")
    assert spec.call(args, idempotency_key="spec-key") == first
    assert len(mail.outbox) == 1


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"to": "not-an-address"}, "is not an email address"),
        ({"to": "a@b"}, "is not an email address"),
        ({"subject": "  "}, "subject must not be empty"),
        ({"subject": "Hi\nBcc: victim@example.com"}, "single line"),
        ({"body": ""}, "body must not be empty"),
        ({"subject": "x" * 201}, "subject is too long"),
    ],
)
def test_invalid_emails_are_tool_errors_with_no_side_effect(overrides, message):
    with pytest.raises(ToolError, match=message):
        email(**overrides)
    assert mail.outbox == []
    assert LedgerEntry.objects.count() == 0


def test_a_failed_delivery_records_nothing_so_a_retry_sends(monkeypatch):
    def refuse(*args, **kwargs):
        raise ConnectionError("mail server unreachable")

    monkeypatch.setattr(builtin_tools, "django_send_mail", refuse)
    with pytest.raises(ConnectionError):
        email()
    assert LedgerEntry.objects.count() == 0
    monkeypatch.undo()
    email()
    assert len(mail.outbox) == 1
    assert LedgerEntry.objects.count() == 1


def test_connection_errors_are_marked_retryable_for_send_email():
    assert ConnectionError in send_email.tool_spec.retryable


def test_reusing_a_key_with_different_arguments_is_refused_without_a_second_email():
    email("shared-key")
    with pytest.raises(ToolError, match="already used for a different email"):
        email("shared-key", body="Something else entirely.")
    assert len(mail.outbox) == 1
    assert LedgerEntry.objects.count() == 1


def test_reusing_an_email_key_for_a_refund_is_refused():
    email("kind-key")
    with pytest.raises(ToolError, match=r"already belongs to email EM-\w+, not to this refund"):
        issue_refund("A-1001", 100, "damaged item", idempotency_key="kind-key")
    assert LedgerEntry.objects.filter(kind="refund").count() == 0


def test_a_refund_is_issued_once_per_key():
    first = issue_refund("A-1001", 2499, "damaged item", idempotency_key="refund-1")
    again = issue_refund("a-1001", 2499, "damaged item", idempotency_key="refund-1")
    assert again == first
    assert first == {
        "status": "refunded",
        "reference": first["reference"],
        "order_id": "A-1001",
        "amount_inr": 2499,
    }
    assert first["reference"].startswith("RF-")
    entry = LedgerEntry.objects.get(kind="refund")
    assert entry.details == {
        "order_id": "A-1001",
        "amount_inr": 2499,
        "reason": "damaged item",
        "result": first,
    }


@pytest.mark.parametrize("amount", [0, -5])
def test_a_refund_amount_that_is_not_positive_is_a_tool_error(amount):
    with pytest.raises(ToolError, match="amount_inr must be a positive number"):
        issue_refund("A-1001", amount, "damaged item", idempotency_key="refund-bad")
    assert LedgerEntry.objects.count() == 0


def test_refunds_of_an_order_never_exceed_what_was_paid():
    with pytest.raises(ToolError, match="at most INR 2499"):
        issue_refund("A-1001", 2500, "damaged item", idempotency_key="too-much")
    issue_refund("A-1001", 2000, "damaged item", idempotency_key="part-1")
    with pytest.raises(ToolError, match="INR 2000 has been refunded already; at most INR 499"):
        issue_refund("A-1001", 500, "damaged item", idempotency_key="part-2")
    issue_refund("A-1001", 499, "damaged item", idempotency_key="part-3")
    assert LedgerEntry.objects.filter(kind="refund").count() == 2


def test_a_refund_for_an_unknown_order_is_a_tool_error():
    with pytest.raises(ToolError, match="unknown order 'Z-1'"):
        issue_refund("Z-1", 10, "damaged item", idempotency_key="refund-z")


def test_a_flight_is_booked_once_per_key_at_the_quoted_fare():
    fare = flight_price("Bengaluru", "Goa", "2026-12-19")
    first = book_flight("Bengaluru", "Goa", "2026-12-19", "Asha Rao", fare, idempotency_key="fl-1")
    again = book_flight("BLR", "goa", "2026-12-19", "Asha Rao", fare, idempotency_key="fl-1")
    assert again == first
    assert first["status"] == "booked"
    assert first["reference"].startswith("FL-")
    assert (first["origin"], first["destination"], first["price_inr"]) == ("Bengaluru", "Goa", fare)
    assert LedgerEntry.objects.filter(kind="flight").count() == 1


def test_a_flight_booked_at_a_price_other_than_the_quote_is_refused():
    fare = flight_price("Bengaluru", "Goa", "2026-12-19")
    with pytest.raises(ToolError, match=f"is INR {fare}, not INR {fare - 1}"):
        book_flight(
            "Bengaluru", "Goa", "2026-12-19", "Asha Rao", fare - 1, idempotency_key="fl-cheap"
        )
    assert LedgerEntry.objects.count() == 0


def test_a_flight_booking_with_a_bad_date_is_a_tool_error():
    with pytest.raises(ToolError, match="YYYY-MM-DD"):
        book_flight("Bengaluru", "Goa", "19/12/2026", "Asha Rao", 4000, idempotency_key="fl-d")


def test_a_hotel_is_booked_once_per_key_at_the_quoted_price():
    quote = hotel_price("Goa", 2)
    first = book_hotel("Goa", "2026-12-19", 2, "Asha Rao", quote, idempotency_key="ht-1")
    again = book_hotel("Goa", "2026-12-19", 2, "Asha Rao", quote, idempotency_key="ht-1")
    assert again == first
    assert first["reference"].startswith("HT-")
    assert first["price_inr"] == 10800
    assert LedgerEntry.objects.filter(kind="hotel").count() == 1


@pytest.mark.parametrize("nights", [0, 31])
def test_a_hotel_booking_outside_one_to_thirty_nights_is_a_tool_error(nights):
    with pytest.raises(ToolError, match="between 1 and 30"):
        book_hotel("Goa", "2026-12-19", nights, "Asha Rao", 5400, idempotency_key="ht-n")
    assert LedgerEntry.objects.count() == 0


def test_a_hotel_booking_at_the_wrong_price_is_refused():
    with pytest.raises(ToolError, match="cost INR 10800, not INR 9000"):
        book_hotel("Goa", "2026-12-19", 2, "Asha Rao", 9000, idempotency_key="ht-p")


def test_a_blank_guest_name_is_a_tool_error():
    with pytest.raises(ToolError, match="guest must not be empty"):
        book_hotel("Goa", "2026-12-19", 2, " ", 10800, idempotency_key="ht-g")


def test_an_over_long_idempotency_key_is_refused_before_any_side_effect():
    with pytest.raises(ValueError, match="1-64 characters"):
        email("k" * 65)
    assert mail.outbox == []


def on_a_thread(work):
    """A thread (not started) running work() on its own database connection, and the list
    its outcome (what work() returns or raises) goes into."""
    outcomes = []

    def run():
        try:
            outcomes.append(work())
        except Exception as error:
            outcomes.append(error)
        finally:
            connections.close_all()

    return threading.Thread(target=run), outcomes


def in_another_thread(work):
    """What work() returns or raises, run on a thread with its own database connection."""
    thread, outcomes = on_a_thread(work)
    thread.start()
    thread.join()
    return outcomes[0]


def write_a_booking():
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA busy_timeout = 200")  # fail fast rather than after 30 s
    LedgerEntry.objects.create(kind="flight", idempotency_key="other", details={})
    return "written"


@pytest.mark.django_db(transaction=True)
def test_no_transaction_is_open_while_an_email_is_delivered(monkeypatch):
    seen = {}

    def deliver(*args, **kwargs):
        seen["in a transaction"] = connection.in_atomic_block
        seen["claim visible elsewhere"] = in_another_thread(
            LedgerEntry.objects.filter(idempotency_key="key-email-1").exists
        )
        seen["another writer"] = in_another_thread(write_a_booking)

    monkeypatch.setattr(builtin_tools, "django_send_mail", deliver)
    email()

    assert seen == {
        "in a transaction": False,
        "claim visible elsewhere": True,
        "another writer": "written",
    }


@pytest.mark.django_db(transaction=True)
def test_a_repeat_while_the_first_email_is_being_delivered_waits_for_its_outcome(monkeypatch):
    # As the executor re-asks after a time-out: the answer is what the first delivery did.
    repeat, outcomes = on_a_thread(email)
    sent = []

    def deliver_slowly(*args, **kwargs):
        sent.append(args)
        repeat.start()
        time.sleep(3 * ledger.CLAIM_POLL_S)  # the repeat finds the claim unfinished

    monkeypatch.setattr(builtin_tools, "django_send_mail", deliver_slowly)
    first = email()
    repeat.join(timeout=10)

    assert outcomes == [first]
    assert len(sent) == 1


@pytest.mark.django_db(transaction=True)
def test_a_repeat_delivers_when_the_first_delivery_it_waited_for_failed(monkeypatch):
    repeat, outcomes = on_a_thread(email)
    sent = []

    def fail_slowly(*args, **kwargs):
        monkeypatch.setattr(builtin_tools, "django_send_mail", lambda *a, **k: sent.append(a))
        repeat.start()
        time.sleep(3 * ledger.CLAIM_POLL_S)
        raise smtplib.SMTPServerDisconnected("connection dropped")

    monkeypatch.setattr(builtin_tools, "django_send_mail", fail_slowly)
    with pytest.raises(smtplib.SMTPServerDisconnected):
        email()
    repeat.join(timeout=10)

    [outcome] = outcomes
    assert outcome["status"] == "sent" and len(sent) == 1
    assert LedgerEntry.objects.get(idempotency_key="key-email-1").details["result"] == outcome


@pytest.mark.django_db(transaction=True)
def test_a_repeat_gives_up_waiting_for_a_delivery_that_never_ends(monkeypatch):
    monkeypatch.setattr(ledger, "CLAIM_WAIT_S", 0.3)
    refusals = []

    def hang_while_repeated(*args, **kwargs):
        try:
            email()
        except ToolError as error:
            refusals.append(str(error))

    monkeypatch.setattr(builtin_tools, "django_send_mail", hang_while_repeated)
    first = email()

    assert refusals == [
        f"an earlier call with this key (email {first['reference']}) has not finished after "
        "0.3 s more; it may yet go out, so it is not repeated"
    ]


def test_an_email_sent_but_not_marked_done_is_reported_sent_and_never_repeated(monkeypatch, caplog):
    def locked(queryset, **fields):
        raise OperationalError("database is locked")

    monkeypatch.setattr(QuerySet, "update", locked)
    first = email()
    monkeypatch.undo()

    assert first["status"] == "sent"
    assert f"email {first['reference']} was delivered but not marked done" in caplog.text
    monkeypatch.setattr(ledger, "CLAIM_WAIT_S", 0.2)
    with pytest.raises(ToolError, match=r"has not finished after 0\.2 s more"):
        email()
    assert len(mail.outbox) == 1
