"""The outbox moves from execution to core, so that every app can make a task due after its commit.

State only: the table is execution's, renamed to ``core_outboxmessage`` by execution's
``0006_outbox_message_moves_to_core``, which owns the rows until then. Neither migration
depends on the other: only their states meet, and no other model refers to this one.
"""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [("core", "0006_ledger_event_trail")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="OutboxMessage",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False,
                                                   verbose_name="ID")),
                        ("task_name", models.CharField(max_length=128)),
                        ("args", models.JSONField(default=list)),
                        ("status", models.CharField(choices=[("pending", "Pending"), ("published", "Published")],
                                                    db_index=True, default="pending", max_length=16)),
                        ("attempts", models.PositiveIntegerField(default=0)),
                        ("created_at", models.DateTimeField()),
                        ("published_at", models.DateTimeField(blank=True, null=True)),
                    ],
                ),
            ],
            database_operations=[],
        ),
    ]
