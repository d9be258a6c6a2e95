"""Against a live server: a stream ends with its credentials, and a big body is a JSON 413."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.api.conftest import EVENTUALLY_S, LiveSite, start_site
from tests.api.test_api_end_to_end import create_refund_run, waiting_approval

pytestmark = pytest.mark.multiprocess

RECHECK_S = 0.5
# A stream still open this long after it was opened fails the test (an idle one sends a
# comment every 15 s, so a read alone would never time out).
STREAM_LIMIT_S = 2 * EVENTUALLY_S


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveSite]:
    var_dir = tmp_path_factory.mktemp("agentsite-streams")
    yield from start_site(var_dir, {"AGENTSITE_STREAM_RECHECK_S": str(RECHECK_S)})


def token_id(site: LiveSite, username: str, raw: str) -> str:
    for line in site.manage("api_token", "list", username).splitlines():
        pk, prefix = line.split("\t")[:2]
        if raw.startswith(prefix.rstrip("…")):
            return pk
    raise AssertionError(f"no token of {username} starts like {raw[:10]}")


def stream(client: httpx.Client, run_id: int) -> Iterator[tuple[str, dict]]:
    """The stream's messages as (event, data) as they arrive; it returns when the server ends it."""
    deadline = time.monotonic() + STREAM_LIMIT_S
    with client.stream(
        "GET", f"/runs/{run_id}/events/", headers={"Accept": "text/event-stream"}
    ) as response:
        assert response.status_code == 200
        fields: dict[str, str] = {}
        for line in response.iter_lines():
            if time.monotonic() > deadline:
                raise AssertionError(f"the stream is still open after {STREAM_LIMIT_S:g} s")
            if line == "":
                if "data" in fields:
                    yield fields.get("event", "message"), json.loads(fields["data"])
                fields = {}
            elif not line.startswith(":"):
                name, _, value = line.partition(": ")
                fields[name] = value


def until_waiting(messages: Iterator[tuple[str, dict]]) -> None:
    """Read a refund run's stream until it parks for a reviewer: it is idle until a decision."""
    for event, _ in messages:
        if event == "run_parked":
            return
    raise AssertionError("the stream ended before the refund waited for approval")


def test_an_open_stream_ends_once_its_token_is_revoked_and_delivers_nothing_after(site):
    raw = site.token("author", "authors")
    reviewer = site.client(site.token("reviewer"))
    author = site.client(raw)
    run = create_refund_run(author)
    messages = stream(author, run["id"])
    until_waiting(messages)

    site.manage("api_token", "revoke", token_id(site, "author", raw))
    approval = waiting_approval(reviewer, run["id"])
    decided = reviewer.post(
        "/approvals/decide/",
        json={
            "decision": "approve",
            "approvals": [{"id": approval["id"], "args_sha256": approval["args_sha256"]}],
        },
    )
    assert decided.status_code == 200, decided.text

    rest = list(messages)  # the server ends the stream: this returns
    assert rest == [
        (
            "error",
            {"code": "token_invalid", "detail": "The bearer token is unknown, revoked or expired."},
        )
    ]  # the decision and everything after it stayed unsent
    assert author.get(f"/runs/{run['id']}/").status_code == 401


def test_an_idle_stream_ends_once_its_token_expires(site):
    raw = site.token("author", "authors")
    author = site.client(raw)
    run = create_refund_run(author)
    messages = stream(author, run["id"])
    until_waiting(messages)

    site.manage(
        "shell",
        "-c",
        "from django.utils import timezone\n"
        "from plans.api.models import ApiToken\n"
        f"ApiToken.objects.filter(pk={token_id(site, 'author', raw)})"
        ".update(expires_at=timezone.now())",
    )

    # Nothing happens in the run: the stream re-reads its token on its own (the read times
    # out after EVENTUALLY_S, far beyond the re-check interval, if it never does).
    assert [event for event, _ in messages] == ["error"]


def test_a_session_stream_ends_at_logout(site):
    browser = httpx.Client(base_url=site.url, timeout=EVENTUALLY_S)
    browser.get("/accounts/login/")
    signed_in = browser.post(
        "/accounts/login/",
        data={
            "username": "author",
            "password": "author-demo-pass",
            "csrfmiddlewaretoken": browser.cookies["csrftoken"],
        },
    )
    assert signed_in.status_code == 302, signed_in.text[:500]
    api = httpx.Client(base_url=f"{site.url}/api/v1", timeout=EVENTUALLY_S)
    api.cookies = browser.cookies
    run = create_refund_run(api, **{"X-CSRFToken": browser.cookies["csrftoken"]})
    messages = stream(api, run["id"])
    until_waiting(messages)

    logout = browser.post(
        "/accounts/logout/", data={"csrfmiddlewaretoken": browser.cookies["csrftoken"]}
    )
    assert logout.status_code == 302

    assert list(messages) == [
        ("error", {"code": "not_authenticated", "detail": "The session has ended: sign in again."})
    ]


def test_a_chunked_body_over_the_limit_is_a_json_413(site):
    author = site.client(site.token("author", "authors"))

    def chunks() -> Iterator[bytes]:
        yield b'{"goal": "'
        for _ in range(5):
            yield b"x" * 1024 * 1024
        yield b'"}'

    # No Content-Length: the size is known only once the body has arrived.
    response = author.post("/runs/", content=chunks(), headers={"Content-Type": "application/json"})

    assert response.status_code == 413
    assert response.headers["content-type"].startswith("application/json")
    assert response.json()["code"] == "body_too_large"
