"""The read-only side of runs: the filtered list, the audit page, its JSON export and the graph."""

from __future__ import annotations

from django import forms
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.utils.cache import patch_cache_control, patch_vary_headers
from django.utils.http import content_disposition_header
from django.views.decorators.http import require_GET

from plans.engine.text import whole_number
from plans.models import Run
from plans.selectors.approvals import step_decisions
from plans.selectors.audit import run_audit_get, run_export_chunks
from plans.selectors.plans import plan_steps_list, plan_version_get
from plans.selectors.runs import (
    DEFAULT_RUN_SORT,
    RUN_SORTS,
    RunFilters,
    authors_with_goals,
    runs_derived_read,
    runs_page,
    runs_progress,
)
from plans.tools import get_registry
from plans.ui.graphs import STATUS_COLOURS, plan_svg
from plans.ui.reports import run_timeline_svg
from plans.views.params import SignedInRequest, visible_run_or_404

RUNS_PER_PAGE = 50
RUNS_TABLE_ID = "runs-table"
SVG_CSP = "default-src 'none'; style-src 'unsafe-inline'"


# A run parked on a question is stored as awaiting approval: the filter says it finds both.
STATUS_FILTER_LABELS: dict[str, str] = {
    Run.Status.AWAITING_APPROVAL.value: "Awaiting approval or an answer"
}


class RunFilterForm(forms.Form):
    """The runs list's query string; invalid values are reported and ignored, not fatal."""

    status = forms.ChoiceField(
        required=False,
        choices=[
            ("", "Any status"),
            *((v, STATUS_FILTER_LABELS.get(v, n)) for v, n in Run.Status.choices),
        ],
    )
    author = forms.ChoiceField(required=False)
    date_from = forms.DateField(
        required=False, label="From", widget=forms.DateInput(attrs={"type": "date"})
    )
    date_to = forms.DateField(
        required=False, label="To", widget=forms.DateInput(attrs={"type": "date"})
    )
    tool = forms.ChoiceField(required=False)
    sort = forms.ChoiceField(required=False, choices=[(key, key) for key in RUN_SORTS])
    evals = forms.BooleanField(required=False, label="Include eval runs")

    def __init__(self, data, *, viewer) -> None:
        super().__init__(data)
        if viewer.has_perm("plans.view_all_runs"):
            # A callable: the query runs only when the select is drawn or an author is given.
            self._choice_field("author").choices = _author_choices
        else:
            del self.fields["author"]  # authors see only their own runs
        self._choice_field("tool").choices = [
            ("", "Any tool"),
            *((t, t) for t in sorted(get_registry())),
        ]

    def _choice_field(self, name: str) -> forms.ChoiceField:
        field = self.fields[name]
        assert isinstance(field, forms.ChoiceField)
        return field

    def filters(self) -> RunFilters:
        """The valid part of the query as selector filters."""
        self.is_valid()
        data = self.cleaned_data
        return RunFilters(
            status=data.get("status") or None,
            author=data.get("author") or None,
            date_from=data.get("date_from"),
            date_to=data.get("date_to"),
            tool=data.get("tool") or None,
            sort=data.get("sort") or DEFAULT_RUN_SORT,
            include_evals=bool(data.get("evals")),
        )


def _author_choices() -> list[tuple[str, str]]:
    return [("", "Anyone"), *((author, author) for author in authors_with_goals())]


