"""API clients, token minting and token checking (CONTRACT C3).

Tokens are HS256 JWTs signed with ``AGP_AUTH_SECRET`` and minted and checked with
djangorestframework-simplejwt. No Django user row stands behind a client: a request's
principal is built from the token's claims, and one indexed read of the client row makes a
disabled client or a rotated secret take effect at once.

Client lifecycle changes are recorded in the ledger (``api_client.*`` events, resource
type ``ApiClient``); secrets never appear in it.
"""

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.contrib.auth.hashers import make_password
from django.db import IntegrityError, transaction
from django.utils import timezone
from rest_framework_simplejwt.backends import TokenBackend
from rest_framework_simplejwt.tokens import AccessToken

from agp_project import errors
from agp_project.ids import is_valid_id
from core.ledger import ledger_append

from .models import Client
from .scopes import ALL_SCOPES

RESOURCE_TYPE = "ApiClient"
BOOTSTRAP_ACTOR = "bootstrap"


def auth_enabled() -> bool:
    return bool(settings.AGP_AUTH_SECRET)


def token_backend() -> TokenBackend:
    # Built from the current settings: HS256 with AGP_AUTH_SECRET is the only key and
    # algorithm accepted (PyJWT is given algorithms=["HS256"], so "none" never verifies).
    # The audience is written into every token and required on every one read: a token
    # minted with the same secret for another service (or without "aud") is refused.
    return TokenBackend(algorithm="HS256", signing_key=settings.AGP_AUTH_SECRET, issuer=settings.AGP_TOKEN_ISSUER,
                        audience=settings.AGP_TOKEN_AUDIENCE)


class ClientAccessToken(AccessToken):
    token_type = "access"

    def get_token_backend(self):
        return token_backend()


@dataclass(frozen=True)
class ClientPrincipal:
    """The stateless principal of a request: the client id and the scopes it may use."""

    client_id: str
    scopes: frozenset[str]
    is_authenticated: bool = True


ANONYMOUS = ClientPrincipal(client_id="anonymous", scopes=frozenset(ALL_SCOPES))


def scopes_normalise(scopes: list[str] | tuple[str, ...]) -> list[str]:
    """Known scopes in the canonical order of the scope table; unknown ones are a 400."""
    unknown = sorted(set(scopes) - set(ALL_SCOPES))
    if unknown:
        raise errors.InvalidRequest(f"Unknown scopes: {' '.join(unknown)}",
                                    details={"fields": {"scopes": [f"Unknown scope {s!r}." for s in unknown]}})
    wanted = set(scopes)
    return [s for s in ALL_SCOPES if s in wanted]


def _client_get(client_id: str, *, for_update: bool = False) -> Client:
    queryset = Client.objects.select_for_update() if for_update else Client.objects
    client = queryset.filter(client_id=client_id).first()
    if client is None:
        raise errors.NotFound(f"No API client {client_id!r}.")
    return client


def _refuse_bootstrap(client_id: str, what: str) -> None:
    if settings.AGP_CLIENT_ID and client_id == settings.AGP_CLIENT_ID:
        raise errors.InvalidRequest(
            f"{client_id!r} is the bootstrap client: its {what} come from AGP_CLIENT_ID/AGP_CLIENT_SECRET; "
            "change the environment instead.")


@transaction.atomic
def client_create(*, client_id: str, scopes: list[str], actor: str, description: str = "",
                  secret: str | None = None) -> tuple[Client, str]:
    """Create a client; returns it with its secret, which is shown only this once."""
    if not is_valid_id(client_id):
        raise errors.invalid_fields({"client_id": ["Must be 1-128 characters of [A-Za-z0-9._:-]."]})
    secret = secret or secrets.token_urlsafe(32)
    client = Client(client_id=client_id, scopes=scopes_normalise(scopes), description=description)
    client.set_secret(secret)
    try:
        with transaction.atomic():
            client.save()
    except IntegrityError:
        raise errors.Conflict(f"An API client {client_id!r} exists.") from None
    ledger_append(event_type="api_client.created", resource_type=RESOURCE_TYPE, resource_id=client_id,
                  actor=actor, payload={"scopes": client.scopes, "description": description})
    return client, secret


