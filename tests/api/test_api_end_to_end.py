"""The API end to end: a real HTTP client against `manage.py serve` with its own workers."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.api.conftest import EVENTUALLY_S, LiveSite
from tests.integration.support import wait_until

pytestmark = pytest.mark.multiprocess

REFUND_PLAN = {
    "steps": [
        {"id": 1, "tool": "order_total", "args": {"order_id": "A-1001"}, "depends_on": []},
        {
            "id": 2,
            "tool": "issue_refund",
            "args": {"order_id": "A-1001", "amount_inr": "{{1}}", "reason": "arrived broken"},
            "depends_on": [1],
        },
    ]
}


@pytest.fixture(scope="module")
def tokens(live_site: LiveSite) -> dict[str, str]:
    live_site.manage(
        "shell",
        "-c",
        "from django.contrib.auth.models import Group, User\n"
        "u = User.objects.create_user('dana', password='dana-pass-123')\n"
        "u.groups.add(*Group.objects.filter(name__in=['authors', 'reviewers']))",
    )
    return {
        "author": live_site.token("author", "authors"),
        "author2": live_site.token("author2"),
        "reviewer": live_site.token("reviewer"),
        "dana": live_site.token("dana"),
        "operator": live_site.token("operator"),
        "dana_as_author": live_site.token("dana", "authors"),
    }


def create_refund_run(client: httpx.Client, **headers: str) -> dict[str, Any]:
    response = client.post(
        "/runs/", json={"goal": "Refund order A-1001", "plan": REFUND_PLAN}, headers=headers
    )
    assert response.status_code == 201, response.text
    return response.json()


def waiting_approval(client: httpx.Client, run_id: int) -> dict[str, Any]:
    def find() -> dict[str, Any] | None:
        listed = client.get("/approvals/").json()
        return next((a for a in listed if a["run"] == run_id), None)

    return wait_until(find, timeout=EVENTUALLY_S, every=0.1, what=f"run {run_id}'s approval")


def follow(client: httpx.Client, run_id: int, after: int = 0) -> list[dict[str, Any]]:
    """Read the run's text/event-stream to its end (the server closes it after the run ends)."""
    events = []
    with client.stream(
        "GET", f"/runs/{run_id}/events/?after={after}", headers={"Accept": "text/event-stream"}
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        fields: dict[str, str] = {}
        for line in response.iter_lines():
            if line == "":
                if "data" in fields:
                    event = json.loads(fields["data"])
                    assert fields["id"] == str(event["seq"]) and fields["event"] == event["kind"]
                    events.append(event)
                fields = {}
            elif not line.startswith(":"):
                name, _, value = line.partition(": ")
                fields[name] = value
    return events


def test_an_author_creates_a_run_follows_it_and_a_second_user_approves_its_refund(
    live_site, tokens
):
    author, reviewer = live_site.client(tokens["author"]), live_site.client(tokens["reviewer"])
    run = create_refund_run(author)
    assert run["status"] in {"running", "planning"} and run["author"] == "author"
    assert run["plan"]["steps"][1]["tool"] == "issue_refund"

    approval = waiting_approval(reviewer, run["id"])
    assert approval["tool"] == "issue_refund"
    assert approval["args"]["amount_inr"] == 2499  # resolved from step 1's result
    assert approval["inputs"] == [
        {"step": 1, "tool": "order_total", "status": "succeeded", "result": 2499, "error": ""}
    ]
    decided = reviewer.post(
        "/approvals/decide/",
        json={
            "decision": "approve",
            "approvals": [{"id": approval["id"], "args_sha256": approval["args_sha256"]}],
        },
    )
    assert decided.status_code == 200, decided.text
    assert decided.json()["decided"][0]["decision"] == "approved"

    events = follow(author, run["id"])
    kinds = [event["kind"] for event in events]
    assert [event["seq"] for event in events] == list(range(1, len(events) + 1))
    assert kinds[0] == "run_created" and kinds[-1] == "run_finished"
    assert "approval_requested" in kinds and "approval_decided" in kinds
    assert events[-1]["payload"]["status"] == "completed"

    later = follow(author, run["id"], after=events[-3]["seq"])
    assert later == events[-2:]  # a stream resumed after a seq has only what followed it
    detail = author.get(f"/runs/{run['id']}/").json()
    assert detail["status"] == "completed"
    assert detail["steps"]["2"]["status"] == "succeeded"
    assert detail["steps"]["2"]["result"]["amount_inr"] == 2499
    assert detail["answer"]
    export = author.get(f"/runs/{run['id']}/export/").json()
    assert export["format"] == "agentsite.run-export/1"
    assert [a["reviewer"] for a in export["approvals"]] == ["reviewer"]
    assert export["approvals"][0]["via"] == "api"


def test_the_author_of_a_goal_may_not_approve_its_steps_under_four_eyes(live_site, tokens):
    dana = live_site.client(tokens["dana"])  # both author and reviewer
    run = create_refund_run(dana)
    approval = waiting_approval(dana, run["id"])

    refused = dana.post(
        "/approvals/decide/",
        json={
            "decision": "approve",
            "approvals": [{"id": approval["id"], "args_sha256": approval["args_sha256"]}],
        },
    )

    assert refused.status_code == 403
    assert refused.json()["code"] == "four_eyes"
    assert "Four-eyes" in refused.json()["detail"]
    still = dana.get("/approvals/").json()
    assert approval["id"] in [a["id"] for a in still]


def test_a_decision_on_arguments_other_than_those_seen_is_a_conflict(live_site, tokens):
    author, reviewer = live_site.client(tokens["author"]), live_site.client(tokens["reviewer"])
    run = create_refund_run(author)
    approval = waiting_approval(reviewer, run["id"])

    stale = reviewer.post(
        "/approvals/decide/",
        json={
            "decision": "approve",
            "approvals": [{"id": approval["id"], "args_sha256": "0" * 64}],
        },
    )

    assert stale.status_code == 409
    assert stale.json()["code"] == "stale_hash"
    assert approval["id"] in [a["id"] for a in reviewer.get("/approvals/").json()]
    rejected = reviewer.post(
        "/approvals/decide/",
        json={
            "decision": "reject",
            "reason": "not this one",
            "approvals": [{"id": approval["id"], "args_sha256": approval["args_sha256"]}],
        },
    )
    assert rejected.status_code == 200
    again = reviewer.post(
        "/approvals/decide/",
        json={
            "decision": "approve",
            "approvals": [{"id": approval["id"], "args_sha256": approval["args_sha256"]}],
        },
    )
    assert again.status_code == 409
    assert again.json()["code"] == "decision_refused"
    assert "already rejected" in again.json()["detail"]


def test_a_retried_create_with_the_same_idempotency_key_returns_the_first_run(live_site, tokens):
    author = live_site.client(tokens["author"])
    body = {"goal": "What does a travel adapter cost?"}
    headers = {"Idempotency-Key": "e2e-key-1"}

    first = author.post("/runs/", json=body, headers=headers)
    retried = author.post("/runs/", json=body, headers=headers)
    other_body = author.post("/runs/", json={"goal": "Something else"}, headers=headers)

    assert first.status_code == 201 and retried.status_code == 200
    assert retried.json()["id"] == first.json()["id"]
    assert other_body.status_code == 422
    assert other_body.json()["code"] == "idempotency_key_reused"
    listed = author.get("/runs/", params={"limit": 200}).json()["results"]
    assert [r["goal"] for r in listed].count("What does a travel adapter cost?") == 1


def test_a_run_another_author_may_not_see_is_not_found(live_site, tokens):
    run = create_refund_run(live_site.client(tokens["author"]))
    stranger = live_site.client(tokens["author2"])

    for response in (
        stranger.get(f"/runs/{run['id']}/"),
        stranger.get(f"/runs/{run['id']}/events/"),
        stranger.post(f"/runs/{run['id']}/cancel/"),
        stranger.get(f"/runs/{run['id']}/export/"),
        stranger.get("/runs/99999999/"),
    ):
        assert response.status_code == 404
        assert response.json() == {"code": "not_found", "detail": "No such run."}
    assert run["id"] not in [r["id"] for r in stranger.get("/runs/").json()["results"]]


def test_an_invalid_plan_is_refused_with_the_same_problems_as_the_cli(live_site, tokens, tmp_path):
    plan = {
        "steps": [
            {"id": 1, "tool": "teleport", "args": {}, "depends_on": []},
            {"id": 2, "tool": "price", "args": {"item": "{{3}}"}, "depends_on": [1]},
        ]
    }
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(plan))
    cli = json.loads(
        live_site.manage("run_goal", "x", "--plan-file", str(plan_file), "--json", expect_exit=2)
    )

    refused = live_site.client(tokens["author"]).post("/runs/", json={"goal": "x", "plan": plan})

    assert refused.status_code == 422
    assert refused.json()["code"] == "plan_invalid"
    assert refused.json()["problems"] == cli["problems"]
    assert len(cli["problems"]) >= 2


