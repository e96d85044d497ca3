"""Keys held by clients, and the statements signed with them (docs/reference/identity.md, "Keys").

Every JWS here is parsed and verified by joserfc (docs/decisions/possession.md); this
module only says which keys, algorithms and claims are acceptable:

- ``jwks_clean``: the public keys a client registers (OKP Ed25519 or EC P-256, each with a
  ``kid``, never a private member).
- ``client_assertion_check``: an RFC 7523 ``private_key_jwt`` client assertion.
- ``dpop_proof_check``: an RFC 9449 DPoP proof, for the token endpoint or a resource.
- ``statement_verify``: a compact JWS by one of a client's keys over given bytes (a
  delegator's link, an approver's verdict).
- ``jti_use_once``: the single-use store of assertion and proof ids, shared by every web
  process (a database table) and bounded in time (rows past their expiry are purged).
"""

import base64
import hashlib
import json
import random
import time
import warnings
from dataclasses import dataclass
from datetime import datetime, timezone as dt_timezone
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from django.db import IntegrityError, transaction
from joserfc import jws
from joserfc.errors import JoseError
from joserfc.jwk import ECKey, OKPKey

from .models import UsedJti

# "EdDSA" is deprecated by RFC 9864 in favour of "Ed25519", but it is what most JOSE
# libraries still write for Ed25519 keys: accepted, without a warning per request.
warnings.filterwarnings("ignore", message="EdDSA is deprecated", module="joserfc")

ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
# Asymmetric algorithms only: an HMAC "signature" proves nothing about a public key.
ALGORITHMS = ("EdDSA", "Ed25519", "ES256")
ASSERTION_MAX_LIFETIME = 300  # seconds: exp at most this far ahead
PROOF_MAX_AGE = 60  # seconds: a DPoP proof's iat at most this old (or this far ahead)
CLOCK_SKEW = 5
MAX_KEYS = 10
MAX_JWS_LENGTH = 16384


class PossessionError(Exception):
    """A key, an assertion, a proof or a signature that does not hold; the message says why."""


# --- keys -------------------------------------------------------------------------------------------------
_KEY_ALGORITHMS = {"OKP": ("EdDSA", "Ed25519"), "EC": ("ES256",)}
_PUBLIC_MEMBERS = {"OKP": {"kty", "crv", "x", "kid", "use", "alg"},
                   "EC": {"kty", "crv", "x", "y", "kid", "use", "alg"}}


def _public_key(data: Any) -> OKPKey | ECKey:
    """One public JWK we accept, imported; PossessionError otherwise."""
    if not isinstance(data, dict):
        raise PossessionError("a key must be a JSON object")
    kty, crv = data.get("kty"), data.get("crv")
    if (kty, crv) not in (("OKP", "Ed25519"), ("EC", "P-256")):
        raise PossessionError("a key must be OKP Ed25519 or EC P-256")
    extra = set(data) - _PUBLIC_MEMBERS[kty]
    if "d" in extra:
        raise PossessionError("a key holds a private member ('d'): send only the public key")
    if extra:
        raise PossessionError(f"a key has members a public {kty} key does not: {', '.join(sorted(extra))}")
    if "alg" in data and data["alg"] not in _KEY_ALGORITHMS[kty]:
        raise PossessionError(f"a {kty} key's alg must be one of {', '.join(_KEY_ALGORITHMS[kty])}")
    if data.get("use", "sig") != "sig":
        raise PossessionError("a key's use must be sig")
    try:
        key = OKPKey.import_key(dict(data)) if kty == "OKP" else ECKey.import_key(dict(data))
    except (JoseError, ValueError, TypeError, KeyError) as exc:
        raise PossessionError(f"a key does not import: {exc}") from None
    if key.is_private:
        raise PossessionError("a key is private: send only the public key")
    return key


def jwks_clean(jwks: Any) -> dict[str, Any]:
    """A client's public keys as stored: ``{"keys": [...]}``, each OKP Ed25519 or EC P-256 with
    a unique ``kid``. PossessionError for anything else (the caller turns it into a 400)."""
    if not isinstance(jwks, dict) or set(jwks) != {"keys"} or not isinstance(jwks["keys"], list):
        raise PossessionError('must be a JWK Set: {"keys": [...]}')
    if len(jwks["keys"]) > MAX_KEYS:
        raise PossessionError(f"at most {MAX_KEYS} keys")
    kids = []
    for data in jwks["keys"]:
        _public_key(data)
        kid = data.get("kid")
        if not isinstance(kid, str) or not 0 < len(kid) <= 128 or not kid.isprintable():
            raise PossessionError("every key needs a kid (1-128 printable characters)")
        kids.append(kid)
    if len(set(kids)) != len(kids):
        raise PossessionError("each kid once")
    return {"keys": [dict(data) for data in jwks["keys"]]}


