"""The costs page's chart and the audit page's step timeline, drawn from the selectors' data."""

from __future__ import annotations

from datetime import datetime

from django.utils.safestring import SafeString, mark_safe

from plans.selectors.audit import RunAudit
from plans.selectors.costs import CostReport
from plans.selectors.runs import progress_status, status_words
from plans.ui.charts import Bar, Span, bar_chart_svg, gantt_svg, usd_label
from plans.ui.graphs import STATUS_COLOURS


def cost_daily_svg(report: CostReport) -> SafeString:
    """Model spend per day of the report's window, as bars."""
    bars = [
        Bar(
            label=row["day"].strftime("%b %-d"),
            value=float(row["cost"]),
            title=f"{row['day']:%a %b %-d}: ${row['cost']:.6f} in {row['calls']} "
            + ("call" if row["calls"] == 1 else "calls"),
        )
        for row in report.daily
    ]
    # bar_chart_svg builds XML elements, so every label in it is escaped by the serialiser.
    return mark_safe(  # noqa: S308
        bar_chart_svg(
            bars, value_label=usd_label, title=f"Model spend per day, last {report.days} days"
        )
    )


def run_timeline_svg(audit: RunAudit, *, now: datetime) -> SafeString | None:
    """The steps the audit shows as a gantt chart (None before any step started)."""
    spans, horizon = run_timeline(audit, now=now)
    if not spans:
        return None
    # gantt_svg builds XML elements, so every label in it is escaped by the serialiser.
    return mark_safe(  # noqa: S308
        gantt_svg(spans, title=f"Timeline of the steps of run {audit.run.pk}", horizon=horizon)
    )


def run_timeline(audit: RunAudit, *, now: datetime) -> tuple[list[Span], float]:
    """One span per started step of the page shown, grouped by (plan version and) round, and
    the seconds from the run's start to its last step's end (the axis, whatever page is drawn).
    """
    times = audit.step_times
    started = [
        (version.plan.version, step, step.started_at)
        for version in audit.versions
        for step in version.shown_steps
        if step.started_at
    ]
    if not started or times.first_started is None:
        return [], 0.0
    origin = min(times.first_started, audit.run.started_at or now)
    ongoing_until = audit.run.finished_at or now
    last_end = times.last_finished or origin
    if times.running:
        last_end = max(last_end, ongoing_until)
    several_versions = times.versions_started > 1
    spans = []
    for number, step, started_at in sorted(
        started, key=lambda item: (item[0], item[1].round, item[2])
    ):
        end = step.finished_at or ongoing_until
        state = progress_status(step.status, step.tool)
        seconds = (end - started_at).total_seconds()
        group = (
            f"Plan v{number} · round {step.round}" if several_versions else f"Round {step.round}"
        )
        spans.append(
            Span(
                group=group,
                label=f"{step.step_id} · {step.tool}",
                start=(started_at - origin).total_seconds(),
                end=(end - origin).total_seconds(),
                fill=STATUS_COLOURS.get(state, STATUS_COLOURS["pending"]),
                title=f"step {step.step_id} · {step.tool}: {status_words(state)}, {seconds:.3f} s",
                open_ended=step.finished_at is None,
            )
        )
    return spans, (last_end - origin).total_seconds()
