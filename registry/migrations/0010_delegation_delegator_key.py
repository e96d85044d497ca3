from django.db import migrations

import core.fields


class Migration(migrations.Migration):
    """The delegator's key that verified its signed link (docs/reference/identity.md, "Keys")."""

    dependencies = [
        ('registry', '0009_task_policy_set'),
    ]

    operations = [
        migrations.AddField(
            model_name='delegation',
            name='delegator_key',
            field=core.fields.ExactJSONField(blank=True, default=dict),
        ),
    ]