def jwk_thumbprint(data: dict[str, Any]) -> str:
    """The RFC 7638 SHA-256 thumbprint of a public JWK (base64url): what ``cnf.jkt`` holds."""
    return _public_key(data).thumbprint()


def _client_key(jwks: dict[str, Any] | None, kid: Any) -> OKPKey | ECKey:
    if not jwks or not jwks.get("keys"):
        raise PossessionError("the client has no keys")
    if not isinstance(kid, str):
        raise PossessionError("the JWS header names no kid")
    for data in jwks["keys"]:
        if data.get("kid") == kid:
            return _public_key(data)
    raise PossessionError(f"no key of the client has kid {kid!r}")


# --- JWS --------------------------------------------------------------------------------------------------
def _extract(value: Any, detached: bytes | None = None) -> jws.CompactSignature:
    if not isinstance(value, str) or not value or len(value) > MAX_JWS_LENGTH or value.count(".") != 2:
        raise PossessionError("not a compact JWS")
    try:
        return jws.extract_compact(value.encode("ascii"), payload=detached)
    except (JoseError, ValueError, TypeError, UnicodeError) as exc:
        raise PossessionError(f"not a compact JWS ({exc})") from None


def _verify(obj: jws.CompactSignature, key) -> dict[str, Any]:
    header = obj.headers()
    alg = header.get("alg")
    if alg not in ALGORITHMS:
        raise PossessionError(f"algorithm {alg!r} is not accepted (only {', '.join(ALGORITHMS)})")
    try:
        valid = jws.validate_compact(obj, key, algorithms=[alg])
    except (JoseError, ValueError, TypeError) as exc:
        raise PossessionError(f"the signature does not verify ({exc})") from None
    if not valid:
        raise PossessionError("the signature does not verify")
    return header


def _claims(obj: jws.CompactSignature) -> dict[str, Any]:
    try:
        claims = json.loads(obj.payload)
    except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: nesting deeper than Python's stack
        raise PossessionError("the payload is not JSON") from None
    if not isinstance(claims, dict):
        raise PossessionError("the payload is not a JSON object")
    return claims


def statement_verify(*, value: Any, jwks: dict[str, Any] | None, payload: bytes,
                     embedded: bool = False) -> dict[str, Any]:
    """Verify a compact JWS by one of ``jwks``'s keys whose payload is exactly ``payload``
    (embedded, or detached: an empty payload segment, unless ``embedded`` is asked for).
    Returns the public JWK that verified it."""
    obj = _extract(value)
    if embedded and not obj.payload:
        raise PossessionError("it must carry what it signs (a detached payload cannot be checked later)")
    if obj.payload and obj.payload != payload:
        raise PossessionError("its payload is not the canonical JSON of what it signs")
    if not obj.payload:
        obj = _extract(value, detached=payload)  # RFC 7515 Appendix F: detached content
    kid = obj.headers().get("kid")
    _verify(obj, _client_key(jwks, kid))
    return next(dict(data) for data in jwks["keys"] if data.get("kid") == kid)


# --- single use -------------------------------------------------------------------------------------------
def jti_use_once(*, namespace: str, jti: str, expires_at: float) -> bool:
    """Record ``jti`` as used until ``expires_at`` (epoch seconds); False when it was already used.

    The unique index decides, so two web processes receiving the same jti at once cannot both
    win. Expired rows are purged now and then: a jti only has to be remembered while whatever
    carries it would still be accepted.
    """
    key = hashlib.sha256(f"{namespace}\x00{jti}".encode()).hexdigest()
    until = datetime.fromtimestamp(expires_at, tz=dt_timezone.utc)
    try:
        with transaction.atomic():
            UsedJti.objects.create(key=key, expires_at=until)
    except IntegrityError:
        return False
    if random.random() < 0.01:
        UsedJti.objects.filter(expires_at__lt=datetime.now(tz=dt_timezone.utc)).delete()
    return True


# --- private_key_jwt (RFC 7523) ---------------------------------------------------------------------------
def assertion_issuer(assertion: Any) -> str:
    """The unverified ``iss`` of a client assertion: which client's keys to verify it with."""
    claims = _claims(_extract(assertion))
    issuer = claims.get("iss")
    if not isinstance(issuer, str) or not issuer:
        raise PossessionError("the assertion has no iss")
    return issuer


