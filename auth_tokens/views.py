"""``POST /oauth/token``: the OAuth 2.0 client-credentials grant (RFC 6749 4.4, CONTRACT C3).

Errors here follow RFC 6749 5.2, not the AGP envelope, because OAuth client libraries
parse that shape.
"""

import base64
import binascii
import time
from urllib.parse import unquote_plus

from django.conf import settings
from django.core.cache import cache
from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from .scopes import parse_scopes
from .services import auth_enabled, client_authenticate, token_issue

WINDOW_SECONDS = 60


def oauth_error(error: str, description: str, status: int = 400, headers: dict | None = None) -> JsonResponse:
    response = JsonResponse({"error": error, "error_description": description}, status=status)
    response["Cache-Control"] = "no-store"
    response["Pragma"] = "no-cache"
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def _basic_credentials(request) -> tuple[str, str] | None:
    header = request.META.get("HTTP_AUTHORIZATION", "")
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return ("", "")
    client_id, sep, secret = decoded.partition(":")
    if not sep:
        return ("", "")
    # RFC 6749 2.3.1: both parts are form-urlencoded before being joined.
    return unquote_plus(client_id), unquote_plus(secret)


def _throttle_keys(request, client_id: str) -> list[str]:
    window = int(time.time() // WINDOW_SECONDS)
    ip = request.META.get("REMOTE_ADDR", "")
    return [f"agp:tokfail:ip:{ip}:{window}", f"agp:tokfail:client:{client_id}:{window}"]


def _throttled(keys: list[str]) -> bool:
    counts = cache.get_many(keys)
    return any(count >= settings.AGP_TOKEN_FAILURES_PER_MINUTE for count in counts.values())


def _record_failure(keys: list[str]) -> None:
    for key in keys:
        if not cache.add(key, 1, timeout=WINDOW_SECONDS * 2):
            try:
                cache.incr(key)
            except ValueError:
                cache.set(key, 1, timeout=WINDOW_SECONDS * 2)


@csrf_exempt
@require_POST
def token(request):
    if not auth_enabled():
        return oauth_error("invalid_request", "Authentication is disabled on this server (AGP_AUTH_SECRET is unset).")
    content_type = request.content_type or ""
    if content_type != "application/x-www-form-urlencoded":
        return oauth_error("invalid_request", "The body must be application/x-www-form-urlencoded.")
    form = request.POST
    grant_type = form.get("grant_type")
    if not grant_type:
        return oauth_error("invalid_request", "grant_type is required.")
    if grant_type != "client_credentials":
        return oauth_error("unsupported_grant_type", "Only grant_type=client_credentials is supported.")

    basic = _basic_credentials(request)
    if basic is not None and "client_secret" in form:
        return oauth_error("invalid_request", "Send client credentials either in the form or with HTTP Basic, not both.")
    client_id, secret = basic if basic is not None else (form.get("client_id", ""), form.get("client_secret", ""))
    if not client_id or not secret:
        if basic is not None:
            return oauth_error("invalid_client", "Malformed HTTP Basic credentials.", 401,
                               {"WWW-Authenticate": 'Basic realm="agp"'})
        return oauth_error("invalid_request", "client_id and client_secret are required.")

    keys = _throttle_keys(request, client_id)
    if _throttled(keys):
        return oauth_error("invalid_client", "Too many failed attempts; try again later.", 429,
                           {"Retry-After": str(WINDOW_SECONDS - int(time.time()) % WINDOW_SECONDS)})
    client = client_authenticate(client_id=client_id, secret=secret)
    if client is None:
        _record_failure(keys)
        headers = {"WWW-Authenticate": 'Basic realm="agp"'} if basic is not None else None
        return oauth_error("invalid_client", "Client authentication failed.", 401, headers)

    requested = parse_scopes(form.get("scope", ""))
    if requested:
        outside = sorted(set(requested) - set(client.scopes))
        if outside:
            return oauth_error("invalid_scope", f"Scopes not granted to this client: {' '.join(outside)}")
        scopes = [s for s in client.scopes if s in set(requested)]
    else:
        scopes = list(client.scopes)
    response = JsonResponse(token_issue(client=client, scopes=scopes))
    response["Cache-Control"] = "no-store"
    response["Pragma"] = "no-cache"
    return response
