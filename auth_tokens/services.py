"""Client management and token minting (CONTRACT C3)."""

import secrets
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from rest_framework_simplejwt.backends import TokenBackend
from rest_framework_simplejwt.tokens import AccessToken

from agp_project import errors

from .models import Client
from .scopes import ALL_SCOPES


def auth_enabled() -> bool:
    return bool(settings.AGP_AUTH_SECRET)


def token_backend() -> TokenBackend:
    # Built from the current settings, so HS256 and the secret are the only ones accepted.
    return TokenBackend(algorithm="HS256", signing_key=settings.AGP_AUTH_SECRET, issuer=settings.AGP_TOKEN_ISSUER)


class ClientAccessToken(AccessToken):
    token_type = "access"

    def get_token_backend(self):
        return token_backend()


@dataclass(frozen=True)
class ClientPrincipal:
    """The stateless principal of a request: the client id and its granted scopes."""

    client_id: str
    scopes: frozenset[str]
    is_authenticated: bool = True


ANONYMOUS = ClientPrincipal(client_id="anonymous", scopes=frozenset(ALL_SCOPES))


def _check_scopes(scopes: list[str]) -> list[str]:
    unknown = sorted(set(scopes) - set(ALL_SCOPES))
    if unknown:
        raise errors.InvalidRequest(f"Unknown scopes: {' '.join(unknown)}", details={"unknown_scopes": unknown})
    return [s for s in ALL_SCOPES if s in set(scopes)]


def client_create(*, client_id: str, scopes: list[str] | None = None, description: str = "",
                  secret: str | None = None) -> tuple[Client, str]:
    """Create a client; returns it with its secret, which is shown only this once."""
    secret = secret or secrets.token_urlsafe(32)
    client = Client(client_id=client_id, scopes=_check_scopes(scopes if scopes is not None else list(ALL_SCOPES)),
                    description=description)
    client.set_secret(secret)
    client.save()
    return client, secret


def client_rotate_secret(*, client_id: str) -> str:
    client = Client.objects.get(client_id=client_id)
    secret = secrets.token_urlsafe(32)
    client.set_secret(secret)
    client.save(update_fields=["secret_hash", "updated_at"])
    return secret


def client_set_active(*, client_id: str, active: bool) -> Client:
    client = Client.objects.get(client_id=client_id)
    client.is_active = active
    client.save(update_fields=["is_active", "updated_at"])
    return client


@transaction.atomic
def bootstrap_client_ensure() -> Client | None:
    """The bootstrap client of ``AGP_CLIENT_ID``/``AGP_CLIENT_SECRET``, with every scope."""
    client_id, secret = settings.AGP_CLIENT_ID, settings.AGP_CLIENT_SECRET
    if not client_id or not secret:
        return None
    client = Client.objects.select_for_update().filter(client_id=client_id).first()
    if client is None:
        client = Client(client_id=client_id, scopes=list(ALL_SCOPES), description="bootstrap client")
        client.set_secret(secret)
        client.save()
    elif not client.check_secret(secret) or set(client.scopes) != set(ALL_SCOPES):
        client.set_secret(secret)
        client.scopes = list(ALL_SCOPES)
        client.save(update_fields=["secret_hash", "scopes", "updated_at"])
    return client


def client_authenticate(*, client_id: str, secret: str) -> Client | None:
    if client_id == settings.AGP_CLIENT_ID and settings.AGP_CLIENT_SECRET:
        bootstrap_client_ensure()
    client = Client.objects.filter(client_id=client_id, is_active=True).first()
    if client is None:
        # Same work whether or not the client exists, so timing does not tell.
        Client(secret_hash="").set_secret(secret)
        return None
    return client if client.check_secret(secret) else None


def token_issue(*, client: Client, scopes: list[str]) -> dict:
    token = ClientAccessToken()
    lifetime = timedelta(seconds=settings.AGP_TOKEN_TTL_SECONDS)
    token.set_exp(lifetime=lifetime)
    token["sub"] = client.client_id
    token["iss"] = settings.AGP_TOKEN_ISSUER
    token["scope"] = " ".join(scopes)
    return {"access_token": str(token), "token_type": "bearer",
            "expires_in": settings.AGP_TOKEN_TTL_SECONDS, "scope": " ".join(scopes)}


def principal_from_token(raw: str) -> ClientPrincipal:
    """Validate a bearer token; the principal keeps the scopes both granted and still held."""
    try:
        token = ClientAccessToken(raw)
    except Exception as exc:  # simplejwt raises TokenError / TokenBackendError subclasses
        raise errors.Unauthenticated(f"Invalid token: {exc}") from None
    client_id = token.get("sub")
    granted = set(str(token.get("scope", "")).split())
    row = Client.objects.filter(client_id=client_id, is_active=True).values_list("scopes", flat=True).first()
    if not client_id or row is None:
        raise errors.Unauthenticated("The token's client is unknown or disabled.")
    return ClientPrincipal(client_id=client_id, scopes=frozenset(granted & set(row)))