@transaction.atomic
def client_rotate_secret(*, client_id: str, actor: str) -> str:
    """A new secret for the client; the old one and every token issued before stop working."""
    _refuse_bootstrap(client_id, "secret")
    client = _client_get(client_id, for_update=True)
    secret = secrets.token_urlsafe(32)
    client.set_secret(secret)
    client.tokens_not_before = timezone.now()
    client.token_generation += 1
    client.save(update_fields=["secret_hash", "tokens_not_before", "token_generation", "updated_at"])
    ledger_append(event_type="api_client.secret_rotated", resource_type=RESOURCE_TYPE, resource_id=client_id,
                  actor=actor, payload={})
    return secret


@transaction.atomic
def client_set_active(*, client_id: str, active: bool, actor: str) -> Client:
    """Disable (its live tokens stop working at once) or enable a client.

    Re-enabling does not revive tokens issued before the client was disabled.
    """
    client = _client_get(client_id, for_update=True)
    if client.is_active == active:
        return client
    client.is_active = active
    fields = ["is_active", "updated_at"]
    if not active:
        client.tokens_not_before = timezone.now()
        client.token_generation += 1
        fields += ["tokens_not_before", "token_generation"]
    client.save(update_fields=fields)
    ledger_append(event_type="api_client.enabled" if active else "api_client.disabled",
                  resource_type=RESOURCE_TYPE, resource_id=client_id, actor=actor, payload={})
    return client


@transaction.atomic
def client_update(*, client_id: str, actor: str, scopes: list[str] | None = None,
                  description: str | None = None) -> Client:
    """Change a client's scopes or description. Removed scopes stop working in live tokens at once."""
    client = _client_get(client_id, for_update=True)
    payload = {}
    if scopes is not None:
        normalised = scopes_normalise(scopes)
        if normalised != client.scopes:
            _refuse_bootstrap(client_id, "scopes")
            client.scopes = payload["scopes"] = normalised
    if description is not None and description != client.description:
        client.description = payload["description"] = description
    if payload:
        client.save(update_fields=["scopes", "description", "updated_at"])
        ledger_append(event_type="api_client.updated", resource_type=RESOURCE_TYPE, resource_id=client_id,
                      actor=actor, payload=payload)
    return client


# What this process last saw of each bootstrap client in sync with the environment:
# (client_id, sha256(secret)) -> the row's secret hash. Checking a stored hash against the
# secret costs a password-hash computation, which would otherwise be paid on every token
# request of the bootstrap client; comparing the hash string catches any change to the row.
_bootstrap_seen: dict[tuple[str, str], str] = {}


def bootstrap_client_ensure() -> Client | None:
    """The bootstrap client of ``AGP_CLIENT_ID``/``AGP_CLIENT_SECRET``: it exists, with every scope.

    Its secret is the environment's; a changed environment secret counts as a rotation
    (earlier tokens stop working). A bootstrap client an operator disabled stays disabled.
    """
    client_id, secret = settings.AGP_CLIENT_ID, settings.AGP_CLIENT_SECRET
    if not client_id or not secret:
        return None
    marker = (client_id, hashlib.sha256(secret.encode()).hexdigest())
    client = Client.objects.filter(client_id=client_id).first()
    if client is not None and client.scopes == list(ALL_SCOPES) and _bootstrap_seen.get(marker) == client.secret_hash:
        return client
    try:
        client = _bootstrap_sync(client_id, secret)
    except IntegrityError:
        # Another process created the row between our read and our insert: sync against it.
        client = _bootstrap_sync(client_id, secret)
    _bootstrap_seen[marker] = client.secret_hash
    return client


