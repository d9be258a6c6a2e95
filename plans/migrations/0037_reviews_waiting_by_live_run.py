"""The approvals' (run, decision) index gains requested_at: /reviews/ counts what waits now from
the live runs to their pending requests, reading this index alone (plans.selectors.reviews)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("plans", "0036_approvals_reminders_repeat_and_digest_period"),
    ]

    operations = [
        # The wider index first: lookups by run and decision always have one.
        migrations.AddIndex(
            model_name="approval",
            index=models.Index(
                fields=["run", "decision", "requested_at"], name="approval_run_decision_idx"
            ),
        ),
        migrations.RemoveIndex(
            model_name="approval",
            name="plans_appro_run_id_7869d3_idx",
        ),
    ]
