"""A run's replays: the list, the operator's Replay button, and one replay's diff."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods

from plans.evals.replay import ReplayError, replay_save, run_replay
from plans.llm import model_for
from plans.models import RunReplay
from plans.views.params import SignedInRequest, visible_run_or_404

REPLAY_PERMISSION = "plans.add_runreplay"


@require_http_methods(["GET", "POST"])
def run_replays(request: SignedInRequest, run_id: int) -> HttpResponse:
    """GET: the run's stored replays; POST (operators): replay it on the configured model."""
    run = visible_run_or_404(request, run_id)
    may_replay = request.user.has_perm(REPLAY_PERMISSION)
    error, status = "", 200
    if request.method == "POST":
        if not may_replay:
            raise PermissionDenied("Replaying a run is for operators.")
        try:
            replay = run_replay(run=run, wanted_prompt_version="current")
        except ReplayError as failed:
            error, status = str(failed), 502
        else:
            stored = replay_save(replay, requested_by=request.user)
            return redirect("plans:run_replay", run_id=run.pk, replay_id=stored.pk)
    context = {
        "run": run,
        "replays": run.replays.select_related("requested_by"),
        "may_replay": may_replay,
        "model": model_for("plan"),
        "error": error,
    }
    return render(request, "plans/run_replays.html", context, status=status)


def run_replay_view(request: SignedInRequest, run_id: int, replay_id: int) -> HttpResponse:
    """One stored replay: plan, arguments, calls, answer, tokens and cost against the original."""
    run = visible_run_or_404(request, run_id)
    replay = get_object_or_404(RunReplay, run=run, pk=replay_id)
    return render(request, "plans/run_replay.html", {"run": run, "replay": replay})
