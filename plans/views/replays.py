"""A run's replays: the list, the operator's Replay form, and one replay's diff."""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods

from plans.evals.replay import CURRENT_PROMPTS, ReplayError, replay_save, run_replay
from plans.evals.runner import models_known, prompt_version
from plans.llm import model_for
from plans.models import RunReplay
from plans.views.params import SignedInRequest, visible_run_or_404

REPLAY_PERMISSION = "plans.add_runreplay"

# What each refusal of run_replay answers: the operator asked for something it cannot do, or
# the model failed on the way.
REPLAY_REFUSAL_STATUS = {"agent": 409, "prompt_version": 400, "model": 400, "model_failed": 502}


class ReplayForm(forms.Form):
    """The model and prompt version to replay on: offered as lists, checked by run_replay (a
    value from elsewhere is refused there with what is wrong, not silently replaced)."""

    model = forms.CharField(required=False, widget=forms.Select)
    prompt_version = forms.CharField(required=False, widget=forms.Select, label="Prompts")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        current = prompt_version()
        self.fields["model"].widget.choices = [(name, name) for name in models_known()]
        self.fields["model"].initial = model_for("plan")
        self.fields["prompt_version"].widget.choices = [(current, f"{current} (this checkout's)")]
        self.fields["prompt_version"].initial = current

    def choice(self) -> tuple[str, str]:
        """(model, prompt version) as posted; a field left out means the configured model or
        this checkout's prompts."""
        self.is_valid()
        data = self.cleaned_data
        return data.get("model") or model_for("plan"), data.get("prompt_version") or CURRENT_PROMPTS


@require_http_methods(["GET", "POST"])
def run_replays(request: SignedInRequest, run_id: int) -> HttpResponse:
    """GET: the run's stored replays; POST (operators): replay it on the model and prompt
    version chosen."""
    run = visible_run_or_404(request, run_id)
    may_replay = request.user.has_perm(REPLAY_PERMISSION)
    error, status = "", 200
    form = ReplayForm(request.POST if request.method == "POST" else None)
    if request.method == "POST":
        if not may_replay:
            raise PermissionDenied("Replaying a run is for operators.")
        model, prompts = form.choice()
        try:
            replay = run_replay(run=run, wanted_prompt_version=prompts, model=model)
        except ReplayError as failed:
            error, status = str(failed), REPLAY_REFUSAL_STATUS[failed.code]
        else:
            stored = replay_save(replay, requested_by=request.user)
            return redirect("plans:run_replay", run_id=run.pk, replay_id=stored.pk)
    context = {
        "run": run,
        "replays": run.replays.select_related("requested_by"),
        "may_replay": may_replay,
        "form": form,
        "error": error,
    }
    return render(request, "plans/run_replays.html", context, status=status)


def run_replay_view(request: SignedInRequest, run_id: int, replay_id: int) -> HttpResponse:
    """One stored replay: plan, arguments, calls, answer, tokens and cost against the original."""
    run = visible_run_or_404(request, run_id)
    replay = get_object_or_404(RunReplay, run=run, pk=replay_id)
    return render(request, "plans/run_replay.html", {"run": run, "replay": replay})
