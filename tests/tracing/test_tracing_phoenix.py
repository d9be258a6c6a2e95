"""A run's spans reach a real trace receiver: Arize Phoenix, started here on loopback."""

import json
import os
import subprocess
import time
import urllib.request
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from plans.llm.offline import REFUND_GOAL
from plans.models import Approval
from plans.runtime.advance import advance_run
from plans.runtime.telemetry import set_run_observer
from plans.services.approvals import approval_decide
from plans.services.runs import run_create
from plans.tracing.spans import HealthTrackingExporter, RunTracer, new_provider
from tests.engine.engine_catalog import SEED_PLAN
from tests.servers import free_port

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]
PHOENIX = Path(os.environ.get("AGENTSITE_PHOENIX", ROOT / ".venv-phoenix" / "bin" / "phoenix"))


@pytest.fixture
def phoenix(tmp_path):
    """`phoenix serve` on loopback with its own working directory; yields its base URL."""
    if not PHOENIX.exists():
        pytest.fail(f"{PHOENIX} is missing: ./dev test installs Arize Phoenix")
    port, grpc_port = free_port(), free_port()
    env = {
        **os.environ,
        "PHOENIX_WORKING_DIR": str(tmp_path),
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(grpc_port),
        "PHOENIX_TELEMETRY_ENABLED": "false",
    }
    process = subprocess.Popen(  # noqa: S603 - the Phoenix that ./dev installed
        [str(PHOENIX), "serve"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdout is not None
        for line in process.stdout:  # until it says it serves (or exits)
            if "Application startup complete" in line:
                break
        else:
            pytest.fail(f"Phoenix exited with {process.wait()}")
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(30)


@contextmanager
def exported_to(phoenix):
    """Runs traced through the SDK's OTLP/HTTP exporter to Phoenix while the block runs."""
    exporter = HealthTrackingExporter(OTLPSpanExporter(f"{phoenix}/v1/traces"))
    provider = new_provider()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    tracer = RunTracer(provider, exporter=exporter)
    set_run_observer(tracer)
    try:
        yield tracer
    finally:
        set_run_observer(None)
        tracer.shutdown()


def spans_in(base_url):
    with urllib.request.urlopen(  # noqa: S310 - Phoenix on loopback
        f"{base_url}/v1/projects/default/spans?limit=100", timeout=10
    ) as response:
        return json.load(response)["data"]


def test_phoenix_shows_the_runs_spans_with_their_token_counts(author, phoenix):
    with exported_to(phoenix) as tracer:
        run = run_create(author=author, goal_text="seed prices", plan_data=SEED_PLAN)
        advance_run(run.pk)
        assert tracer.flush()
    run.refresh_from_db()

    deadline = time.monotonic() + 30
    while len(spans := spans_in(phoenix)) < 9:  # run, plan, 3 steps, 3 tool calls, answer
        assert time.monotonic() < deadline, f"Phoenix has {len(spans)} spans"
        time.sleep(0.2)

    assert {span["context"]["trace_id"] for span in spans} == {run.trace_id}
    names = sorted(span["name"] for span in spans)
    assert names.count("execute_tool price") == 2
    assert "execute_tool calculator" in names and "plan v1" in names
    (answer,) = [span for span in spans if span["span_kind"] == "LLM"]
    assert answer["attributes"]["gen_ai.usage.input_tokens"] == run.input_tokens
    assert answer["attributes"]["gen_ai.usage.output_tokens"] == run.output_tokens
    assert answer["attributes"]["llm.token_count.total"] == run.total_tokens
    (root,) = [span for span in spans if span["parent_id"] is None]
    assert root["name"] == "invoke_agent agentsite"
    assert root["attributes"]["agentsite.run.status"] == "completed"


def test_phoenix_shows_the_approval_span_with_its_wait_and_rule(
    author, reviewer, phoenix, settings
):
    settings.AGENTSITE_APPROVAL_RULE_MODULES = ["tests.rule_modules.review_mix"]
    with exported_to(phoenix) as tracer:
        run = run_create(author=author, goal_text=REFUND_GOAL)
        advance_run(run.pk)
        refund = Approval.objects.get(run=run, decision="pending")
        Approval.objects.filter(pk=refund.pk).update(
            requested_at=timezone.now() - timedelta(seconds=45, microseconds=1)
        )
        refund.refresh_from_db()
        approval_decide(approval=refund, reviewer=reviewer, approve=True)
        assert tracer.flush()

    deadline = time.monotonic() + 30
    while not [s for s in spans_in(phoenix) if s["name"] == "approval send_email"]:
        assert time.monotonic() < deadline, "Phoenix has no span of the e-mail's approval"
        time.sleep(0.2)
    spans = {span["name"]: span for span in spans_in(phoenix)}
    by_person = spans["approval issue_refund"]["attributes"]
    assert by_person["agentsite.approval.rule"] == "refunds_need_a_reviewer"
    assert by_person["agentsite.approval.rule_outcome"] == "require"
    assert by_person["agentsite.approval.wait_s"] in (45, 46)
    assert by_person["agentsite.approval.reviewer"] == "bob"
    by_rule = spans["approval send_email"]["attributes"]
    assert by_rule["agentsite.approval.rule"] == "customer_emails_go_out"
    assert by_rule["agentsite.approval.via"] == "rule" and by_rule["agentsite.approval.wait_s"] == 0
