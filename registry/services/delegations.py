"""Delegation links (docs/reference/governance.md): parent discovery under the tree lock, and the limits (docs/reference/governance.md)."""

from datetime import datetime
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agp_project import errors
from agp_project.exactjson import decimal_text
from agp_project.ids import new_id
from agp_project.signing import sign_resource
from auth_tokens.services import client_has_keys, client_statement_verify
from core.ledger import ledger_append

from .. import selectors
from ..choices import ActiveStatus
from ..documents import delegation_document, delegation_link_payload
from ..models import Delegation, path_pks, path_segment
from .common import (
    insert_new,
    lock_agents,
    lock_tree_roots,
    money,
    record_timestamp,
    refuse_frozen,
    refuse_revoked_agents,
    require_future,
)


def delegation_create(
    *,
    actor: str,
    root_principal: str,
    delegator_agent: str,
    delegate_agent: str,
    authority_scope: list[str],
    constraints: dict[str, Any] | None = None,
    expires_at: datetime | None = None,
    accepted_at: datetime | None = None,
    created_at: datetime | None = None,
    delegation_id: str | None = None,
    delegator_signature: str | None = None,
    delegator_key: dict[str, Any] | None = None,
) -> Delegation:
    """Record one delegation link under the parent the server finds (docs/reference/governance.md).

    ``constraints`` may hold ``spend_limit`` (``{"currency", "amount"}``) and
    ``max_hops_remaining``. Refusals, checked in this order: 400 (delegate equals
    delegator, ``expires_at`` not in the future, root without ``expires_at``); 409
    ``AGP_DELEGATION_SCOPE_VIOLATION`` when no usable parent covers the scope; 409
    ``AGP_CONFLICT`` when the delegate (or a root's principal) is a revoked agent; 409
    ``AGP_DELEGATION_SCOPE_VIOLATION`` for a cycle; 409 ``AGP_DELEGATION_HOP_LIMIT``;
    409 ``AGP_DELEGATION_SCOPE_VIOLATION`` for spend, then expiry. Before any of the 409s:
    409 ``AGP_FROZEN`` when the delegator or the root principal is frozen (docs/reference/governance.md).

    ``delegator_signature`` (verified by ``delegator_signature_check``, with the key that
    verified it as ``delegator_key``) goes into ``signature_chain`` before the service's own
    signature, which covers it.
    """
    now = timezone.now()
    constraints = constraints or {}
    requested_hops = constraints.get("max_hops_remaining")
    requested_spend = constraints.get("spend_limit")
    if delegate_agent == delegator_agent:
        raise errors.invalid_fields({"delegate_agent": ["Must differ from delegator_agent."]})
    require_future(expires_at, field="expires_at", now=now)
    accepted_at = record_timestamp(accepted_at, field="accepted_at", now=now)
    created_at = record_timestamp(created_at, field="created_at", now=now)
    is_root = delegator_agent == root_principal
    if is_root and expires_at is None:
        raise errors.invalid_fields({"expires_at": ["Required for a root delegation."]})
    refuse_frozen(acting="a delegation", agent_id=delegator_agent, root_principal=root_principal)

    with transaction.atomic():
        lock_agents([delegator_agent, delegate_agent])
        if is_root:
            parent, chain = None, []
            refuse_revoked_agents([root_principal, delegate_agent])
            hops = settings.AGP_DEFAULT_MAX_HOPS if requested_hops is None else requested_hops
            spend_currency, spend_amount = money(requested_spend)
        else:
            parent, chain = _delegation_parent(root_principal=root_principal, delegator_agent=delegator_agent,
                                               authority_scope=authority_scope, now=now)
            refuse_revoked_agents([delegate_agent])
            _delegation_check_cycle(chain=chain, root_principal=root_principal, delegate_agent=delegate_agent)
            hops = _delegation_hops(parent=parent, requested=requested_hops)
            spend_currency, spend_amount = _delegation_spend(parent=parent, requested=requested_spend)
            expires_at = _delegation_expiry(parent=parent, requested=expires_at)

        delegation = Delegation(
            delegation_id=delegation_id or new_id("dlg"), parent_id=parent.delegation_id if parent else None,
            root_principal=root_principal, delegator_agent=delegator_agent, delegate_agent=delegate_agent,
            authority_scope=list(authority_scope), spend_currency=spend_currency, spend_amount=spend_amount,
            max_hops_remaining=hops, depth=len(chain), accepted_at=accepted_at, expires_at=expires_at,
            signature_chain=[*(parent.signature_chain if parent else []),
                             *([delegator_signature] if delegator_signature else [])],
            signature=None, delegator_key=delegator_key or {},
            status=ActiveStatus.ACTIVE, created_by=actor, created_at=created_at)
        # The link's signature covers the rendered link with the parent's signature chain.
        delegation.signature = sign_resource(delegation_link_payload(
            delegation_document(delegation), includes_own_signature=False))
        delegation.signature_chain = [*delegation.signature_chain, delegation.signature["value"]]
        insert_new(delegation, id_field="delegation_id", type_name="delegation")
        delegation.path = (parent.path if parent else "") + path_segment(delegation.pk)
        Delegation.objects.filter(pk=delegation.pk).update(path=delegation.path)
        ledger_append(event_type="delegation.created", resource_type="DelegationChain",
                      resource_id=delegation.delegation_id, actor=actor, root_principal=root_principal, payload={
                          "parent_delegation_id": delegation.parent_id, "root_principal": root_principal,
                          "delegator_agent": delegator_agent, "delegate_agent": delegate_agent,
                          "authority_scope": delegation.authority_scope,
                          "signature_value": delegation.signature["value"],
                          **({"delegator_kid": delegator_key.get("kid")} if delegator_key else {})})
    return delegation


