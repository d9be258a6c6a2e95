"""The demo plans, one builder per goal: the offline planner fills them from a goal's words,
the seeder (plans.demo.seeding) from random values. Whether a step is destructive is the
registry's to say, never written here."""

from __future__ import annotations

from typing import Any


def step(step_id: int, tool: str, args: dict[str, Any], depends_on: list[int]) -> dict[str, Any]:
    return {"id": step_id, "tool": tool, "args": args, "depends_on": depends_on}


def price_plan(items: list[str]) -> dict[str, Any]:
    """Each item's price, then their sum when there are several."""
    steps = [step(n, "price", {"item": item}, []) for n, item in enumerate(items, start=1)]
    if len(steps) > 1:
        expression = "+".join(f"{{{{{n}}}}}" for n in range(1, len(steps) + 1))
        steps.append(
            step(
                len(steps) + 1,
                "calculator",
                {"expression": expression},
                list(range(1, len(steps) + 1)),
            )
        )
    return {"steps": steps}


def trip_plan(*, origin: str, destination: str, day: str, nights: int, traveller: str) -> dict:
    """Flight and hotel prices, their total, then both bookings at the prices quoted."""
    return {
        "steps": [
            step(
                1, "flight_price", {"origin": origin, "destination": destination, "date": day}, []
            ),
            step(2, "hotel_price", {"city": destination, "nights": nights}, []),
            step(3, "calculator", {"expression": "{{1}}+{{2}}"}, [1, 2]),
            step(
                4,
                "book_flight",
                {
                    "origin": origin,
                    "destination": destination,
                    "date": day,
                    "passenger": traveller,
                    "price_inr": "{{1}}",
                },
                [1, 3],
            ),
            step(
                5,
                "book_hotel",
                {
                    "city": destination,
                    "check_in": day,
                    "nights": nights,
                    "guest": traveller,
                    "price_inr": "{{2}}",
                },
                [2, 3],
            ),
        ]
    }


def refund_plan(
    *, order_id: str, reason: str, customer: str, amount: int | None = None
) -> dict[str, Any]:
    """The order's total refunded (or `amount`, a reviewer's figure), then the customer told."""
    if amount is not None:
        return {
            "steps": [
                step(1, "order_total", {"order_id": order_id}, []),
                step(
                    2,
                    "issue_refund",
                    {"order_id": order_id, "amount_inr": amount, "reason": reason},
                    [1],
                ),
                step(
                    3,
                    "send_email",
                    {
                        "to": customer,
                        "subject": "Your refund",
                        "body": f"We refunded INR {amount} for order {order_id}. "
                        "Reference: {{2}}",
                    },
                    [2],
                ),
            ]
        }
    return {
        "steps": [
            step(1, "order_total", {"order_id": order_id}, []),
            step(
                2,
                "issue_refund",
                {"order_id": order_id, "amount_inr": "{{1}}", "reason": reason},
                [1],
            ),
            step(
                3,
                "send_email",
                {
                    "to": customer,
                    "subject": "Your refund",
                    "body": f"We refunded INR {{{{2.amount_inr}}}} for order {order_id}. "
                    "Reference: {{2.reference}}",
                },
                [1, 2],
            ),
        ]
    }


def confirmed_refund_plan(*, order_id: str, reason: str, customer: str) -> dict[str, Any]:
    """The author confirms the amount (an ask_human step) before anything is refunded."""
    question = f"Order {order_id} totals INR {{{{1}}}}. How many rupees should be refunded?"
    return {
        "steps": [
            step(1, "order_total", {"order_id": order_id}, []),
            step(2, "ask_human", {"question": question, "audience": "author"}, [1]),
            step(
                3,
                "issue_refund",
                {"order_id": order_id, "amount_inr": "{{2}}", "reason": reason},
                [2],
            ),
            step(
                4,
                "send_email",
                {
                    "to": customer,
                    "subject": "Your refund",
                    "body": f"We refunded INR {{{{2}}}} for order {order_id}. Reference: {{{{3}}}}",
                },
                [2, 3],
            ),
        ]
    }


def research_plan(queries: list[str]) -> dict[str, Any]:
    """A library search per query; the answer cites what they find."""
    return {"steps": [step(n, "search", {"query": q}, []) for n, q in enumerate(queries, 1)]}
