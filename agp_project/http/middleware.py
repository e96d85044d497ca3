"""Cross-cutting HTTP middleware: body size limit and security headers."""

from django.conf import settings
from django.core.exceptions import RequestDataTooBig

from agp_project import errors
from agp_project.http.errors import error_response


class BodySizeLimitMiddleware:
    """413 for bodies over ``AGP_MAX_BODY_BYTES`` (1 MiB), before anything reads them."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
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


class NulQueryMiddleware:
    """400 for a query string carrying NUL (%00): PostgreSQL cannot compare text with it."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if "%00" in request.META.get("QUERY_STRING", "") and any(
                "\x00" in key or any("\x00" in value for value in values)
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
