"""API clients, token minting and token checking (docs/reference/identity.md).

Tokens are HS256 JWTs signed with ``AGP_AUTH_SECRET`` and minted and checked with
djangorestframework-simplejwt. No Django user row stands behind a client: a request's
principal is built from its client's row, read on every request (one indexed read), so a
disabled client or a rotated secret takes effect at once, and the kind and bindings the
token claims must still be the row's.

Client lifecycle changes are recorded in the ledger (``api_client.*`` events, resource
type ``ApiClient``); secrets never appear in it.
"""

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Any
from datetime import timedelta

from django.conf import settings
from django.contrib.auth.hashers import make_password
from django.db import IntegrityError, transaction
from django.utils import timezone
from rest_framework_simplejwt.backends import TokenBackend
from rest_framework_simplejwt.tokens import AccessToken

from agp_project import errors
from agp_project.canonical import canonical_json
from agp_project.ids import is_valid_id
from core.ledger import ledger_append

from . import possession
from .kinds import DEFAULT_SCOPES, EVERY_TENANT, SCOPE_CEILINGS, ClientKind
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


# The kind of the principal of every request while authentication is off: the service is
# open, and the rules that rest on identity (docs/reference/identity.md) do not apply.
OPEN_KIND = "open"


@dataclass(frozen=True)
class ClientPrincipal:
    """Who is calling: the client, the scopes it may use, its kind and bindings.

    ``tenants`` is None for a principal that sees every tenant (an operator, an auditor of
    every tenant, anyone while the service is open), else the root principals it is bound to.
    """

    client_id: str
    scopes: frozenset[str]
    kind: str = ClientKind.OPERATOR
    agent_id: str = ""
    subject: str = ""
    tenants: frozenset[str] | None = None
    is_authenticated: bool = True

    @property
    def is_agent(self) -> bool:
        return self.kind == ClientKind.AGENT

    @property
    def is_operator(self) -> bool:
        """An operator, or anyone while the service is open."""
        return self.kind in (ClientKind.OPERATOR, OPEN_KIND)

    def sees_tenant(self, root_principal: str | None) -> bool:
        """Whether records of ``root_principal`` (None: of no tenant) are this principal's to see."""
        return self.tenants is None or root_principal in self.tenants


ANONYMOUS = ClientPrincipal(client_id="anonymous", scopes=frozenset(ALL_SCOPES), kind=OPEN_KIND)


def principal_tenants(kind: str, tenants: list[str]) -> frozenset[str] | None:
    """The tenants a client of ``kind`` bound to ``tenants`` sees (None: every one)."""
    if kind == ClientKind.OPERATOR or EVERY_TENANT in tenants:
        return None
    return frozenset(tenants)


def scopes_normalise(scopes: list[str] | tuple[str, ...]) -> list[str]:
    """Known scopes in the canonical order of the scope table; unknown ones are a 400."""
    unknown = sorted(set(scopes) - set(ALL_SCOPES))
    if unknown:
        raise errors.InvalidRequest(f"Unknown scopes: {' '.join(unknown)}",
                                    details={"fields": {"scopes": [f"Unknown scope {s!r}." for s in unknown]}})
    wanted = set(scopes)
    return [s for s in ALL_SCOPES if s in wanted]


def client_get(client_id: str, *, for_update: bool = False) -> Client:
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


SUBJECT_MAX = 256
NAME_MAX = 128  # agent ids and root principals: the registry's columns


def _is_name(value: str, limit: int = NAME_MAX) -> bool:
    """An agent id, root principal or subject: free text (DIDs, URIs, e-mail addresses), printable,
    without surrounding spaces."""
    return 0 < len(value) <= limit and value.isprintable() and value == value.strip()


