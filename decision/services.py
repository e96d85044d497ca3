"""Writes of the Decision API: every state change with its ledger event, in one transaction.

Each public service is keyword-only, raises ``agp_project.errors`` and returns the
written row. Rules that are not in the spec or CONTRACT are explained in
docs/decisions/decision-api.md.
"""

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from decimal import Decimal
from typing import Any

import rfc8785
from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone
from django_fsm import ConcurrentTransition, can_proceed

from agp_project import errors
from agp_project.canonical import action_document, content_hash
from agp_project.ids import new_id
from agp_project.signing import sign_resource
from agp_project.timeutil import iso, not_in_future
from core import engine
from core.ledger import ledger_append
from registry.choices import PolicySetStatus
from registry.models import Delegation, PolicySet, Task
from registry.selectors import delegation_chain_problem, freezes_matching
from registry.services import refuse_frozen

from .choices import DecisionOutcome, DecisionStatus, EscalationStatus, Recommendation
from .documents import ETHICAL_DEFAULTS, PARETO_DEFAULTS, approval_document, impact_assessment_document
from .models import (
    Approval,
    CommerceSession,
    Context,
    Decision,
    Escalation,
    EvidenceBundle,
    ImpactAssessment,
    PolicyEvaluation,
)
from .selectors import impact_assessment_required, impact_assessment_standing


# --- helpers -------------------------------------------------------------------------------
@contextmanager
def _unique(resource: str, id_field: str, value: str) -> Iterator[None]:
    """A duplicate client-chosen id is a 409; the unique index decides, so races are covered too."""
    try:
        yield
    except IntegrityError:
        raise errors.duplicate_id(resource, id_field, value) from None


def _hash_of(value: Any, field: str) -> str:
    try:
        return content_hash(value)
    except rfc8785.CanonicalizationError as exc:
        # e.g. an integer beyond 2**53: RFC 8785 cannot represent it exactly.
        raise errors.invalid_fields({field: [f"Cannot be canonicalised (RFC 8785): {exc}"]}) from None


def _task(task_id: str, field: str = "task_id") -> Task:
    task = Task.objects.filter(task_id=task_id).first()
    if task is None:
        raise errors.invalid_fields({field: [f"No task with id {task_id!r}."]})
    return task


def _created_at(value: datetime | None, now: datetime | None = None) -> datetime:
    """A client may date its record (C1), but not ahead of the server clock: "newest" decides
    which approval or assessment counts, and a future date would win every comparison."""
    now = now or timezone.now()
    return now if value is None else not_in_future(value, field="created_at", now=now)


def _check(check: str, reason: str) -> dict[str, str]:
    return {"check": check, "reason": reason}


# --- contexts and evidence bundles ------------------------------------------------------------
def context_create(*, actor: str, task_id: str, data: dict[str, Any], agent_id: str = "",
                   context_id: str | None = None, created_at: datetime | None = None) -> Context:
    """A task-scoped context; ``content_hash`` is the canonical-JSON SHA-256 of ``data``."""
    context_id = context_id or new_id("ctx")
    task = _task(task_id)
    digest = _hash_of(data, "data")
    with _unique("context", "context_id", context_id), transaction.atomic():
        context = Context.objects.create(context_id=context_id, task=task, agent_id=agent_id, data=data,
                                         content_hash=digest, created_at=_created_at(created_at))
        ledger_append(event_type="context.created", resource_type="Context", resource_id=context_id,
                      actor=actor, payload={"task_id": task_id, "content_hash": digest})
    return context


def evidence_bundle_create(*, actor: str, task_id: str, items: Sequence[dict[str, Any]],
                           bundle_id: str | None = None, created_at: datetime | None = None) -> EvidenceBundle:
    """A task-scoped bundle; ``bundle_hash`` is the canonical-JSON SHA-256 of ``items``."""
    bundle_id = bundle_id or new_id("evb")
    task = _task(task_id)
    items = [dict(item) for item in items]
    digest = _hash_of(items, "items")
    with _unique("evidence bundle", "bundle_id", bundle_id), transaction.atomic():
        bundle = EvidenceBundle.objects.create(bundle_id=bundle_id, task=task, items=items, bundle_hash=digest,
                                               created_at=_created_at(created_at))
        ledger_append(event_type="evidence_bundle.created", resource_type="EvidenceBundle", resource_id=bundle_id,
                      actor=actor, payload={"task_id": task_id, "bundle_hash": digest, "items": len(items)})
    return bundle


