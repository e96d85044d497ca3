"""Bearer-token authentication (CONTRACT C3), stateless: the principal comes from the claims."""

from rest_framework.authentication import BaseAuthentication

from agp_project import errors

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
    header = django_request.META.get("HTTP_AUTHORIZATION", "")
    if not header:
        principal = None
    else:
        scheme, _, raw = header.partition(" ")
        try:
            if scheme.lower() != "bearer" or not raw.strip():
                raise errors.Unauthenticated("The Authorization header must be 'Bearer <token>'.")
            principal = principal_from_token(raw.strip())
        except errors.AGPError as exc:
            setattr(django_request, _CACHE_ATTR, exc)
            raise
    setattr(django_request, _CACHE_ATTR, principal)
    return principal


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
