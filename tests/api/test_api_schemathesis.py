"""schemathesis against the schema the live server serves: no 5xx, every response as documented.

Every check but positive_data_acceptance: rules a JSON schema cannot state (a goal of spaces, a
rejection without a reason, a plan naming an unknown tool, a cursor not given out) are refused
with a documented 422. (Its pytest plugin does not run under pytest 9, so each operation's
strategy is driven here.)
"""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import positive_data_acceptance

from tests.api.conftest import LiveSite, start_site

pytestmark = pytest.mark.multiprocess

EXAMPLES_PER_OPERATION = 40


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


def test_the_api_answers_every_operation_as_its_schema_says(live_site, fuzz_token):
    schema = schemathesis.openapi.from_url(f"{live_site.url}/api/v1/schema/")
    headers = {"Authorization": f"Bearer {fuzz_token}"}
    failures: list[str] = []
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 9

    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(
            max_examples=EXAMPLES_PER_OPERATION,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def check(case: schemathesis.Case) -> None:
            case.call_and_validate(
                headers=headers, timeout=30, excluded_checks=[positive_data_acceptance]
            )

        try:
            check()
        except (FailureGroup, AssertionError) as failure:
            failures.append(f"{operation.label}:\n{failure}")

    assert not failures, "\n\n".join(failures)
