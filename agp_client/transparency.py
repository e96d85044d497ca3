"""Verifying the service's transparency log and evidence bundles, with no network (docs/reference/ledger.md).

- ``verify_inclusion`` / ``verify_consistency``: RFC 9162 proofs as the API returns them
  (lowercase hex), checked by ``agp_client.merkle``;
- ``verify_checkpoint``: a checkpoint's Ed25519 signature against a JWKS;
- ``verify_evidence``: a whole ``GET /agp/action-envelopes/{id}/evidence`` bundle; raises
  ``VerificationError`` naming the first thing that does not hold.

A bundle carries the JWKS it was signed with, which proves nothing on its own: whoever
re-signs a bundle puts their key beside the service's. The reader says which keys to trust:
a JWKS obtained separately (the service's ``/.well-known/jwks.json``), or pinned key ids
(RFC 7638 thumbprints, checked against the keys themselves).

"""

from __future__ import annotations

import hashlib
from typing import Any

from .authors import approver_signatures_problem, delegator_signatures_problem
from .merkle import leaf_hash
from .merkle import verify_consistency as _verify_consistency
from .merkle import verify_inclusion as _verify_inclusion
from .numbers import canonical_json
from .signatures import evidence_signed_records, keys_pinned, signature_problem

EVIDENCE_TYPE = "ActionEvidence"
CHECKPOINT_FIELDS = ("tree_size", "root_hash", "issued_at", "signature")
# The fields of a ledger event its hash chain and its Merkle leaf cover (docs/reference/ledger.md).
CHAINED_FIELDS = ("actor", "event_id", "event_type", "payload_hash", "recorded_at", "resource_id", "resource_type",
                  "sequence")


class VerificationError(Exception):
    """A proof, a checkpoint or an evidence bundle does not verify; the message says what failed."""


def _digest(value: Any) -> bytes | None:
    """A 32-byte hash from its lowercase hex (or bytes); None when it is not one."""
    if isinstance(value, bytes):
        return value if len(value) == 32 else None
    if not isinstance(value, str) or len(value) != 64 or value != value.lower():
        return None
    try:
        return bytes.fromhex(value)
    except ValueError:
        return None


def _digests(values: Any) -> list[bytes] | None:
    if not isinstance(values, list):
        return None
    digests = [_digest(value) for value in values]
    return None if any(digest is None for digest in digests) else digests


