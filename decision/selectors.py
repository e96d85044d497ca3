"""Reads of the Decision API, including the checks other apps run before acting.

The execution app's fail-closed checks (docs/reference/execution.md, checks 4-9) read through the
querysets here (``impact_assessments_standing_first``,
``escalations_blocking``, ``commerce_spending_under``), so each rule has one definition.
Each takes model instances or plain ids, so callers need not load rows first.
"""

from dataclasses import dataclass
from decimal import Decimal

from django.db.models import Case, DecimalField, F, Q, QuerySet, Sum, Value, When
from django.db.models.functions import Coalesce

from auth_tokens.models import Client
from registry.choices import ActionClass, RiskLevel
from registry.models import Task

from .choices import EscalationOutcome, EscalationStatus, Recommendation
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

# Rule 5 (docs/reference/governance.md): where an impact assessment must precede finalising.
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

    An assessor is not the assessed: an assessment by the decision's own agent is left out,
    unless it says ``do_not_proceed`` (a veto stands whoever makes it).
    """
    vetoes_first = Case(When(recommendation=Recommendation.DO_NOT_PROCEED, then=Value(0)), default=Value(1))
    return (ImpactAssessment.objects
            .filter(task_id=_id(task, "task_id"), decision_id=_id(decision, "decision_id"))
            .filter(Q(recommendation=Recommendation.DO_NOT_PROCEED) | ~Q(agent_id=F("decision__agent_id")))
            .order_by(vetoes_first, "-pk"))


def impact_assessment_standing(*, task: Task | str, decision: Decision | str) -> ImpactAssessment | None:
    """The assessment that decides for ``decision``: a ``do_not_proceed`` one if any exists,
    else the one recorded last. None when the decision has no assessment."""
    return impact_assessments_standing_first(task=task, decision=decision).first()


# --- approvals -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Authors:
    """Who asked for an action: the clients that recorded its decision and evaluation, and the
    people or agents those clients are (casefolded). Nobody approves their own request."""

    clients: frozenset[str] = frozenset()
    subjects: frozenset[str] = frozenset()


def authors_of(*, decision: Decision | None, evaluation: PolicyEvaluation | None) -> Authors:
    """The ``Authors`` of a decision and its evaluation (one query, none when neither names a client)."""
    clients = frozenset(record.created_by for record in (decision, evaluation)
                        if record is not None and record.created_by)
    rows = Client.objects.filter(client_id__in=clients).values_list("subject", "agent_id") if clients else []
    return Authors(clients=clients, subjects=frozenset(name.casefold() for row in rows for name in row if name))


def approvals_required(*, task: Task | None, evaluation: PolicyEvaluation | None) -> tuple[int, list[str]]:
    """How many people must approve, and why: the evaluation's ``approvals_required`` (1 when
    it only said ``require_approval``), and at least one for a critical task."""
    required, why = 0, []
    if task is not None and task.risk_level == "critical":
        required, why = 1, ["the task is critical"]
    if evaluation is not None and evaluation.require_approval:
        asked = evaluation.result.get("approvals_required", 1)
        required = max(required, asked if isinstance(asked, int) and not isinstance(asked, bool) else 1)
        why.append("the policy evaluation requires approval" if asked == 1
                   else f"the policy evaluation requires {asked} approvals")
    return required, why


# --- escalations ---------------------------------------------------------------------------
def escalations_blocking(*, task_id: str | None = None, decision_id: str | None = None,
                         action_id: str | None = None, root_principal: str | None = None) -> QuerySet[Escalation]:
    """Escalations on the task, decision or action that still stand: open, or resolved upheld.

    ``dismissed`` and ``partially_upheld`` resolutions do not block (check 8). An escalation
    raised in one tenant never blocks another's: with ``root_principal``, only that tenant's
    and those of no tenant (an operator's) count.
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
    escalations = Escalation.objects.filter(target).filter(standing)
    if root_principal is not None:
        escalations = escalations.filter(Q(root_principal__isnull=True) | Q(root_principal=root_principal))
    return escalations.order_by("-pk")



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
