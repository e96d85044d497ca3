"""Ledger events carry the task and the action they belong to (docs/reference/governance.md): ``task_id`` and
``action_id``, an index of what each payload says. Events already recorded get them from their
payload's members, or from their own resource for a task's or an envelope's event; the
execution app's migration then gives an action's older events its task."""

from django.db import migrations, models

BATCH = 5000
TRAIL_RESOURCES = {"task_id": "Task", "action_id": "ActionEnvelope"}


def trail_from_payloads(apps, schema_editor):
    LedgerEvent = apps.get_model("core", "LedgerEvent")
    last = 0
    while True:
        events = list(LedgerEvent.objects.filter(sequence__gt=last).order_by("sequence")
                      .only("sequence", "resource_type", "resource_id", "payload")[:BATCH])
        if not events:
            return
        changed = []
        for event in events:
            payload = event.payload if isinstance(event.payload, dict) else {}
            for name, own in TRAIL_RESOURCES.items():
                value = payload.get(name)
                if not isinstance(value, str) or not value:
                    value = event.resource_id if event.resource_type == own else None
                setattr(event, name, value)
            if event.task_id or event.action_id:
                changed.append(event)
        LedgerEvent.objects.bulk_update(changed, ["task_id", "action_id"])
        last = events[-1].sequence


class Migration(migrations.Migration):

    dependencies = [
        ("core", "0005_transparency_log"),
    ]

    operations = [
        migrations.AddField(
            model_name="ledgerevent",
            name="action_id",
            field=models.CharField(blank=True, max_length=128, null=True),
        ),
        migrations.AddField(
            model_name="ledgerevent",
            name="task_id",
            field=models.CharField(blank=True, max_length=128, null=True),
        ),
        migrations.RunPython(trail_from_payloads, migrations.RunPython.noop),
        migrations.AddIndex(
            model_name="ledgerevent",
            index=models.Index(fields=["task_id", "sequence"], name="core_ledgerevent_task_trail"),
        ),
        migrations.AddIndex(
            model_name="ledgerevent",
            index=models.Index(fields=["action_id", "sequence"], name="core_ledgerevent_action_trail"),
        ),
    ]
