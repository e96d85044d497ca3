"""Approvals: immutable, expiring, signed verdicts on a decision by someone else."""

from collections.abc import Sequence
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from agp_project import errors
from agp_project.ids import new_id
from agp_project.signing import sign_resource
from core.ledger import ledger_append

from ..documents import approval_document
from ..models import Approval, Decision
from .common import failed_check, record_created_at, unique_id


def approval_create(*, actor: str, decision_ref: str, approver: str, verdict: str, expires_at: datetime,
                    conditions: Sequence[str] = (), approval_id: str | None = None,
                    created_at: datetime | None = None) -> Approval:
    """An immutable, expiring, signed verdict on a decision.

    The decision's own agent cannot approve it (422): an approval is a second pair of eyes.
    """
    approval_id = approval_id or new_id("apr")
    now = timezone.now()
    decision = Decision.objects.filter(decision_id=decision_ref).first()
    if decision is None:
        raise errors.invalid_fields({"decision_ref": [f"No decision with id {decision_ref!r}."]})
    if expires_at <= now:
        raise errors.invalid_fields({"expires_at": ["Must be in the future."]})
    if approver == decision.agent_id:
        raise errors.PrerequisiteFailed(
            "An agent cannot approve its own decision.",
            details={"failed_checks": [failed_check("approver_independent",
                                              f"approver {approver!r} is the decision's own agent")]})
    with unique_id("approval", "approval_id", approval_id), transaction.atomic():
        approval = Approval(approval_id=approval_id, decision=decision, approver=approver, verdict=verdict,
                            conditions=list(conditions), expires_at=expires_at, created_at=record_created_at(created_at, now))
        approval.signature = sign_resource(approval_document(approval))
        approval.save(force_insert=True)
        ledger_append(event_type="approval.created", resource_type="Approval", resource_id=approval_id,
                      actor=actor, payload={"task_id": decision.task_id, "decision_ref": decision_ref,
                                            "approver": approver, "verdict": verdict,
                                            "payload_hash": approval.signature["payload_hash"]})
    return approval