def _size(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def verify_inclusion(*, leaf_hash: str | bytes, leaf_index: int, tree_size: int, audit_path: list[str],
                     root_hash: str | bytes) -> bool:
    """Whether ``audit_path`` (a proof's, sibling first) leads from the leaf to ``root_hash`` (RFC 9162 2.1.3.2)."""
    leaf, path, root = _digest(leaf_hash), _digests(audit_path), _digest(root_hash)
    if leaf is None or path is None or root is None or not _size(leaf_index) or not _size(tree_size):
        return False
    return _verify_inclusion(leaf, leaf_index, tree_size, path, root)


def verify_consistency(*, first: int, second: int, first_root: str | bytes, second_root: str | bytes,
                       proof: list[str]) -> bool:
    """Whether the tree of ``second`` leaves extends the tree of ``first`` leaves (RFC 9162 2.1.4.2)."""
    old, new, path = _digest(first_root), _digest(second_root), _digests(proof)
    if old is None or new is None or path is None or not _size(first) or not _size(second):
        return False
    return _verify_consistency(first, second, old, new, path)


def checkpoint_problem(checkpoint: Any, jwks: dict[str, Any]) -> str | None:
    """Why ``checkpoint`` is not a well-formed checkpoint signed by a key of ``jwks``, or None."""
    if not isinstance(checkpoint, dict) or sorted(checkpoint) != sorted(CHECKPOINT_FIELDS):
        return f"a checkpoint has exactly the fields {', '.join(CHECKPOINT_FIELDS)}"
    if not _size(checkpoint["tree_size"]) or checkpoint["tree_size"] < 1 or _digest(checkpoint["root_hash"]) is None:
        return "its tree_size or root_hash is malformed"
    return signature_problem(checkpoint, jwks)


def verify_checkpoint(checkpoint: dict[str, Any], jwks: dict[str, Any]) -> bool:
    """Whether ``checkpoint`` (``{"tree_size", "root_hash", "issued_at", "signature"}``) is signed by a
    key of ``jwks`` (the signature (docs/reference/ledger.md) over the other three fields)."""
    return checkpoint_problem(checkpoint, jwks) is None


def _canonical(value: Any) -> bytes:
    return canonical_json(value)  # the service's form: numbers exact (agp_client.numbers)


def event_problem(event: Any, proof: Any, checkpoint: dict[str, Any]) -> str | None:
    """Why a ledger event and its inclusion proof do not show the event in the checkpoint's tree, or None.

    The event's own hashes are recomputed from its fields (its payload against
    ``payload_hash``, its chain ``hash`` from ``prev_hash`` and the canonical event), its leaf
    hash is SHA-256(0x00 || the canonical event), and the audit path must lead from that leaf
    at index ``sequence - 1`` to the checkpoint's root.
    """
    if not isinstance(event, dict) or any(name not in event for name in (*CHAINED_FIELDS, "payload", "prev_hash",
                                                                          "hash")):
        return "it lacks the fields a ledger event has"
    if not _size(event["sequence"]) or event["sequence"] < 1:
        return "its sequence is not a positive integer"
    if not isinstance(proof, dict):
        return "it has no inclusion proof"
    try:
        payload_ok = "sha256:" + hashlib.sha256(_canonical(event["payload"])).hexdigest() == event["payload_hash"]
        canonical = _canonical({name: event[name] for name in CHAINED_FIELDS})
    except (ValueError, TypeError) as exc:
        return f"it has no canonical JSON form ({exc})"
    if not payload_ok:
        return "its payload does not hash to its payload_hash"
    prev = event["prev_hash"]
    if not isinstance(prev, str) or hashlib.sha256(prev.encode("utf-8") + canonical).hexdigest() != event["hash"]:
        return "its hash does not recompute from its fields and prev_hash (the event was changed)"
    sequence = event["sequence"]
    if proof.get("sequence") != sequence or proof.get("leaf_index") != sequence - 1:
        return "its proof is for another event"
    if proof.get("leaf_hash") != leaf_hash(canonical).hex():
        return "its proof's leaf_hash is not the hash of this event"
    if proof.get("tree_size") != checkpoint["tree_size"]:
        return (f"its proof is for a tree of {proof.get('tree_size')} events, not the checkpoint's "
                f"{checkpoint['tree_size']}")
    if not verify_inclusion(leaf_hash=proof["leaf_hash"], leaf_index=proof["leaf_index"],
                            tree_size=proof["tree_size"], audit_path=proof.get("audit_path"),
                            root_hash=checkpoint["root_hash"]):
        return f"its inclusion proof does not lead to the root hash of checkpoint {checkpoint['tree_size']}"
    return None


# The bundle's records that governed the action, and the id member of each.
GOVERNANCE_RECORDS = (("policy_evaluation", "evaluation_id"), ("decision", "decision_id"),
                      ("approvals", "approval_id"), ("impact_assessments", "assessment_id"))


def _links_problem(bundle: dict[str, Any]) -> str | None:
    """Why the records and events of a bundle are not about one action, or None."""
    action_id, records = bundle["action_id"], bundle["records"]
    envelope = records.get("envelope") or {}
    if envelope.get("action_id") != action_id:
        return f"the envelope is for action {envelope.get('action_id')!r}, not {action_id!r}"
    operation, receipt, payment = records.get("operation"), records.get("receipt"), records.get("payment")
    for label, record in (("receipt", receipt), ("payment", payment)):
        if record is not None and record.get("action_id") != action_id:
            return f"the {label} is for action {record.get('action_id')!r}, not {action_id!r}"
    ids = {action_id}
    ids.update(record[key] for record, key in ((operation, "operation_id"), (receipt, "receipt_id"),
                                                (payment, "payment_id")) if isinstance(record, dict))
    # The records that governed the action (its evaluation, decision, approvals, assessments):
    # their events are part of its story.
    for key, member in GOVERNANCE_RECORDS:
        found = records.get(key)
        ids.update(row[member] for row in (found if isinstance(found, list) else [found]) if isinstance(row, dict))
    accepted = False
    for item in bundle["ledger_events"]:
        event = item["event"]
        label = f"ledger event #{event['sequence']} ({event['event_type']})"
        if event["resource_id"] not in ids:
            return f"{label} is about {event['resource_type']} {event['resource_id']!r}, not a record of this action"
        payload = event["payload"] if isinstance(event["payload"], dict) else {}
        if event["event_type"] == "envelope.accepted":
            accepted = True
            if payload.get("signature_payload_hash") != (envelope.get("signature") or {}).get("payload_hash"):
                return f"{label} records another envelope than the bundle's (signature_payload_hash differs)"
        if event["event_type"] == "receipt.issued" and receipt is not None and event["resource_id"] == receipt.get(
                "receipt_id") and payload.get("result_hash") != receipt.get("result_hash"):
            return f"{label} records another result than the bundle's receipt (result_hash differs)"
    if not accepted:
        return "no ledger event records the envelope's acceptance (envelope.accepted)"
    return None


def verify_evidence(bundle: Any, *, jwks: dict[str, Any] | None = None,
                    kids: set[str] | None = None) -> dict[str, Any]:
    """Check an evidence bundle with no network; a summary, or ``VerificationError`` naming the first failure.

    In order: its shape; the checkpoint's signature; every signed record's signature; every
    ledger event's own hashes and its inclusion proof against the checkpoint; that records
    and events are about this one action (the ledger's acceptance event names the bundle's
    envelope, its receipt event the bundle's receipt); the delegators' signatures in the
    delegation chain and the approvers' signatures of approvals, each with its author's keys
    from ``authors`` (``agp_client.authors``); last the service's signature over the whole
    bundle, which covers the unsigned records (task, decision, ...) and ``authors`` too.

    Which keys to trust is the caller's to say, never the bundle's: ``jwks`` (keys obtained
    and trusted separately, such as the service's ``/.well-known/jwks.json``), or ``kids``:
    the pinned thumbprints of trusted keys, used from the bundle's JWKS only when the key's
    own thumbprint is one of them. A bundle's JWKS alone proves nothing: whoever re-signs a
    bundle puts their key in it.
    """
    if (jwks is None) == (kids is None):
        raise ValueError("say which keys to trust: jwks= (a trusted JWKS) or kids= (pinned key ids), one of them")
    try:
        if kids is not None:
            bundle_keys = bundle.get("jwks") if isinstance(bundle, dict) else None
            jwks = keys_pinned(bundle_keys if isinstance(bundle_keys, dict) else {}, set(kids))
        return _verify_evidence(bundle, jwks)

    except (AttributeError, KeyError, TypeError, IndexError) as exc:
        # A member of the wrong kind somewhere (a string where a record should be ...).
        raise VerificationError(f"the bundle is malformed ({type(exc).__name__}: {exc})") from None


def _verify_evidence(bundle: Any, jwks: dict[str, Any]) -> dict[str, Any]:
    def fail(message: str) -> VerificationError:
        return VerificationError(message)

    if not isinstance(bundle, dict) or bundle.get("type") != EVIDENCE_TYPE:
        raise fail(f"not an evidence bundle: its type is not {EVIDENCE_TYPE!r}")
    for name, kind in (("action_id", str), ("records", dict), ("ledger_events", list), ("checkpoint", dict),
                       ("jwks", dict)):
        if not isinstance(bundle.get(name), kind):
            raise fail(f"the bundle has no valid {name!r}")
    keys = jwks
    if not isinstance(keys.get("keys"), list) or not keys["keys"]:
        raise fail("no trusted key: the JWKS given holds none, or the bundle holds no key with a pinned kid")
    checkpoint = bundle["checkpoint"]
    problem = checkpoint_problem(checkpoint, keys)
    if problem:
        raise fail(f"checkpoint {checkpoint.get('tree_size')}: {problem}")
    signed = evidence_signed_records(bundle["records"])
    for label, record, link in signed:
        problem = signature_problem(record, keys, delegation_link=link)
        if problem:
            raise fail(f"{label}: {problem}")
    if not bundle["ledger_events"]:
        raise fail("the bundle holds no ledger events")
    for item in bundle["ledger_events"]:
        event = item.get("event") if isinstance(item, dict) else None
        proof = item.get("proof") if isinstance(item, dict) else None
        label = (f"ledger event #{event.get('sequence')} ({event.get('event_type')})" if isinstance(event, dict)
                 else "a ledger event")
        problem = event_problem(event, proof, checkpoint)
        if problem:
            raise fail(f"{label}: {problem}")
    problem = _links_problem(bundle)
    if problem:
        raise fail(problem)
    authors = bundle.get("authors", {})
    if not isinstance(authors, dict):
        raise fail("the bundle has no valid 'authors'")
    records = bundle["records"]
    found = (delegator_signatures_problem(list(records.get("delegation_chain") or []), authors)
             or approver_signatures_problem(list(records.get("approvals") or []), records.get("policy_evaluation"), authors))
    if found:
        raise fail(f"{found[0]}: {found[1]}")
    problem = signature_problem(bundle, keys)
    if problem:
        raise fail(f"the bundle's own signature: {problem}")
    kids = {record["signature"]["kid"] for _label, record, _link in signed}
    kids |= {checkpoint["signature"]["kid"], bundle["signature"]["kid"]}
    authored = sum(1 for approval in records.get("approvals") or [] if approval.get("approver_signature")) + sum(
        max(0, len(link.get("signature_chain") or []) - 1 - len(parent.get("signature_chain") or []))
        for parent, link in zip([{}, *(records.get("delegation_chain") or [])], records.get("delegation_chain") or []))
    return {"action_id": bundle["action_id"], "signatures": len(signed) + 2, "author_signatures": authored,
            "ledger_events": len(bundle["ledger_events"]), "tree_size": checkpoint["tree_size"],
            "root_hash": checkpoint["root_hash"], "kids": sorted(kids)}