def client_bindings_problems(*, kind: str, agent_id: str, subject: str, tenants: list[str]) -> dict[str, list[str]]:
    """What is wrong with a client's bindings for its kind, by field."""
    problems: dict[str, list[str]] = {}
    needs = {ClientKind.AGENT: ("agent_id",), ClientKind.HUMAN: ("subject",)}.get(kind, ())
    for field, value in (("agent_id", agent_id), ("subject", subject)):
        if field in needs and not value:
            problems[field] = [f"Required for a client of kind {kind!r}."]
        elif field not in needs and value:
            problems[field] = [f"Only for a client of kind {'agent' if field == 'agent_id' else 'human'}."]
    if agent_id and "agent_id" in needs and not _is_name(agent_id):
        problems["agent_id"] = [f"Must be 1-{NAME_MAX} printable characters, without surrounding spaces."]
    if subject and not _is_name(subject, SUBJECT_MAX):
        problems["subject"] = [f"Must be 1-{SUBJECT_MAX} printable characters, without surrounding spaces."]
    bad_tenants = [t for t in tenants if not isinstance(t, str) or not _is_name(t)
                   or (t == EVERY_TENANT and kind != ClientKind.AUDITOR)]

    if kind == ClientKind.OPERATOR and tenants:
        problems["tenants"] = ["An operator acts in every tenant: leave it out."]
    elif kind != ClientKind.OPERATOR and not tenants:
        problems["tenants"] = [f"A client of kind {kind!r} needs at least one tenant (root principal)."]
    elif kind == ClientKind.AGENT and len(tenants) != 1:
        problems["tenants"] = ["An agent acts for exactly one tenant."]
    elif bad_tenants:
        problems["tenants"] = [f"{t!r} is not a root principal (1-{NAME_MAX} printable characters"
                               f"{'; * is for auditors of every tenant' if t == EVERY_TENANT else ''})."
                               for t in bad_tenants]

    elif len(set(tenants)) != len(tenants):
        problems["tenants"] = ["Each tenant once."]
    return problems


def client_scopes_for(kind: str, scopes: list[str] | None) -> list[str]:
    """The scopes a client of ``kind`` gets: its kind's defaults, or ``scopes`` within its ceiling (else 400)."""
    if scopes is None:
        return list(DEFAULT_SCOPES[kind])
    normalised = scopes_normalise(scopes)
    beyond = [scope for scope in normalised if scope not in SCOPE_CEILINGS[kind]]
    if beyond:
        raise errors.invalid_fields({"scopes": [f"A client of kind {kind!r} may not hold {scope!r}." for scope in beyond]})
    return normalised


@transaction.atomic
def client_create(*, client_id: str, kind: str, actor: str, scopes: list[str] | None = None, agent_id: str = "",
                  subject: str = "", tenants: list[str] = (), description: str = "",
                  secret: str | None = None, jwks: dict | None = None,
                  require_dpop: bool = False) -> tuple[Client, str]:
    """Create a client of ``kind`` with its bindings; returns it with its secret, which is shown only this once.

    ``jwks``: its public keys; ``require_dpop``: it gets only DPoP-bound tokens."""
    problems = {} if is_valid_id(client_id) else {"client_id": ["Must be 1-128 characters of [A-Za-z0-9._:-]."]}
    jwks = client_jwks_clean(jwks, problems)
    if kind not in ClientKind.values:
        problems["kind"] = [f"Must be one of {', '.join(ClientKind.values)}."]
    else:
        problems |= client_bindings_problems(kind=kind, agent_id=agent_id, subject=subject, tenants=list(tenants))
    if problems:
        raise errors.invalid_fields(problems)
    secret = secret or secrets.token_urlsafe(32)
    client = Client(client_id=client_id, kind=kind, agent_id=agent_id, subject=subject, tenants=list(tenants),
                    scopes=client_scopes_for(kind, scopes), description=description, jwks=jwks,
                    require_dpop=bool(require_dpop))
    client.set_secret(secret)
    try:
        with transaction.atomic():
            client.save()
    except IntegrityError:
        raise errors.Conflict(f"An API client {client_id!r} exists.") from None
    ledger_append(event_type="api_client.created", resource_type=RESOURCE_TYPE, resource_id=client_id,
                  actor=actor, payload={"kind": kind, "agent_id": agent_id, "subject": subject,
                                        "tenants": client.tenants, "scopes": client.scopes,
                                        "description": description,
                                        **({"jwks": jwks} if jwks else {}),
                                        **({"require_dpop": True} if client.require_dpop else {})})
    return client, secret


def client_jwks_clean(jwks, problems: dict[str, list[str]]) -> dict:
    """``jwks`` as stored (``{}`` for none), or its problem added to ``problems``."""
    if jwks is None or jwks == {} or jwks == {"keys": []}:
        return {}
    try:
        return possession.jwks_clean(jwks)
    except possession.PossessionError as exc:
        problems["jwks"] = [f"Not accepted: {exc}."]
        return {}


