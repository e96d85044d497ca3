"""Reads of the Decision API, including the checks other apps run before acting.

The execution app's fail-closed checks (CONTRACT C8, checks 4-9) read through the
querysets here (``impact_assessments_standing_first``, ``approvals_standing``,
``escalations_blocking``, ``commerce_spending_under``), so each rule has one definition.
Each takes model instances or plain ids, so callers need not load rows first.
"""

from datetime import datetime
from decimal import Decimal

from django.db.models import Case, DecimalField, Exists, F, OuterRef, Q, QuerySet, Sum, Value, When
from django.db.models.functions import Coalesce

from registry.choices import ActionClass, RiskLevel
from registry.models import Task

from .choices import ApprovalVerdict, EscalationOutcome, EscalationStatus, Recommendation
from .models import (
    Approval,
    Backtest,
    CommerceSession,
    Context,
    Decision,
    Escalation,
    EvidenceBundle,
    ImpactAssessment,
    PolicyEvaluation,
)

# Spec rule 5 / CONTRACT C7: where an impact assessment must precede finalising.
RULE5_RISK_LEVELS = frozenset({RiskLevel.HIGH, RiskLevel.CRITICAL})
RULE5_ACTION_CLASSES = frozenset({ActionClass.TRANSACT, ActionClass.DELETE, ActionClass.ADMIN})


