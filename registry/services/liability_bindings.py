"""Liability bindings: who answers for an agent's actions on behalf of a root principal."""

from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from agp_project.ids import new_id
from core.ledger import ledger_append

from ..choices import ActiveStatus
from ..models import LiabilityBinding
from .common import insert_new, lock_agents, money, record_timestamp, refuse_revoked_agents, require_future


def liability_binding_create(*, actor: str, root_principal: str, agent_id: str, liable_party: str,
                             coverage: dict[str, Any] | None = None, expires_at: datetime | None = None,
                             binding_id: str | None = None,
                             created_at: datetime | None = None) -> LiabilityBinding:
    """Bind a liable party to an agent's actions for a root principal."""
    now = timezone.now()
    require_future(expires_at, field="expires_at", now=now)
    currency, amount = money(coverage)
    binding = LiabilityBinding(
        binding_id=binding_id or new_id("lib"), root_principal=root_principal, agent_id=agent_id,
        liable_party=liable_party, coverage_currency=currency, coverage_amount=amount, expires_at=expires_at,
        status=ActiveStatus.ACTIVE, created_by=actor, created_at=record_timestamp(created_at, field="created_at", now=now))
    with transaction.atomic():
        lock_agents([agent_id])
        refuse_revoked_agents([agent_id])
        insert_new(binding, id_field="binding_id", type_name="liability binding")
        ledger_append(event_type="liability_binding.created", resource_type="LiabilityBinding",
                      resource_id=binding.binding_id, actor=actor, root_principal=root_principal,

                      payload={"root_principal": root_principal, "agent_id": agent_id,
                               "liable_party": liable_party})
    return binding