@transaction.atomic
def client_rotate_secret(*, client_id: str, actor: str) -> str:
    """A new secret for the client; the old one and every token issued before stop working."""
    _refuse_bootstrap(client_id, "secret")
    client = client_get(client_id, for_update=True)
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
    client = client_get(client_id, for_update=True)
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
                  description: str | None = None, jwks: dict | None = None,
                  require_dpop: bool | None = None) -> Client:
    """Change a client's scopes, description, keys or DPoP requirement. Removed scopes stop
    working in live tokens at once; so do unbound tokens once DPoP is required."""
    problems: dict[str, list[str]] = {}
    cleaned = client_jwks_clean(jwks, problems) if jwks is not None else None
    if problems:
        raise errors.invalid_fields(problems)
    client = client_get(client_id, for_update=True)
    payload = {}
    if cleaned is not None and cleaned != client.jwks:
        client.jwks = payload["jwks"] = cleaned
    if require_dpop is not None and require_dpop != client.require_dpop:
        client.require_dpop = payload["require_dpop"] = require_dpop
    if scopes is not None:
        normalised = client_scopes_for(client.kind, scopes)
        if normalised != client.scopes:
            _refuse_bootstrap(client_id, "scopes")
            client.scopes = payload["scopes"] = normalised
    if description is not None and description != client.description:
        client.description = payload["description"] = description
    if payload:
        client.save(update_fields=["scopes", "description", "jwks", "require_dpop", "updated_at"])
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
    if (client is not None and client.scopes == list(ALL_SCOPES) and client.kind == ClientKind.OPERATOR
            and _bootstrap_seen.get(marker) == client.secret_hash):
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
        client = Client(client_id=client_id, kind=ClientKind.OPERATOR, scopes=list(ALL_SCOPES),
                        description="bootstrap client")
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
    if client.kind != ClientKind.OPERATOR:
        # The bootstrap client is the operator of last resort, whatever its row was made as.
        client.kind = changed["kind"] = ClientKind.OPERATOR
        client.agent_id, client.subject, client.tenants = "", "", []
    if changed:
        client.save(update_fields=["secret_hash", "scopes", "kind", "agent_id", "subject", "tenants",
                                   "tokens_not_before", "token_generation", "updated_at"])
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


# The claims that carry who the client is; each must still be the client row's (docs/reference/identity.md).
IDENTITY_CLAIMS = ("kind", "agent_id", "subject", "tenants")


def token_issue(*, client: Client, scopes: list[str], jkt: str | None = None) -> dict:
    """The RFC 6749 5.1 token response for ``client``, granting ``scopes``; with ``jkt`` (the
    thumbprint of a DPoP proof's key), a token bound to that key (RFC 9449: ``cnf.jkt``,
    ``token_type`` ``DPoP``)."""
    token = ClientAccessToken()
    if jkt is not None:
        token["cnf"] = {"jkt": jkt}
    token.set_exp(lifetime=timedelta(seconds=settings.AGP_TOKEN_TTL_SECONDS))
    token["sub"] = client.client_id
    token["iss"] = settings.AGP_TOKEN_ISSUER
    token["scope"] = " ".join(scopes)
    token["gen"] = client.token_generation
    for claim in IDENTITY_CLAIMS:
        token[claim] = getattr(client, claim)
    return {"access_token": str(token), "token_type": "DPoP" if jkt is not None else "bearer",
            "expires_in": settings.AGP_TOKEN_TTL_SECONDS, "scope": " ".join(scopes)}


_ROW_FIELDS = ("is_active", "scopes", "token_generation", "require_dpop", *IDENTITY_CLAIMS)
DPOP_INVALID_TOKEN = {"WWW-Authenticate": 'DPoP error="invalid_token", algs="EdDSA ES256"'}
DPOP_INVALID_PROOF = {"WWW-Authenticate": 'DPoP error="invalid_dpop_proof", algs="EdDSA ES256"'}


