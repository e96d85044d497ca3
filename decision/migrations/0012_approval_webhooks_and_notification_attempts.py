"""Where a tenant is told that a decision waits for its people, and every attempt to tell it."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('decision', '0011_approval_reason'),
    ]

    operations = [
        migrations.CreateModel(
            name='ApprovalWebhook',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('root_principal', models.CharField(max_length=128, unique=True)),
                ('url', models.URLField(max_length=2048)),
                ('is_active', models.BooleanField(default=True)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('updated_at', models.DateTimeField(auto_now=True)),
            ],
            options={
                'ordering': ['root_principal'],
            },
        ),
        migrations.CreateModel(
            name='ApprovalNotificationAttempt',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('attempt', models.PositiveIntegerField()),
                ('url', models.URLField(max_length=2048)),
                ('status', models.CharField(choices=[('pending', 'Pending'), ('delivered', 'Delivered'), ('failed', 'Failed')], max_length=16)),
                ('response_status', models.PositiveSmallIntegerField(blank=True, null=True)),
                ('error', models.TextField(blank=True, default='')),
                ('attempted_at', models.DateTimeField()),
                ('decision', models.ForeignKey(db_column='decision_ref', on_delete=django.db.models.deletion.PROTECT, related_name='notification_attempts', to='decision.decision', to_field='decision_id')),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('decision', 'attempt'), name='approval_notification_attempt_unique')],
            },
        ),
    ]
