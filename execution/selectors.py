"""Reads of the Execution API: the records an action cites, and execution records other apps'
services are handed (they may not import execution)."""

from typing import Any

from agp_project.canonical import plain_json
from decision.models import PolicyEvaluation
from decision.selectors import impact_assessment_standing
from registry.models import Delegation

from .checks.report import CheckReport
from .models import ActionEnvelope


def action_trail(envelope: ActionEnvelope) -> dict[str, str]:
    """The ``task_id`` and ``action_id`` every ledger event about an action's records carries
    (docs/reference/governance.md): ``GET /agp/ledger-events?action_id=`` and ``?task_id=`` find it by them."""
    return {"task_id": envelope.task_id, "action_id": envelope.action_id}


def receipt_governance(*, envelope: ActionEnvelope, report: CheckReport | None = None) -> dict[str, Any]:
    """The why-record a receipt carries (docs/reference/governance.md): which decision, evaluation, policy,
    approvals, assessment, delegation chain (root first), commerce session and payment
    cleared this action, as recorded when it was accepted.

    ``report``: the execution-time re-check that just passed; the records it read are not
    read again (its chain only when it is the delegation recorded at acceptance). Without
    it, up to four queries.
    """
    evaluation = report.evaluation if report is not None else (
        PolicyEvaluation.objects.filter(evaluation_id=envelope.policy_decision_ref)
        .only("evaluation_id", "policy_set_id", "ruleset_hash", "action_hash").first())
    if report is not None and report.assessment_read:
        assessment_id = report.assessment_id
    else:
        assessment = impact_assessment_standing(task=envelope.task_id, decision=envelope.decision_ref)
        assessment_id = assessment.assessment_id if assessment is not None else None
    if report is not None and report.chain and report.delegation_ref == envelope.delegation_ref:
        links = report.chain
    else:
        delegation = Delegation.objects.filter(delegation_id=envelope.delegation_ref).only("path").first()
        links = (Delegation.objects.filter(pk__in=delegation.chain_pks).order_by("depth")
                 if delegation is not None else [])
    return {
        "decision_id": envelope.decision_ref,
        "evaluation_id": evaluation.evaluation_id if evaluation else envelope.policy_decision_ref,
        "policy_set_id": evaluation.policy_set_id if evaluation else None,
        "ruleset_hash": evaluation.ruleset_hash if evaluation else None,
        "action_hash": (evaluation.action_hash or None) if evaluation else None,
        "approvals": (list(report.approval_ids) if report is not None
                      else [envelope.approval_ref] if envelope.approval_ref else []),

        "assessment_id": assessment_id,
        "delegation_path": [{"delegation_id": link.delegation_id, "delegator_agent": link.delegator_agent,
                             "delegate_agent": link.delegate_agent, "spend_limit": plain_json(link.spend_limit),
                             "max_hops_remaining": link.max_hops_remaining} for link in links],
        "commerce_session_id": envelope.commerce_session_ref or None,
        "payment_id": envelope.payment_ref or None,
    }

# Envelopes named per evaluation.
MAX_ACTIONS_PER_EVALUATION = 100
# Evaluation ids per query.
CHUNK = 500


def action_ids_citing(evaluation_ids: list[str]) -> dict[str, list[str]]:
    """The accepted envelopes that cite each evaluation (``policy_decision_ref``), oldest first.

    A backtest's changes name them (docs/reference/governance.md). One query per ``CHUNK`` ids, at most
    ``MAX_ACTIONS_PER_EVALUATION`` envelopes each.
    """
    found: dict[str, list[str]] = {}
    for start in range(0, len(evaluation_ids), CHUNK):
        rows = (ActionEnvelope.objects.filter(policy_decision_ref__in=evaluation_ids[start:start + CHUNK])
                .order_by("pk").values_list("policy_decision_ref", "action_id"))
        for evaluation_id, action_id in rows:
            cited = found.setdefault(evaluation_id, [])
            if len(cited) < MAX_ACTIONS_PER_EVALUATION:
                cited.append(action_id)
    return found
