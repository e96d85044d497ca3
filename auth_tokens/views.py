"""``POST /oauth/token``: the OAuth 2.0 client-credentials grant (RFC 6749 4.4, docs/reference/identity.md).

A client authenticates with its secret (RFC 6749 2.3.1) or, when it has keys, with a
signed client assertion (RFC 7523, ``private_key_jwt``); a request carrying a DPoP proof
gets a token bound to the proof's key (RFC 9449).

Errors here follow RFC 6749 5.2, not the AGP envelope, because OAuth client libraries
parse that shape: 401 ``invalid_client``, otherwise 400. Failed client authentications are
counted per source address and per client id; past ``AGP_TOKEN_FAILURES_PER_MINUTE`` in
the current minute, every attempt from that address or for that client gets 429
``slow_down`` with ``Retry-After`` until the minute ends.

The counts live in the shared cache (Redis, ``AGP_CACHE_URL``) and in the process's own
memory. Either reaching the limit throttles. While Redis is down the shared counts are
missing, but each process still counts what it sees: guessing stays limited (to the limit
times the number of web processes) instead of becoming free while Redis is away.
"""

import base64
import binascii
import hashlib
import logging
import re
import time
from urllib.parse import unquote_plus

from django.conf import settings
from django.core.cache import cache, caches
from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt
from rest_framework import status
from rest_framework.response import Response

from agp_project.http.schema import documented
from agp_project.http.viewsets import NO_TENANT, AGPViewSet, CreateMixin, absolute_url
from agp_project.ids import new_id

from . import api_docs, possession
from .models import Client
from .scopes import parse_scopes
from .serializers import ApiClientChangeSerializer, ApiClientSerializer
from .services import (
    auth_enabled,
    client_authenticate,
    client_create,
    client_rotate_secret,
    client_set_active,
    client_update,
    token_issue,
)

logger = logging.getLogger(__name__)

WINDOW_SECONDS = 60
BASIC_CHALLENGE = {"WWW-Authenticate": 'Basic realm="agp"'}


def oauth_error(error: str, description: str, status: int = 400, headers: dict | None = None) -> JsonResponse:
    response = JsonResponse({"error": error, "error_description": description}, status=status)
    _no_store(response)
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def _no_store(response) -> None:
    response["Cache-Control"] = "no-store"
    response["Pragma"] = "no-cache"


def _basic_credentials(request) -> tuple[str, str] | None:
    """HTTP Basic client credentials; ``("", "")`` when the header is malformed."""
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


_CONTROL = re.compile("[\x00-\x1f\x7f\ud800-\udfff]")


def _unprintable(*values: str) -> bool:
    """Whether any credential holds a control character (NUL included) or a lone surrogate:
    RFC 6749 Appendix A allows none in client_id, client_secret or scope, and a NUL would
    reach the database (PostgreSQL refuses it: a 500, not the 400 RFC 6749 5.2 asks for)."""
    return any(_CONTROL.search(value) for value in values)


