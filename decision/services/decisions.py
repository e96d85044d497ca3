"""Decisions (CONTRACT C7): created as drafts, finalised once their prerequisites hold."""

from collections.abc import Sequence
from datetime import datetime

from django.db import transaction
from django.utils import timezone
from django_fsm import ConcurrentTransition, can_proceed

from agp_project import errors
from agp_project.ids import new_id
from core.ledger import ledger_append
from registry.choices import PolicySetStatus

from ..choices import DecisionOutcome, DecisionStatus, Recommendation
from ..models import Context, Decision, EvidenceBundle, PolicyEvaluation
from ..selectors import impact_assessment_required, impact_assessment_standing
from .common import failed_check, record_created_at, task_required, unique_id


def decision_create(*, actor: str, task_id: str, agent_id: str, outcome: str, rationale: str = "",
                    context_ref: str | None = None, evidence_refs: Sequence[str] = (),
                    policy_evaluation_ref: str | None = None, status: str = DecisionStatus.DRAFT,
                    decision_id: str | None = None, created_at: datetime | None = None) -> Decision:
    """A draft decision; everything it cites must exist and belong to its task (else 400)."""
    if status != DecisionStatus.DRAFT:
        raise errors.invalid_fields({"status": ["Decisions are created as 'draft'."]})
    decision_id = decision_id or new_id("dec")
    task = task_required(task_id)
    problems: dict[str, list[str]] = {}
    context = None
    if context_ref:
        context = Context.objects.filter(context_id=context_ref).first()
        if context is None:
            problems["context_ref"] = [f"No context with id {context_ref!r}."]
        elif context.task_id != task_id:
            problems["context_ref"] = [f"Context {context_ref!r} belongs to another task."]
    evidence_refs = list(evidence_refs)
    if evidence_refs:
        found = dict(EvidenceBundle.objects.filter(bundle_id__in=evidence_refs).values_list("bundle_id", "task_id"))
        bad = [f"No evidence bundle with id {ref!r}." for ref in evidence_refs if ref not in found]
        bad += [f"Evidence bundle {ref!r} belongs to another task." for ref in evidence_refs
                if ref in found and found[ref] != task_id]
        if bad:
            problems["evidence_refs"] = bad
    evaluation = None
    if policy_evaluation_ref:
        evaluation = PolicyEvaluation.objects.filter(evaluation_id=policy_evaluation_ref).first()
        if evaluation is None:
            problems["policy_evaluation_ref"] = [f"No policy evaluation with id {policy_evaluation_ref!r}."]
        elif evaluation.task_id != task_id:
            problems["policy_evaluation_ref"] = [f"Policy evaluation {policy_evaluation_ref!r} is for another task."]
    if problems:
        raise errors.invalid_fields(problems)
    with unique_id("decision", "decision_id", decision_id), transaction.atomic():
        decision = Decision.objects.create(
            decision_id=decision_id, task=task, agent_id=agent_id, outcome=outcome, rationale=rationale,
            context=context, evidence_refs=evidence_refs, policy_evaluation=evaluation,
            created_at=record_created_at(created_at), created_by=actor)
        ledger_append(event_type="decision.created", resource_type="Decision", resource_id=decision_id, actor=actor,
                      root_principal=task.root_principal, payload={"task_id": task_id, "agent_id": agent_id, "outcome": outcome,
                               "context_ref": context_ref, "evidence_refs": evidence_refs,
                               "policy_evaluation_ref": policy_evaluation_ref})
    return decision


def _finalise_failures(decision: Decision) -> tuple[bool, list[dict[str, str]]]:
    """(rule 5 assessment missing?, every failed check) for finalising ``decision``."""
    task = decision.task
    failed = []
    assessment_missing = False
    standing = impact_assessment_standing(task=task, decision=decision)
    if impact_assessment_required(task=task) and standing is None:
        assessment_missing = True
        failed.append(failed_check("impact_assessment_present",
                             f"task {task.task_id!r} is {task.risk_level} risk with action class "
                             f"{task.action_class}: an impact assessment of this decision is required"))
    if (standing is not None and decision.outcome == DecisionOutcome.APPROVE
            and standing.recommendation == Recommendation.DO_NOT_PROCEED):
        failed.append(failed_check("impact_assessment_recommendation",
                             f"impact assessment {standing.assessment_id!r} recommends do_not_proceed (a later "
                             f"assessment does not lift it)"))
    evaluation = decision.policy_evaluation
    if evaluation is not None and evaluation.policy_set.status == PolicySetStatus.REVOKED:
        failed.append(failed_check("policy_set_not_revoked",
                             f"the cited evaluation {evaluation.evaluation_id!r} used policy set "
                             f"{evaluation.policy_set_id!r}, which is revoked"))
    return assessment_missing, failed


def decision_status_set(*, actor: str, decision_id: str, status: str, now: datetime | None = None) -> Decision:
    """``PATCH /agp/decisions/{id}``: the one move is ``draft -> finalised`` (CONTRACT C7).

    Refused with 422 ``AGP_IMPACT_ASSESSMENT_REQUIRED`` where rule 5 needs an assessment
    that does not exist, and with 422 ``AGP_PREREQUISITE_FAILED`` when an ``approve``
    decision meets a ``do_not_proceed`` assessment or cites an evaluation of a revoked
    policy set. Every other move (including finalised -> anything) is 409.
    """
    with transaction.atomic():
        # The row lock orders this against a concurrent finalise and against impact
        # assessments being added for the decision (they lock the same row).
        decision = (Decision.objects.select_for_update(of=("self",))
                    .select_related("task", "policy_evaluation__policy_set")
                    .filter(decision_id=decision_id).first())
        if decision is None:
            raise errors.NotFound(f"No decision with id {decision_id!r}.")
        allowed = [DecisionStatus.FINALISED] if decision.status == DecisionStatus.DRAFT else []
        if status != DecisionStatus.FINALISED or not can_proceed(decision.finalise):
            raise errors.InvalidTransition(from_state=decision.status, to_state=status, allowed=allowed)
        assessment_missing, failed = _finalise_failures(decision)
        if assessment_missing:
            raise errors.ImpactAssessmentRequired(
                "An impact assessment of this decision is required before it is finalised (rule 5).",
                details={"failed_checks": failed})
        if failed:
            raise errors.PrerequisiteFailed("The decision cannot be finalised.", details={"failed_checks": failed})
        decision.finalise()
        decision.finalised_at = now or timezone.now()
        try:
            decision.save()
        except ConcurrentTransition:
            raise errors.InvalidTransition(from_state=DecisionStatus.FINALISED, to_state=status, allowed=[]) from None
        ledger_append(event_type="decision.finalised", resource_type="Decision", resource_id=decision_id,
                      actor=actor, root_principal=decision.task.root_principal, payload=
{"task_id": decision.task_id, "outcome": decision.outcome})
    return decision
