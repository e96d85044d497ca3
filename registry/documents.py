"""The registry's signed resources as JSON documents: what the API renders and what the
service signs, built once here (docs/reference/ledger.md). Serializers render through these functions;
services sign what they return."""

from typing import Any

from agp_project.signing import authored
from agp_project.timeutil import iso

from .models import Delegation, Freeze, PolicySet

# What a delegation link's signature does not cover: the fields that change after issue.
LINK_UNSIGNED_FIELDS = ("signature", "status", "revoked_at")


def _iso_or_none(value) -> str | None:
    return iso(value) if value is not None else None


def delegation_document(delegation: Delegation) -> dict[str, Any]:
    """One link of a delegation chain (DelegationChain), as rendered."""
    return {
        "type": "DelegationChain",
        "delegation_id": delegation.delegation_id,
        "parent_delegation_id": delegation.parent_id,
        "root_principal": delegation.root_principal,
        "delegator_agent": delegation.delegator_agent,
        "delegate_agent": delegation.delegate_agent,
        "authority_scope": list(delegation.authority_scope),
        "constraints": delegation.constraints,
        "accepted_at": iso(delegation.accepted_at),
        "expires_at": iso(delegation.expires_at),
        "signature_chain": list(delegation.signature_chain),
        "signature": delegation.signature or None,
        "status": str(delegation.status),
        "revoked_at": _iso_or_none(delegation.revoked_at),
        "created_at": iso(delegation.created_at),
        **authored(delegation),
    }


def delegation_link_payload(document: dict[str, Any], *, includes_own_signature: bool = True) -> dict[str, Any]:
    """What the signature of one delegation link covers.

    The DelegationChain document without the fields that change after issue
    (``signature``, ``status``, ``revoked_at``), and with ``signature_chain`` ending
    *before* this link's own signature: the parent's chain. Binding the parent's chain
    into every link makes the chain tamper-evident from the root down. To verify a
    response, pass it as it is (``includes_own_signature=True``) and check
    ``signature_chain[-1]`` (the ``signature`` object) over ``content_hash`` of the result.
    """
    payload = {key: value for key, value in document.items() if key not in LINK_UNSIGNED_FIELDS}
    chain = list(document.get("signature_chain") or [])
    payload["signature_chain"] = chain[:-1] if includes_own_signature else chain
    return payload


def policy_set_document(policy_set: PolicySet) -> dict[str, Any]:
    """A policy set (PolicySet), as rendered; its signature covers the rest, status included."""
    document = {
        "type": "PolicySet",
        "policy_set_id": policy_set.policy_set_id,
        "name": policy_set.name,
        "version": policy_set.version,
        "publisher": policy_set.publisher,
        "regulatory_frameworks": list(policy_set.regulatory_frameworks),
        "jurisdictions": list(policy_set.jurisdictions),
        "ruleset": policy_set.ruleset,
        "ruleset_hash": policy_set.ruleset_hash,
        "ruleset_engine": policy_set.ruleset_engine,
        "ruleset_engine_version": policy_set.ruleset_engine_version,
        "ruleset_uri": policy_set.ruleset_uri,
        "attestation_level": str(policy_set.attestation_level),
        "certifying_body": policy_set.certifying_body,
        "status": str(policy_set.status),
        "effective_from": _iso_or_none(policy_set.effective_from),
        "expires_at": _iso_or_none(policy_set.expires_at),
        "supersedes": policy_set.supersedes,
        "signature": policy_set.signature or None,
        "created_at": iso(policy_set.created_at),
    }
    # Rendered when set only: the signatures of sets issued before shadows and tests existed
    # cover a representation without these members, and must still verify.
    if policy_set.shadow_of_id is not None:
        document["shadow_of"] = policy_set.shadow_of_id
    if policy_set.root_principal is not None:
        document["root_principal"] = policy_set.root_principal
    document.update(authored(policy_set))
    if policy_set.tests:
        document["tests"] = list(policy_set.tests)
        document["test_summary"] = policy_set.test_summary
    return document


def freeze_document(freeze: Freeze) -> dict[str, Any]:
    """An emergency stop (Freeze), as rendered; signed at creation and again when lifted."""
    return {
        "type": "Freeze",
        "freeze_id": freeze.freeze_id,
        "target_type": str(freeze.target_type),
        # The model keeps "" for "none"; the resource says null.
        "target_id": freeze.target_id or None,
        "reason": freeze.reason,
        "frozen_by": freeze.frozen_by,
        "status": str(freeze.status),
        "lifted_at": _iso_or_none(freeze.lifted_at),
        "lifted_by": freeze.lifted_by or None,
        "signature": freeze.signature or None,
        "created_at": iso(freeze.created_at),
        **({"root_principal": freeze.root_principal} if freeze.root_principal is not None else {}),
        **authored(freeze),
    }

