"""The shape of a run's trace, captured by the SDK's in-memory exporter."""

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from plans.llm.offline import REFUND_GOAL
from plans.models import Approval, Run
from plans.runtime.advance import advance_run
from plans.runtime.telemetry import set_run_observer
from plans.services.approvals import approval_decide
from plans.services.runs import run_create
from plans.tracing import tracing_configured
from plans.tracing.spans import HealthTrackingExporter, RunTracer, new_provider
from tests.engine.engine_catalog import SEED_PLAN

pytestmark = pytest.mark.django_db(transaction=True)


class Captured:
    """The spans a run tracer built, through the SDK's in-memory exporter."""

    def __init__(self, tracer, exporter):
        self.tracer, self.exporter = tracer, exporter

    def get_finished_spans(self):
        assert self.tracer.flush()  # the tracer builds spans on its own thread
        return self.exporter.get_finished_spans()


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = new_provider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = RunTracer(provider)
    set_run_observer(tracer)
    yield Captured(tracer, exporter)
    set_run_observer(None)
    tracer.shutdown()


def by_name(captured):
    found = {}
    for span in captured.get_finished_spans():
        found.setdefault(span.name, []).append(span)
    return found


def test_a_run_is_one_trace_with_plan_step_tool_and_model_spans(author, spans):
    run = run_create(author=author, goal_text="seed", plan_data=SEED_PLAN)
    advance_run(run.pk)
    run.refresh_from_db()

    found = by_name(spans)
    (root,) = found["invoke_agent agentsite"]
    (plan,) = found["plan v1"]
    assert {span.context.trace_id for span in spans.get_finished_spans()} == {int(run.trace_id, 16)}
    assert root.parent is None
    assert plan.parent.span_id == root.context.span_id
    steps = {span.attributes["agentsite.step.id"]: span for span in found["step 1 price"]}
    assert steps[1].parent.span_id == plan.context.span_id
    tool = next(s for s in found["execute_tool price"] if s.attributes["agentsite.step.id"] == 1)
    assert tool.parent.span_id == steps[1].context.span_id
    assert tool.attributes["gen_ai.tool.name"] == "price"
    assert tool.attributes["agentsite.tool.attempt"] == 1
    assert "gen_ai.tool.call.arguments" not in tool.attributes  # content is off by default
    (answer,) = [s for s in spans.get_finished_spans() if s.name.startswith("chat ")]
    assert answer.parent.span_id == root.context.span_id
    assert answer.attributes["gen_ai.operation.name"] == "chat"
    assert answer.attributes["gen_ai.usage.input_tokens"] > 0
    assert answer.attributes["gen_ai.usage.output_tokens"] > 0
    assert "agentsite.cost_usd" in answer.attributes
    assert root.attributes["agentsite.run.status"] == "completed"
    assert root.start_time <= plan.start_time <= tool.start_time <= tool.end_time <= root.end_time


def test_a_failed_tool_call_is_an_error_span_naming_the_error(author, spans, settings):
    settings.AGENTSITE_TOOL_MODULES = ["tests.support_tools"]
    plan = {"steps": [{"id": 1, "tool": "explode", "args": {"message": "warehouse offline"}}]}
    run = run_create(author=author, goal_text="fail", plan_data=plan)
    advance_run(run.pk)

    found = by_name(spans)
    (tool,) = found["execute_tool explode"]
    assert tool.status.status_code.name == "ERROR"
    assert tool.status.description == "warehouse offline"
    (step,) = found["step 1 explode"]
    assert step.attributes["agentsite.step.status"] == "failed"


def test_arguments_and_results_are_attributes_only_when_allowed_and_redacted(
    author, spans, settings
):
    settings.AGENTSITE_TRACE_CONTENT = True
    settings.AGENTSITE_TOOL_MODULES = ["tests.support_tools"]
    plan = {"steps": [{"id": 1, "tool": "echo", "args": {"text": "card 4111 1111 1111 1111"}}]}
    run = run_create(author=author, goal_text="echo", plan_data=plan)
    advance_run(run.pk)

    (tool,) = by_name(spans)["execute_tool echo"]
    assert "4111 1111 1111 1111" not in tool.attributes["gen_ai.tool.call.arguments"]
    assert "4111 1111 1111 1111" not in tool.attributes["gen_ai.tool.call.result"]
    assert "text" in tool.attributes["gen_ai.tool.call.arguments"]


