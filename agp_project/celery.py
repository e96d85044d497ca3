"""The Celery app, configured from Django settings with the ``CELERY_`` prefix."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agp_project.settings.base")

app = Celery("agp")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
