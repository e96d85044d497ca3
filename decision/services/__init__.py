"""Writes of the Decision API: every state change with its ledger event, in one transaction.

Each public service is keyword-only, raises ``agp_project.errors`` and returns the
written row; one module per resource. Rules beyond docs/reference are explained in
docs/decisions/decision-api.md.
"""

from .approvals import approval_create
from .commerce_sessions import commerce_session_create
from .contexts import context_create, evidence_bundle_create
from .decisions import decision_by_policy, decision_create, decision_finalise_locked, decision_status_set
from .escalations import escalation_create, escalation_status_set
from .evaluations import (
    Evaluated,
    policy_evaluate,
    policy_evaluation_create,
    policy_evaluation_input,
    policy_evaluation_record,
    policy_evaluation_shadows_record,
    policy_sets_with_shadows,
)
from .impact_assessments import impact_assessment_create

__all__ = [
    "Evaluated",
    "approval_create",
    "commerce_session_create",
    "context_create",
    "decision_by_policy",
    "decision_create",
    "decision_finalise_locked",
    "decision_status_set",
    "escalation_create",
    "escalation_status_set",
    "evidence_bundle_create",
    "impact_assessment_create",
    "policy_evaluation_create",
    "policy_evaluate",
    "policy_evaluation_input",
    "policy_evaluation_record",
    "policy_evaluation_shadows_record",
    "policy_sets_with_shadows",
]
