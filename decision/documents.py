"""The Decision API's signed resources as JSON documents: what the API renders and what the
service signs, built once here (docs/reference/ledger.md). Serializers render through these functions;
services sign what they return."""

from typing import Any

from agp_project.signing import authored
from agp_project.timeutil import iso

from .choices import EthicalFramework
from .models import Approval, ImpactAssessment

# What an assessment that does not say holds (the parser's defaults, kept with every row
# the service writes; merged here too, so a row written before a default existed renders whole).
PARETO_DEFAULTS = {"improves_without_harm": False, "harmed_parties": [], "mitigation_available": False,
                   "mitigation_notes": ""}
ETHICAL_DEFAULTS = {"primary": EthicalFramework.VEIL_OF_IGNORANCE.value, "secondary": [], "prohibitions": []}


def impact_assessment_document(assessment: ImpactAssessment) -> dict[str, Any]:
    """An impact assessment (ImpactAssessment), as rendered; its parts are stored as parsed."""
    return {
        "type": "ImpactAssessment",
        "assessment_id": assessment.assessment_id,
        "task_id": assessment.task_id,
        "decision_ref": assessment.decision_id,
        "agent_id": assessment.agent_id,
        "time_horizons": assessment.time_horizons,
        "stakeholders_affected": assessment.stakeholders_affected,
        "pareto_assessment": {**PARETO_DEFAULTS, **assessment.pareto_assessment},
        "ethical_framework_applied": {**ETHICAL_DEFAULTS, **assessment.ethical_framework_applied},
        "recommendation": str(assessment.recommendation),
        "recommendation_rationale": assessment.recommendation_rationale,
        "assessed_at": iso(assessment.assessed_at),
        "signature": assessment.signature or None,
        **authored(assessment),
    }


def approval_document(approval: Approval) -> dict[str, Any]:
    """An approver's verdict on a decision (Approval), as rendered."""
    return {
        "type": "Approval",
        "approval_id": approval.approval_id,
        "decision_ref": approval.decision_id,
        "approver": approval.approver,
        "verdict": str(approval.verdict),
        **({"reason": approval.reason} if approval.reason else {}),
        "conditions": list(approval.conditions),
        "expires_at": iso(approval.expires_at) if approval.expires_at is not None else None,
        "signature": approval.signature or None,
        "created_at": iso(approval.created_at),
        **({"approver_client": approval.approver_client} if approval.approver_client else {}),
        **({"approver_signature": approval.approver_signature} if approval.approver_signature else {}),
        **authored(approval),
    }

