"""Service endpoints outside the API groups: health, readiness, the JWKS, the API's index and docs."""

import logging
import re

from django.conf import settings
from django.db import connection
from django.http import JsonResponse
from django.urls import URLResolver, get_resolver
from django.views.decorators.http import require_GET
from drf_spectacular.utils import extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from agp_project import errors
from agp_project.http.errors import error_response
from agp_project.http.viewsets import absolute_url
from agp_project.signing import get_signer

logger = logging.getLogger(__name__)

# A route's literal text, or a named group, of the API's regex and path patterns.
_COLLECTION = re.compile(r"^\^?([a-z][a-z-]*)\$?$")
_NAMED_GROUP = re.compile(r"\(\?P<(\w+)>(?:[^()]|\([^()]*\))*\)|<(?:\w+:)?(\w+)>")


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


# The API group an app's routes make, where it is not named after the app.
GROUP_OF_APP = {"auth_tokens": "admin"}


def _api_groups():
    """The API groups under /agp/ as routed (one per app): its collections, then its other paths."""
    groups = {}
    for entry in get_resolver().url_patterns:
        if not (isinstance(entry, URLResolver) and str(entry.pattern) == "agp/"):
            continue
        app = entry.urlconf_module.__name__.split(".")[0]
        name = GROUP_OF_APP.get(app, app)
        collections, others = groups.setdefault(name, ({}, []))
        for pattern in entry.url_patterns:
            text = str(pattern.pattern)
            match = _COLLECTION.match(text)
            if match:
                collections[match.group(1)] = f"/agp/{match.group(1)}"
                continue
            path = "/agp/" + _NAMED_GROUP.sub(lambda m: "{" + (m.group(1) or m.group(2)) + "}", text).strip("^$")
            if path.split("/")[2] not in collections and path not in others:
                others.append(path)
    return groups


class ApiIndexView(APIView):
    """``GET /agp/``: the API groups and their collections, with the OpenAPI document and the docs.

    Open like the OpenAPI document: it says nothing the document does not.
    """

    authentication_classes = []
    permission_classes = []

    @extend_schema(exclude=True)
    def get(self, request):
        base = absolute_url(request, "/")[:-1]

        def link(path):  # not build_absolute_uri: it would escape a template's braces
            return base + path

        return Response({
            "service": settings.SPECTACULAR_SETTINGS["TITLE"],
            "version": settings.SPECTACULAR_SETTINGS["VERSION"],
            "openapi": link("/agp/openapi.json"),
            "docs": link("/agp/docs"),
            "groups": [
                {"name": name, "collections": {key: link(path) for key, path in collections.items()},
                 "paths": [link(path) for path in others]}
                for name, (collections, others) in _api_groups().items()
            ],
        })
