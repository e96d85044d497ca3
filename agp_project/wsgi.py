import gc
import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agp_project.settings.base")

django_application = get_wsgi_application()

from gateway.wsgi import gateway_application  # noqa: E402 - needs the apps loaded

# The MCP gateway's one path (docs/decisions/gateway.md); everything else is Django's.
MCP_PATH = "/mcp"


def application(environ, start_response):
    if environ.get("PATH_INFO") == MCP_PATH:
        return gateway_application(environ, start_response)
    return django_application(environ, start_response)


# What start-up created (Django, the apps, their modules and settings) lives as long as the
# process. Frozen, it is out of the collector's sight: a full collection, which walked all
# of it and paused a worker for over 100 ms (a p99 spike in the benchmark), only walks what
# requests created since.
gc.collect()
gc.freeze()
