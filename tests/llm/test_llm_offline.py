import json
import math

import pytest

from plans.llm.base import ModelError, ModelRequest
from plans.llm.offline import (
    CACHE_MIN_TOKENS,
    CACHE_TTL_S,
    OFFLINE_DEMO_GOALS,
    OfflineModel,
    PromptCache,
)
from plans.llm.prompts import answer_request, planner_request, repair_request

PRICE, TRIP, REFUND, CONFIRMED_REFUND, RESEARCH = OFFLINE_DEMO_GOALS
CATALOG = [{"name": "price", "description": "d", "input_schema": {}, "destructive": False}]


def planned(goal):
    request = planner_request(goal=goal, catalog=CATALOG, max_steps=5, model="claude-test")
    return json.loads(OfflineModel().complete(request).text)


def answered(goal, outcomes):
    request = answer_request(goal=goal, plan={}, outcomes=outcomes, model="claude-test")
    return OfflineModel().complete(request).text


def step(id, tool, args, depends_on=()):
    return {"id": id, "tool": tool, "args": args, "depends_on": list(depends_on)}


def ok(id, tool, args, result):
    return {
        "id": id,
        "tool": tool,
        "args": args,
        "status": "succeeded",
        "result": result,
        "error": "",
    }


def not_ok(id, tool, args, status, error):
    return {"id": id, "tool": tool, "args": args, "status": status, "result": None, "error": error}


def blocked(id, tool, args, reason):
    text = f"BLOCKED: a reviewer declined {tool}. Reason: {reason}. Do not retry."
    return not_ok(id, tool, args, "blocked", text)


def test_there_are_five_demo_goals():
    assert OFFLINE_DEMO_GOALS == [
        "Total price of an iPhone 16 and AirPods 4 in INR",
        "Book a trip from Bengaluru to Goa on 2026-12-19 for 2 nights",
        "Refund order A-1001 for a damaged item",
        "Refund order A-1002 for a late delivery once I confirm the amount",
        "What makes plan-and-execute agents cheaper than ReAct?",
    ]


def test_the_price_goal_prices_both_items_then_adds_them():
    assert planned(PRICE) == {
        "steps": [
            step(1, "price", {"item": "iPhone 16"}),
            step(2, "price", {"item": "AirPods 4"}),
            step(3, "calculator", {"expression": "{{1}}+{{2}}"}, [1, 2]),
        ]
    }


def test_the_trip_goal_prices_adds_and_books_with_the_fares_as_placeholders():
    steps = planned(TRIP)["steps"]
    route = {"origin": "Bengaluru", "destination": "Goa", "date": "2026-12-19"}
    assert steps[:3] == [
        step(1, "flight_price", route),
        step(2, "hotel_price", {"city": "Goa", "nights": 2}),
        step(3, "calculator", {"expression": "{{1}}+{{2}}"}, [1, 2]),
    ]
    assert steps[3]["tool"] == "book_flight" and steps[3]["depends_on"] == [1, 3]
    assert steps[3]["args"] == {
        **route,
        "passenger": steps[3]["args"]["passenger"],
        "price_inr": "{{1}}",
    }
    assert steps[4]["tool"] == "book_hotel" and steps[4]["depends_on"] == [2, 3]
    assert steps[4]["args"] == {
        "city": "Goa",
        "check_in": "2026-12-19",
        "nights": 2,
        "guest": steps[4]["args"]["guest"],
        "price_inr": "{{2}}",
    }


def test_the_refund_goal_looks_up_refunds_and_emails():
    assert planned(REFUND) == {
        "steps": [
            step(1, "order_total", {"order_id": "A-1001"}),
            step(
                2,
                "issue_refund",
                {"order_id": "A-1001", "amount_inr": "{{1}}", "reason": "damaged item"},
                [1],
            ),
            step(
                3,
                "send_email",
                {
                    "to": "customer-a1001@example.com",
                    "subject": "Your refund",
                    "body": (
                        "We refunded INR {{2.amount_inr}} for order A-1001. "
                        "Reference: {{2.reference}}"
                    ),
                },
                [1, 2],
            ),
        ]
    }


def test_the_research_goal_searches_from_two_angles():
    steps = planned(RESEARCH)["steps"]
    assert [s["tool"] for s in steps] == ["search", "search"]
    assert all(s["depends_on"] == [] and set(s["args"]) == {"query"} for s in steps)
    assert steps[0]["args"]["query"] != steps[1]["args"]["query"]


def test_goals_are_matched_by_keywords_whatever_the_case():
    assert planned("what do an IPHONE 16 and airpods 4 cost?") == planned(PRICE)
    assert planned("please REFUND order a-1001 for a damaged item") == planned(REFUND)


def test_an_unknown_goal_gets_no_steps_and_a_reason_listing_the_demo_goals():
    plan = planned("Write me a sonnet about tea")
    assert plan["steps"] == []
    assert plan["reason"].startswith("The offline model plans only these demo goals:")
    for goal in OFFLINE_DEMO_GOALS:
        assert goal in plan["reason"]


