"""Commerce sessions (docs/reference/api.md, docs/reference/governance.md): spending windows inside a delegation's spend limit."""

from datetime import datetime
from decimal import Decimal

from django.db import transaction
from django.utils import timezone

from agp_project import errors
from agp_project.exactjson import decimal_text
from agp_project.ids import new_id
from core.ledger import ledger_append
from registry.models import Delegation
from registry.selectors import delegation_chain_problem

from ..models import CommerceSession
from .common import record_created_at, task_required, unique_id


def commerce_session_create(*, actor: str, task_id: str, agent_id: str, delegation_id: str, currency: str,
                            amount_limit: Decimal, merchant: str = "", expires_at: datetime | None = None,
                            session_id: str | None = None, created_at: datetime | None = None) -> CommerceSession:
    """A spending window for a task and agent, inside the delegation's spend limit.

    The delegation must be the agent's own, for the task's root principal, live along its
    whole chain, and carry a spend limit in the session's currency no smaller than
    ``amount_limit``; otherwise 409 ``AGP_DELEGATION_SCOPE_VIOLATION`` (docs/reference/api.md, docs/reference/governance.md).
    """
    session_id = session_id or new_id("cs")
    now = timezone.now()
    task = task_required(task_id)
    delegation = Delegation.objects.filter(delegation_id=delegation_id).first()
    if delegation is None:
        raise errors.invalid_fields({"delegation_id": [f"No delegation with id {delegation_id!r}."]})
    if expires_at is not None and expires_at <= now:
        raise errors.invalid_fields({"expires_at": ["Must be in the future."]})
    problems = []
    if delegation.delegate_agent != agent_id:
        problems.append(f"delegation {delegation_id!r} was granted to {delegation.delegate_agent!r}, not {agent_id!r}")
    if delegation.root_principal != task.root_principal:
        problems.append(f"delegation {delegation_id!r} acts for {delegation.root_principal!r}, "
                        f"the task for {task.root_principal!r}")
    # The registry's chain rule (docs/reference/governance.md): revoked, expired or revoked-agent links, one query.
    chain_problem = delegation_chain_problem(delegation=delegation, now=now)
    if chain_problem:
        problems.append(chain_problem)
    if delegation.spend_amount is None or delegation.spend_currency is None:
        problems.append(f"delegation {delegation_id!r} grants no spending authority (no spend_limit)")
    elif delegation.spend_currency != currency:
        problems.append(f"currency {currency} differs from the delegation's spend limit currency "
                        f"{delegation.spend_currency}")
    elif amount_limit > delegation.spend_amount:
        problems.append(f"amount_limit {amount_limit} exceeds the delegation's spend limit "
                        f"{decimal_text(delegation.spend_amount)} {delegation.spend_currency}")
    if expires_at is not None and delegation.expires_at is not None and expires_at > delegation.expires_at:
        problems.append("expires_at is later than the delegation's expires_at")
    if problems:
        raise errors.DelegationScopeViolation("; ".join(problems) + ".", details={"violations": problems})
    with unique_id("commerce session", "session_id", session_id), transaction.atomic():
        session = CommerceSession.objects.create(
            session_id=session_id, task=task, agent_id=agent_id, delegation=delegation, merchant=merchant,
            currency=currency, amount_limit=amount_limit,
            # Omitted, the session lasts as long as the delegation that funds it.
            expires_at=expires_at if expires_at is not None else delegation.expires_at,
            created_at=record_created_at(created_at, now), created_by=actor)
        ledger_append(event_type="commerce_session.created", resource_type="CommerceSession", resource_id=session_id,
                      actor=actor, root_principal=task.root_principal, payload=
{"task_id": task_id, "agent_id": agent_id, "delegation_id": delegation_id,
                                            "currency": currency, "amount_limit": str(amount_limit)})
    return session
