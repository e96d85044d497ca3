"""The outbox table becomes core's (``core.OutboxMessage``, see core's ``0007_outbox_message``).

The rows stay: the table is renamed, and execution forgets the model.
"""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [("execution", "0005_ledger_trail_of_actions")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.AlterModelTable(name="outboxmessage", table="core_outboxmessage")],
            state_operations=[migrations.DeleteModel(name="OutboxMessage")],
        ),
    ]
