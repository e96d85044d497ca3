"""Resource-style access to every AGP collection (docs/reference/api.md paths under ``/agp/``)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from .errors import OperationTimeoutError, error_from_operation

if TYPE_CHECKING:
    from .client import AGPClient

TERMINAL_OPERATION_STATUSES = frozenset({"succeeded", "failed", "cancelled"})


def _segment(value: Any) -> str:
    return quote(str(value), safe="")


# The largest page the service answers (``limit`` 1-200).
MAX_PAGE = 200


class ReadOnlyResource:

    """``get`` and ``list`` of one collection."""

    def __init__(self, client: AGPClient, collection: str):
        self._client = client
        self.collection = collection
        self.path = f"/agp/{collection}"

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.path}>"

    def get(self, resource_id: str | int) -> dict[str, Any]:
        """``GET /agp/<collection>/{id}``."""
        return self._client.request("GET", f"{self.path}/{_segment(resource_id)}").data

    def page(self, *, cursor: str | None = None, limit: int | None = None, **filters: Any) -> dict[str, Any]:
        """One page: ``{"items": [...], "next_cursor": str | None}``, newest first."""
        params = {name: value for name, value in filters.items() if value is not None}
        if cursor is not None:
            params["cursor"] = cursor
        if limit is not None:
            params["limit"] = limit
        return self._client.request("GET", self.path, params=params).data

    def list(self, *, limit: int | None = None, page_size: int | None = None,
             **filters: Any) -> Iterator[dict[str, Any]]:
        """Every matching resource (at most ``limit`` of them), newest first, fetching pages as the
        iteration goes.

        ``filters`` are the collection's exact-match query parameters (``task_id=...``,
        ``status=...``); ``page_size`` is the ``limit`` of each page (1-200; by default
        ``limit`` when it is smaller than the service's largest page).
        """
        if page_size is None and limit is not None and 0 < limit <= MAX_PAGE:
            page_size = limit
        cursor, given = None, 0
        while limit is None or given < limit:
            page = self.page(cursor=cursor, limit=page_size, **filters)
            for item in page["items"][: None if limit is None else limit - given]:
                given += 1
                yield item
            cursor = page.get("next_cursor")
            if not cursor:
                return


class Resource(ReadOnlyResource):
    """``create``, ``get`` and ``list`` of one collection."""

    def create(self, *, idempotency_key: str | None = None, **fields: Any) -> dict[str, Any]:
        """``POST /agp/<collection>``; the created resource. A retried create is executed once."""
        return self._client.request("POST", self.path, json=fields, idempotency_key=idempotency_key).data

    def _patch(self, resource_id: str, fields: dict[str, Any], idempotency_key: str | None) -> dict[str, Any]:
        return self._client.request("PATCH", f"{self.path}/{_segment(resource_id)}", json=fields,
                                    idempotency_key=idempotency_key).data


class Delegations(Resource):
    def create(self, *, idempotency_key: str | None = None, sign: bool | None = None,
               **fields: Any) -> dict[str, Any]:
        """``POST /agp/delegations``. With the client's ``private_key`` (unless ``sign=False``) the
        request carries ``delegator_signature``: the key's JWS over the request's canonical JSON,
        which the service appends to the link's ``signature_chain``."""
        key = self._client.private_key
        if key is not None and sign is not False and "delegator_signature" not in fields:
            fields["delegator_signature"] = key.sign_statement(fields)
        return super().create(idempotency_key=idempotency_key, **fields)


class Approvals(Resource):
    def create(self, *, idempotency_key: str | None = None, sign: bool | None = None,
               **fields: Any) -> dict[str, Any]:
        """``POST /agp/approvals``. With the client's ``private_key`` (unless ``sign=False``) the
        approval carries ``approver_signature``: the key's JWS over ``{"decision_id",
        "action_hash", "verdict"}``, the action hash read from the decision's policy evaluation."""
        key = self._client.private_key
        if key is not None and sign is not False and "approver_signature" not in fields:
            decision = self._client.decisions.get(fields["decision_ref"])
            evaluation_ref = decision.get("policy_evaluation_ref")
            action_hash = (self._client.policy_evaluations.get(evaluation_ref).get("action_hash")
                           if evaluation_ref else None)
            fields["approver_signature"] = key.sign_statement({
                "decision_id": fields["decision_ref"], "action_hash": action_hash or None,
                "verdict": fields.get("verdict")})
        return super().create(idempotency_key=idempotency_key, **fields)


class PolicySets(Resource):
    def update(self, policy_set_id: str, *, idempotency_key: str | None = None, **fields: Any) -> dict[str, Any]:
        """``PATCH /agp/policy-sets/{id}`` (the service accepts only ``status``)."""
        return self._patch(policy_set_id, fields, idempotency_key)

    def deprecate(self, policy_set_id: str, *, idempotency_key: str | None = None) -> dict[str, Any]:
        """Move an active policy set to ``deprecated``."""
        return self.update(policy_set_id, status="deprecated", idempotency_key=idempotency_key)

    def revoke(self, policy_set_id: str, *, idempotency_key: str | None = None) -> dict[str, Any]:
        """Move a deprecated policy set to ``revoked`` (final)."""
        return self.update(policy_set_id, status="revoked", idempotency_key=idempotency_key)


class Tasks(Resource):
    def close(self, task_id: str, *, idempotency_key: str | None = None) -> dict[str, Any]:
        """``PATCH /agp/tasks/{id}`` with ``{"status": "closed"}``: no envelope passes for it after."""
        return self._patch(task_id, {"status": "closed"}, idempotency_key)


class Decisions(Resource):
    def finalise(self, decision_id: str, *, idempotency_key: str | None = None) -> dict[str, Any]:
        """``PATCH /agp/decisions/{id}`` with ``{"status": "finalised"}``."""
        return self._patch(decision_id, {"status": "finalised"}, idempotency_key)

    finalize = finalise


class Escalations(Resource):
    def resolve(self, escalation_id: str, *, outcome: str, resolved_by: str, resolution_notes: str | None = None,
                idempotency_key: str | None = None) -> dict[str, Any]:
        """Resolve an open escalation: ``outcome`` is ``upheld``, ``dismissed`` or ``partially_upheld``."""
        fields = {"status": "resolved", "outcome": outcome, "resolved_by": resolved_by}
        if resolution_notes is not None:
            fields["resolution_notes"] = resolution_notes
        return self._patch(escalation_id, fields, idempotency_key)


class Freezes(Resource):
    def lift(self, freeze_id: str, *, lifted_by: str | None = None,
             idempotency_key: str | None = None) -> dict[str, Any]:
        """``PATCH /agp/freezes/{id}`` with ``{"status": "lifted"}``: forward only (a second lift raises
        ``InvalidTransitionError``); operations the freeze cancelled stay cancelled."""
        fields = {"status": "lifted"}
        if lifted_by is not None:
            fields["lifted_by"] = lifted_by
        return self._patch(freeze_id, fields, idempotency_key)


class Clients(Resource):
    """``/agp/clients`` (an operator's token, scope ``agp.admin``): create one with ``kind`` and its
    bindings (``agent_id``, ``subject``, ``tenants``); the answer carries ``client_secret`` once."""

    def disable(self, client_id: str, *, idempotency_key: str | None = None) -> dict[str, Any]:
        """Its tokens stop working at once."""
        return self._patch(client_id, {"is_active": False}, idempotency_key)

    def enable(self, client_id: str, *, idempotency_key: str | None = None) -> dict[str, Any]:
        """Tokens issued before it was disabled stay dead."""
        return self._patch(client_id, {"is_active": True}, idempotency_key)

    def rotate_secret(self, client_id: str, *, idempotency_key: str | None = None) -> dict[str, Any]:
        """A new ``client_secret`` (in the answer, once); tokens issued before stop working."""
        return self._patch(client_id, {"rotate_secret": True}, idempotency_key)

    def update(self, client_id: str, *, idempotency_key: str | None = None, **fields: Any) -> dict[str, Any]:
        """``scopes`` or ``description``; who the client is never changes."""
        return self._patch(client_id, fields, idempotency_key)


class ActionEnvelopes(ReadOnlyResource):

    def validate(self, *, idempotency_key: str | None = None, **fields: Any) -> dict[str, Any]:
        """Validate only (``Prefer: return=representation``): the envelope as it would execute.

        Nothing is reserved or executed; a failed check raises ``PrerequisiteFailedError``
        listing every failed check.
        """
        return self._client.request("POST", self.path, json=fields, idempotency_key=idempotency_key,
                                    headers={"Prefer": "return=representation"}).data

    def submit(self, *, callback_url: str | None = None, idempotency_key: str | None = None,
               **fields: Any) -> dict[str, Any]:
        """Validate and execute (``Prefer: respond-async``): the pending Operation.

        Follow it with ``client.operations.wait(operation["operation_id"])``.
        """
        if callback_url is not None:
            fields["callback_url"] = callback_url
        return self._client.request("POST", self.path, json=fields, idempotency_key=idempotency_key,
                                    headers={"Prefer": "respond-async"}).data


    def evidence(self, action_id: str) -> dict[str, Any]:
        """The action's evidence bundle (every record, every ledger event with its inclusion proof, the
        checkpoint, the JWKS); check it offline with ``agp_client.verify_evidence``."""
        return self._client.request("GET", f"{self.path}/{_segment(action_id)}/evidence").data


class Operations:
    """``GET /agp/operations/{id}`` and waiting for an operation to end."""

    path = "/agp/operations"

    def __init__(self, client: AGPClient):
        self._client = client

    def get(self, operation_id: str) -> dict[str, Any]:
        """The Operation: ``status`` (pending, running, succeeded, failed, cancelled), ``error``, URLs."""
        return self._client.request("GET", f"{self.path}/{_segment(operation_id)}").data

    def cancel(self, operation_id: str, *, idempotency_key: str | None = None) -> dict[str, Any]:
        """``PATCH /agp/operations/{id}`` ``{"status": "cancelled"}``: stop a pending operation.

        Its budget reservation is released; a running or ended one raises ``InvalidTransitionError``.
        """
        return self._client.request("PATCH", f"{self.path}/{_segment(operation_id)}", json={"status": "cancelled"},
                                    idempotency_key=idempotency_key).data

    def wait(self, operation: str | dict[str, Any], *, timeout: float = 60.0, poll_interval: float = 0.5,
             raise_on_failure: bool = False) -> dict[str, Any]:
        """Poll until the operation is ``succeeded``, ``failed`` or ``cancelled``; return it.

        ``operation`` is an id or an Operation (as returned by ``action_envelopes.submit``).
        A failed operation is returned (its ``error`` holds the AGP error body), or with
        ``raise_on_failure=True`` raised as the typed error of that body (for instance
        ``ExecutionFailedError``, or ``PrerequisiteFailedError`` when a check failed at
        execution time). Raises ``OperationTimeoutError`` after ``timeout`` seconds.
        """
        operation_id = operation["operation_id"] if isinstance(operation, dict) else operation
        deadline = time.monotonic() + timeout
        while True:
            current = self.get(operation_id)
            if current.get("status") in TERMINAL_OPERATION_STATUSES:
                if raise_on_failure and current.get("status") == "failed":
                    raise error_from_operation(current)
                return current
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise OperationTimeoutError(
                    f"Operation {operation_id} still {current.get('status')!r} after {timeout:g}s.",
                    operation=current)
            time.sleep(min(poll_interval, remaining))


class LedgerEvents(Resource):
    def __init__(self, client: AGPClient, collection: str):
        super().__init__(client, collection)
        self.checkpoints = ReadOnlyResource(client, f"{collection}/checkpoints")

    def verify(self) -> dict[str, Any]:
        """Walk the hash chain and recompute the Merkle tree: ``{"verified", "events", "head_hash",
        "first_broken_sequence", "tree": {...}}``."""
        return self._client.request("GET", f"{self.path}/verify").data

    def checkpoint(self) -> dict[str, Any]:
        """The newest signed checkpoint ``{"tree_size", "root_hash", "issued_at", "signature"}``, unverified
        (``AGPClient.check_checkpoint`` verifies it)."""
        return self._client.request("GET", f"{self.path}/checkpoint").data

    def proof(self, sequence: int, tree_size: int | None = None) -> dict[str, Any]:
        """The inclusion proof of event ``sequence`` in the tree of ``tree_size`` events (default: the
        newest checkpoint's): ``{"sequence", "leaf_index", "tree_size", "leaf_hash", "audit_path"}``."""
        params = {"tree_size": tree_size} if tree_size is not None else None
        return self._client.request("GET", f"{self.path}/{_segment(sequence)}/proof", params=params).data

    def consistency(self, first: int, second: int | None = None) -> dict[str, Any]:
        """The consistency proof from the tree of ``first`` events to the tree of ``second`` (default: the
        newest checkpoint's): ``{"first", "second", "proof"}``."""
        params = {"first": first} if second is None else {"first": first, "second": second}
        return self._client.request("GET", f"{self.path}/consistency", params=params).data
