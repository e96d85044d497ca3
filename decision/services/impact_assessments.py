"""Impact assessments (rule 5, docs/reference/governance.md): signed, and only of draft decisions."""

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from agp_project import errors
from agp_project.ids import new_id
from agp_project.signing import sign_resource
from agp_project.timeutil import not_in_future
from core.ledger import ledger_append
from registry.models import Task

from ..choices import DecisionStatus
from ..documents import ETHICAL_DEFAULTS, PARETO_DEFAULTS, impact_assessment_document
from ..models import Decision, ImpactAssessment
from .common import unique_id

# What an assessment says about what the request left out: the careful reading (no
# improvement without harm shown, no mitigation known, the spec's framework).


def _impact_defaults(*, stakeholders_affected, pareto_assessment, ethical_framework_applied,
                     decision: Decision) -> tuple[list, dict, dict]:
    pareto = {**PARETO_DEFAULTS, **dict(pareto_assessment or {})}
    ethical = {**ETHICAL_DEFAULTS, **dict(ethical_framework_applied or {})}
    if "policy_ref" not in ethical:
        # Omitted, it names the policy set the decision's evaluation ran under.
        evaluation = decision.policy_evaluation
        ethical["policy_ref"] = evaluation.policy_set_id if evaluation is not None else ""
    return [dict(item) for item in stakeholders_affected or []], pareto, ethical


def impact_assessment_create(*, actor: str, task_id: str, decision_ref: str, agent_id: str,
                             time_horizons: Sequence[dict[str, Any]], recommendation: str,
                             stakeholders_affected: Sequence[dict[str, Any]] | None = None,
                             pareto_assessment: dict[str, Any] | None = None,
                             ethical_framework_applied: dict[str, Any] | None = None,
                             recommendation_rationale: str = "", assessed_at: datetime | None = None,
                             assessment_id: str | None = None) -> ImpactAssessment:
    """Record a signed impact assessment of a draft decision (rule 5, docs/reference/governance.md).

    Refused (400) for an unknown task or decision, a decision of another task, or a
    decision that is already finalised.
    """
    assessment_id = assessment_id or new_id("ia")
    now = timezone.now()
    assessed_at = not_in_future(assessed_at, field="assessed_at", now=now) if assessed_at else now
    task = Task.objects.filter(task_id=task_id).first()
    with unique_id("impact assessment", "assessment_id", assessment_id), transaction.atomic():
        # Locking the decision orders this against its finalisation (which locks it too):
        # an assessment can never be added to a decision finalised a moment earlier.
        decision = (Decision.objects.select_for_update(of=("self",)).select_related("policy_evaluation")
                    .filter(decision_id=decision_ref).first())
        problems = {}
        if task is None:
            problems["task_id"] = [f"No task with id {task_id!r}."]
        if decision is None:
            problems["decision_ref"] = [f"No decision with id {decision_ref!r}."]
        elif decision.task_id != task_id:
            problems["decision_ref"] = [f"Decision {decision_ref!r} is for another task."]
        elif decision.status == DecisionStatus.FINALISED:
            problems["decision_ref"] = [f"Decision {decision_ref!r} is already finalised; "
                                        "an assessment must precede finalisation."]
        if problems:
            raise errors.invalid_fields(problems)
        stakeholders, pareto, ethical = _impact_defaults(
            stakeholders_affected=stakeholders_affected, pareto_assessment=pareto_assessment,
            ethical_framework_applied=ethical_framework_applied, decision=decision)
        assessment = ImpactAssessment(
            assessment_id=assessment_id, task=task, decision=decision, agent_id=agent_id,
            time_horizons=[dict(item) for item in time_horizons], stakeholders_affected=stakeholders,
            pareto_assessment=pareto, ethical_framework_applied=ethical, recommendation=recommendation,
            recommendation_rationale=recommendation_rationale, assessed_at=assessed_at, created_at=now,
            created_by=actor)
        assessment.signature = sign_resource(impact_assessment_document(assessment))
        assessment.save(force_insert=True)
        ledger_append(event_type="impact_assessment.created", resource_type="ImpactAssessment",
                      resource_id=assessment_id, actor=actor, root_principal=task.root_principal,
                      payload={"task_id": task_id,
 "decision_ref": decision_ref, "recommendation": recommendation,
                               "payload_hash": assessment.signature["payload_hash"]})
    return assessment
