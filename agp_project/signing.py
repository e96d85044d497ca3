"""Ed25519 signatures over the canonical JSON of issued resources (docs/reference/ledger.md).

``payload_hash`` is ``sha256:<hex>`` of the RFC 8785 JSON of the resource without its
``signature`` member; ``value`` is the base64url Ed25519 signature of the UTF-8 bytes of
that ``payload_hash`` string. The public key is published as a JWK at
``/.well-known/jwks.json`` under its RFC 7638 thumbprint (``kid``).
"""

import base64
import functools
import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from .canonical import content_hash
from .settings.env import file_created_once
from .timeutil import iso


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    """Strict unpadded base64url: one spelling per value, so a changed character never decodes
    to the same bytes (the decoder alone ignores the unused low bits of the last character)."""
    data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii") != text:
        raise ValueError("not canonical unpadded base64url")
    return data


def _new_private_key_pem() -> bytes:
    return Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


class Signer:
    def __init__(self, private_key: Ed25519PrivateKey, issuer: str):
        self.private_key = private_key
        self.public_key = private_key.public_key()
        self.issuer = issuer
        raw = self.public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        self.x = b64url(raw)
        thumbprint_input = json.dumps({"crv": "Ed25519", "kty": "OKP", "x": self.x},
                                      separators=(",", ":"), sort_keys=True).encode()
        self.kid = b64url(hashlib.sha256(thumbprint_input).digest())

    def jwk(self) -> dict[str, str]:
        return {"kty": "OKP", "crv": "Ed25519", "x": self.x, "kid": self.kid, "alg": "EdDSA", "use": "sig"}

    def sign(self, resource: dict[str, Any], *, issued_at: datetime | None = None) -> dict[str, str]:
        """The docs/reference/ledger.md Signature object for ``resource`` (its own ``signature`` is ignored)."""
        payload_hash = content_hash({k: v for k, v in resource.items() if k != "signature"})
        issued = iso(issued_at or datetime.now(UTC))
        return {
            "alg": "EdDSA",
            "kid": self.kid,
            "issuer": self.issuer,
            "issued_at": issued,
            "payload_hash": payload_hash,
            "value": b64url(self.private_key.sign(payload_hash.encode("ascii"))),
        }


@functools.cache
def _signer(pem: str | None, key_file: Path, issuer: str) -> Signer:
    data = pem.encode() if pem else file_created_once(key_file, _new_private_key_pem)
    key = serialization.load_pem_private_key(data, password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ImproperlyConfigured("AGP_SIGNING_KEY must be an Ed25519 private key in PEM")
    return Signer(key, issuer)


def get_signer() -> Signer:
    """The service's signer; loaded once per distinct key setting, so a changed setting
    (another ``AGP_SIGNING_KEY``) takes effect without a stale cached key."""
    return _signer(settings.AGP_SIGNING_KEY, Path(settings.AGP_SIGNING_KEY_FILE), settings.AGP_ISSUER)


def sign_resource(resource: dict[str, Any]) -> dict[str, str]:
    return get_signer().sign(resource)


def verify_resource(resource: dict[str, Any], jwks: dict[str, Any]) -> bool:
    """Check ``resource['signature']`` against a JWKS document; False on any mismatch."""
    signature = resource.get("signature")
    if not isinstance(signature, dict) or signature.get("alg") != "EdDSA":
        return False
    if content_hash({k: v for k, v in resource.items() if k != "signature"}) != signature.get("payload_hash"):
        return False
    for jwk in jwks.get("keys", []):
        if jwk.get("kid") != signature.get("kid"):
            continue
        try:
            public_key = Ed25519PublicKey.from_public_bytes(b64url_decode(jwk["x"]))
            public_key.verify(b64url_decode(signature["value"]), signature["payload_hash"].encode("ascii"))
        except (InvalidSignature, ValueError, KeyError, TypeError, AttributeError):
            # A malformed key or signature is a failed verification, never an exception.
            return False
        return True
    return False


def authored(record: Any) -> dict[str, Any]:
    """A document's ``created_by`` (the API client that made the record), when one was
    recorded: the signatures of records made before authors were recorded cover a document
    without it, and must still verify."""
    created_by = getattr(record, "created_by", "")
    return {"created_by": created_by} if created_by else {}
