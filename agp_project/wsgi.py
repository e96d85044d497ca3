import gc
import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agp_project.settings.base")

application = get_wsgi_application()

# What start-up created (Django, the apps, their modules and settings) lives as long as the
# process. Frozen, it is out of the collector's sight: a full collection, which walked all
# of it and paused a worker for over 100 ms (a p99 spike in the benchmark), only walks what
# requests created since.
gc.collect()
gc.freeze()