def test_a_trip_without_dates_is_not_planned_with_made_up_values():
    plan = planned("Book a hotel in Goa")
    assert plan["steps"] == []
    assert "date" in plan["reason"] and "nights" in plan["reason"]


def test_a_repair_request_gets_the_same_plan_for_the_same_goal():
    model = OfflineModel()
    first = planner_request(goal=TRIP, catalog=CATALOG, max_steps=5, model="m")
    text = model.complete(first).text
    repair = repair_request(first, bad_output="oops", problems=["the reply is not JSON"])
    assert model.complete(repair).text == text


def test_the_price_answer_states_the_total_plainly():
    answer = answered(
        PRICE,
        [
            ok(1, "price", {"item": "iPhone 16"}, 79900),
            ok(2, "price", {"item": "AirPods 4"}, 12900),
            ok(3, "calculator", {"expression": "79900+12900"}, 92800),
        ],
    )
    assert "The total price of iPhone 16 and AirPods 4 is INR 92800 (92,800)." in answer
    assert "79900" in answer and "12900" in answer


def test_an_answer_never_invents_a_result_that_is_missing():
    answer = answered(
        PRICE,
        [
            ok(1, "price", {"item": "iPhone 16"}, 79900),
            not_ok(2, "price", {"item": "AirPods 4"}, "failed", "unknown item 'AirPods 4'"),
            not_ok(
                3,
                "calculator",
                {"expression": "{{1}}+{{2}}"},
                "skipped",
                "skipped: depends on step 2, which failed",
            ),
        ],
    )
    assert "92800" not in answer and "total price of" not in answer
    assert "Step 2 (price) failed: unknown item 'AirPods 4'." in answer
    assert "Step 3 (calculator) was skipped: depends on step 2, which failed." in answer


def test_the_trip_answer_gives_totals_and_booking_references():
    route = {"origin": "Bengaluru", "destination": "Goa", "date": "2026-12-19"}
    answer = answered(
        TRIP,
        [
            ok(1, "flight_price", route, 5400),
            ok(2, "hotel_price", {"city": "Goa", "nights": 2}, 9000),
            ok(3, "calculator", {"expression": "5400+9000"}, 14400),
            ok(
                4,
                "book_flight",
                {**route, "price_inr": 5400},
                {"status": "booked", "reference": "FL-1"},
            ),
            ok(
                5,
                "book_hotel",
                {"city": "Goa", "price_inr": 9000},
                {"status": "booked", "reference": "HT-2"},
            ),
        ],
    )
    assert "The flight from Bengaluru to Goa on 2026-12-19 costs INR 5400." in answer
    assert "The hotel in Goa for 2 nights costs INR 9000." in answer
    assert "The trip totals INR 14400" in answer
    assert "reference FL-1" in answer and "reference HT-2" in answer


def test_the_trip_answer_says_which_booking_a_reviewer_declined_and_why():
    route = {"origin": "Bengaluru", "destination": "Goa", "date": "2026-12-19"}
    answer = answered(
        TRIP,
        [
            ok(1, "flight_price", route, 5400),
            ok(2, "hotel_price", {"city": "Goa", "nights": 2}, 9000),
            ok(3, "calculator", {"expression": "5400+9000"}, 14400),
            blocked(4, "book_flight", route, "too expensive this week"),
            ok(5, "book_hotel", {"city": "Goa"}, {"reference": "HT-2"}),
        ],
    )
    assert "The flight was not booked." in answer
    assert "Step 4 (book_flight) was declined by a reviewer" in answer
    assert "Reason: too expensive this week." in answer
    assert "reference HT-2" in answer


def test_the_refund_answer_gives_the_reference_or_the_reviewers_reason():
    args = {"order_id": "A-1001", "amount_inr": 2499, "reason": "damaged item"}
    done = answered(
        REFUND,
        [
            ok(1, "order_total", {"order_id": "A-1001"}, 2499),
            ok(2, "issue_refund", args, {"status": "refunded", "reference": "RF-9"}),
            ok(3, "send_email", {"to": "customer-a1001@example.com"}, {"reference": "EM-1"}),
        ],
    )
    assert "Refunded INR 2499 for order A-1001 (reference RF-9)." in done
    assert "customer-a1001@example.com" in done
    declined = answered(
        REFUND,
        [
            ok(1, "order_total", {"order_id": "A-1001"}, 2499),
            blocked(2, "issue_refund", args, "no photo of the damage"),
            not_ok(3, "send_email", {}, "skipped", "skipped: depends on step 2, which was blocked"),
        ],
    )
    assert "The refund was not issued." in declined
    assert "Reason: no photo of the damage." in declined
    assert "RF-" not in declined


def test_the_research_answer_summarises_snippets_and_cites_them_once():
    hit1 = {
        "doc": "plan-exec",
        "title": "Plan-and-execute",
        "snippet": "One planning call.",
        "cite": "[plan-exec]",
    }
    hit2 = {
        "doc": "react",
        "title": "ReAct",
        "snippet": "A model call per tool step",
        "cite": "[react]",
    }
    answer = answered(
        RESEARCH,
        [ok(1, "search", {"query": "a"}, [hit1, hit2]), ok(2, "search", {"query": "b"}, [hit2])],
    )
    assert "One planning call [plan-exec]." in answer
    assert "A model call per tool step [react]." in answer
    assert answer.count("[react]") == 1


