"""The bearer tokens this process has verified, so that each one's signature is checked once.

See ``services.principal_from_token`` and docs/decisions/authentication.md.
"""

import threading
from collections import OrderedDict
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


class VerifiedTokens:
    """A bounded least-recently-used map of raw token -> ``VerifiedClaims``, safe across threads.

    gunicorn's gthread workers serve several requests of one process at once; every read
    and write of the map holds the lock (a few dict operations).
    """

    def __init__(self, maxsize: int):
        self.maxsize = maxsize
        self._entries: OrderedDict[str, VerifiedClaims] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, raw: str) -> VerifiedClaims | None:
        with self._lock:
            claims = self._entries.get(raw)
            if claims is not None:
                self._entries.move_to_end(raw)
            return claims

    def put(self, raw: str, claims: VerifiedClaims) -> None:
        with self._lock:
            self._entries[raw] = claims
            self._entries.move_to_end(raw)
            while len(self._entries) > self.maxsize:
                self._entries.popitem(last=False)

    def discard(self, raw: str) -> None:
        with self._lock:
            self._entries.pop(raw, None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, raw: str) -> bool:
        return raw in self._entries
