"""Records made before tenants were recorded get their task's root principal.

Envelopes, escalations and the ledger's events that name a task belong to that task's tenant;
without this, only callers of every tenant would see them. Events that name no task stay of
no tenant (operators and auditors of every tenant see them).
"""

from django.db import migrations
from django.db.models import OuterRef, Subquery


def backfill(apps, schema_editor):
    task_tenant = Subquery(apps.get_model("registry", "Task").objects
                           .filter(task_id=OuterRef("task_id")).values("root_principal")[:1])
    apps.get_model("execution", "ActionEnvelope").objects.filter(root_principal__isnull=True).update(
        root_principal=task_tenant)
    apps.get_model("decision", "Escalation").objects.filter(root_principal__isnull=True, task__isnull=False).update(
        root_principal=task_tenant)
    apps.get_model("core", "LedgerEvent").objects.filter(root_principal__isnull=True, task_id__isnull=False).update(
        root_principal=task_tenant)


class Migration(migrations.Migration):

    dependencies = [
        ("execution", "0008_envelope_tenant"),
        ("core", "0010_ledger_event_tenant"),
        ("decision", "0007_authors_and_tenants"),
        ("registry", "0008_authors_and_tenants"),
    ]

    operations = [migrations.RunPython(backfill, migrations.RunPython.noop)]
