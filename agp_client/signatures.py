"""Verifying the Ed25519 signatures of what the service signs (docs/reference/ledger.md, docs/reference/governance.md): the one place.

The rules (docs/signatures.md spells them out for any language):

- What is signed is the resource as the API renders it, without its ``signature`` member;
  except for a **delegation link** (``type`` ``DelegationChain``), whose signature covers the
  link without ``signature``, ``status`` and ``revoked_at`` (they change after issue) and
  with ``signature_chain`` ending *before* the link's own signature (the parent's chain),
  which in turn must end with the link's ``signature.value``.
- ``payload_hash`` is ``"sha256:"`` + hex SHA-256 of the RFC 8785 canonical JSON of that
  (numbers exact, as ``numbers.canonical_json`` writes them: resources must be parsed with
  Decimals, as this client does).
- ``value`` is the unpadded base64url Ed25519 signature of the ASCII bytes of
  ``payload_hash``, made with the key whose ``kid`` the JWKS at ``/.well-known/jwks.json``
  publishes; ``alg`` is ``EdDSA``.

``signature_problem`` says why one record does not verify; ``signed_resources`` finds every
signed record in a response body (a resource, a page of them, an envelope's attestations,
an evidence bundle's records), which ``signature_problems`` checks all at once.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

from .numbers import canonical_json

DELEGATION_LINK_TYPE = "DelegationChain"
# What a delegation link's signature does not cover: the fields that change after issue.
LINK_UNSIGNED_FIELDS = ("signature", "status", "revoked_at")
# The resources the service always signs, by ``type``, and the member holding each one's id.
SIGNED_TYPES = {
    "ActionEnvelope": ("action envelope", "action_id"),
    "Receipt": ("receipt", "receipt_id"),
    DELEGATION_LINK_TYPE: ("delegation", "delegation_id"),
    "PolicySet": ("policy set", "policy_set_id"),
    "ImpactAssessment": ("impact assessment", "assessment_id"),
    "Approval": ("approval", "approval_id"),
    "Freeze": ("freeze", "freeze_id"),
    "ActionEvidence": ("evidence bundle of action", "action_id"),
}


def _b64url_decode(text: str) -> bytes:
    """Strict unpadded base64url: one spelling per value, so a changed character never decodes
    to the same bytes (the decoder alone ignores the unused low bits of the last character)."""
    data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii") != text:
        raise ValueError("not canonical unpadded base64url")
    return data


def payload_hash(resource: dict[str, Any]) -> str:
    """``"sha256:<hex>"`` of the canonical JSON of ``resource`` without its ``signature``."""
    unsigned = {key: value for key, value in resource.items() if key != "signature"}
    return "sha256:" + hashlib.sha256(canonical_json(unsigned)).hexdigest()


def delegation_link_payload(link: dict[str, Any]) -> dict[str, Any]:
    """What one delegation link's signature covers: the link without the fields that change after
    issue, with ``signature_chain`` ending before the link's own signature (the parent's chain)."""
    payload = {key: value for key, value in link.items() if key not in LINK_UNSIGNED_FIELDS}
    payload["signature_chain"] = list(link.get("signature_chain") or [])[:-1]
    return payload


def is_delegation_link(record: dict[str, Any]) -> bool:
    """A delegation link as the API renders it (with its ``status``), signed by the link rule.
    A payload already rebuilt with ``delegation_link_payload`` is checked as it stands."""
    return record.get("type") == DELEGATION_LINK_TYPE and "status" in record


def jwk_thumbprint(jwk: dict[str, Any]) -> str | None:
    """The RFC 7638 SHA-256 thumbprint of a public JWK (the service's ``kid``), computed from the
    key itself; None for a key that is not an Ed25519 or P-256 public key."""
    members = {"OKP": ("crv", "kty", "x"), "EC": ("crv", "kty", "x", "y")}.get(jwk.get("kty"))
    if members is None or not all(isinstance(jwk.get(name), str) for name in members):
        return None
    required = {name: jwk[name] for name in members}
    digest = hashlib.sha256(json.dumps(required, separators=(",", ":"), sort_keys=True).encode("utf-8")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def keys_pinned(jwks: dict[str, Any], kids: set[str]) -> dict[str, Any]:
    """The keys of ``jwks`` whose own thumbprint is one of ``kids`` (and which carry it as their
    ``kid``): pinning a kid pins the key, since a kid is the key's thumbprint."""
    return {"keys": [jwk for jwk in jwks.get("keys", []) if isinstance(jwk, dict)
                     and jwk_thumbprint(jwk) in kids and jwk.get("kid") == jwk_thumbprint(jwk)]}


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


def signature_problem(record: dict[str, Any], jwks: dict[str, Any], *,
                      delegation_link: bool | None = None) -> str | None:
    """Why ``record``'s signature does not verify against ``jwks``, or None when it does.

    ``payload_hash`` must be the hash of what the signature covers, and ``value`` an Ed25519
    signature of it by the JWKS key ``kid`` names. ``delegation_link``: check ``record`` by the
    link rule (True), as a plain resource (False), or as its ``type`` says (None, the default).
    """
    if not isinstance(record, dict):
        return "it is not a JSON object"
    link = is_delegation_link(record) if delegation_link is None else delegation_link
    signature = record.get("signature")
    if not isinstance(signature, dict) or not signature:
        return "it carries no signature"
    if signature.get("alg") != "EdDSA":
        return f"its signature algorithm is {signature.get('alg')!r}, not EdDSA"
    try:
        computed = payload_hash(delegation_link_payload(record) if link else record)
    except (ValueError, TypeError) as exc:  # no canonical form (a float NaN, a non-string key, ...)
        return f"its content has no canonical JSON form ({exc})"
    if computed != signature.get("payload_hash"):
        return "its content is not what was signed (a field was changed: payload_hash does not match)"
    if link and list(record.get("signature_chain") or [None])[-1] != signature.get("value"):
        return "its signature is not the last entry of its signature_chain"
    kid = signature.get("kid")
    keys = jwks.get("keys") if isinstance(jwks, dict) else None
    if not any(isinstance(key, dict) and key.get("kid") == kid for key in keys or []):
        return f"it is signed with key {kid!r}, which the JWKS does not hold"
    if not signature_value_verifies(signature, jwks):
        return f"its signature value does not verify with key {kid!r}"
    return None


def verify_signature(resource: dict[str, Any], jwks: dict[str, Any]) -> bool:
    """True when ``resource`` carries a valid EdDSA signature of itself by a key in ``jwks``
    (a delegation link by the link rule); False on any mismatch (changed field, unknown key,
    bad value). ``signature_problem`` says why."""
    return signature_problem(resource, jwks) is None


# --- finding what a response holds ----------------------------------------------------------------------------
def _label(record: dict[str, Any]) -> str:
    kind = SIGNED_TYPES.get(record.get("type"))
    if kind is not None:
        return f"{kind[0]} {record.get(kind[1])}"
    if "tree_size" in record and "root_hash" in record:
        return f"checkpoint {record.get('tree_size')}"
    return f"{record.get('type') or 'signed resource'}"


def evidence_signed_records(records: dict[str, Any]) -> list[tuple[str, dict[str, Any], bool]]:
    """(label, record, is a delegation link) for every record of an evidence bundle's ``records``
    that the service signed, whether or not it carries its signature."""
    signed: list[tuple[str, dict[str, Any], bool]] = []
    envelope = records.get("envelope")
    if isinstance(envelope, dict):
        signed.extend(_with_attestations(envelope))
    if isinstance(records.get("policy_set"), dict):
        signed.append((_label({**records["policy_set"], "type": "PolicySet"}), records["policy_set"], False))
    for kind, name in (("ImpactAssessment", "impact_assessments"), ("Approval", "approvals")):
        for record in records.get(name) or []:
            signed.append((_label({**record, "type": kind}), record, False))
    for link in records.get("delegation_chain") or []:
        signed.append((_label({**link, "type": DELEGATION_LINK_TYPE}), link, True))
    if isinstance(records.get("receipt"), dict):
        signed.append((_label({**records["receipt"], "type": "Receipt"}), records["receipt"], False))
    return signed


def _with_attestations(envelope: dict[str, Any]) -> list[tuple[str, dict[str, Any], bool]]:
    found = [(_label({**envelope, "type": "ActionEnvelope"}), envelope, False)]
    for number, attestation in enumerate(envelope.get("governance_attestations") or [], start=1):
        if isinstance(attestation, dict):
            found.append((f"governance attestation {number} of the envelope", attestation, False))
    return found


def signed_resources(data: Any) -> list[tuple[str, dict[str, Any], bool | None]]:
    """Every signed record in a response body: (label, record, how to check it).

    The body itself when it is a resource the service signs (by ``type``, or any object with
    a ``signature`` object, such as a checkpoint), each item of a page (``{"items": [...]}``),
    an envelope's governance attestations, and every signed record of an evidence bundle.
    Client-supplied members (parameters, inputs, results, ledger payloads) are not searched.
    """
    if isinstance(data, list):
        return [found for item in data for found in signed_resources(item)]
    if not isinstance(data, dict):
        return []
    kind = data.get("type")
    if kind is None and isinstance(data.get("items"), list):
        return signed_resources(data["items"])
    if kind == "ActionEnvelope":
        return list(_with_attestations(data))
    found: list[tuple[str, dict[str, Any], bool | None]] = []
    if kind in SIGNED_TYPES or isinstance(data.get("signature"), dict):
        found.append((_label(data), data, None))
    if kind == "ActionEvidence":
        if isinstance(data.get("checkpoint"), dict):
            found.append((_label(data["checkpoint"]), data["checkpoint"], False))
        if isinstance(data.get("records"), dict):
            found.extend(evidence_signed_records(data["records"]))
    return found


def signature_problems(data: Any, jwks: dict[str, Any]) -> list[str]:
    """``"<label>: <problem>"`` for every signed record in ``data`` that does not verify; empty
    when they all do (or there is none)."""
    problems = []
    for label, record, link in signed_resources(data):
        problem = signature_problem(record, jwks, delegation_link=link)
        if problem:
            problems.append(f"{label}: {problem}")
    return problems


def signing_kids(data: Any) -> set[str]:
    """The key ids the signed records in ``data`` name."""
    kids = set()
    for _label_, record, _link in signed_resources(data):
        signature = record.get("signature")
        if isinstance(signature, dict) and isinstance(signature.get("kid"), str):
            kids.add(signature["kid"])
    return kids
