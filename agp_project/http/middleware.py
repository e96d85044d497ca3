"""Cross-cutting HTTP middleware: request ids, metrics, body size limit and security headers."""

import functools
import re
import time

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.urls import Resolver404, resolve

from agp_project import errors, metrics
from agp_project.http.errors import error_response
from agp_project.logformat import QUERY_TOKEN
from agp_project.request_context import HEADER, META_KEY, bind_request_id, request_id_for, unbind_request_id


class BodySizeLimitMiddleware:
    """413 for bodies over ``AGP_MAX_BODY_BYTES`` (1 MiB), before anything reads them; 411 for
    a chunked body.

    Django reads a body by its Content-Length: a chunked one (no Content-Length) would be
    read as empty and the request processed as if nothing had been sent. It is refused
    instead (411 Length Required, RFC 9110 15.5.12), so a client learns to send the length.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if "chunked" in request.META.get("HTTP_TRANSFER_ENCODING", "").lower():
            return error_response(errors.LengthRequired())
        if request.method in ("POST", "PUT", "PATCH"):
            try:
                length = int(request.META.get("CONTENT_LENGTH") or 0)
            except ValueError:
                return error_response(errors.InvalidRequest("Content-Length is not a number."))
            if length > settings.AGP_MAX_BODY_BYTES:
                return self._too_large()
            if not request.path.startswith("/admin/"):
                try:
                    request.body  # noqa: B018 - read now, under DATA_UPLOAD_MAX_MEMORY_SIZE
                except RequestDataTooBig:
                    return self._too_large()
        return self.get_response(request)

    @staticmethod
    def _too_large():
        return error_response(errors.PayloadTooLarge(
            f"The request body exceeds {settings.AGP_MAX_BODY_BYTES} bytes.",
            details={"max_bytes": settings.AGP_MAX_BODY_BYTES}))


class QueryStringMiddleware:
    """400 for a query string that carries what a URL must not.

    - NUL (``%00``) in a name or value: PostgreSQL cannot compare text with it.
    - An ``access_token`` (RFC 6750 2.3 allows a bearer token there; this service does not):
      URLs end up in access logs, proxies' logs and browser histories, where a token is a
      credential anyone reading them could use. Refused on every path, with or without
      authentication on, so a client learns it at once; gunicorn's access log writes the
      value as ``[redacted]`` (agp_project/logformat.py).
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        query = request.META.get("QUERY_STRING", "")
        if query and QUERY_TOKEN in request.GET:
            return error_response(errors.InvalidRequest(
                "Send the access token in the Authorization header (Bearer), never in the URL: URLs are written "
                "to logs. Revoke or let expire a token that was sent this way.",
                details={"fields": {QUERY_TOKEN: ["Not accepted in the query string."]}},
                headers={"WWW-Authenticate": 'Bearer error="invalid_request"'}))
        if "%00" in query and any("\x00" in key or any("\x00" in value for value in values)
                                  for key, values in request.GET.lists()):
            return error_response(errors.InvalidRequest("Query parameters must not contain NUL characters."))
        return self.get_response(request)


class SecurityHeadersMiddleware:
    """Headers every API response carries (OWASP API8: security misconfiguration)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        response.setdefault("X-Content-Type-Options", "nosniff")
        response.setdefault("Referrer-Policy", "no-referrer")
        if request.path.startswith("/agp/") or request.path.startswith("/oauth/"):
            # Over SecurityMiddleware's `same-origin`, which the admin keeps: with
            # `no-referrer` browsers send `Origin: null` on form posts and CSRF refuses them.
            response["Referrer-Policy"] = "no-referrer"
            response.setdefault("Cache-Control", "no-store")
            response.setdefault("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'")
            response.setdefault("X-Frame-Options", "DENY")
        return response


class RequestIdMiddleware:
    """Every request has an id: the client's ``X-Request-ID`` when sane, else a new one.

    It is bound for the request's log lines, carried into the work the request causes (the
    outbox stores it with each task), and echoed in the response's ``X-Request-ID``.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        request_id = request_id_for(request.META.get(META_KEY))
        token = bind_request_id(request_id)
        try:
            response = self.get_response(request)
        finally:
            unbind_request_id(token)
        response[HEADER] = request_id
        return response


_ROUTE_GROUP = re.compile(r"\(\?P<(\w+)>[^)]*\)|<(?:\w+:)?(\w+)>")
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


@functools.lru_cache(maxsize=512)
def route_template(route: str) -> str:
    """``agp/operations/(?P<operation_id>[...])$`` -> ``/agp/operations/{operation_id}``."""
    return "/" + _ROUTE_GROUP.sub(lambda m: "{" + (m.group(1) or m.group(2)) + "}", route).replace("^", "").replace(
        "$", "")


def _route_of(request, status: int) -> str:
    """The URL pattern that answered, as a template: a label with one value per route, never per id."""
    match = getattr(request, "resolver_match", None)
    if match is None:
        # A middleware answered before the URL was resolved (a replayed Idempotency-Key, a
        # body over the limit, a static file): resolve it here, off the usual path.
        if request.path_info.startswith(settings.STATIC_URL):
            return settings.STATIC_URL
        if status == 404:
            return "unmatched"
        try:
            match = resolve(request.path_info)
        except Resolver404:
            return "unmatched"
    return route_template(match.route)


class MetricsMiddleware:
    """Counts every request by route, method and status, and observes its latency (``/metrics``)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        started = time.perf_counter()
        response = self.get_response(request)
        elapsed = time.perf_counter() - started
        route = _route_of(request, response.status_code)
        method = request.method if request.method in _METHODS else "other"
        metrics.HTTP_REQUESTS.labels(route, method, str(response.status_code)).inc()
        metrics.HTTP_LATENCY.labels(route, method).observe(elapsed)
        return response
