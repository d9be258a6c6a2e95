"""Runs exported as OpenTelemetry traces, with the GenAI semantic conventions.

Off unless OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set, and
OTEL_SDK_DISABLED is not true; then the SDK's OTLP/HTTP exporter sends batches from its own
thread, so a slow or dead collector costs a run nothing but dropped spans.
"""

from __future__ import annotations

import os

from django.conf import settings


def tracing_configured() -> bool:
    """Whether the standard OpenTelemetry variables ask for traces to be exported."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    return bool(endpoint) and getattr(settings, "AGENTSITE_TRACING", True)


def tracing_start_if_configured() -> None:
    """Install the run tracer in the runtime when the environment asks for it (app ready)."""
    if not tracing_configured():
        return
    # Why here: OpenTelemetry's SDK and exporter load only when tracing is configured.
    from plans.runtime.telemetry import set_run_observer
    from plans.tracing.spans import otlp_tracer

    set_run_observer(otlp_tracer())
