"""Service endpoints outside the API groups: health, readiness, the JWKS."""

import logging

from django.conf import settings
from django.db import connection
from django.http import JsonResponse
from django.views.decorators.http import require_GET

from agp_project import errors
from agp_project.http.errors import error_response
from agp_project.signing import get_signer

logger = logging.getLogger(__name__)


@require_GET
def healthz(request):
    body = {"status": "ok"}
    if settings.AGP_INSTANCE_ID:
        body["instance"] = settings.AGP_INSTANCE_ID
    return JsonResponse(body)


def _database_ok() -> bool:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
        return True
    except Exception as exc:  # any failure means "not ready", never a 500
        logger.warning("readiness: database unreachable: %s", exc)
        connection.close_if_unusable_or_obsolete()
        return False


def _broker_ok() -> bool:
    from agp_project.celery import app

    url = settings.CELERY_BROKER_URL
    if url.startswith("filesystem://"):
        return settings.BROKER_DIR.is_dir()
    try:
        # The configured URL, one attempt, no back-off: a probe must answer quickly.
        with app.connection_for_write(url=url) as conn:
            conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0, timeout=2)
        return True
    except Exception as exc:
        logger.warning("readiness: broker unreachable: %s", exc)
        return False


@require_GET
def readyz(request):
    checks = {"database": _database_ok(), "broker": _broker_ok()}
    if all(checks.values()):
        return JsonResponse({"status": "ready", "checks": checks})
    err = errors.Unavailable("Not ready: " + ", ".join(name for name, ok in checks.items() if not ok) + " unreachable.",
                             details={"checks": checks})
    return error_response(err)


@require_GET
def jwks(request):
    response = JsonResponse({"keys": [get_signer().jwk()]})
    response["Cache-Control"] = "public, max-age=300"
    return response
