"""Decisions (docs/reference/governance.md): created as drafts, finalised once their prerequisites hold."""

from collections.abc import Sequence
from datetime import datetime

from django.db import transaction
from django.utils import timezone
from django_fsm import ConcurrentTransition, can_proceed

from agp_project import errors
from agp_project.ids import new_id
from core.ledger import ledger_append
from registry.choices import PolicySetStatus
from registry.models import Task

from ..choices import DecidedBy, DecisionOutcome, DecisionStatus, Recommendation
from ..models import Context, Decision, EvidenceBundle, PolicyEvaluation
from ..notifications import approval_wait_announce
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
    if outcome == DecisionOutcome.APPROVE and evaluation is not None and not evaluation.allowed:
        # An approval of what the policy refused would only be caught when an envelope cites
        # it (check 5): refused here, when it is made.
        reasons = (evaluation.result or {}).get("reasons") or []
        raise errors.PrerequisiteFailed(
            "An approve decision needs an evaluation that allowed the action.",
            details={"failed_checks": [failed_check(
                "policy_evaluation_allows", f"policy evaluation {evaluation.evaluation_id!r} did not allow the action"
                + (f" ({', '.join(map(str, reasons))})" if reasons else ""))]})
    with unique_id("decision", "decision_id", decision_id), transaction.atomic():
        decision = Decision.objects.create(
            decision_id=decision_id, task=task, agent_id=agent_id, outcome=outcome, rationale=rationale,
            context=context, evidence_refs=evidence_refs, policy_evaluation=evaluation,
            created_at=record_created_at(created_at), created_by=actor)
        ledger_append(event_type="decision.created", resource_type="Decision", resource_id=decision_id, actor=actor,
                      root_principal=task.root_principal, payload={"task_id": task_id, "agent_id": agent_id, "outcome": outcome,
                               "context_ref": context_ref, "evidence_refs": evidence_refs,
                               "policy_evaluation_ref": policy_evaluation_ref, "decided_by": DecidedBy.CLIENT})
        approval_wait_announce(decision=decision, task=task, evaluation=evaluation)
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
    """``PATCH /agp/decisions/{id}``: the one move is ``draft -> finalised`` (docs/reference/governance.md).

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
        decision_finalise_locked(decision, actor=actor, root_principal=decision.task.root_principal,
                                 now=now or timezone.now())
    return decision


def decision_finalise_locked(decision: Decision, *, actor: str, root_principal: str, now: datetime) -> None:
    """``draft -> finalised`` of a decision the caller locked and found ready, with its ledger event."""
    decision.finalise()
    decision.finalised_at = now
    try:
        decision.save()
    except ConcurrentTransition:
        raise errors.InvalidTransition(from_state=DecisionStatus.FINALISED, to_state=DecisionStatus.FINALISED,
                                       allowed=[]) from None
    ledger_append(event_type="decision.finalised", resource_type="Decision", resource_id=decision.decision_id,
                  actor=actor, root_principal=root_principal,
                  payload={"task_id": decision.task_id, "outcome": decision.outcome})


def decision_by_policy(*, actor: str, task: Task, agent_id: str, evaluation: PolicyEvaluation, waits: bool,
                       now: datetime) -> Decision:
    """The decision the task's policy set made on ``evaluation`` (an action made in one call), in
    the caller's transaction: ``approve`` when it allowed, else ``deny``.

    An ``approve`` that ``waits`` for people (approvals, an impact assessment) stays a draft;
    every other decision is final at once: nothing about a refusal waits.
    """
    allowed = evaluation.allowed
    outcome = DecisionOutcome.APPROVE if allowed else DecisionOutcome.DENY
    final = not (allowed and waits)
    reasons = (evaluation.result or {}).get("reasons") or []
    rationale = (f"Policy set {evaluation.policy_set_id!r} " + ("allowed the action" if allowed else "did not allow the action")
                 + (f": {'; '.join(map(str, reasons))}" if reasons else "") + ".")
    # A final decision is written final (one statement); its trail still says it was made, then finalised.
    decision = Decision.objects.create(
        decision_id=new_id("dec"), task=task, agent_id=agent_id, outcome=outcome, rationale=rationale,
        policy_evaluation=evaluation, decided_by=DecidedBy.POLICY,
        status=DecisionStatus.FINALISED if final else DecisionStatus.DRAFT, finalised_at=now if final else None,
        created_at=now, created_by=actor)
    ledger_append(event_type="decision.created", resource_type="Decision", resource_id=decision.decision_id,
                  actor=actor, root_principal=task.root_principal, payload={
                      "task_id": task.task_id, "agent_id": agent_id, "outcome": outcome, "context_ref": None,
                      "evidence_refs": [], "policy_evaluation_ref": evaluation.evaluation_id,
                      "decided_by": DecidedBy.POLICY})
    if final:
        ledger_append(event_type="decision.finalised", resource_type="Decision", resource_id=decision.decision_id,
                      actor=actor, root_principal=task.root_principal,
                      payload={"task_id": task.task_id, "outcome": outcome})
    else:
        approval_wait_announce(decision=decision, task=task, evaluation=evaluation)
    return decision