# --- policy evaluations -----------------------------------------------------------------------
def _policy_set_warnings(policy_set: PolicySet, now: datetime) -> list[str]:
    warnings = []
    if policy_set.status == PolicySetStatus.DEPRECATED:
        warnings.append(f"Policy set {policy_set.policy_set_id!r} is deprecated.")
    if policy_set.effective_from and policy_set.effective_from > now:
        warnings.append(f"Policy set {policy_set.policy_set_id!r} is not effective until "
                        f"{iso(policy_set.effective_from)}.")
    if policy_set.expires_at and policy_set.expires_at <= now:
        warnings.append(f"Policy set {policy_set.policy_set_id!r} expired at {iso(policy_set.expires_at)}.")
    return warnings


def policy_evaluation_input(*, input: dict[str, Any], action: dict[str, Any] | None) -> dict[str, Any]:
    """The Rego ``input``: the client's input with ``input.action`` set to the action evaluated."""
    return {**input, "action": action} if action is not None else input


def policy_evaluation_create(*, actor: str, policy_set_id: str, task_id: str, agent_id: str,
                             input: dict[str, Any], action: dict[str, Any] | None = None,
                             evaluation_id: str | None = None, created_at: datetime | None = None) -> PolicyEvaluation:
    """Evaluate the policy set's Rego ruleset for ``input`` and ``action``, and record the result.

    ``action`` (``{"tool_id", "operation", "parameters"}``) is what the evaluation may later
    clear: an envelope cites it only for exactly that action (CONTRACT C12); the ruleset
    reads it as ``input.action``. An evaluation without one clears no envelope.

    A revoked set is refused (422); a deprecated, expired or not yet effective one is
    evaluated with a warning. The engine never raises: a ruleset that fails to compile or
    to evaluate is recorded as ``allow: false`` with the error among the reasons. An
    active freeze of the agent or of the task's root principal refuses it (409
    ``AGP_FROZEN``, C13); whether one exists is read with the task, in the same query.

    The set is read once, before the engine runs. A revocation that commits while the
    evaluation runs may be ordered before it in the ledger; the evaluation still clears
    nothing, since check 5 of an envelope refuses an evaluation whose set is revoked.
    """
    evaluation_id = evaluation_id or new_id("pev")
    if action is not None:
        if "action" in input:
            raise errors.invalid_fields({"input": [
                "input.action is set by the service from the request's action: send one or the other."]})
        action = action_document(**action)
    # The set and its active shadows (C14) in one query.
    sets = list(PolicySet.objects.filter(Q(policy_set_id=policy_set_id)
                                         | Q(shadow_of_id=policy_set_id, status=PolicySetStatus.ACTIVE))
                .order_by("policy_set_id"))
    policy_set = next((candidate for candidate in sets if candidate.policy_set_id == policy_set_id), None)
    missing = {}
    if policy_set is None:
        missing["policy_set_id"] = [f"No policy set with id {policy_set_id!r}."]
    task = (Task.objects.filter(task_id=task_id)
            .annotate(frozen=Exists(freezes_matching(agent_id=agent_id, root_principal=OuterRef("root_principal"))))
            .values("root_principal", "frozen").first())
    if task is None:
        missing["task_id"] = [f"No task with id {task_id!r}."]
    if missing:
        raise errors.invalid_fields(missing)
    if task["frozen"]:
        refuse_frozen(acting="a policy evaluation", agent_id=agent_id, root_principal=task["root_principal"])
    if policy_set.status == PolicySetStatus.REVOKED:
        raise errors.PrerequisiteFailed(
            f"Policy set {policy_set_id!r} is revoked: it cannot be referenced in new policy evaluations.",
            details={"failed_checks": [_check("policy_set_not_revoked", f"policy set {policy_set_id!r} is revoked")]})
    input_hash = _hash_of(input, "input")
    evaluated_action_hash = _hash_of(action, "action") if action is not None else ""
    now = timezone.now()
    outcome = engine.evaluate(ruleset=policy_set.ruleset, ruleset_hash=policy_set.ruleset_hash,
                              input=policy_evaluation_input(input=input, action=action))
    result = outcome.as_result()
    shadow_results = _shadows_evaluate([s for s in sets if s is not policy_set],
                                       input=policy_evaluation_input(input=input, action=action), allow=outcome.allow)
    payload = {"policy_set_id": policy_set.policy_set_id, "task_id": task_id, "agent_id": agent_id,
               "ruleset_hash": policy_set.ruleset_hash, "input_hash": input_hash,
               "action_hash": evaluated_action_hash or None, "result": result, "engine": outcome.engine}
    if shadow_results:
        payload["shadow_results"] = shadow_results
    with _unique("policy evaluation", "evaluation_id", evaluation_id), transaction.atomic():
        evaluation = PolicyEvaluation.objects.create(
            evaluation_id=evaluation_id, policy_set=policy_set, task_id=task_id, agent_id=agent_id, input=input,
            input_hash=input_hash, action=action, action_hash=evaluated_action_hash,
            ruleset_hash=policy_set.ruleset_hash, result=result, allowed=outcome.allow,
            require_approval=outcome.require_approval, warnings=_policy_set_warnings(policy_set, now),
            shadow_results=shadow_results, evaluated_at=now, created_at=_created_at(created_at, now))
        ledger_append(event_type="policy_evaluation.created", resource_type="PolicyEvaluation",
                      resource_id=evaluation_id, actor=actor, payload=payload)
    return evaluation