def test_other_goals_get_each_steps_outcome_listed():
    answer = answered(
        "Something else entirely",
        [
            ok(1, "order_total", {"order_id": "A-1001"}, 2499),
            not_ok(2, "calculator", {}, "failed", "division by zero"),
        ],
    )
    assert "step 1 (order_total) returned 2499" in answer
    assert "Step 2 (calculator) failed: division by zero." in answer


def test_streaming_delivers_word_chunks_that_join_to_the_full_text():
    request = answer_request(
        goal=PRICE, plan={}, outcomes=[ok(1, "calculator", {}, 92800)], model="m"
    )
    chunks = []
    streamed = OfflineModel().complete(request, on_text=chunks.append)
    assert len(chunks) > 3
    assert "".join(chunks) == streamed.text == OfflineModel().complete(request).text


def test_usage_is_counted_from_the_prompt_and_reply_lengths():
    request = planner_request(goal=PRICE, catalog=CATALOG, max_steps=5, model="claude-test")
    completion = OfflineModel().complete(request)
    assert completion.model == "offline"
    assert completion.usage.input_tokens == math.ceil(len(request.prompt_text()) / 4) > 0
    assert completion.usage.output_tokens == math.ceil(len(completion.text) / 4) > 0
    assert completion.usage.cache_read_tokens == completion.usage.cache_write_tokens == 0
    assert 0 <= completion.latency_ms < 1000


def test_a_request_without_a_goal_in_its_metadata_is_an_error():
    request = ModelRequest(
        model="m", system="s", tools_catalog=[], messages=[], max_tokens=10, purpose="plan"
    )
    with pytest.raises(ModelError, match="goal"):
        OfflineModel().complete(request)


def test_the_confirmed_refund_goal_asks_the_author_for_the_amount_before_refunding_it():
    steps = planned(CONFIRMED_REFUND)["steps"]
    assert [s["tool"] for s in steps] == ["order_total", "ask_human", "issue_refund", "send_email"]
    assert steps[1]["args"]["audience"] == "author"
    assert "{{1}}" in steps[1]["args"]["question"]
    assert steps[2]["args"] == {
        "order_id": "A-1002",
        "amount_inr": "{{2}}",
        "reason": "late delivery",
    }
    assert steps[2]["depends_on"] == [2]


def big_request(goal, *, catalog_size=40, purpose="plan"):
    catalog = [
        {"name": f"tool_{n}", "description": "x" * 100, "input_schema": {}, "destructive": False}
        for n in range(catalog_size)
    ]
    request = planner_request(goal=goal, catalog=catalog, max_steps=5, model="claude-test")
    return request


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_the_same_prefix_is_written_to_the_cache_once_then_read_as_the_api_reports_it():
    cache = PromptCache(clock=Clock())
    model = OfflineModel(cache=cache)
    first, second = big_request(PRICE), big_request(REFUND)
    prefix = math.ceil(len(first.cached_prefix()) / 4)
    assert prefix >= CACHE_MIN_TOKENS

    cold = model.complete(first).usage
    warm = model.complete(second).usage

    assert cold.cache_write_tokens == prefix and cold.cache_read_tokens == 0
    assert warm.cache_read_tokens == prefix and warm.cache_write_tokens == 0
    for request, usage in ((first, cold), (second, warm)):
        # Every prompt token is counted once: uncached input, cache read or cache write.
        total = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
        assert total == request.estimated_input_tokens()
        assert usage.input_tokens == request.estimated_input_tokens() - prefix


def test_a_changed_prefix_or_one_left_unused_past_the_ttl_is_written_again():
    clock = Clock()
    model = OfflineModel(cache=PromptCache(clock=clock))
    model.complete(big_request(PRICE))

    assert model.complete(big_request(PRICE, catalog_size=41)).usage.cache_write_tokens > 0
    clock.now += CACHE_TTL_S - 1
    assert model.complete(big_request(PRICE)).usage.cache_read_tokens > 0  # and refreshed
    clock.now += CACHE_TTL_S - 1
    assert model.complete(big_request(PRICE)).usage.cache_read_tokens > 0
    clock.now += CACHE_TTL_S + 1
    assert model.complete(big_request(PRICE)).usage.cache_write_tokens > 0


def test_a_prefix_shorter_than_the_apis_minimum_is_not_cached():
    model = OfflineModel(cache=PromptCache())
    request = answer_request(goal=PRICE, plan={}, outcomes=[], model="claude-test")

    for _ in range(2):
        usage = model.complete(request).usage
        assert usage.cache_read_tokens == usage.cache_write_tokens == 0
        assert usage.input_tokens == request.estimated_input_tokens()


def test_offline_models_share_the_processes_cache_as_api_calls_share_the_providers():
    OfflineModel().complete(big_request(PRICE))

    assert OfflineModel().complete(big_request(TRIP)).usage.cache_read_tokens > 0
