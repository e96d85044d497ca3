"""Escalations: open ones block execution until they are resolved."""

from datetime import datetime

from django.db import transaction
from django.utils import timezone
from django_fsm import ConcurrentTransition, can_proceed

from agp_project import errors
from agp_project.ids import new_id
from core.ledger import ledger_append

from ..choices import EscalationStatus
from ..models import Decision, Escalation
from .common import record_created_at, task_required, unique_id


def escalation_create(*, actor: str, raised_by: str, reason: str, task_id: str | None = None,
                      decision_ref: str | None = None, action_id: str | None = None,
                      escalation_id: str | None = None, created_at: datetime | None = None,
                      root_principal: str | None = None) -> Escalation:
    """An open escalation on a task, a decision and/or an action; it blocks execution until resolved.

    A decision's escalation is also its task's; ``action_id`` is not checked, so an
    escalation can stop an action before it is even submitted. It belongs to its task's
    tenant; naming only an action, to ``root_principal`` (the caller's tenant), and it then
    blocks that action only in that tenant.
    """
    escalation_id = escalation_id or new_id("esc")
    task = task_required(task_id) if task_id else None
    decision = None
    if decision_ref:
        decision = Decision.objects.select_related("task").filter(decision_id=decision_ref).first()
        if decision is None:
            raise errors.invalid_fields({"decision_ref": [f"No decision with id {decision_ref!r}."]})
        if task is not None and decision.task_id != task.task_id:
            raise errors.invalid_fields({"decision_ref": [f"Decision {decision_ref!r} is for another task."]})
        task = task or decision.task
    if task is not None:
        root_principal = task.root_principal
    with unique_id("escalation", "escalation_id", escalation_id), transaction.atomic():
        escalation = Escalation.objects.create(
            escalation_id=escalation_id, task=task, decision=decision, action_id=action_id or "",
            raised_by=raised_by, reason=reason, created_at=record_created_at(created_at), created_by=actor,
            root_principal=root_principal)
        ledger_append(event_type="escalation.created", resource_type="Escalation", resource_id=escalation_id,
                      actor=actor, root_principal=root_principal, payload={"task_id": task.task_id if task else None, "decision_ref": decision_ref,
                                            "action_id": action_id, "raised_by": raised_by})
    return escalation


def escalation_status_set(*, actor: str, escalation_id: str, status: str, outcome: str | None = None,
                          resolved_by: str | None = None, resolution_notes: str = "",
                          now: datetime | None = None) -> Escalation:
    """``PATCH /agp/escalations/{id}``: ``open -> resolved`` with an outcome; resolved is final (409)."""
    with transaction.atomic():
        # Two resolvers racing: the row lock lets exactly one of them resolve it.
        escalation = Escalation.objects.select_for_update().filter(escalation_id=escalation_id).first()
        if escalation is None:
            raise errors.NotFound(f"No escalation with id {escalation_id!r}.")
        allowed = [EscalationStatus.RESOLVED] if escalation.status == EscalationStatus.OPEN else []
        if status != EscalationStatus.RESOLVED or not can_proceed(escalation.resolve):
            raise errors.InvalidTransition(from_state=escalation.status, to_state=status, allowed=allowed)
        escalation.resolve()
        escalation.outcome = outcome
        escalation.resolved_by = resolved_by
        escalation.resolution_notes = resolution_notes
        escalation.resolved_at = now or timezone.now()
        try:
            escalation.save()
        except ConcurrentTransition:
            raise errors.InvalidTransition(from_state=EscalationStatus.RESOLVED, to_state=status,
                                           allowed=[]) from None
        ledger_append(event_type="escalation.resolved", resource_type="Escalation", resource_id=escalation_id,
                      actor=actor, root_principal=escalation.root_principal, payload=
{"task_id": escalation.task_id, "action_id": escalation.action_id or None,
                                            "outcome": outcome, "resolved_by": resolved_by})
    return escalation
