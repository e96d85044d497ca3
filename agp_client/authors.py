"""Statements signed by their authors: delegators' links and approvers' verdicts, checked offline.

The service notarises every record with its own key; a delegator's link and a person's
approval may also carry the author's own signature (docs/reference/identity.md, "Keys"):

- a delegation link's ``signature_chain`` is its parent's chain, then (when its delegator
  signed) the delegator's compact JWS over the canonical JSON of its request, then the
  service's signature value;
- an approval's ``approver_signature`` is a compact JWS over the canonical JSON of
  ``{"decision_id", "action_hash", "verdict"}``.

An evidence bundle's ``authors`` maps each signing client to its kind, bindings and the
public keys that verified its statements. These functions check the statements against
those keys alone, without the service's key.
"""

from __future__ import annotations

import json
from typing import Any

from .numbers import canonical_json

ALGORITHMS = ("EdDSA", "Ed25519", "ES256")
LINK_FIELDS = ("root_principal", "delegate_agent", "authority_scope")


def statement_problem(value: Any, keys: list[dict[str, Any]], statement: dict[str, Any]) -> str | None:
    """Why ``value`` is not a compact JWS by one of ``keys`` over the canonical JSON of
    ``statement`` (embedded or detached), or None when it is."""
    import warnings

    from joserfc import jws
    from joserfc.errors import JoseError
    from joserfc.jwk import ECKey, OKPKey

    if not isinstance(value, str) or value.count(".") != 2:
        return "it is not a compact JWS"
    payload = canonical_json(statement)
    try:
        obj = jws.extract_compact(value.encode("ascii"), payload=None if value.split(".")[1] else payload)
    except (JoseError, ValueError, UnicodeError) as exc:
        return f"it is not a compact JWS ({exc})"
    if obj.payload != payload:
        return "what it signs is not what the record says"
    header = obj.headers()
    alg, kid = header.get("alg"), header.get("kid")
    if alg not in ALGORITHMS:
        return f"its algorithm {alg!r} is not accepted"
    key_data = next((key for key in keys if isinstance(key, dict) and key.get("kid") == kid), None)
    if key_data is None:
        return f"no key of its author has kid {kid!r}"
    try:
        key = (OKPKey if key_data.get("kty") == "OKP" else ECKey).import_key(dict(key_data))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "EdDSA is deprecated" (RFC 9864): still what many signers write
            valid = jws.validate_compact(obj, key, algorithms=[alg])
    except (JoseError, ValueError, TypeError) as exc:
        return f"it does not verify with key {kid!r} ({exc})"
    return None if valid else f"it does not verify with key {kid!r}"


def _author(authors: dict[str, Any], client_id: Any) -> dict[str, Any] | None:
    author = authors.get(client_id) if isinstance(client_id, str) else None
    return author if isinstance(author, dict) and isinstance(author.get("keys"), list) else None


def delegator_signatures_problem(links: list[dict[str, Any]], authors: dict[str, Any]) -> tuple[str, str] | None:
    """The first link (its id) whose delegator's signature fails, and why; None when every
    signed link verifies with its delegator's keys. ``links`` run from the root down."""
    parent_chain: list[Any] = []
    for link in links:
        label = f"delegation link {link.get('delegation_id')}"
        chain = list(link.get("signature_chain") or [])
        if chain[:len(parent_chain)] != parent_chain or len(chain) - len(parent_chain) not in (1, 2):
            return label, "its signature_chain is not its parent's chain and its own signatures"
        for signed in chain[len(parent_chain):-1]:
            author = _author(authors, link.get("created_by"))
            if author is None:
                return label, f"the bundle carries no keys of its delegator's client {link.get('created_by')!r}"
            if author.get("kind") == "agent" and author.get("agent_id") != link.get("delegator_agent"):
                return label, (f"it was signed by the client of agent {author.get('agent_id')!r}, not of its "
                               f"delegator {link.get('delegator_agent')!r}")
            try:
                statement = json.loads(_embedded_payload(signed))
            except (ValueError, RecursionError):
                return label, "the delegator's signature holds no JSON request"
            if not isinstance(statement, dict) or any(statement.get(name) != link.get(name) for name in LINK_FIELDS) \
                    or statement.get("delegator_agent", link.get("delegator_agent")) != link.get("delegator_agent"):
                return label, "the request its delegator signed is not this link"
            problem = statement_problem(signed, author["keys"], statement)
            if problem:
                return label, f"the delegator's signature: {problem}"
        parent_chain = chain
    return None


def _embedded_payload(value: Any) -> bytes:
    """The payload a compact JWS carries (ValueError when it is not one, or carries none)."""
    from joserfc import jws
    from joserfc.errors import JoseError

    try:
        payload = jws.extract_compact(value.encode("ascii")).payload if isinstance(value, str) else b""
    except (JoseError, UnicodeError) as exc:
        raise ValueError(str(exc)) from None
    if not payload:
        raise ValueError("no payload")
    return payload


def approver_signatures_problem(approvals: list[dict[str, Any]], evaluation: dict[str, Any] | None,
                      authors: dict[str, Any]) -> tuple[str, str] | None:
    """The first approval (its label) whose approver's signature fails, and why; None when
    every signed approval verifies with its approver's keys. ``evaluation``: the decision's
    policy evaluation, whose ``action_hash`` the approver signed."""
    for approval in approvals:
        value = approval.get("approver_signature")
        if value is None:
            continue
        label = f"approval {approval.get('approval_id')}"
        author = _author(authors, approval.get("approver_client"))
        if author is None:
            return label, f"the bundle carries no keys of its approver's client {approval.get('approver_client')!r}"
        statement = {"decision_id": approval.get("decision_ref"),
                     "action_hash": (evaluation or {}).get("action_hash") or None, "verdict": approval.get("verdict")}
        problem = statement_problem(value, author["keys"], statement)
        if problem:
            return label, f"the approver's signature: {problem}"
    return None
