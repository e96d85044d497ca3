"""The URL clients reach this service at: what Location headers say and what clients sign."""

from django.conf import settings


def absolute_url(request, path: str) -> str:
    """``AGP_BASE_URL`` + path, else the request's own scheme and host.

    A worker has no request (``None``): without ``AGP_BASE_URL`` it gets the path only,
    which is why deployments that use callbacks set ``AGP_BASE_URL``.
    """
    base = settings.AGP_BASE_URL
    if base:
        return f"{base}{path}"
    return request.build_absolute_uri(path) if request is not None else path
