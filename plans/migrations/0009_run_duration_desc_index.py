"""Longest-first sorting of the runs list on PostgreSQL.

The runs list sorts by duration with unfinished runs (no duration) last in both directions.
SQLite serves DESC NULLS LAST by reading run_duration_idx backwards; PostgreSQL reads it
backwards as DESC NULLS FIRST, so it needs this index. SQLite cannot declare NULLS LAST in an
index, which is why it is not a Meta index.
"""

from django.db import migrations

INDEX = "run_duration_desc_idx"


def create_index(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            f'CREATE INDEX IF NOT EXISTS "{INDEX}" ON "plans_run" ("duration_ms" DESC NULLS LAST)'
        )


def drop_index(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f'DROP INDEX IF EXISTS "{INDEX}"')


class Migration(migrations.Migration):
    dependencies = [
        ("plans", "0008_event_lease_token"),
    ]

    operations = [migrations.RunPython(create_index, drop_index, elidable=False)]