def principal_from_token(raw: str, *, dpop_proof: str | None = None, method: str = "", url: str = "",
                         scheme: str = "bearer") -> ClientPrincipal:
    """Validate an access token; the principal keeps the scopes both granted and still held.

    The client's row is read on every request, so a disabled client or a rotated secret
    takes effect at once; a token whose kind or bindings are no longer the row's is refused.
    A token bound to a key (``cnf.jkt``) counts only with ``scheme`` ``dpop`` and a fresh
    proof of that key for this ``method`` and ``url`` (docs/reference/identity.md, "Keys");
    an unbound token only as a bearer token.
    """
    token = _token_claims(raw)
    jkt = token.get("cnf", {}).get("jkt") if isinstance(token.get("cnf"), dict) else None
    if scheme == "bearer" and jkt is not None:
        raise errors.Unauthenticated("This token is bound to a key (DPoP): send it as 'Authorization: DPoP "
                                     "<token>' with a DPoP proof.", headers=DPOP_INVALID_TOKEN)
    if scheme == "dpop":
        if not isinstance(jkt, str):
            raise errors.Unauthenticated("This token is not bound to a key: send it as a bearer token.",
                                         headers=DPOP_INVALID_TOKEN)
        if not dpop_proof:
            raise errors.Unauthenticated("A DPoP-bound token needs a DPoP proof header.", headers=DPOP_INVALID_PROOF)
        try:
            proof = possession.dpop_proof_check(proof=dpop_proof, method=method, url=url, access_token=raw)
        except possession.PossessionError as exc:
            raise errors.Unauthenticated(f"Invalid DPoP proof: {exc}.", headers=DPOP_INVALID_PROOF) from None
        if proof.jkt != jkt:
            raise errors.Unauthenticated("Invalid DPoP proof: signed by another key than the token is bound to.",
                                         headers=DPOP_INVALID_PROOF)
    row = Client.objects.filter(client_id=token["sub"]).values(*_ROW_FIELDS).first()
    if row is None or not row["is_active"]:
        raise errors.Unauthenticated("The token's client is unknown or disabled.")
    if row["require_dpop"] and jkt is None:
        raise errors.Unauthenticated("This client requires DPoP-bound tokens: request a new token with a DPoP proof.")
    # Exact, unlike comparing the whole-second iat with the rotation instant: any token
    # minted before the rotation or disabling carries an older generation.
    if token["gen"] != row["token_generation"]:
        raise errors.Unauthenticated("The token was issued before the client's secret was rotated or "
                                     "the client was disabled.")
    if any(token.get(claim) != row[claim] for claim in IDENTITY_CLAIMS):
        raise errors.Unauthenticated("The token's kind or bindings are no longer its client's: request a new token.")
    return ClientPrincipal(client_id=token["sub"], scopes=frozenset(set(token["scope"].split()) & set(row["scopes"] or [])),
                           kind=row["kind"], agent_id=row["agent_id"], subject=row["subject"],
                           tenants=principal_tenants(row["kind"], row["tenants"]))


def _token_claims(raw: str) -> dict:
    """The claims of a token whose signature, algorithm, issuer, expiry and type hold, with
    ``sub``, ``scope`` and ``gen`` of the right types; Unauthenticated for any failure."""
    try:
        token = ClientAccessToken(raw)
    except Exception as exc:  # simplejwt raises TokenError subclasses; garbage may raise others
        raise errors.Unauthenticated(f"Invalid token: {exc}") from None
    claims = dict(token.payload)
    client_id, scope, generation = claims.get("sub"), claims.setdefault("scope", ""), claims.get("gen")
    if not isinstance(client_id, str) or not client_id or not isinstance(scope, str) \
            or not isinstance(generation, int) or isinstance(generation, bool):
        raise errors.Unauthenticated("Invalid token: malformed claims.")
    return claims


def client_has_keys(client_id: str) -> bool:
    """Whether the client registered public keys (``jwks``)."""
    row = Client.objects.filter(client_id=client_id).values("jwks").first()
    return bool(row and (row["jwks"] or {}).get("keys"))


def client_statement_verify(*, client_id: str, field: str, value: Any, statement: dict,
                            embedded: bool = False) -> dict:
    """The public key (a JWK) of ``client_id`` that signed ``statement``: ``value`` must be a
    compact JWS by one of its keys over the RFC 8785 canonical JSON of ``statement``
    (docs/reference/identity.md, "Keys"). A 400 naming ``field`` otherwise."""
    row = Client.objects.filter(client_id=client_id).values("jwks").first()
    jwks = (row or {}).get("jwks") or {}
    if not jwks.get("keys"):
        raise errors.invalid_fields({field: ["This client has no keys (jwks) to verify it with."]})
    try:
        return possession.statement_verify(value=value, jwks=jwks, payload=canonical_json(statement),
                                           embedded=embedded)
    except possession.PossessionError as exc:
        raise errors.invalid_fields({field: [f"Does not verify: {exc}."]}) from None