def test_cancelling_a_run_waiting_for_approval_ends_it(live_site, tokens):
    author = live_site.client(tokens["author"])
    run = create_refund_run(author)
    waiting_approval(live_site.client(tokens["reviewer"]), run["id"])

    cancelled = author.post(f"/runs/{run['id']}/cancel/")

    assert cancelled.status_code == 200 and cancelled.json()["cancel_requested"] is True
    assert follow(author, run["id"])[-1]["payload"]["status"] == "cancelled"


def test_tokens_act_only_with_their_roles(live_site, tokens):
    operator = live_site.client(tokens["operator"])
    dana_as_author = live_site.client(tokens["dana_as_author"])  # dana also reviews
    not_author = live_site.client(tokens["reviewer"])

    assert operator.get("/runs/").status_code == 200
    for refused in (
        operator.post(
            "/approvals/decide/",
            json={"decision": "approve", "approvals": [{"id": 1, "args_sha256": "0" * 64}]},
        ),
        dana_as_author.post(
            "/approvals/decide/",
            json={"decision": "approve", "approvals": [{"id": 1, "args_sha256": "0" * 64}]},
        ),
    ):
        assert refused.status_code == 403 and refused.json()["code"] == "not_a_reviewer"
    created = not_author.post("/runs/", json={"goal": "hello"})
    assert created.status_code == 403 and created.json()["code"] == "not_an_author"
    wrong = live_site.client("ags_not-a-real-token").get("/runs/")
    assert wrong.status_code == 401 and wrong.json()["code"] == "token_invalid"
    assert live_site.client().get("/runs/").status_code == 401
