"""Reads of the Execution API that span the records an action cites."""

from typing import Any

from agp_project.canonical import plain_json
from decision.models import PolicyEvaluation
from decision.selectors import impact_assessment_newest
from registry.models import Delegation

from .models import ActionEnvelope


def receipt_governance(*, envelope: ActionEnvelope) -> dict[str, Any]:
    """The why-record a receipt carries (CONTRACT C12): which decision, evaluation, policy,
    approvals, assessment, delegation chain (root first), commerce session and payment
    cleared this action, as recorded when it was accepted. Four queries."""
    evaluation = (PolicyEvaluation.objects.filter(evaluation_id=envelope.policy_decision_ref)
                  .values("evaluation_id", "policy_set_id", "ruleset_hash", "action_hash").first() or {})
    assessment = impact_assessment_newest(task=envelope.task_id, decision=envelope.decision_ref)
    delegation = Delegation.objects.filter(delegation_id=envelope.delegation_ref).only("path").first()
    links = (Delegation.objects.filter(pk__in=delegation.chain_pks).order_by("depth")
             if delegation is not None else [])
    return {
        "decision_id": envelope.decision_ref,
        "evaluation_id": evaluation.get("evaluation_id", envelope.policy_decision_ref),
        "policy_set_id": evaluation.get("policy_set_id"),
        "ruleset_hash": evaluation.get("ruleset_hash"),
        "action_hash": evaluation.get("action_hash") or None,
        "approvals": [envelope.approval_ref] if envelope.approval_ref else [],
        "assessment_id": assessment.assessment_id if assessment is not None else None,
        "delegation_path": [{"delegation_id": link.delegation_id, "delegator_agent": link.delegator_agent,
                             "delegate_agent": link.delegate_agent, "spend_limit": plain_json(link.spend_limit),
                             "max_hops_remaining": link.max_hops_remaining} for link in links],
        "commerce_session_id": envelope.commerce_session_ref or None,
        "payment_id": envelope.payment_ref or None,
    }
