"""``AGPClient``: the Python client of the AGP service."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import requests

from . import __version__
from .resources import (
    ActionEnvelopes,
    Decisions,
    Escalations,
    Freezes,
    LedgerEvents,
    Operations,
    PolicySets,
    Resource,
    Tasks,
    _segment,
)
from .signatures import verify_signature
from .transport import Response, RetryPolicy, TokenManager, Transport

WRITE_METHODS = frozenset({"POST", "PATCH", "PUT", "DELETE"})


class AGPClient:
    """A thread-safe client of one AGP server.

    With ``client_id`` and ``client_secret`` it obtains OAuth 2.0 client-credentials tokens
    from ``/oauth/token``, caches them, refreshes them before they expire and once after a
    401; without them it sends no token (a server with ``AGP_AUTH_SECRET`` unset is open).
    Every POST and PATCH carries an ``Idempotency-Key`` (a fresh UUID, or the one given),
    the same on each retry, so a retried write is executed once. Errors raise the typed
    exceptions of ``agp_client.errors``.

    >>> client = AGPClient("http://localhost:8000", client_id="ops", client_secret="...")
    >>> task = client.tasks.create(root_principal="acme", agent_id="agent-1", title="Refund",
    ...                            risk_level="low", action_class="transact")
    >>> for event in client.ledger_events.list(resource_id=task["task_id"]): ...
    """

    def __init__(self, base_url: str, client_id: str | None = None, client_secret: str | None = None, *,
                 timeout: float = 10.0, max_retries: int = 4, backoff: float = 0.5, max_backoff: float = 30.0,
                 scope: str | None = None, token_refresh_skew: float = 30.0, user_agent: str | None = None):
        if (client_id is None) != (client_secret is None):
            raise ValueError("Give both client_id and client_secret, or neither.")
        self.base_url = base_url.rstrip("/")
        self._transport = Transport(
            timeout=timeout, retry=RetryPolicy(max_retries=max_retries, backoff=backoff, max_backoff=max_backoff),
            user_agent=user_agent or f"agp-client/{__version__} python-requests/{requests.__version__}")
        self.auth: TokenManager | None = None
        if client_id is not None:
            self.auth = TokenManager(self._transport, f"{self.base_url}/oauth/token", client_id, client_secret,
                                     scope=scope, refresh_skew=token_refresh_skew)
        self._jwks: dict[str, Any] | None = None
        self._jwks_lock = threading.Lock()

        # Registry API
        self.delegations = Resource(self, "delegations")
        self.policy_sets = PolicySets(self, "policy-sets")
        self.tasks = Tasks(self, "tasks")
        self.capabilities = Resource(self, "capabilities")
        self.liability_bindings = Resource(self, "liability-bindings")
        self.skills = Resource(self, "skills")
        self.revocations = Resource(self, "revocations")
        self.freezes = Freezes(self, "freezes")
        # Decision API
        self.contexts = Resource(self, "contexts")
        self.evidence_bundles = Resource(self, "evidence-bundles")
        self.decisions = Decisions(self, "decisions")
        self.policy_evaluations = Resource(self, "policy-evaluations")
        self.approvals = Resource(self, "approvals")
        self.escalations = Escalations(self, "escalations")
        self.commerce_sessions = Resource(self, "commerce-sessions")
        self.impact_assessments = Resource(self, "impact-assessments")
        self.backtests = Resource(self, "backtests")
        # Execution API
        self.action_envelopes = ActionEnvelopes(self, "action-envelopes")
        self.operations = Operations(self)
        self.receipts = Resource(self, "receipts")
        self.ledger_events = LedgerEvents(self, "ledger-events")

    # --- lifecycle ---------------------------------------------------------------------
    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> AGPClient:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # --- the one way requests go out ----------------------------------------------------
    def request(self, method: str, path: str, *, json: Any = None, params: dict[str, Any] | None = None,
                headers: dict[str, str] | None = None, idempotency_key: str | None = None,
                authenticated: bool = True) -> Response:
        """Send one API call (with its retries); a decoded 2xx ``Response`` or a typed exception."""
        method = method.upper()
        base_headers = {"Accept": "application/json", **(headers or {})}
        if method in WRITE_METHODS:
            base_headers["Idempotency-Key"] = idempotency_key or str(uuid.uuid4())
        use_token = authenticated and self.auth is not None

        def build() -> dict[str, Any]:
            attempt_headers = dict(base_headers)
            if use_token:
                attempt_headers["Authorization"] = f"Bearer {self.auth.token()}"
            kwargs: dict[str, Any] = {"headers": attempt_headers, "params": params}
            if json is not None or method in WRITE_METHODS:
                kwargs["json"] = {} if json is None else json
            return kwargs

        def on_unauthorized(sent: dict[str, Any]) -> bool:
            # The cached token may have expired early or been revoked: fetch a new one, once.
            sent_token = sent["headers"]["Authorization"].removeprefix("Bearer ")
            self.auth.invalidate(sent_token)
            return True

        # Writes always carry an Idempotency-Key, so they are as safe to retry as reads.
        return self._transport.send(method, f"{self.base_url}{path}", retry=True, build=build,
                                    on_unauthorized=on_unauthorized if use_token else None)

    # --- operations outside the collections ---------------------------------------------
    def replay(self, action_id: str, policy_set_id: str | None = None) -> dict[str, Any]:
        """``GET /agp/replay/{action_id}``: the original and today's verdicts, optionally under
        a candidate policy set."""
        params = {"policy_set_id": policy_set_id} if policy_set_id is not None else None
        return self.request("GET", f"/agp/replay/{_segment(action_id)}", params=params).data

    def jwks(self, *, refresh: bool = False) -> dict[str, Any]:
        """The service's public signing keys (``/.well-known/jwks.json``), cached."""
        with self._jwks_lock:
            if self._jwks is None or refresh:
                self._jwks = self.request("GET", "/.well-known/jwks.json", authenticated=False).data
            return self._jwks

    def verify_signature(self, resource: dict[str, Any], jwks: dict[str, Any] | None = None) -> bool:
        """Check a signed resource (envelope, receipt, assessment, ...) against the service's keys.

        With no ``jwks`` given, the cached JWKS is used, refreshed once when the signature's
        ``kid`` is not in it (the service rotated its key).
        """
        if jwks is not None:
            return verify_signature(resource, jwks)
        keys = self.jwks()
        signature = resource.get("signature")
        kid = signature.get("kid") if isinstance(signature, dict) else None
        if kid and not any(key.get("kid") == kid for key in keys.get("keys", [])):
            keys = self.jwks(refresh=True)
        return verify_signature(resource, keys)

    def openapi(self) -> dict[str, Any]:
        """The service's OpenAPI 3.1 document."""
        return self.request("GET", "/agp/openapi.json", authenticated=False).data


__all__ = ["AGPClient"]
