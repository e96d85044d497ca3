"""The registry's signed resources as JSON documents: what the API renders and what the
service signs, built once here (CONTRACT C9). Serializers render through these functions;
services sign what they return."""

from typing import Any

from agp_project.timeutil import iso

from .models import Delegation, PolicySet

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
    return {
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
