from django.db import migrations, models

import core.fields


class Migration(migrations.Migration):
    """The approver's own signature over its verdict, and the key that verified it."""

    dependencies = [
        ('decision', '0009_backtest_slices_and_limits'),
    ]

    operations = [
        migrations.AddField(
            model_name='approval',
            name='approver_signature',
            field=models.TextField(blank=True, default=''),
        ),
        migrations.AddField(
            model_name='approval',
            name='approver_key',
            field=core.fields.ExactJSONField(blank=True, default=dict),
        ),
    ]
