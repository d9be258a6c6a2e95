"""The demo shop's previews: read from its ledger and data, never acting."""

import pytest

from plans.models import LedgerEntry
from plans.tools import get_registry
from plans.tools.builtin import _rupees

pytestmark = pytest.mark.django_db


def preview(tool, **args):
    return get_registry()[tool].take_preview(args)


def refund(key, amount):
    get_registry()["issue_refund"].call(
        {"order_id": "A-1002", "amount_inr": amount, "reason": "damaged"}, idempotency_key=key
    )


def test_rupees_are_grouped_the_indian_way():
    assert [_rupees(n) for n in (0, 999, 2499, 92800, 100000, 12345678)] == [
        "₹0",
        "₹999",
        "₹2,499",
        "₹92,800",
        "₹1,00,000",
        "₹1,23,45,678",
    ]


def test_a_refund_preview_shows_the_total_what_was_refunded_and_what_is_left():
    shown = preview("issue_refund", order_id="a-1002", amount_inr=12900, reason="damaged")

    assert shown["summary"] == (
        "Refund ₹12,900 of ₹92,800 to Mastercard …5100; already refunded ₹0"
    )
    assert dict(shown["facts"]) == {
        "Order total": "₹92,800",
        "Already refunded": "₹0",
        "Left after this refund": "₹79,900",
        "Refunded to": "Mastercard …5100",
        "Earlier refunds": "none",
    }
    assert shown["warnings"] == []
    assert not LedgerEntry.objects.exists()  # a preview does not act


def test_a_refund_elsewhere_changes_the_target_version_and_the_facts():
    before = preview("issue_refund", order_id="A-1002", amount_inr=80000, reason="x")
    refund("k-1", 12900)
    after = preview("issue_refund", order_id="A-1002", amount_inr=80000, reason="x")

    assert before["target_version"] != after["target_version"]
    facts = dict(after["facts"])
    assert facts["Already refunded"] == "₹12,900"
    assert facts["Earlier refunds"].startswith("₹12,900 (RF-")
    assert after["warnings"][0] == "only ₹79,900 is left to refund: this refund will be refused"
    # The same state reads as the same version.
    assert (
        preview("issue_refund", order_id="A-1002", amount_inr=1, reason="y")["target_version"]
        == after["target_version"]
    )


def test_a_whole_order_refund_says_so():
    shown = preview("issue_refund", order_id="A-1001", amount_inr=2499, reason="damaged")
    assert shown["warnings"] == ["this refunds the whole order"]


def test_an_email_preview_is_the_message_as_it_will_be_sent(settings):
    settings.DEFAULT_FROM_EMAIL = "shop@example.com"
    shown = preview("send_email", to=" c@example.com ", subject="Your refund", body="Done.\n")

    message = dict(shown["facts"])["Message as sent"]
    assert message == "From: shop@example.com\nTo: c@example.com\nSubject: Your refund\n\nDone."
    assert shown["summary"] == "Send 'Your refund' to c@example.com (5 characters)"


def test_a_flight_preview_shows_the_fare_now_and_whether_the_quote_holds():
    fare = get_registry()["flight_price"].call(
        {"origin": "BLR", "destination": "Goa", "date": "2026-12-20"}, idempotency_key=""
    )
    args = {"origin": "BLR", "destination": "Goa", "date": "2026-12-20", "passenger": "A. Rao"}
    held = preview("book_flight", **args, price_inr=fare)
    moved = preview("book_flight", **args, price_inr=fare - 100)

    assert dict(held["facts"])["Quote holds"] == "yes" and held["warnings"] == []
    assert dict(moved["facts"])["Quote holds"] == "no"
    assert "the booking will be refused" in moved["warnings"][0]


def test_a_hotel_preview_shows_the_price_and_earlier_identical_bookings():
    args = {"city": "Goa", "check_in": "2026-12-20", "nights": 2, "guest": "A. Rao"}
    price = get_registry()["hotel_price"].call({"city": "Goa", "nights": 2}, idempotency_key="")
    before = preview("book_hotel", **args, price_inr=price)
    get_registry()["book_hotel"].call({**args, "price_inr": price}, idempotency_key="h-1")
    after = preview("book_hotel", **args, price_inr=price)

    assert dict(before["facts"])["Same bookings so far"] == "0"
    assert dict(after["facts"])["Same bookings so far"] == "1"
    assert after["warnings"][0].startswith("already booked: HT-")
    assert before["target_version"] != after["target_version"]
