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
from ..selectors import authors_of
from .common import failed_check, record_created_at, unique_id

HUMAN = "human"


def _independence_problem(*, decision: Decision, approver: str, approver_kind: str, actor: str) -> str | None:
    """Why ``approver`` may not approve ``decision``: nobody approves their own request."""
    if approver.casefold() == decision.agent_id.casefold():
        return f"approver {approver!r} is the decision's own agent"
    if approver_kind != HUMAN:
        return None  # recorded, but only a person's approval ever counts (check 7)
    authors = authors_of(decision=decision, evaluation=decision.policy_evaluation)
    if actor in authors.clients or approver.casefold() in authors.subjects:
        return f"approver {approver!r} asked for this action (they recorded its decision or policy evaluation)"
    return None


def approval_create(*, actor: str, decision_ref: str, approver: str, verdict: str, expires_at: datetime,
                    approver_kind: str = "", conditions: Sequence[str] = (), reason: str = "",
                    approval_id: str | None = None,
                    created_at: datetime | None = None) -> Approval:
    """An immutable, expiring, signed verdict on a decision (docs/reference/identity.md).

    ``approver_kind``: the kind of the client recording it (``actor``). A person's client
    approves as its own subject; an operator's approval is recorded but clears nothing.
    Nobody approves their own request (422 ``approver_independent``): not the decision's
    agent, and not the person or client who recorded the decision or its evaluation.
    """
    approval_id = approval_id or new_id("apr")
    now = timezone.now()
    decision = (Decision.objects.select_related("task", "policy_evaluation")
                .filter(decision_id=decision_ref).first())
    if decision is None:
        raise errors.invalid_fields({"decision_ref": [f"No decision with id {decision_ref!r}."]})
    if expires_at <= now:
        raise errors.invalid_fields({"expires_at": ["Must be in the future."]})
    problem = _independence_problem(decision=decision, approver=approver, approver_kind=approver_kind, actor=actor)
    if problem:
        raise errors.PrerequisiteFailed(
            "Nobody approves their own request.",
            details={"failed_checks": [failed_check("approver_independent", problem)]})
    with unique_id("approval", "approval_id", approval_id), transaction.atomic():
        approval = Approval(approval_id=approval_id, decision=decision, approver=approver, verdict=verdict,
                            approver_client=actor, approver_kind=approver_kind, created_by=actor,
                            reason=reason, conditions=list(conditions), expires_at=expires_at,
                            created_at=record_created_at(created_at, now))
        approval.signature = sign_resource(approval_document(approval))
        approval.save(force_insert=True)
        ledger_append(event_type="approval.created", resource_type="Approval", resource_id=approval_id,
                      actor=actor, root_principal=decision.task.root_principal,
                      payload={"task_id": decision.task_id, "decision_ref": decision_ref,
                               "approver": approver, "approver_kind": approver_kind, "verdict": verdict,
                               "payload_hash": approval.signature["payload_hash"]})
    return approval