@login_required
@require_GET
def run_list(request: SignedInRequest) -> HttpResponse:
    form = RunFilterForm(request.GET, viewer=request.user)
    filters = form.filters()
    # Keyset pages (after/before a cursor, or the last page): no OFFSET, however deep.
    page = runs_page(
        viewer=request.user,
        filters=filters,
        after=request.GET.get("after"),
        before=request.GET.get("before"),
        last=request.GET.get("last") == "1",
        size=RUNS_PER_PAGE,
    )
    progress = runs_progress([run.pk for run in page.object_list])
    runs_derived_read([run for run in page.object_list if run.origin_id], user=request.user)
    context = {
        "form": form,
        "page": page,
        "progress": progress,
        "filtered": filters != RunFilters(sort=filters.sort),
        "can_see_all": request.user.has_perm("plans.view_all_runs"),
        "sort": filters.sort,
        "table_id": RUNS_TABLE_ID,
        "sort_columns": _sort_columns(filters.sort),
    }
    # Filters, sorting and paging swap only the table; anything else gets the whole page.
    htmx = request.htmx
    partial = bool(htmx) and htmx.target == RUNS_TABLE_ID and not htmx.history_restore_request
    template = "plans/run_list.html#runs_table" if partial else "plans/run_list.html"
    response = render(request, template, context)
    patch_vary_headers(response, ("HX-Request", "HX-Target"))
    return response


def _sort_columns(current: str) -> dict[str, dict[str, str]]:
    """For each sortable column: the sort its header link asks for and its arrow."""
    columns = {}
    for key in ("date", "cost", "duration"):
        descending = f"-{key}"
        if current == descending:
            columns[key] = {"next": key, "arrow": "\u2193", "aria": "descending"}
        elif current == key:
            columns[key] = {"next": descending, "arrow": "\u2191", "aria": "ascending"}
        else:
            columns[key] = {"next": descending, "arrow": "", "aria": "none"}
    return columns


@login_required
@require_GET
def run_audit(request: SignedInRequest, run_id: int) -> HttpResponse:
    run = visible_run_or_404(request, run_id)
    # The event log, each version's steps and the tool calls a page at a time (?events_after=
    # seq, ?steps_after=n, ?tool_calls_after=n): a 500-step run has thousands of events.
    audit = run_audit_get(
        run=run,
        events_after=whole_number(request.GET.get("events_after", "")) or 0,
        steps_after=whole_number(request.GET.get("steps_after", "")) or 0,
        tool_calls_after=whole_number(request.GET.get("tool_calls_after", "")) or 0,
    )
    return render(
        request,
        "plans/run_audit.html",
        {
            "run": run,
            "audit": audit,
            "timeline_svg": run_timeline_svg(audit, now=timezone.now()),
            "status_colours": STATUS_COLOURS,
            "several_versions": len(audit.versions) > 1,
            # What a parked run waits on (a reviewer, an answer) is read only for its status pill.
            "progress": (
                runs_progress([run.pk]).get(run.pk)
                if run.status == Run.Status.AWAITING_APPROVAL
                else None
            ),
        },
    )


@login_required
@require_GET
def run_export(request: SignedInRequest, run_id: int) -> StreamingHttpResponse:
    run = visible_run_or_404(request, run_id)
    # Streamed as it is encoded: a big run's export starts at once and is never whole in memory.
    response = StreamingHttpResponse(
        (piece.encode() for piece in run_export_chunks(run=run)),
        content_type="application/json; charset=utf-8",
    )
    response["Content-Disposition"] = content_disposition_header(
        as_attachment=True, filename=f"run-{run.pk}.json"
    )
    response["X-Content-Type-Options"] = "nosniff"
    return response


@login_required
@require_GET
def run_graph_svg(request: SignedInRequest, run_id: int) -> HttpResponse:
    run = visible_run_or_404(request, run_id)
    version = request.GET.get("version", "")
    number = whole_number(version) if version else None
    if version and number is None:
        raise Http404("No such plan version.")
    plan = plan_version_get(run, number)
    if plan is None:
        raise Http404("This run has no plan yet.")
    svg = plan_svg(plan, plan_steps_list(plan), decisions=step_decisions(plan))
    response = HttpResponse(svg, content_type="image/svg+xml; charset=utf-8")
    response["Content-Security-Policy"] = SVG_CSP
    response["X-Content-Type-Options"] = "nosniff"
    # Step statuses change while a run is live: always revalidate.
    patch_cache_control(response, private=True, no_cache=True)
    return response
