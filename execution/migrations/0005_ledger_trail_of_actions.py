"""An action's older ledger events (operation, payment, receipt, callback) recorded its
``action_id`` (or its operation's id) but not its task: derive both from the envelope."""

from django.db import migrations
from django.db.models import OuterRef, Subquery


def trail_from_envelopes(apps, schema_editor):
    LedgerEvent = apps.get_model("core", "LedgerEvent")
    ActionEnvelope = apps.get_model("execution", "ActionEnvelope")
    Operation = apps.get_model("execution", "Operation")
    # Callback events name only their operation.
    LedgerEvent.objects.filter(action_id__isnull=True, resource_type="Operation").update(action_id=Subquery(
        Operation.objects.filter(operation_id=OuterRef("resource_id")).values("envelope_id")[:1]))
    LedgerEvent.objects.filter(action_id__isnull=False, task_id__isnull=True).update(task_id=Subquery(
        ActionEnvelope.objects.filter(action_id=OuterRef("action_id")).values("task_id")[:1]))


class Migration(migrations.Migration):

    dependencies = [
        ("core", "0006_ledger_event_trail"),
        ("execution", "0004_receipt_governance"),
    ]

    operations = [migrations.RunPython(trail_from_envelopes, migrations.RunPython.noop)]
