"""The Celery app, configured from Django settings with the ``CELERY_`` prefix."""

import os
import warnings

from celery import Celery
from celery.exceptions import SecurityWarning

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agp_project.settings.base")

# Celery warns on every start as root because a root worker that unpickles messages can be
# made to run anything. This worker accepts JSON only (CELERY_ACCEPT_CONTENT; with pickle
# Celery refuses to start as root at all), and scripts/serve commonly runs as root in
# containers and CI; the Docker image runs as an unprivileged user.
warnings.filterwarnings("ignore", message="You're running the worker with superuser privileges",
                        category=SecurityWarning)

app = Celery("agp")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
