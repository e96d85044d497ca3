"""The waiting table is a queue: every event is inserted and soon deleted. PostgreSQL's default
autovacuum waits for a fifth of a table to be dead, which a table that is nearly empty
between bursts reaches at once or never; these settings vacuum it after every few thousand
deleted rows, so the sequencer's poll does not walk dead index entries (docs/scaling.md)."""

from django.db import migrations

TABLE = "core_ledgerpendingevent"
QUEUE_SETTINGS = "autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 5000"


def queue_vacuum(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER TABLE {TABLE} SET ({QUEUE_SETTINGS})")


def default_vacuum(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER TABLE {TABLE} RESET (autovacuum_vacuum_scale_factor, "
                              "autovacuum_vacuum_threshold)")


class Migration(migrations.Migration):

    dependencies = [
        ("core", "0012_ledger_pending_event"),
    ]

    operations = [
        migrations.RunPython(queue_vacuum, default_vacuum),
    ]