def client_assertion_check(*, assertion: str, client_id: str, jwks: dict[str, Any] | None, audience: str,
                           now: float | None = None) -> None:
    """An RFC 7523 client assertion of ``client_id``: signed by one of its keys, ``iss`` = ``sub``
    = the client, ``aud`` the token endpoint, ``exp`` in the future and at most five minutes
    ahead, a ``jti`` never used before. PossessionError otherwise."""
    now = time.time() if now is None else now
    obj = _extract(assertion)
    _verify(obj, _client_key(jwks, obj.headers().get("kid")))
    claims = _claims(obj)
    if claims.get("iss") != client_id or claims.get("sub") != client_id:
        raise PossessionError("iss and sub must both be the client id")
    aud = claims.get("aud")
    audiences = aud if isinstance(aud, list) else [aud]
    if audience not in audiences:
        raise PossessionError(f"aud must be the token endpoint, {audience}")
    exp = claims.get("exp")
    if not isinstance(exp, (int, float)) or isinstance(exp, bool):
        raise PossessionError("exp is required")
    if exp <= now - CLOCK_SKEW:
        raise PossessionError("the assertion has expired")
    if exp > now + ASSERTION_MAX_LIFETIME + CLOCK_SKEW:
        raise PossessionError(f"exp is more than {ASSERTION_MAX_LIFETIME} seconds ahead")
    nbf = claims.get("nbf")
    if isinstance(nbf, (int, float)) and nbf > now + CLOCK_SKEW:
        raise PossessionError("the assertion is not valid yet (nbf)")
    jti = claims.get("jti")
    if not isinstance(jti, str) or not jti or len(jti) > 256:
        raise PossessionError("jti is required")
    if not jti_use_once(namespace=f"assertion:{client_id}", jti=jti, expires_at=exp + CLOCK_SKEW):
        raise PossessionError("the assertion was used before (its jti is spent)")


# --- DPoP (RFC 9449) --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Proof:
    jkt: str  # the thumbprint of the proof's key


def _normal_url(url: str) -> str:
    """RFC 9449 4.3: compare htu without query and fragment, with scheme and host as URLs compare."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    port = parts.port
    scheme = parts.scheme.lower()
    if port and not ((scheme, port) in (("http", 80), ("https", 443))):
        host = f"{host}:{port}"
    return urlunsplit((scheme, host, parts.path or "/", "", ""))


def access_token_hash(token: str) -> str:
    """``ath``: base64url of the SHA-256 of the access token's ASCII."""
    return base64.urlsafe_b64encode(hashlib.sha256(token.encode("ascii")).digest()).rstrip(b"=").decode()


def dpop_proof_check(*, proof: Any, method: str, url: str, access_token: str | None = None,
                     now: float | None = None) -> Proof:
    """A DPoP proof for this request: ``typ`` ``dpop+jwt``, signed by the public key in its own
    header, ``htm`` and ``htu`` this request's, ``iat`` within a minute, ``jti`` never seen, and
    with an access token, ``ath`` its hash. PossessionError otherwise."""
    now = time.time() if now is None else now
    obj = _extract(proof)
    header = obj.headers()
    if header.get("typ") != "dpop+jwt":
        raise PossessionError("typ must be dpop+jwt")
    if "jwk" not in header:
        raise PossessionError("the header carries no jwk")
    key_data = header["jwk"]
    key = _public_key(key_data)
    _verify(obj, key)
    claims = _claims(obj)
    if claims.get("htm") != method:
        raise PossessionError(f"htm is not this request's method ({method})")
    htu = claims.get("htu")
    if not isinstance(htu, str) or _normal_url(htu) != _normal_url(url):
        raise PossessionError(f"htu is not this request's URL ({_normal_url(url)})")
    iat = claims.get("iat")
    if not isinstance(iat, (int, float)) or isinstance(iat, bool) or abs(now - iat) > PROOF_MAX_AGE:
        raise PossessionError(f"iat must be within {PROOF_MAX_AGE} seconds of now")
    if access_token is not None and claims.get("ath") != access_token_hash(access_token):
        raise PossessionError("ath is not the hash of the access token")
    jti = claims.get("jti")
    if not isinstance(jti, str) or not jti or len(jti) > 256:
        raise PossessionError("jti is required")
    jkt = key.thumbprint()
    if not jti_use_once(namespace=f"dpop:{jkt}", jti=jti, expires_at=iat + PROOF_MAX_AGE + CLOCK_SKEW):
        raise PossessionError("the proof was used before (its jti is spent)")
    return Proof(jkt=jkt)


__all__ = ["ASSERTION_TYPE", "PossessionError", "jwks_clean", "jwk_thumbprint", "statement_verify",
           "jti_use_once", "assertion_issuer", "client_assertion_check", "dpop_proof_check", "access_token_hash"]