def _throttle_keys(request, client_id: str) -> list[str]:
    # Fixed one-minute windows; the client id is attacker-chosen text, so it is hashed
    # into the key (cache keys must be short and free of spaces and control characters).
    window = int(time.time() // WINDOW_SECONDS)
    address = request.META.get("REMOTE_ADDR", "")
    client = hashlib.sha256(client_id.encode()).hexdigest()[:32]
    return [f"agp:tokfail:ip:{address}:{window}", f"agp:tokfail:client:{client}:{window}"]


def _throttled(keys: list[str]) -> bool:
    counts = list(caches["local"].get_many(keys).values())
    try:
        counts += cache.get_many(keys).values()
    except Exception:  # the shared cache is away: the process's own counts still decide
        logger.exception("token-endpoint throttle: shared cache unavailable, throttling on this process's counts")
    return any(int(count) >= settings.AGP_TOKEN_FAILURES_PER_MINUTE for count in counts)


def _record_failure(keys: list[str]) -> None:
    _count(caches["local"], keys)
    try:
        _count(cache, keys)
    except Exception:
        logger.exception("token-endpoint throttle: shared cache unavailable, failure counted in this process only")


def _count(counters, keys: list[str]) -> None:
    for key in keys:
        if not counters.add(key, 1, timeout=WINDOW_SECONDS * 2):
            try:
                counters.incr(key)
            except ValueError:  # expired between add and incr
                counters.set(key, 1, timeout=WINDOW_SECONDS * 2)


def _retry_after() -> str:
    return str(WINDOW_SECONDS - int(time.time()) % WINDOW_SECONDS)


@csrf_exempt
def token(request):
    if request.method != "POST":
        return oauth_error("invalid_request", "Use POST.", 405, {"Allow": "POST"})
    if not auth_enabled():
        return oauth_error("invalid_request", "Authentication is disabled on this server (AGP_AUTH_SECRET is "
                                              "unset): no token is needed.")
    if request.content_type != "application/x-www-form-urlencoded":
        return oauth_error("invalid_request", "The body must be application/x-www-form-urlencoded.")
    form = request.POST
    grant_type = form.get("grant_type")
    if not grant_type:
        return oauth_error("invalid_request", "grant_type is required.")
    if grant_type != "client_credentials":
        return oauth_error("unsupported_grant_type", "Only grant_type=client_credentials is supported.")

    basic = _basic_credentials(request)
    if "client_assertion" in form or "client_assertion_type" in form:
        return _token_by_assertion(request, form, basic)
    if basic is not None:
        # RFC 6749 2.3: one client authentication method per request.
        if "client_secret" in form:
            return oauth_error("invalid_request", "Send client credentials either in the form or with HTTP Basic, "
                                                  "not both.")
        if not basic[0] or not basic[1]:
            return oauth_error("invalid_client", "Malformed HTTP Basic credentials.", 401, BASIC_CHALLENGE)
        if "client_id" in form and form["client_id"] != basic[0]:
            return oauth_error("invalid_request", "client_id in the form differs from the HTTP Basic one.")
        client_id, secret = basic
    else:
        client_id, secret = form.get("client_id", ""), form.get("client_secret", "")
        if not client_id or not secret:
            return oauth_error("invalid_request", "client_id and client_secret are required "
                                                  "(in the form or with HTTP Basic).")

    if _unprintable(client_id, secret, form.get("scope", "")):
        return oauth_error("invalid_request", "client_id, client_secret and scope must not contain control "
                                              "characters (RFC 6749 Appendix A).")
    keys = _throttle_keys(request, client_id)
    if _throttled(keys):
        return oauth_error("slow_down", "Too many failed client authentications; try again later.", 429,
                           {"Retry-After": _retry_after()})
    client = client_authenticate(client_id=client_id, secret=secret)
    if client is None:
        _record_failure(keys)
        return oauth_error("invalid_client", "Client authentication failed.", 401,
                           BASIC_CHALLENGE if basic is not None else None)
    return _token_for(request, form, client)


def _token_by_assertion(request, form, basic):
    """RFC 7523 2.2 client authentication: a JWT signed by one of the client's keys (``private_key_jwt``)."""
    if basic is not None or "client_secret" in form:
        return oauth_error("invalid_request", "Authenticate with a client assertion or with a secret, not both.")
    if form.get("client_assertion_type") != possession.ASSERTION_TYPE:
        return oauth_error("invalid_request", f"client_assertion_type must be {possession.ASSERTION_TYPE}.")
    assertion = form.get("client_assertion", "")
    if not assertion or _unprintable(assertion, form.get("scope", ""), form.get("client_id", "")):
        return oauth_error("invalid_request", "client_assertion is required (a JWT).")
    try:
        client_id = possession.assertion_issuer(assertion)
    except possession.PossessionError as exc:
        return oauth_error("invalid_client", f"Client authentication failed: {exc}.", 401)
    if "client_id" in form and form["client_id"] != client_id:
        return oauth_error("invalid_request", "client_id in the form differs from the assertion's iss.")
    keys = _throttle_keys(request, client_id)
    if _throttled(keys):
        return oauth_error("slow_down", "Too many failed client authentications; try again later.", 429,
                           {"Retry-After": _retry_after()})
    client = Client.objects.filter(client_id=client_id, is_active=True).first() if len(client_id) <= 128 else None
    try:
        if client is None:
            raise possession.PossessionError("no active client has this id")
        possession.client_assertion_check(assertion=assertion, client_id=client_id, jwks=client.jwks,
                                          audience=_endpoint_url(request))
    except possession.PossessionError as exc:
        _record_failure(keys)
        return oauth_error("invalid_client", f"Client authentication failed: {exc}.", 401)
    return _token_for(request, form, client)


def _endpoint_url(request) -> str:
    # AGP_BASE_URL when set: behind a proxy the public URL is what clients sign, not the Host we see.
    return absolute_url(request, request.path)


def _token_for(request, form, client):
    """The token response for an authenticated client: its scopes, narrowed by ``scope``, and
    bound to the key of a DPoP proof when the request carries one (RFC 9449 5)."""
    proof = request.META.get("HTTP_DPOP")
    jkt = None
    if proof is not None:
        try:
            jkt = possession.dpop_proof_check(proof=proof, method="POST", url=_endpoint_url(request)).jkt
        except possession.PossessionError as exc:
            return oauth_error("invalid_dpop_proof", f"Invalid DPoP proof: {exc}.")
    elif client.require_dpop:
        return oauth_error("invalid_dpop_proof", "This client is issued only DPoP-bound tokens: send a DPoP proof.")

    requested = parse_scopes(form.get("scope", ""))
    if requested:
        outside = sorted(set(requested) - set(client.scopes))
        if outside:
            return oauth_error("invalid_scope", f"Scopes not granted to this client: {' '.join(outside)}")
        scopes = [s for s in client.scopes if s in set(requested)]
    else:
        scopes = list(client.scopes)
    response = JsonResponse(token_issue(client=client, scopes=scopes, jkt=jkt))
    _no_store(response)
    return response


@documented(ApiClientSerializer, api_docs.CLIENTS, patch=ApiClientChangeSerializer, create={
    400: "AGP_INVALID_REQUEST: a binding the kind needs is missing, one it does not take is given, or a scope is "
         "beyond the kind's ceiling (`details.fields`)."})
class ApiClientViewSet(CreateMixin, AGPViewSet):
    """API clients and who they are: operators' business only (``agp.admin``)."""

    queryset = Client.objects.all()
    serializer_class = ApiClientSerializer
    collection = "clients"
    lookup_field = "client_id"
    scope_group = "admin"
    tenant_field = NO_TENANT  # only operators hold agp.admin, and they see every tenant
    filter_fields = {"kind": "kind", "agent_id": "agent_id", "subject": "subject"}
    http_method_names = ["get", "post", "patch", "head", "options"]

    def create(self, request, *args, **kwargs):
        validated = self.parse()
        client, secret = client_create(actor=self.actor, client_id=validated.pop("client_id", None) or new_id("cli"),
                                       **validated)
        body = {**self.render(client), "client_secret": secret}
        return Response(body, status=status.HTTP_201_CREATED, headers={"Location": self.resource_url(client),
                                                                      "Cache-Control": "no-store"})

    def partial_update(self, request, client_id=None):
        validated = self.parse(serializer_class=ApiClientChangeSerializer)
        client = self.get_object()
        secret = None
        if validated.keys() & {"scopes", "description", "jwks", "require_dpop"}:
            client = client_update(client_id=client_id, actor=self.actor, scopes=validated.get("scopes"),
                                   description=validated.get("description"), jwks=validated.get("jwks"),
                                   require_dpop=validated.get("require_dpop"))
        if "is_active" in validated:
            client = client_set_active(client_id=client_id, active=validated["is_active"], actor=self.actor)
        if validated.get("rotate_secret"):
            secret = client_rotate_secret(client_id=client_id, actor=self.actor)
            client.refresh_from_db()
        body = self.render(client)
        response = Response(body if secret is None else {**body, "client_secret": secret})
        response["Cache-Control"] = "no-store"
        return response
