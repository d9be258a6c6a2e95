"""schemathesis against the schema the live server serves: every check, on data the schema calls
valid (each must be accepted) and on data it calls invalid (each must be refused as documented).

A few rules are checked against the live registry or the server's own records, which no JSON
schema can hold: a plan's tools, arguments and graph (422 plan_invalid), an Idempotency-Key
already used with another body (422 idempotency_key_reused), a cursor this list did not give
out (422 invalid_cursor), one approval listed twice (422 listed_twice) and a webhook URL
that does not resolve to public addresses (422 endpoint_invalid). Their
codes are the only refusals of schema-valid data accepted here, each on its own operation.
(The pytest plugin does not run under pytest 9, so each operation's strategy is driven here.)
"""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.core.failures import Failure, FailureGroup
from schemathesis.specs.openapi.checks import RejectedPositiveData

from tests.api.conftest import LiveSite, start_site

pytestmark = pytest.mark.multiprocess

EXAMPLES_PER_OPERATION = 40
# Per operation, the 422 codes for rules beyond a JSON schema (see the module's docstring).
BEYOND_THE_SCHEMA = {
    "POST /api/v1/runs/": {"plan_invalid", "idempotency_key_reused"},
    "GET /api/v1/runs/": {"invalid_cursor"},
    "POST /api/v1/approvals/decide/": {"listed_twice"},
    "POST /api/v1/webhooks/endpoints/": {"endpoint_invalid"},
    "PATCH /api/v1/webhooks/endpoints/{endpoint_id}/": {"endpoint_invalid"},
}


@pytest.fixture(scope="module")
def live_site(tmp_path_factory: pytest.TempPathFactory):
    """A site of its own, notifications off: the fuzzer registers webhook endpoints at
    whatever URLs it makes up, and nothing may be sent to them."""
    yield from start_site(
        tmp_path_factory.mktemp("agentsite-fuzz"), {"AGENTSITE_NOTIFICATIONS": "0"}
    )


@pytest.fixture(scope="module")
def fuzz_token(live_site: LiveSite) -> str:
    live_site.manage(
        "shell",
        "-c",
        "from django.contrib.auth.models import Group, User\n"
        "u = User.objects.create_user('sam', password='sam-pass-123')\n"
        "u.groups.add(*Group.objects.all())",
    )
    return live_site.token("sam")


def beyond_the_schema(failure: Failure, label: str, response) -> bool:
    if not isinstance(failure, RejectedPositiveData) or response.status_code != 422:
        return False
    return response.json().get("code") in BEYOND_THE_SCHEMA.get(label, set())


def fuzz(operation, mode: GenerationMode, headers: dict[str, str]) -> None:
    """Every check on each generated case, but the refusals listed in BEYOND_THE_SCHEMA."""
    label = operation.label

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=EXAMPLES_PER_OPERATION,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def check(case: schemathesis.Case) -> None:
        response = case.call(headers=headers, timeout=30)
        try:
            case.validate_response(response, headers=headers)
        except FailureGroup as group:
            kept = [f for f in group.exceptions if not beyond_the_schema(f, label, response)]
            if kept:
                raise FailureGroup(kept, group.message) from None
        except RejectedPositiveData as failure:
            if not beyond_the_schema(failure, label, response):
                raise

    check()


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_the_api_answers_every_operation_as_its_schema_says(live_site, fuzz_token, mode):
    schema = schemathesis.openapi.from_url(f"{live_site.url}/api/v1/schema/")
    headers = {"Authorization": f"Bearer {fuzz_token}"}
    failures: list[str] = []
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 9

    for operation in operations:
        try:
            fuzz(operation, mode, headers)
        except (FailureGroup, AssertionError) as failure:
            failures.append(f"{operation.label}:\n{failure}")

    assert not failures, "\n\n".join(failures)
