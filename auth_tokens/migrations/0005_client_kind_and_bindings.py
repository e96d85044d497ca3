from django.db import migrations, models

import core.fields


class Migration(migrations.Migration):
    """Client kinds: every client that existed before is an operator (every scope, every tenant)."""

    dependencies = [
        ('auth_tokens', '0004_exact_json_numbers'),
    ]

    operations = [
        migrations.AddField(
            model_name='client',
            name='kind',
            field=models.CharField(choices=[('operator', 'operator'), ('agent', 'agent'), ('human', 'human'),
                                            ('auditor', 'auditor')], default='operator', max_length=16),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name='client',
            name='agent_id',
            field=models.CharField(blank=True, default='', max_length=128),
        ),
        migrations.AddField(
            model_name='client',
            name='subject',
            field=models.CharField(blank=True, default='', max_length=256),
        ),
        migrations.AddField(
            model_name='client',
            name='tenants',
            field=core.fields.ExactJSONField(blank=True, default=list),
        ),
    ]
