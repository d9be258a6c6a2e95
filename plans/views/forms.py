"""The forms behind the decision POSTs: a reviewer's verdict on a round's steps, or on a plan."""

from __future__ import annotations

from typing import Any

from django import forms

from plans.engine.text import whole_number

VERDICTS = [("approve", "Approve"), ("reject", "Reject")]


class WholeNumbersField(forms.Field):
    """Database ids ticked in a form: what is not a whole number is ignored, not an error."""

    widget = forms.MultipleHiddenInput

    def to_python(self, value: Any) -> list[int]:
        texts = value if isinstance(value, list | tuple) else []
        return [number for number in map(whole_number, texts) if number is not None]


class VerdictForm(forms.Form):
    """Approve or reject, with a reason (which a rejection needs; the service says so)."""

    decision = forms.ChoiceField(choices=VERDICTS)
    reason = forms.CharField(required=False, strip=False)

    @property
    def approve(self) -> bool:
        return self.cleaned_data["decision"] == "approve"

    @property
    def changes(self) -> bool:
        return self.cleaned_data["decision"] == "changes"


class RoundDecisionForm(VerdictForm):
    """The ticked destructive steps of one run's round, decided together; or sent back with
    instructions for a replan (the reason box holds them)."""

    decision = forms.ChoiceField(choices=[*VERDICTS, ("changes", "Request changes")])
    group = forms.CharField()
    # Ids not of this run and round are ignored by the view's query, not refused.
    approval = WholeNumbersField(required=False)

    def __init__(self, data: Any) -> None:
        super().__init__(data)
        self.drafts_by_text = {
            name.removeprefix("args-"): value
            for name, value in data.items()
            if name.startswith("args-")
        }
        # The hash of the arguments each card showed: the decision is bound to them.
        self.seen_by_text = {
            name.removeprefix("seen-"): value
            for name, value in data.items()
            if name.startswith("seen-")
        }
        # And the token of the preview it showed with them (plans.engine.preview_token).
        self.previews_by_text = {
            name.removeprefix("preview-"): value
            for name, value in data.items()
            if name.startswith("preview-")
        }

    def clean_group(self) -> tuple[int, int]:
        run_text, _, round_text = self.cleaned_data["group"].partition("-")
        run_id, round_no = whole_number(run_text), whole_number(round_text)
        if run_id is None or round_no is None:
            raise forms.ValidationError("expected a group (run-round)", code="invalid")
        return run_id, round_no

    def draft_for(self, approval_id: int) -> str | None:
        """What the reviewer left in the step's argument box, if the form carried one."""
        return self.drafts_by_text.get(str(approval_id))

    def seen_for(self, approval_id: int) -> str | None:
        """The args_sha256 the step's card showed (None: the form did not say)."""
        return self.seen_by_text.get(str(approval_id))

    def preview_seen_for(self, approval_id: int) -> str | None:
        """The token of the preview the step's card showed (None: the form did not say)."""
        return self.previews_by_text.get(str(approval_id))


class PlanDecisionForm(VerdictForm):
    """A reviewer's verdict on a whole plan (the plan-approval policy), or instructions for a
    replan (the reason box holds them)."""

    decision = forms.ChoiceField(choices=[*VERDICTS, ("changes", "Request changes")])


class QuestionAnswerForm(forms.Form):
    """A person's answer to an ask_human question: a chosen choice, or typed text."""

    answer = forms.CharField(required=False, strip=False)
    choice = forms.CharField(required=False, strip=False)

    @property
    def text(self) -> str:
        return self.cleaned_data["choice"] or self.cleaned_data["answer"]
