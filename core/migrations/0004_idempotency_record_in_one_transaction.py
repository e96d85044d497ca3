"""An idempotency record is written with its request's work, in one transaction: there is no
in-flight state any more, only answered requests. Records still in flight (a request that
died with the old code) are dropped; their keys are free again."""

from django.db import migrations, models


def drop_in_flight(apps, schema_editor):
    apps.get_model("core", "IdempotencyRecord").objects.exclude(state="done").delete()


class Migration(migrations.Migration):
    dependencies = [("core", "0003_ledger_indexes_without_pattern_ops")]

    operations = [
        migrations.RunPython(drop_in_flight, migrations.RunPython.noop),
        migrations.RemoveField(model_name="idempotencyrecord", name="state"),
        migrations.RenameField(model_name="idempotencyrecord", old_name="locked_at", new_name="created_at"),
        migrations.AlterField(model_name="idempotencyrecord", name="response_status",
                              field=models.PositiveSmallIntegerField()),
        migrations.AlterField(model_name="idempotencyrecord", name="response_body", field=models.BinaryField()),
    ]
