"""``AGPClient``: the Python client of the AGP service."""

from __future__ import annotations

import json
import os
import threading
import uuid
from pathlib import Path
from typing import Any

import requests

from . import __version__, numbers
from .errors import SignatureError
from .keys import ClientKey
from .resources import (
    ActionEnvelopes,
    Approvals,
    Clients,
    Decisions,
    Delegations,
    Escalations,
    Freezes,
    LedgerEvents,
    Operations,
    PolicySets,
    Resource,
    Tasks,
    _segment,
)
from .signatures import signature_problem, signature_problems, signed_resources, signing_kids
from .transparency import VerificationError, checkpoint_problem, verify_consistency
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

    With ``private_key`` (an ``agp_client.keys.ClientKey`` or a private JWK) instead of a
    secret it authenticates with RFC 7523 client assertions; its tokens are bound to the key
    (DPoP, RFC 9449) when ``dpop=True`` or when the server issues the client no other kind;
    and ``delegations.create`` and ``approvals.create`` sign what they send with it.

    With ``verify_signatures=True`` every signed record in every response (envelopes and
    their attestations, receipts, delegation links, policy sets, impact assessments,
    approvals, freezes, checkpoints, evidence bundles; each item of a page) is verified
    against the service's JWKS before the call returns, and one that does not verify raises
    ``SignatureError``. Off by default: ``verify_signature(resource)`` checks one on demand.

    >>> client = AGPClient("http://localhost:8000", client_id="ops", client_secret="...")
    >>> task = client.tasks.create(root_principal="acme", agent_id="agent-1", title="Refund",
    ...                            risk_level="low", action_class="transact")
    >>> for event in client.ledger_events.list(resource_id=task["task_id"]): ...
    """

    def __init__(self, base_url: str, client_id: str | None = None, client_secret: str | None = None, *,
                 timeout: float = 10.0, max_retries: int = 4, backoff: float = 0.5, max_backoff: float = 30.0,
                 scope: str | None = None, token_refresh_skew: float = 30.0, user_agent: str | None = None,
                 checkpoint_file: str | os.PathLike | None = None, verify_signatures: bool = False,
                 private_key: ClientKey | dict[str, Any] | None = None, dpop: bool | None = None):
        if client_id is None and (client_secret is not None or private_key is not None):
            raise ValueError("Give client_id with client_secret or private_key.")
        if client_id is not None and client_secret is None and private_key is None:
            raise ValueError("Give client_id with client_secret or private_key, or neither.")
        if dpop and private_key is None:
            raise ValueError("DPoP needs the private_key whose possession it proves.")
        # The client's own key (docs/reference/identity.md, "Keys"): authenticates it without a
        # secret (private_key_jwt), binds its tokens (DPoP) and signs its delegations and approvals.
        self.private_key = ClientKey.from_jwk(private_key) if isinstance(private_key, dict) else private_key
        self.base_url = base_url.rstrip("/")
        self._transport = Transport(
            timeout=timeout, retry=RetryPolicy(max_retries=max_retries, backoff=backoff, max_backoff=max_backoff),
            user_agent=user_agent or f"agp-client/{__version__} python-requests/{requests.__version__}")
        self.auth: TokenManager | None = None
        if client_id is not None:
            self.auth = TokenManager(self._transport, f"{self.base_url}/oauth/token", client_id, client_secret,
                                     scope=scope, refresh_skew=token_refresh_skew, key=self.private_key, dpop=dpop)
        self._jwks: dict[str, Any] | None = None
        self._jwks_lock = threading.Lock()
        self.verify_signatures = verify_signatures
        self.checkpoint_file = Path(checkpoint_file) if checkpoint_file is not None else None
        self._checkpoint: dict[str, Any] | None = None
        self._checkpoint_lock = threading.Lock()

        # Registry API
        self.clients = Clients(self, "clients")
        self.delegations = Delegations(self, "delegations")

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
        self.approvals = Approvals(self, "approvals")
        self.escalations = Escalations(self, "escalations")
        self.commerce_sessions = Resource(self, "commerce-sessions")
        self.impact_assessments = Resource(self, "impact-assessments")
        self.backtests = Resource(self, "backtests")
        # Execution API
        self.action_envelopes = ActionEnvelopes(self, "action-envelopes")
        self.operations = Operations(self)
        self.receipts = Resource(self, "receipts")
        self.ledger_events = LedgerEvents(self, "ledger-events")

    # --- one governed action in one call (docs/reference/gateway.md) --------------------
    def govern(self, *, task_id: str, tool_id: str, operation: str | None = None, capability_id: str | None = None,
               agent_id: str | None = None, timeout: float = 60.0):
        """Decorate a function so that each call of it is one governed action (``agp_client.governed``)."""
        from .governed import govern

        return govern(self, task_id=task_id, tool_id=tool_id, operation=operation, capability_id=capability_id,
                      agent_id=agent_id, timeout=timeout)

    def governed_action(self, *, task_id: str, tool_id: str, operation: str, parameters: dict[str, Any] | None = None,
                        capability_id: str | None = None, agent_id: str | None = None, timeout: float = 60.0):
        """A context manager around one governed action: cleared on entry, its receipt posted on exit
        with the hash of what was assigned to ``.result`` (``agp_client.governed``)."""
        from .governed import GovernedAction

        return GovernedAction(self, task_id=task_id, tool_id=tool_id, operation=operation, parameters=parameters,
                              capability_id=capability_id, agent_id=agent_id, timeout=timeout)

    def mcp_session(self, *, task_id: str | None = None, commerce_session_id: str | None = None):
        """An MCP client session (the official SDK's ``Client``) with the gateway at ``/mcp``, carrying
        this client's token (``agp_client.gateway``); use it with ``async with``."""
        from .gateway import gateway_session

        return gateway_session(self, task_id=task_id, commerce_session_id=commerce_session_id)

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
                authenticated: bool = True, verify_signatures: bool | None = None) -> Response:
        """Send one API call (with its retries); a decoded 2xx ``Response`` or a typed exception.

        ``verify_signatures`` (default: the client's setting): raise ``SignatureError`` when a
        signed record in the response does not verify against the service's JWKS."""
        method = method.upper()
        base_headers = {"Accept": "application/json", **(headers or {})}
        if method in WRITE_METHODS:
            base_headers["Idempotency-Key"] = idempotency_key or str(uuid.uuid4())
        use_token = authenticated and self.auth is not None

        def build() -> dict[str, Any]:
            attempt_headers = dict(base_headers)
            if use_token:
                attempt_headers.update(self.auth.headers(method, f"{self.base_url}{path}"))
            kwargs: dict[str, Any] = {"headers": attempt_headers, "params": params}
            if json is not None or method in WRITE_METHODS:
                # Written here, not by requests' json=: a Decimal amount goes out exactly.
                kwargs["data"] = numbers.dumps({} if json is None else json).encode("utf-8")
                attempt_headers["Content-Type"] = "application/json"
            return kwargs

        def on_unauthorized(sent: dict[str, Any]) -> bool:
            # The cached token may have expired early or been revoked: fetch a new one, once.
            sent_token = sent["headers"]["Authorization"].partition(" ")[2]
            self.auth.invalidate(sent_token)
            return True

        # Writes always carry an Idempotency-Key, so they are as safe to retry as reads.
        response = self._transport.send(method, f"{self.base_url}{path}", retry=True, build=build,
                                        on_unauthorized=on_unauthorized if use_token else None)
        if self.verify_signatures if verify_signatures is None else verify_signatures:
            self.check_signatures(response.data, context=f"{method} {path}", status=response.status,
                                  headers=response.headers)
        return response

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
                self._jwks = self.request("GET", "/.well-known/jwks.json", authenticated=False,
                                          verify_signatures=False).data
            return self._jwks

    def _keys_for(self, data: Any) -> dict[str, Any]:
        """The cached JWKS, refreshed once when a signature in ``data`` names a key it lacks
        (the service rotated its key)."""
        keys = self.jwks()
        known = {key.get("kid") for key in keys.get("keys", []) if isinstance(key, dict)}
        if signing_kids(data) - known:
            keys = self.jwks(refresh=True)
        return keys

    def verify_signature(self, resource: dict[str, Any], jwks: dict[str, Any] | None = None) -> bool:
        """Check one signed resource (envelope, receipt, delegation link, assessment, approval, ...)
        against the service's keys (``jwks`` when given, else the service's JWKS, cached)."""
        return signature_problem(resource, jwks if jwks is not None else self._keys_for(resource)) is None

    def check_signatures(self, data: Any, *, jwks: dict[str, Any] | None = None, context: str = "the response",
                         status: int | None = None, headers: dict[str, str] | None = None) -> None:
        """Raise ``SignatureError`` unless every signed record in ``data`` (a resource, a page, an
        evidence bundle: ``agp_client.signed_resources``) verifies against ``jwks`` or the
        service's JWKS. What ``verify_signatures=True`` runs on every response."""
        if not signed_resources(data):
            return
        problems = signature_problems(data, jwks if jwks is not None else self._keys_for(data))
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise SignatureError(f"{context}: a signed record does not verify: {problems[0]}{more}",
                                 problems=problems, status=status, body=data, headers=headers)

    # --- the transparency log (docs/reference/ledger.md) ----------------------------------------------
    @property
    def last_checkpoint(self) -> dict[str, Any] | None:
        """The newest checkpoint of this service the client has verified (kept in ``checkpoint_file``
        too, when given, so a later process continues from it); None before the first."""
        with self._checkpoint_lock:
            return self._remembered()

    def _remembered(self) -> dict[str, Any] | None:
        if self._checkpoint is None and self.checkpoint_file is not None and self.checkpoint_file.exists():
            try:
                stored = json.loads(self.checkpoint_file.read_text(encoding="utf-8")).get(self.base_url)
            except (OSError, ValueError, AttributeError) as exc:
                raise VerificationError(f"cannot read the remembered checkpoint in {self.checkpoint_file}: "
                                        f"{exc}") from None
            if stored is not None and not (isinstance(stored, dict) and isinstance(stored.get("tree_size"), int)
                                           and isinstance(stored.get("root_hash"), str)):
                raise VerificationError(f"the checkpoint remembered in {self.checkpoint_file} is malformed")
            self._checkpoint = stored
        return self._checkpoint

    def _remember(self, checkpoint: dict[str, Any]) -> None:
        self._checkpoint = checkpoint
        if self.checkpoint_file is None:
            return
        try:
            stored = json.loads(self.checkpoint_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            stored = {}
        stored = stored if isinstance(stored, dict) else {}
        stored[self.base_url] = checkpoint
        self.checkpoint_file.parent.mkdir(parents=True, exist_ok=True)
        partial = self.checkpoint_file.with_name(self.checkpoint_file.name + ".tmp")
        partial.write_text(json.dumps(stored, indent=2), encoding="utf-8")
        partial.replace(self.checkpoint_file)  # atomic: a crash leaves the old file or the new one

    def check_checkpoint(self) -> dict[str, Any]:
        """Fetch the service's newest checkpoint, verify it, remember it; return it.

        Its signature must verify against the JWKS (refreshed once for an unknown key). When a
        checkpoint was seen before, the new one must extend it: same size and root, or a
        consistency proof from the old tree to the new one that verifies (RFC 9162). Anything
        else (a log that shrank or was rewritten) raises ``VerificationError`` and the
        remembered checkpoint stays as it was.
        """
        with self._checkpoint_lock:
            checkpoint = self.ledger_events.checkpoint()
            keys = self.jwks()
            kid = (checkpoint.get("signature") or {}).get("kid") if isinstance(checkpoint, dict) else None
            if kid and not any(key.get("kid") == kid for key in keys.get("keys", [])):
                keys = self.jwks(refresh=True)
            problem = checkpoint_problem(checkpoint, keys)
            if problem:
                raise VerificationError(f"checkpoint {checkpoint.get('tree_size')}: {problem}")
            previous = self._remembered()
            if previous is not None:
                old, new = previous["tree_size"], checkpoint["tree_size"]
                if new < old:
                    raise VerificationError(f"the log shrank: checkpoint {new} after checkpoint {old}")
                proof = [] if new == old else self.ledger_events.consistency(first=old, second=new)["proof"]
                if not verify_consistency(first=old, second=new, first_root=previous["root_hash"],
                                          second_root=checkpoint["root_hash"], proof=proof):
                    raise VerificationError(f"checkpoint {new} does not extend checkpoint {old} seen before: "
                                            "the log was rewritten")
            self._remember(checkpoint)
            return checkpoint

    def openapi(self) -> dict[str, Any]:
        """The service's OpenAPI 3.1 document."""
        return self.request("GET", "/agp/openapi.json", authenticated=False).data


__all__ = ["AGPClient"]
