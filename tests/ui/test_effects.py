"""The decision bar's one-line effects: tools with the amounts and recipients they carry."""

import pytest

from plans.ui.effects import effect_line


@pytest.mark.parametrize(
    ("tool", "args", "line"),
    [
        (
            "issue_refund",
            {"order_id": "A-1001", "amount_inr": 2499, "reason": "damaged"},
            "issue_refund: INR 2,499 · order_id A-1001",
        ),
        (
            "send_email",
            {"to": "c@example.com", "subject": "Hi", "body": "..."},
            "send_email: to c@example.com",
        ),
        (
            "book_flight",
            {
                "origin": "Delhi",
                "destination": "Goa",
                "date": "2026-12-20",
                "passenger": "Asha Rao",
                "price_inr": 6120,
            },
            "book_flight: INR 6,120 · passenger Asha Rao · Delhi \u2192 Goa · on 2026-12-20",
        ),
        (
            "book_hotel",
            {
                "city": "Goa",
                "check_in": "2026-12-20",
                "nights": 2,
                "guest": "Asha",
                "price_inr": 9800,
            },
            "book_hotel: INR 9,800 · guest Asha · in Goa · on 2026-12-20",
        ),
        ("charge", {"account": "acme", "amount": 12.5}, "charge: amount 12.50 · account acme"),
        ("noop", {"flag": True}, "noop"),
        ("odd", ["not", "an", "object"], "odd"),
    ],
)
def test_an_effect_names_the_tool_and_the_amounts_and_recipients_first(tool, args, line):
    assert effect_line(tool, args) == line
