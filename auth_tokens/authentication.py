"""Bearer-token authentication (docs/reference/api.md), stateless: the principal comes from the claims."""

from rest_framework.authentication import BaseAuthentication

from agp_project import errors
from agp_project.http.public_url import absolute_url

from .services import ANONYMOUS, ClientPrincipal, auth_enabled, principal_from_token

_CACHE_ATTR = "_agp_principal"


def _principal(django_request) -> ClientPrincipal | None:
    """The request's principal, computed once per request; None when no token was sent.

    Raises Unauthenticated for a token that is present but not valid.
    """
    if not auth_enabled():
        return ANONYMOUS
    cached = getattr(django_request, _CACHE_ATTR, False)
    if cached is not False:
        if isinstance(cached, errors.AGPError):
            raise cached
        return cached
    try:
        principal = principal_from_authorization(
            django_request.META.get("HTTP_AUTHORIZATION", ""), dpop=django_request.META.get("HTTP_DPOP"),
            method=django_request.method, url=absolute_url(django_request, django_request.path))
    except errors.AGPError as exc:
        setattr(django_request, _CACHE_ATTR, exc)
        raise
    setattr(django_request, _CACHE_ATTR, principal)
    return principal


def principal_from_authorization(header: str, *, dpop: str | None = None, method: str = "",
                                 url: str = "") -> ClientPrincipal | None:
    """The principal of an ``Authorization`` header (the API's and the MCP gateway's one check);
    None when there is none. Raises Unauthenticated for a header or token that is not valid.

    ``Bearer <token>``, or ``DPoP <token>`` with ``dpop`` the request's DPoP proof for
    ``method`` and ``url`` (RFC 9449 7.1)."""
    if not header:
        return None
    scheme, _, raw = header.partition(" ")
    if scheme.lower() not in ("bearer", "dpop") or not raw.strip():
        raise errors.Unauthenticated("The Authorization header must be 'Bearer <token>' or 'DPoP <token>'.")
    return principal_from_token(raw.strip(), dpop_proof=dpop, method=method, url=url, scheme=scheme.lower())


def client_id_for_request(django_request) -> str | None:
    """The client id the Idempotency-Key is scoped to; None when the request is not authenticated."""
    try:
        principal = _principal(django_request)
    except errors.AGPError:
        return None
    return principal.client_id if principal else None


class BearerTokenAuthentication(BaseAuthentication):
    def authenticate(self, request):
        # DRF's Request hands attributes it lacks to Django's request, where the middleware
        # left the principal it computed.
        principal = _principal(request)
        if principal is None:
            return None
        return (principal, None)

    def authenticate_header(self, request):
        return 'Bearer error="invalid_token"'
