"""A client's own private key: client assertions, DPoP proofs and signed statements.

The service's side of each is described in docs/reference/identity.md ("Keys"); this is
the holder's side. JWS and JWK come from joserfc (docs/decisions/possession.md), imported
when first used.

- ``client_assertion``: an RFC 7523 ``private_key_jwt`` assertion for ``/oauth/token``.
- ``dpop_proof``: an RFC 9449 proof for one request (with ``ath`` once a token is bound).
- ``sign_statement``: a compact JWS over the RFC 8785 canonical JSON of a statement (a
  delegation request, an approval's verdict), the payload embedded.
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
import uuid
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from .numbers import canonical_json

ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
# The fully specified names of RFC 9864 ("Ed25519" rather than the deprecated "EdDSA").
_ALGORITHMS = {"Ed25519": "Ed25519", "P-256": "ES256"}


def _jose():
    from joserfc import jws
    from joserfc.jwk import ECKey, OKPKey

    return jws, ECKey, OKPKey


class ClientKey:
    """One private key of an API client (Ed25519 or EC P-256), with its ``kid``.

    Register ``public_jwks()`` as the client's ``jwks``; keep ``private_jwk()`` secret.
    """

    def __init__(self, key: Any):
        self._key = key
        if not key.is_private:
            raise ValueError("a ClientKey needs the private key")
        self.kid = key.kid or key.thumbprint()
        self.alg = _ALGORITHMS[key.curve_name]

    @classmethod
    def generate(cls, curve: str = "Ed25519", *, kid: str | None = None) -> ClientKey:
        """A new key on ``curve`` (``Ed25519`` or ``P-256``); ``kid`` defaults to its RFC 7638 thumbprint."""
        _, ECKey, OKPKey = _jose()
        if curve not in _ALGORITHMS:
            raise ValueError("curve must be 'Ed25519' or 'P-256'")
        key = OKPKey.generate_key("Ed25519") if curve == "Ed25519" else ECKey.generate_key("P-256")
        return cls.from_jwk({**key.as_dict(private=True), "kid": kid or key.thumbprint()})

    @classmethod
    def from_jwk(cls, jwk: dict[str, Any]) -> ClientKey:
        """The key of a private JWK (``d`` included)."""
        _, ECKey, OKPKey = _jose()
        importer = {"OKP": OKPKey, "EC": ECKey}.get(jwk.get("kty"))
        if importer is None:
            raise ValueError("the key must be OKP Ed25519 or EC P-256")
        return cls(importer.import_key(dict(jwk)))

    def public_jwk(self) -> dict[str, Any]:
        return {**self._key.as_dict(private=False), "kid": self.kid}

    def public_jwks(self) -> dict[str, Any]:
        """The JWK Set to register as the client's ``jwks``."""
        return {"keys": [self.public_jwk()]}

    def private_jwk(self) -> dict[str, Any]:
        return {**self._key.as_dict(private=True), "kid": self.kid}

    def thumbprint(self) -> str:
        """RFC 7638: what a bound token's ``cnf.jkt`` holds."""
        return self._key.thumbprint()

    def sign(self, header: dict[str, Any], payload: bytes) -> str:
        """A compact JWS by this key over ``payload`` (``alg`` is the key's)."""
        jws, _, _ = _jose()
        return jws.serialize_compact({"alg": self.alg, **header}, payload, self._key, algorithms=[self.alg])

    def client_assertion(self, *, client_id: str, token_url: str, lifetime: int = 60) -> str:
        """An RFC 7523 client assertion: ``iss`` = ``sub`` = ``client_id``, ``aud`` the token
        endpoint's URL, a fresh ``jti``, expiring in ``lifetime`` seconds (at most 300)."""
        now = int(time.time())
        claims = {"iss": client_id, "sub": client_id, "aud": token_url, "iat": now, "exp": now + lifetime,
                  "jti": uuid.uuid4().hex}
        return self.sign({"typ": "JWT", "kid": self.kid}, json.dumps(claims).encode())

    def dpop_proof(self, *, method: str, url: str, access_token: str | None = None,
                   nonce: str | None = None) -> str:
        """An RFC 9449 DPoP proof for one request: ``htm``, ``htu`` (the URL without query and
        fragment), ``iat``, a fresh ``jti``, and ``ath`` when an access token is given."""
        parts = urlsplit(url)
        claims: dict[str, Any] = {"htm": method.upper(),
                                  "htu": urlunsplit((parts.scheme, parts.netloc, parts.path, "", "")),
                                  "iat": int(time.time()), "jti": uuid.uuid4().hex}
        if access_token is not None:
            claims["ath"] = base64.urlsafe_b64encode(
                hashlib.sha256(access_token.encode("ascii")).digest()).rstrip(b"=").decode()
        if nonce is not None:
            claims["nonce"] = nonce
        return self.sign({"typ": "dpop+jwt", "jwk": self._key.as_dict(private=False)}, json.dumps(claims).encode())

    def sign_statement(self, statement: dict[str, Any]) -> str:
        """A compact JWS by this key over the RFC 8785 canonical JSON of ``statement``."""
        return self.sign({"kid": self.kid}, canonical_json(statement))
