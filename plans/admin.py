"""Raw audit records, read-only: the admin is for looking, services are for changing."""

from django.contrib import admin

from plans import models


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(models.Goal)
class GoalAdmin(ReadOnlyAdmin):
    list_display = ["id", "author", "text", "created_at"]
    list_select_related = ["author"]
    search_fields = ["text"]


@admin.register(models.Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = ["id", "goal", "status", "model_call_count", "cost_usd", "created_at"]
    list_filter = ["status"]
    list_select_related = ["goal"]


@admin.register(models.Plan)
class PlanAdmin(ReadOnlyAdmin):
    list_display = ["id", "run", "version", "source", "is_valid", "created_at"]


@admin.register(models.Step)
class StepAdmin(ReadOnlyAdmin):
    list_display = ["id", "plan", "step_id", "tool", "status", "round", "attempts"]
    list_filter = ["status", "tool", "destructive"]


@admin.register(models.Approval)
class ApprovalAdmin(ReadOnlyAdmin):
    list_display = ["id", "run", "tool", "decision", "reviewer", "args_sha256", "decided_at"]
    list_filter = ["decision", "tool"]
    list_select_related = ["reviewer", "run"]


@admin.register(models.RunEvent)
class RunEventAdmin(ReadOnlyAdmin):
    list_display = ["id", "run", "seq", "kind", "at"]
    list_filter = ["kind"]


@admin.register(models.ModelCall)
class ModelCallAdmin(ReadOnlyAdmin):
    list_display = ["id", "run", "purpose", "model", "input_tokens", "output_tokens", "cost_usd"]
    list_filter = ["purpose", "model"]


@admin.register(models.ToolCall)
class ToolCallAdmin(ReadOnlyAdmin):
    list_display = ["id", "run", "tool", "attempt", "duration_ms", "idempotency_key"]
    list_filter = ["tool"]


@admin.register(models.ToolPreview)
class ToolPreviewAdmin(ReadOnlyAdmin):
    list_display = ["id", "run", "tool", "purpose", "duration_ms", "error", "started_at"]
    list_filter = ["tool", "purpose"]


@admin.register(models.LedgerEntry)
class LedgerEntryAdmin(ReadOnlyAdmin):
    list_display = ["id", "kind", "reference", "idempotency_key", "created_at"]
    list_filter = ["kind"]


@admin.register(models.Experiment)
class ExperimentAdmin(ReadOnlyAdmin):
    list_display = ["id", "agent", "model", "prompt_version", "passed", "trials", "created_at"]
    list_filter = ["agent", "model"]


@admin.register(models.EvalResult)
class EvalResultAdmin(ReadOnlyAdmin):
    list_display = ["id", "experiment", "case_id", "category", "attempt", "passed", "run"]
    list_filter = ["category", "passed"]
    list_select_related = ["experiment", "run"]
    search_fields = ["case_id"]


from plans.api import admin as api_admin  # noqa: E402, F401  (tokens)
from plans.notifications import admin as notifications_admin  # noqa: E402, F401  (webhooks)