@transaction.atomic
def _bootstrap_sync(client_id: str, secret: str) -> Client:
    client = Client.objects.select_for_update().filter(client_id=client_id).first()
    if client is None:
        client = Client(client_id=client_id, scopes=list(ALL_SCOPES), description="bootstrap client")
        client.set_secret(secret)
        with transaction.atomic():
            client.save()
        ledger_append(event_type="api_client.created", resource_type=RESOURCE_TYPE, resource_id=client_id,
                      actor=BOOTSTRAP_ACTOR, payload={"scopes": client.scopes, "description": client.description})
        return client
    changed = {}
    if not client.check_secret(secret):
        client.set_secret(secret)
        client.tokens_not_before = timezone.now()
        client.token_generation += 1
        changed["secret_rotated"] = True
    if client.scopes != list(ALL_SCOPES):
        client.scopes = changed["scopes"] = list(ALL_SCOPES)
    if changed:
        client.save(update_fields=["secret_hash", "scopes", "tokens_not_before", "token_generation", "updated_at"])
        ledger_append(event_type="api_client.updated", resource_type=RESOURCE_TYPE, resource_id=client_id,
                      actor=BOOTSTRAP_ACTOR, payload=changed)
    return client


def _burn_hash_time(secret: str) -> None:
    # Same password-hash work whether or not the client exists, so timing does not tell.
    make_password(secret)


def client_authenticate(*, client_id: str, secret: str) -> Client | None:
    """The active client with these credentials, or None."""
    if settings.AGP_CLIENT_ID and settings.AGP_CLIENT_SECRET and client_id == settings.AGP_CLIENT_ID:
        if not hmac.compare_digest(secret.encode(), settings.AGP_CLIENT_SECRET.encode()):
            _burn_hash_time(secret)
            return None
        client = bootstrap_client_ensure()
        return client if client is not None and client.is_active else None
    client = Client.objects.filter(client_id=client_id, is_active=True).first()
    if client is None:
        _burn_hash_time(secret)
        return None
    return client if client.check_secret(secret) else None


def token_issue(*, client: Client, scopes: list[str]) -> dict:
    """The RFC 6749 5.1 token response for ``client``, granting ``scopes``."""
    token = ClientAccessToken()
    token.set_exp(lifetime=timedelta(seconds=settings.AGP_TOKEN_TTL_SECONDS))
    token["sub"] = client.client_id
    token["iss"] = settings.AGP_TOKEN_ISSUER
    token["scope"] = " ".join(scopes)
    token["gen"] = client.token_generation
    return {"access_token": str(token), "token_type": "bearer",
            "expires_in": settings.AGP_TOKEN_TTL_SECONDS, "scope": " ".join(scopes)}


def principal_from_token(raw: str) -> ClientPrincipal:
    """Validate a bearer token; the principal keeps the scopes both granted and still held.

    The client's row is read on every request, so a disabled client or a rotated secret
    takes effect at once.
    """
    client_id, scope, generation = _token_claims(raw)
    row = Client.objects.filter(client_id=client_id).values_list("is_active", "scopes", "token_generation").first()
    if row is None or not row[0]:
        raise errors.Unauthenticated("The token's client is unknown or disabled.")
    # Exact, unlike comparing the whole-second iat with the rotation instant: any token
    # minted before the rotation or disabling carries an older generation.
    _, scopes, token_generation = row
    if generation != token_generation:
        raise errors.Unauthenticated("The token was issued before the client's secret was rotated or "
                                     "the client was disabled.")
    return ClientPrincipal(client_id=client_id, scopes=frozenset(set(scope.split()) & set(scopes or [])))


def _token_claims(raw: str) -> tuple[str, str, int]:
    """``(client_id, scope, generation)`` of a token whose signature, algorithm, issuer,
    expiry and type hold; Unauthenticated for any failure."""
    try:
        token = ClientAccessToken(raw)
    except Exception as exc:  # simplejwt raises TokenError subclasses; garbage may raise others
        raise errors.Unauthenticated(f"Invalid token: {exc}") from None
    client_id, scope, generation = token.get("sub"), token.get("scope", ""), token.get("gen")
    if not isinstance(client_id, str) or not client_id or not isinstance(scope, str) \
            or not isinstance(generation, int) or isinstance(generation, bool):
        raise errors.Unauthenticated("Invalid token: malformed claims.")
    return client_id, scope, generation
