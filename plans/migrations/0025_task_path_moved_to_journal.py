"""Queued tasks name their function by import path; the tasks module moved to plans.journal."""

from django.db import migrations

OLD, NEW = "plans.runtime.tasks.", "plans.journal.tasks."


def _rename(apps, old: str, new: str) -> None:
    DBTaskResult = apps.get_model("django_tasks_database", "DBTaskResult")
    for task in DBTaskResult.objects.filter(task_path__startswith=old).only("task_path"):
        task.task_path = new + task.task_path.removeprefix(old)
        task.save(update_fields=["task_path"])


def forwards(apps, schema_editor) -> None:
    _rename(apps, OLD, NEW)


def backwards(apps, schema_editor) -> None:
    _rename(apps, NEW, OLD)


class Migration(migrations.Migration):
    dependencies = [
        ("plans", "0024_step_repeat"),
        ("django_tasks_database", "0001_initial"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
