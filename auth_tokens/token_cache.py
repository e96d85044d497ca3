"""The bearer tokens this process has verified, so that each one's signature is checked once.

See ``services.principal_from_token`` and docs/decisions/authentication.md. They are kept
in an ``agp_project.lru.LRUMap`` (raw token -> ``VerifiedClaims``).
"""

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class VerifiedClaims:
    """What a request's principal needs from a token that passed every check."""

    client_id: str
    scope: str
    generation: int
    # simplejwt's expiry instant: the token is expired from ``exp + leeway`` on.
    expires: datetime
    # The (secret, issuer) it was verified under: a changed setting makes the entry useless.
    verified_with: tuple
