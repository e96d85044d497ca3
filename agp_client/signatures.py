"""Verifying the Ed25519 signatures of resources the service issues (CONTRACT C9).

Same rules as the server: ``payload_hash`` is ``"sha256:"`` + hex SHA-256 of the RFC 8785
canonical JSON of the resource without its ``signature`` member (numbers exact, as
``numbers.canonical_json`` writes them: resources must be parsed with Decimals, as this
client does), and ``value`` is the
base64url Ed25519 signature of the ASCII bytes of ``payload_hash``, made with the key whose
``kid`` the JWKS at ``/.well-known/jwks.json`` publishes.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from .numbers import canonical_json


def _b64url_decode(text: str) -> bytes:
    """Strict unpadded base64url: one spelling per value, so a changed character never decodes
    to the same bytes (the decoder alone ignores the unused low bits of the last character)."""
    data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii") != text:
        raise ValueError("not canonical unpadded base64url")
    return data


def payload_hash(resource: dict[str, Any]) -> str:
    unsigned = {key: value for key, value in resource.items() if key != "signature"}
    return "sha256:" + hashlib.sha256(canonical_json(unsigned)).hexdigest()


def verify_signature(resource: dict[str, Any], jwks: dict[str, Any]) -> bool:
    """True when ``resource["signature"]`` is a valid EdDSA signature of this very resource
    by a key in ``jwks``; False on any mismatch (changed field, unknown key, bad value)."""
    signature = resource.get("signature")
    if not isinstance(signature, dict) or signature.get("alg") != "EdDSA":
        return False
    claimed = signature.get("payload_hash")
    if not isinstance(claimed, str) or payload_hash(resource) != claimed:
        return False
    return signature_value_verifies(signature, jwks)


def signature_value_verifies(signature: dict[str, Any], jwks: dict[str, Any]) -> bool:
    """Whether ``signature["value"]`` signs ``signature["payload_hash"]`` with the ``jwks`` key named
    by ``signature["kid"]`` (what the hash covers is the caller's to check)."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    claimed = signature.get("payload_hash")
    if not isinstance(claimed, str) or signature.get("alg") != "EdDSA":
        return False
    for jwk in jwks.get("keys", []):
        if jwk.get("kid") != signature.get("kid") or jwk.get("kty") != "OKP" or jwk.get("crv") != "Ed25519":
            continue
        try:
            key = Ed25519PublicKey.from_public_bytes(_b64url_decode(jwk["x"]))
            key.verify(_b64url_decode(str(signature.get("value", ""))), claimed.encode("ascii"))
        except (InvalidSignature, ValueError, KeyError, TypeError):
            return False
        return True
    return False
