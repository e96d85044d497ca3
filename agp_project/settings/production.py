"""Production settings: the base settings, refusing to start where a deployment must decide.

``scripts/serve`` uses them with ``AGP_MODE=production``; the container image always does.

- The public host: ``AGP_BASE_URL`` (the URL clients reach; ``Location``, ``status_url``,
  ``result_url`` and callbacks are built from it, and its host is allowed) or
  ``AGP_ALLOWED_HOSTS``. With neither, the service would answer only ``localhost``, which
  in production is a misconfiguration to report at start, not a stream of 400s.
- ``DEBUG`` is off whatever ``AGP_DEBUG`` says.
- Behind HTTPS (an ``https`` base URL) the admin's session and CSRF cookies are ``Secure``.
"""

from django.core.exceptions import ImproperlyConfigured

from .base import *  # noqa: F403
from .env import env_str

if not env_str("AGP_BASE_URL") and not env_str("AGP_ALLOWED_HOSTS"):
    raise ImproperlyConfigured(
        "Production settings need AGP_BASE_URL (the public URL of this service) or AGP_ALLOWED_HOSTS "
        "(the host names it answers to).")

DEBUG = False
WHITENOISE_AUTOREFRESH = False
if AGP_BASE_URL.startswith("https://"):  # noqa: F405
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
