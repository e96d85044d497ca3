"""An approval keeps why its approver decided so (the approvals inbox asks)."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('decision', '0010_approval_approver_signature'),
    ]

    operations = [
        migrations.AddField(
            model_name='approval',
            name='reason',
            field=models.TextField(blank=True, default=''),
        ),
    ]