def test_a_run_that_parks_for_approval_and_resumes_stays_one_trace(author, reviewer, spans):
    run = run_create(author=author, goal_text=REFUND_GOAL, plan_data=None)
    advance_run(run.pk)
    run.refresh_from_db()
    trace_id = run.trace_id
    assert run.status == Run.Status.AWAITING_APPROVAL and trace_id

    while run.status == Run.Status.AWAITING_APPROVAL:
        for approval in Approval.objects.filter(run=run, decision="pending"):
            approval_decide(approval=approval, reviewer=reviewer, approve=True)
        run.refresh_from_db()

    assert run.trace_id == trace_id
    all_spans = spans.get_finished_spans()
    assert {span.context.trace_id for span in all_spans} == {int(trace_id, 16)}
    approvals = [s for s in all_spans if s.name.startswith("approval ")]
    assert approvals and {s.attributes["agentsite.approval.reviewer"] for s in approvals} == {"bob"}
    assert {s.attributes["agentsite.approval.decision"] for s in approvals} == {"approved"}
    planner = [s for s in all_spans if s.attributes.get("agentsite.model_call.purpose") == "plan"]
    assert planner and planner[0].attributes["gen_ai.usage.input_tokens"] > 0


def test_the_approval_span_carries_the_wait_in_seconds(author, reviewer, spans):
    from datetime import timedelta

    from django.utils import timezone

    run = run_create(author=author, goal_text=REFUND_GOAL, plan_data=None)
    advance_run(run.pk)
    approval = Approval.objects.get(run=run, decision="pending")
    Approval.objects.filter(pk=approval.pk).update(
        requested_at=timezone.now() - timedelta(seconds=90, microseconds=1)
    )
    approval.refresh_from_db()
    approval_decide(approval=approval, reviewer=reviewer, approve=False, reason="no")

    [span] = [s for s in spans.get_finished_spans() if s.name == f"approval {approval.tool}"]
    assert span.attributes["agentsite.approval.wait_s"] in (90, 91)
    assert span.attributes["agentsite.approval.decision"] == "rejected"


def test_the_approval_span_carries_the_rule_that_required_or_decided_it(
    author, reviewer, spans, settings
):
    from datetime import timedelta

    from django.utils import timezone

    settings.AGENTSITE_APPROVAL_RULE_MODULES = ["tests.rule_modules.review_mix"]
    run = run_create(author=author, goal_text=REFUND_GOAL, plan_data=None)
    advance_run(run.pk)
    refund = Approval.objects.get(run=run, decision="pending")
    Approval.objects.filter(pk=refund.pk).update(
        requested_at=timezone.now() - timedelta(seconds=30, microseconds=1)
    )
    refund.refresh_from_db()
    approval_decide(approval=refund, reviewer=reviewer, approve=True)  # the e-mail then runs

    found = by_name(spans)
    (by_person,) = found["approval issue_refund"]
    assert by_person.attributes["agentsite.approval.rule"] == "refunds_need_a_reviewer"
    assert by_person.attributes["agentsite.approval.rule_version"] == refund.rule_version
    assert by_person.attributes["agentsite.approval.rule_outcome"] == "require"
    assert by_person.attributes["agentsite.approval.approvals_needed"] == 1
    assert by_person.attributes["agentsite.approval.wait_s"] in (30, 31)
    (by_rule,) = found["approval send_email"]
    assert by_rule.attributes["agentsite.approval.rule"] == "customer_emails_go_out"
    assert by_rule.attributes["agentsite.approval.rule_outcome"] == "approve"
    assert by_rule.attributes["agentsite.approval.via"] == "rule"
    assert by_rule.attributes["agentsite.approval.wait_s"] == 0


def test_an_approval_no_rule_matched_has_no_rule_on_its_span(author, reviewer, spans):
    run = run_create(author=author, goal_text=REFUND_GOAL, plan_data=None)
    advance_run(run.pk)
    approval = Approval.objects.get(run=run, decision="pending")
    approval_decide(approval=approval, reviewer=reviewer, approve=False, reason="no")

    (span,) = by_name(spans)[f"approval {approval.tool}"]
    assert "agentsite.approval.rule" not in span.attributes


def test_a_dead_collector_drops_notes_unbuilt_instead_of_slowing_runs(author):
    class DeadCollector(SpanExporter):
        def __init__(self):
            self.calls = 0

        def export(self, spans):
            self.calls += 1
            return SpanExportResult.FAILURE

    dead = HealthTrackingExporter(DeadCollector())
    provider = new_provider()
    provider.add_span_processor(SimpleSpanProcessor(dead))
    tracer = RunTracer(provider, exporter=dead)
    set_run_observer(tracer)
    try:
        for _ in range(2):
            run = run_create(author=author, goal_text="seed", plan_data=SEED_PLAN)
            advance_run(run.pk)
            tracer.flush()
    finally:
        set_run_observer(None)
        tracer.shutdown()

    assert Run.objects.filter(status="completed").count() == 2
    assert dead.inner.calls == 1  # the first span failed; the rest were never built
    assert tracer.dropped > 10


def test_tracing_is_off_unless_an_otlp_endpoint_is_set(monkeypatch):
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    assert not tracing_configured()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    assert tracing_configured()
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert not tracing_configured()