def _shadows_evaluate(shadows: Sequence[PolicySet], *, input: dict[str, Any],
                      allow: bool) -> dict[str, dict[str, bool]]:
    """Each active shadow's verdict on the same input, and whether it agrees (C14).

    Through the same engine call, so the evaluation limits hold for each; a shadow that
    fails to evaluate records ``allow: false``, as any evaluation would. Nothing here can
    change the evaluation's own result.
    """
    results = {}
    for shadow in shadows:
        shadow_allow = engine.evaluate(ruleset=shadow.ruleset, ruleset_hash=shadow.ruleset_hash, input=input).allow
        results[shadow.policy_set_id] = {"allow": shadow_allow, "matches": shadow_allow == allow}
    return results


# --- decisions --------------------------------------------------------------------------------
def decision_create(*, actor: str, task_id: str, agent_id: str, outcome: str, rationale: str = "",
                    context_ref: str | None = None, evidence_refs: Sequence[str] = (),
                    policy_evaluation_ref: str | None = None, status: str = DecisionStatus.DRAFT,
                    decision_id: str | None = None, created_at: datetime | None = None) -> Decision:
    """A draft decision; everything it cites must exist and belong to its task (else 400)."""
    if status != DecisionStatus.DRAFT:
        raise errors.invalid_fields({"status": ["Decisions are created as 'draft'."]})
    decision_id = decision_id or new_id("dec")
    task = _task(task_id)
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
    with _unique("decision", "decision_id", decision_id), transaction.atomic():
        decision = Decision.objects.create(
            decision_id=decision_id, task=task, agent_id=agent_id, outcome=outcome, rationale=rationale,
            context=context, evidence_refs=evidence_refs, policy_evaluation=evaluation,
            created_at=_created_at(created_at))
        ledger_append(event_type="decision.created", resource_type="Decision", resource_id=decision_id, actor=actor,
                      payload={"task_id": task_id, "agent_id": agent_id, "outcome": outcome,
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
        failed.append(_check("impact_assessment_present",
                             f"task {task.task_id!r} is {task.risk_level} risk with action class "
                             f"{task.action_class}: an impact assessment of this decision is required"))
    if (standing is not None and decision.outcome == DecisionOutcome.APPROVE
            and standing.recommendation == Recommendation.DO_NOT_PROCEED):
        failed.append(_check("impact_assessment_recommendation",
                             f"impact assessment {standing.assessment_id!r} recommends do_not_proceed (a later "
                             f"assessment does not lift it)"))
    evaluation = decision.policy_evaluation
    if evaluation is not None and evaluation.policy_set.status == PolicySetStatus.REVOKED:
        failed.append(_check("policy_set_not_revoked",
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
                      actor=actor, payload={"task_id": decision.task_id, "outcome": decision.outcome})
    return decision


# --- impact assessments ----------------------------------------------------------------------
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
    """Record a signed impact assessment of a draft decision (spec rule 5, CONTRACT C7).

    Refused (400) for an unknown task or decision, a decision of another task, or a
    decision that is already finalised.
    """
    assessment_id = assessment_id or new_id("ia")
    now = timezone.now()
    assessed_at = not_in_future(assessed_at, field="assessed_at", now=now) if assessed_at else now
    task = Task.objects.filter(task_id=task_id).first()
    with _unique("impact assessment", "assessment_id", assessment_id), transaction.atomic():
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
            recommendation_rationale=recommendation_rationale, assessed_at=assessed_at, created_at=now)
        assessment.signature = sign_resource(impact_assessment_document(assessment))
        assessment.save(force_insert=True)
        ledger_append(event_type="impact_assessment.created", resource_type="ImpactAssessment",
                      resource_id=assessment_id, actor=actor,
                      payload={"task_id": task_id, "decision_ref": decision_ref, "recommendation": recommendation,
                               "payload_hash": assessment.signature["payload_hash"]})
    return assessment


# --- approvals -------------------------------------------------------------------------------
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
            details={"failed_checks": [_check("approver_independent",
                                              f"approver {approver!r} is the decision's own agent")]})
    with _unique("approval", "approval_id", approval_id), transaction.atomic():
        approval = Approval(approval_id=approval_id, decision=decision, approver=approver, verdict=verdict,
                            conditions=list(conditions), expires_at=expires_at, created_at=_created_at(created_at, now))
        approval.signature = sign_resource(approval_document(approval))
        approval.save(force_insert=True)
        ledger_append(event_type="approval.created", resource_type="Approval", resource_id=approval_id,
                      actor=actor, payload={"task_id": decision.task_id, "decision_ref": decision_ref,
                                            "approver": approver, "verdict": verdict,
                                            "payload_hash": approval.signature["payload_hash"]})
    return approval


# --- escalations -----------------------------------------------------------------------------
def escalation_create(*, actor: str, raised_by: str, reason: str, task_id: str | None = None,
                      decision_ref: str | None = None, action_id: str | None = None,
                      escalation_id: str | None = None, created_at: datetime | None = None) -> Escalation:
    """An open escalation on a task, a decision and/or an action; it blocks execution until resolved.

    A decision's escalation is also its task's; ``action_id`` is not checked, so an
    escalation can stop an action before it is even submitted.
    """
    escalation_id = escalation_id or new_id("esc")
    task = _task(task_id) if task_id else None
    decision = None
    if decision_ref:
        decision = Decision.objects.select_related("task").filter(decision_id=decision_ref).first()
        if decision is None:
            raise errors.invalid_fields({"decision_ref": [f"No decision with id {decision_ref!r}."]})
        if task is not None and decision.task_id != task.task_id:
            raise errors.invalid_fields({"decision_ref": [f"Decision {decision_ref!r} is for another task."]})
        task = task or decision.task
    with _unique("escalation", "escalation_id", escalation_id), transaction.atomic():
        escalation = Escalation.objects.create(
            escalation_id=escalation_id, task=task, decision=decision, action_id=action_id or "",
            raised_by=raised_by, reason=reason, created_at=_created_at(created_at))
        ledger_append(event_type="escalation.created", resource_type="Escalation", resource_id=escalation_id,
                      actor=actor, payload={"task_id": task.task_id if task else None, "decision_ref": decision_ref,
                                            "action_id": action_id, "raised_by": raised_by})
    return escalation


def escalation_status_set(*, actor: str, escalation_id: str, status: str, outcome: str | None = None,
                          resolved_by: str | None = None, resolution_notes: str = "",
                          now: datetime | None = None) -> Escalation:
    """``PATCH /agp/escalations/{id}``: ``open -> resolved`` with an outcome; resolved is final (409)."""
    with transaction.atomic():
        # Two resolvers racing: the row lock lets exactly one of them resolve it.
        escalation = Escalation.objects.select_for_update().filter(escalation_id=escalation_id).first()
        if escalation is None:
            raise errors.NotFound(f"No escalation with id {escalation_id!r}.")
        allowed = [EscalationStatus.RESOLVED] if escalation.status == EscalationStatus.OPEN else []
        if status != EscalationStatus.RESOLVED or not can_proceed(escalation.resolve):
            raise errors.InvalidTransition(from_state=escalation.status, to_state=status, allowed=allowed)
        escalation.resolve()
        escalation.outcome = outcome
        escalation.resolved_by = resolved_by
        escalation.resolution_notes = resolution_notes
        escalation.resolved_at = now or timezone.now()
        try:
            escalation.save()
        except ConcurrentTransition:
            raise errors.InvalidTransition(from_state=EscalationStatus.RESOLVED, to_state=status,
                                           allowed=[]) from None
        ledger_append(event_type="escalation.resolved", resource_type="Escalation", resource_id=escalation_id,
                      actor=actor, payload={"task_id": escalation.task_id, "action_id": escalation.action_id or None,
                                            "outcome": outcome, "resolved_by": resolved_by})
    return escalation


# --- commerce sessions ------------------------------------------------------------------------
def commerce_session_create(*, actor: str, task_id: str, agent_id: str, delegation_id: str, currency: str,
                            amount_limit: Decimal, merchant: str = "", expires_at: datetime | None = None,
                            session_id: str | None = None, created_at: datetime | None = None) -> CommerceSession:
    """A spending window for a task and agent, inside the delegation's spend limit.

    The delegation must be the agent's own, for the task's root principal, live along its
    whole chain, and carry a spend limit in the session's currency no smaller than
    ``amount_limit``; otherwise 409 ``AGP_DELEGATION_SCOPE_VIOLATION`` (CONTRACT C2, C7).
    """
    session_id = session_id or new_id("cs")
    now = timezone.now()
    task = _task(task_id)
    delegation = Delegation.objects.filter(delegation_id=delegation_id).first()
    if delegation is None:
        raise errors.invalid_fields({"delegation_id": [f"No delegation with id {delegation_id!r}."]})
    if expires_at is not None and expires_at <= now:
        raise errors.invalid_fields({"expires_at": ["Must be in the future."]})
    problems = []
    if delegation.delegate_agent != agent_id:
        problems.append(f"delegation {delegation_id!r} was granted to {delegation.delegate_agent!r}, not {agent_id!r}")
    if delegation.root_principal != task.root_principal:
        problems.append(f"delegation {delegation_id!r} acts for {delegation.root_principal!r}, "
                        f"the task for {task.root_principal!r}")
    # The registry's chain rule (C5): revoked, expired or revoked-agent links, one query.
    chain_problem = delegation_chain_problem(delegation=delegation, now=now)
    if chain_problem:
        problems.append(chain_problem)
    if delegation.spend_amount is None or delegation.spend_currency is None:
        problems.append(f"delegation {delegation_id!r} grants no spending authority (no spend_limit)")
    elif delegation.spend_currency != currency:
        problems.append(f"currency {currency} differs from the delegation's spend limit currency "
                        f"{delegation.spend_currency}")
    elif amount_limit > delegation.spend_amount:
        problems.append(f"amount_limit {amount_limit} exceeds the delegation's spend limit "
                        f"{delegation.spend_amount} {delegation.spend_currency}")
    if expires_at is not None and delegation.expires_at is not None and expires_at > delegation.expires_at:
        problems.append("expires_at is later than the delegation's expires_at")
    if problems:
        raise errors.DelegationScopeViolation("; ".join(problems) + ".", details={"violations": problems})
    with _unique("commerce session", "session_id", session_id), transaction.atomic():
        session = CommerceSession.objects.create(
            session_id=session_id, task=task, agent_id=agent_id, delegation=delegation, merchant=merchant,
            currency=currency, amount_limit=amount_limit,
            # Omitted, the session lasts as long as the delegation that funds it.
            expires_at=expires_at if expires_at is not None else delegation.expires_at,
            created_at=_created_at(created_at, now))
        ledger_append(event_type="commerce_session.created", resource_type="CommerceSession", resource_id=session_id,
                      actor=actor, payload={"task_id": task_id, "agent_id": agent_id, "delegation_id": delegation_id,
                                            "currency": currency, "amount_limit": str(amount_limit)})
    return session