def delegator_signature_check(*, client_id: str, is_agent: bool, request_body: dict[str, Any],
                              signature: str | None) -> dict[str, Any]:
    """The key that signed a delegation request, or {} for an unsigned one a client may make
    (docs/reference/identity.md, "Keys"): an agent client with keys must sign the RFC 8785
    canonical JSON of its request without ``delegator_signature``; a 400 otherwise."""
    if signature is None:
        if is_agent and client_has_keys(client_id):
            raise errors.invalid_fields({"delegator_signature": [
                "Required: an agent client with keys signs its delegations (a compact JWS over the canonical "
                "JSON of the request without this member)."]})
        return {}
    statement = {key: value for key, value in request_body.items() if key != "delegator_signature"}
    # Embedded, not detached: the link must carry the request, so that the chain verifies from
    # the delegators' keys alone, long after the request is gone.
    return client_statement_verify(client_id=client_id, field="delegator_signature", value=signature,
                                   statement=statement, embedded=True)


def _delegation_parent(*, root_principal: str, delegator_agent: str, authority_scope: list[str],
                       now: datetime) -> tuple[Delegation, list[Delegation]]:
    """docs/reference/governance.md parent discovery under the lock of the parent's tree root.

    The candidates come first (one query). When they all lie in one tree, as they do unless
    the delegator holds links in several of this principal's trees, its root is locked and
    the chains are read once, under the lock: a revocation that committed while we waited
    is seen by that read, so the parent chosen is the parent checked. Otherwise the parent
    is chosen first, only its tree is locked, and its chain is read again under the lock.
    """
    candidates = selectors.delegation_candidates(agent_id=delegator_agent, root_principal=root_principal,
                                                 scope=authority_scope, now=now)
    roots = {path_pks(path)[0] for _, path in candidates}
    one_tree = len(roots) == 1
    if one_tree:
        lock_tree_roots(roots)
    found = selectors.delegation_usable_among(candidates=candidates, now=now)
    if found is None:
        raise errors.DelegationScopeViolation(
            f"{delegator_agent!r} holds no active delegation from {root_principal!r} covering the requested scope.",
            details={"delegator_agent": delegator_agent, "root_principal": root_principal,
                     "authority_scope": list(authority_scope)})
    if one_tree:
        return found
    parent, chain = found
    lock_tree_roots([parent.root_pk])
    fresh = selectors.delegation_chain(delegation=parent)  # under the lock: a revocation that committed is seen
    problem = selectors.delegation_links_problem(links=fresh, now=now)
    if problem or len(fresh) != len(chain):
        raise errors.DelegationScopeViolation(
            f"The parent delegation {parent.delegation_id} stopped being usable: {problem or 'chain changed'}.",
            details={"parent_delegation_id": parent.delegation_id})
    return fresh[-1], fresh


def _delegation_check_cycle(*, chain: list[Delegation], root_principal: str, delegate_agent: str) -> None:
    above = {root_principal} | {link.delegator_agent for link in chain} | {link.delegate_agent for link in chain}
    if delegate_agent in above:
        raise errors.DelegationScopeViolation(
            f"{delegate_agent!r} already appears in the chain above: delegating to it would close a cycle.",
            details={"delegate_agent": delegate_agent, "cycle": True})


def _delegation_hops(*, parent: Delegation, requested: int | None) -> int:
    allowed = parent.max_hops_remaining - 1
    if allowed < 0:
        raise errors.DelegationHopLimit(
            f"The parent delegation {parent.delegation_id} permits no further sub-delegation.",
            details={"parent_delegation_id": parent.delegation_id, "parent_max_hops_remaining": 0})
    if requested is None:
        return allowed
    if requested > allowed:
        raise errors.DelegationHopLimit(
            f"max_hops_remaining may be at most {allowed} under {parent.delegation_id}.",
            details={"parent_delegation_id": parent.delegation_id, "max_allowed": allowed, "requested": requested})
    return requested


def _delegation_spend(*, parent: Delegation, requested: dict[str, Any] | None) -> tuple[str | None, Decimal | None]:
    if requested is None:
        return parent.spend_currency, parent.spend_amount
    currency, amount = money(requested)
    if parent.spend_limit is None:
        raise errors.DelegationScopeViolation(
            f"The parent delegation {parent.delegation_id} grants no spending authority.",
            details={"parent_delegation_id": parent.delegation_id, "constraint": "spend_limit"})
    if currency != parent.spend_currency or amount > parent.spend_amount:
        raise errors.DelegationScopeViolation(
            f"spend_limit must be in {parent.spend_currency} and at most {decimal_text(parent.spend_amount)}.",
            details={"parent_delegation_id": parent.delegation_id, "constraint": "spend_limit",
                     "max_allowed": {"currency": parent.spend_currency, "amount": str(parent.spend_amount)}})
    return currency, amount


def _delegation_expiry(*, parent: Delegation, requested: datetime | None) -> datetime:
    if requested is None:
        return parent.expires_at
    if requested > parent.expires_at:
        raise errors.DelegationScopeViolation(
            f"expires_at must not be later than the parent's ({parent.expires_at.isoformat()}).",
            details={"parent_delegation_id": parent.delegation_id, "constraint": "expires_at"})
    return requested
