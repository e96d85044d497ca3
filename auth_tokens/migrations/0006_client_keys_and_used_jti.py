from django.db import migrations, models

import core.fields


class Migration(migrations.Migration):
    """Client keys (jwks, require_dpop) and the shared single-use store of assertion and proof ids."""

    dependencies = [
        ('auth_tokens', '0005_client_kind_and_bindings'),
    ]

    operations = [
        migrations.AddField(
            model_name='client',
            name='jwks',
            field=core.fields.ExactJSONField(blank=True, default=dict),
        ),
        migrations.AddField(
            model_name='client',
            name='require_dpop',
            field=models.BooleanField(default=False),
        ),
        migrations.CreateModel(
            name='UsedJti',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('key', models.CharField(max_length=64, unique=True)),
                ('expires_at', models.DateTimeField(db_index=True)),
            ],
        ),
    ]
