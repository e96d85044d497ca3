"""Capabilities: the use of a tool's operations, derived from a delegation the agent holds."""

from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from agp_project import errors
from agp_project.ids import new_id
from core.ledger import ledger_append

from .. import selectors
from ..choices import ActiveStatus
from ..models import Capability
from ..scopes import scope_covers, tool_scope
from .common import insert_new, lock_agents, lock_tree_roots, record_timestamp, require_future


def capability_create(*, actor: str, agent_id: str, delegation_id: str, tool_id: str, operations: list[str],
                      allowed_parameter_ranges: dict[str, Any] | None = None, expires_at: datetime | None = None,
                      capability_id: str | None = None, created_at: datetime | None = None) -> Capability:
    """Grant ``agent_id`` the use of ``tool_id`` operations, derived from a delegation it holds.

    400 when the delegation does not exist or ``expires_at`` is not in the future; 409
    ``AGP_DELEGATION_SCOPE_VIOLATION`` when the delegation is not usable, is not held by
    ``agent_id``, does not cover every ``tool_id:operation``, or expires earlier.
    """
    now = timezone.now()
    require_future(expires_at, field="expires_at", now=now)
    created_at = record_timestamp(created_at, field="created_at", now=now)
    with transaction.atomic():
        lock_agents([agent_id])
        delegation = selectors.delegation_get(delegation_id=delegation_id)
        if delegation is None:
            raise errors.invalid_fields({"delegation_id": [f"No delegation with id {delegation_id!r}."]})
        lock_tree_roots([delegation.root_pk])
        chain = selectors.delegation_chain(delegation=delegation)  # re-read under the tree lock
        problem = selectors.delegation_links_problem(links=chain, now=now)
        delegation = chain[-1]
        if problem:
            raise errors.DelegationScopeViolation(f"The delegation is not usable: {problem}.",
                                                  details={"delegation_id": delegation_id})
        if agent_id != delegation.delegate_agent:
            raise errors.DelegationScopeViolation(
                f"{agent_id!r} is not the delegate of {delegation_id} ({delegation.delegate_agent!r}).",
                details={"delegation_id": delegation_id, "agent_id": agent_id})
        uncovered = [tool_scope(tool_id, op) for op in operations
                     if not scope_covers(delegation.authority_scope, tool_scope(tool_id, op))]
        if uncovered:
            raise errors.DelegationScopeViolation(
                f"The delegation's authority_scope does not cover {', '.join(uncovered)}.",
                details={"delegation_id": delegation_id, "uncovered_scopes": uncovered})
        if expires_at is None:
            expires_at = delegation.expires_at
        elif expires_at > delegation.expires_at:
            raise errors.DelegationScopeViolation(
                "expires_at must not be later than the delegation's.",
                details={"delegation_id": delegation_id, "constraint": "expires_at"})
        capability = Capability(
            capability_id=capability_id or new_id("cap"), agent_id=agent_id, delegation_id=delegation_id,
            tool_id=tool_id, operations=list(operations), allowed_parameter_ranges=allowed_parameter_ranges or {},
            expires_at=expires_at, status=ActiveStatus.ACTIVE, created_by=actor, created_at=created_at)
        insert_new(capability, id_field="capability_id", type_name="capability")
        ledger_append(event_type="capability.created", resource_type="Capability",
                      resource_id=capability.capability_id, actor=actor, root_principal=delegation.root_principal,
                      payload={"agent_id"
: agent_id, "delegation_id": delegation_id, "tool_id": tool_id,
                               "operations": capability.operations})
    return capability
