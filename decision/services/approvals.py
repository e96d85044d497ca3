"""Approvals: immutable, expiring, signed verdicts on a decision by someone else."""

from collections.abc import Sequence
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from agp_project import errors
from agp_project.ids import new_id
from agp_project.signing import sign_resource
from auth_tokens.services import client_statement_verify
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


def approval_statement(*, decision_id: str, action_hash: str, verdict: str) -> dict:
    """What an approver signs: the decision, the hash of the exact action its policy evaluation
    was made for (null when none) and the verdict (docs/reference/identity.md, "Keys")."""
    return {"decision_id": decision_id, "action_hash": action_hash or None, "verdict": verdict}


def approval_create(*, actor: str, decision_ref: str, approver: str, verdict: str, expires_at: datetime,
                    approver_kind: str = "", conditions: Sequence[str] = (), reason: str = "",
                    approval_id: str | None = None, created_at: datetime | None = None,
                    approver_signature: str | None = None) -> Approval:
    """An immutable, expiring, signed verdict on a decision (docs/reference/identity.md).

    ``approver_kind``: the kind of the client recording it (``actor``). A person's client
    approves as its own subject; an operator's approval is recorded but clears nothing.
    Nobody approves their own request (422 ``approver_independent``): not the decision's
    agent, and not the person or client who recorded the decision or its evaluation.

    ``approver_signature``: a person's own compact JWS, by a key of its client, over
    ``approval_statement`` (400 when it does not verify); check 7 of a policy with
    ``signed_approvals_required`` counts only signed approvals.
    """
    approval_id = approval_id or new_id("apr")
    now = timezone.now()
    decision = (Decision.objects.select_related("task", "policy_evaluation")
                .filter(decision_id=decision_ref).first())
    if decision is None:
        raise errors.invalid_fields({"decision_ref": [f"No decision with id {decision_ref!r}."]})
    if expires_at <= now:
        raise errors.invalid_fields({"expires_at": ["Must be in the future."]})
    approver_key = {}
    if approver_signature is not None:
        # Any client with keys may sign (an operator's approval is still recorded and clears nothing).
        approver_key = client_statement_verify(
            client_id=actor, field="approver_signature", value=approver_signature,
            statement=approval_statement(
                decision_id=decision.decision_id, verdict=verdict,
                action_hash=decision.policy_evaluation.action_hash if decision.policy_evaluation else ""))
    problem = _independence_problem(decision=decision, approver=approver, approver_kind=approver_kind, actor=actor)
    if problem:
        raise errors.PrerequisiteFailed(
            "Nobody approves their own request.",
            details={"failed_checks": [failed_check("approver_independent", problem)]})
    with unique_id("approval", "approval_id", approval_id), transaction.atomic():
        approval = Approval(approval_id=approval_id, decision=decision, approver=approver, verdict=verdict,
                            approver_client=actor, approver_kind=approver_kind, created_by=actor,
                            reason=reason, conditions=list(conditions), expires_at=expires_at,
                            approver_signature=approver_signature or "", approver_key=approver_key,
                            created_at=record_created_at(created_at, now))
        approval.signature = sign_resource(approval_document(approval))
        approval.save(force_insert=True)
        ledger_append(event_type="approval.created", resource_type="Approval", resource_id=approval_id,
                      actor=actor, root_principal=decision.task.root_principal,
                      payload={"task_id": decision.task_id, "decision_ref": decision_ref,
                               "approver": approver, "approver_kind": approver_kind, "verdict": verdict,
                               **({"approver_kid": approver_key.get("kid")} if approver_key else {}),
                               "payload_hash": approval.signature["payload_hash"]})
    return approval