def _id(value, attr: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return getattr(value, attr)


# --- rule 5 and impact assessments -------------------------------------------------------
def impact_assessment_required(*, task: Task) -> bool:
    """True when rule 5 applies: risk high or critical, action class transact, delete or admin."""
    return task.risk_level in RULE5_RISK_LEVELS and task.action_class in RULE5_ACTION_CLASSES


def impact_assessments_standing_first(*, task: Task | str, decision: Decision | str) -> QuerySet[ImpactAssessment]:
    """The assessments of ``decision`` for ``task``: every ``do_not_proceed`` one before the
    others, then the one recorded last (server order) first.

    An assessor's "do not proceed" stands whatever is recorded after it: assessments are
    immutable, so a later ``proceed`` (or one back-dated with an earlier ``assessed_at``)
    is a second opinion, not a withdrawal, and a governance service fails closed on the
    disagreement. The way past it is a new decision with its own assessment.
    """
    vetoes_first = Case(When(recommendation=Recommendation.DO_NOT_PROCEED, then=Value(0)), default=Value(1))
    return (ImpactAssessment.objects
            .filter(task_id=_id(task, "task_id"), decision_id=_id(decision, "decision_id"))
            .order_by(vetoes_first, "-pk"))


def impact_assessment_standing(*, task: Task | str, decision: Decision | str) -> ImpactAssessment | None:
    """The assessment that decides for ``decision``: a ``do_not_proceed`` one if any exists,
    else the one recorded last. None when the decision has no assessment."""
    return impact_assessments_standing_first(task=task, decision=decision).first()


# --- approvals -----------------------------------------------------------------------------
def approvals_standing(*, decision: Decision | str, now: datetime) -> QuerySet[Approval]:
    """The approved, unexpired approvals of ``decision``, the one recorded last first, each
    annotated with ``rejected_later`` (a rejection was recorded after it).

    "Later" is server order (primary key), never the client-settable ``created_at``: a
    backdated rejection still withdraws the approval before it.
    """
    decision_id = _id(decision, "decision_id")
    return (Approval.objects.filter(decision_id=decision_id, verdict=ApprovalVerdict.APPROVED)
            .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
            .annotate(rejected_later=Exists(Approval.objects.filter(
                decision_id=decision_id, verdict=ApprovalVerdict.REJECTED, pk__gt=OuterRef("pk"))))
            .order_by("-pk"))


def approval_valid_for(*, decision: Decision | str, now: datetime) -> Approval | None:
    """The newest approved, unexpired approval of ``decision``, unless a later approval rejected it.

    Approvals are immutable, so a rejection recorded after an approval is how that
    approval is withdrawn; an approval recorded after a rejection stands. CONTRACT C8
    check 7 reads ``approvals_standing`` itself to tell the two refusals apart.
    """
    approval = approvals_standing(decision=decision, now=now).first()
    return None if approval is None or approval.rejected_later else approval


# --- escalations ---------------------------------------------------------------------------
def escalations_blocking(*, task_id: str | None = None, decision_id: str | None = None,
                         action_id: str | None = None) -> QuerySet[Escalation]:
    """Escalations on the task, decision or action that still stand: open, or resolved upheld.

    ``dismissed`` and ``partially_upheld`` resolutions do not block (CONTRACT C8 check 8).
    """
    target = Q()
    if task_id:
        target |= Q(task_id=task_id)
    if decision_id:
        target |= Q(decision_id=decision_id)
    if action_id:
        target |= Q(action_id=action_id)
    if not target:
        return Escalation.objects.none()
    standing = Q(status=EscalationStatus.OPEN) | Q(status=EscalationStatus.RESOLVED,
                                                   outcome=EscalationOutcome.UPHELD)
    return Escalation.objects.filter(target).filter(standing).order_by("-pk")


def escalation_blocking(*, task_id: str | None = None, decision_id: str | None = None,
                        action_id: str | None = None) -> bool:
    """True when an open or upheld escalation names the task, the decision or the action."""
    return escalations_blocking(task_id=task_id, decision_id=decision_id, action_id=action_id).exists()


# --- spending under delegations --------------------------------------------------------------
MONEY = DecimalField(max_digits=20, decimal_places=4)
ZERO = Decimal("0")


def commerce_spending_under(*, paths: list[str]) -> list[Decimal]:
    """What the commerce sessions under each delegation path (its link and every descendant)
    have spent or reserved, in the order of ``paths`` (one query).

    ``paths`` are the materialised paths of one chain, root first: every session under a
    later path lies under the first, so one aggregate over the root's subtree sums them all.
    """
    if not paths:
        return []
    sums = CommerceSession.objects.filter(delegation__path__startswith=paths[0]).aggregate(**{
        f"under_{number}": Coalesce(Sum(Case(
            When(delegation__path__startswith=path, then=F("spent_amount") + F("reserved_amount")),
            default=Value(ZERO), output_field=MONEY)), Value(ZERO), output_field=MONEY)
        for number, path in enumerate(paths)})
    return [sums[f"under_{number}"] or ZERO for number in range(len(paths))]


# --- plain reads -----------------------------------------------------------------------------
def context_list() -> QuerySet[Context]:
    return Context.objects.all()


def evidence_bundle_list() -> QuerySet[EvidenceBundle]:
    return EvidenceBundle.objects.all()


def policy_evaluation_list() -> QuerySet[PolicyEvaluation]:
    return PolicyEvaluation.objects.all()


def policy_evaluation_get(*, evaluation_id: str) -> PolicyEvaluation | None:
    return PolicyEvaluation.objects.select_related("policy_set").filter(evaluation_id=evaluation_id).first()


def decision_list() -> QuerySet[Decision]:
    return Decision.objects.all()


def decision_get(*, decision_id: str) -> Decision | None:
    return Decision.objects.select_related("task").filter(decision_id=decision_id).first()


def impact_assessment_list() -> QuerySet[ImpactAssessment]:
    return ImpactAssessment.objects.all()


def approval_list() -> QuerySet[Approval]:
    return Approval.objects.all()


def escalation_list() -> QuerySet[Escalation]:
    return Escalation.objects.all()


def commerce_session_list() -> QuerySet[CommerceSession]:
    return CommerceSession.objects.all()


def backtest_list() -> QuerySet[Backtest]:
    return Backtest.objects.all()


def backtest_by_operation(*, operation_id: str) -> Backtest | None:
    """The backtest whose Operation has this id (``/agp/operations/{id}`` serves both kinds)."""
    return Backtest.objects.filter(operation_id=operation_id).first()
