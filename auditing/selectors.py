"""What the auditor's pages read: the dashboard's figures, an action's timeline, a delegation tree.

Each read is a fixed number of queries, bounded where a table grows without limit (the
ledger): the dashboard looks at the last days only, and verifies the whole chain only while
it is small enough to do so on a page load.
"""

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

from django.db.models import Count, Q
from django.db.models.functions import TruncDate
from django.utils import timezone

from agp_project.exactjson import decimal_text
from agp_project.tenancy import tenant_condition
from core.ledger_verification import Verification, ledger_verify
from core.metrics import newest_checkpoint
from core.models import LedgerEvent, LedgerHead
from core.selectors import TreeVerification, tree_verify
from decision.choices import EscalationStatus
from decision.models import Approval, Decision, Escalation, ImpactAssessment, PolicyEvaluation
from execution.choices import OperationStatus
from execution.models import ActionEnvelope, CallbackAttempt, Operation
from registry.choices import FreezeStatus
from registry.models import Delegation, Freeze, Task

from .signatures import SignatureStatus, signature_status

# The dashboard verifies the chain on every load up to this many events (well under a second
# on PostgreSQL); past it, verifying is the "Verify ledger" button's job.
VERIFY_ON_LOAD_MAX_EVENTS = 200_000
CHART_DAYS = 14
REFUSAL_DAYS = 7
# The newest refusals read for the "checks that refused most" table.
REFUSALS_READ_MAX = 10_000
ENVELOPE_EVENTS = {
    "envelope.validated": "validated",
    "envelope.rejected": "rejected",
    "envelope.accepted": "accepted",
    "envelope.executed": "executed",
    "envelope.failed": "failed",
}
TREE_MAX_LINKS = 500


# --- Dashboard -------------------------------------------------------------------------------


@dataclass
class LedgerIntegrity:
    head_sequence: int
    head_hash: str
    verification: Verification | None  # the hash chain; None: too large to verify on a page load
    tree: TreeVerification | None  # the Merkle tree against the newest checkpoint; None likewise
    checkpoint_size: int
    checkpoint_issued_at: datetime | None

    @property
    def checkpoint_verified(self) -> bool:
        """The chain verifies and the newest checkpoint's root is the tree recomputed from its events."""
        return (self.verification is not None and self.verification.verified and self.tree is not None
                and self.tree.verified and 0 < self.checkpoint_size <= self.verification.events)


@dataclass
class Dashboard:
    integrity: LedgerIntegrity
    days: list[date]
    envelopes_per_day: dict[str, list[int]]  # outcome -> one count per day
    refusals: list[tuple[str, str, int]]  # (check, stage, count), most first
    refusals_read: int
    operations_by_status: dict[str, int]
    open_escalations: list[Escalation]
    open_escalation_count: int
    active_freezes: list[Freeze]


def ledger_integrity() -> LedgerIntegrity:
    head = LedgerHead.objects.filter(pk=1).values_list("sequence", "hash").first() or (0, "0" * 64)
    small = head[0] <= VERIFY_ON_LOAD_MAX_EVENTS
    size, issued = newest_checkpoint()
    return LedgerIntegrity(head_sequence=head[0], head_hash=head[1], verification=ledger_verify() if small else None,
                           tree=tree_verify() if small else None, checkpoint_size=size,
                           checkpoint_issued_at=datetime.fromtimestamp(issued, tz=UTC) if size else None)


def envelopes_per_day(*, today: date, days: int = CHART_DAYS,
                      tenants: frozenset[str] | None = None) -> tuple[list[date], dict[str, list[int]]]:
    """Envelope outcomes per UTC day, from their ledger events (every outcome is one), of ``tenants``
    (None: every tenant)."""
    first = today - timedelta(days=days - 1)
    since = datetime.combine(first, datetime.min.time(), tzinfo=UTC)
    rows = (LedgerEvent.objects.filter(tenant_condition(tenants, "root_principal"), event_type__in=ENVELOPE_EVENTS,
                                       recorded_at__gte=since)
            .annotate(day=TruncDate("recorded_at", tzinfo=UTC)).values("day", "event_type")
            .annotate(count=Count("sequence")).order_by())
    dates = [first + timedelta(days=n) for n in range(days)]
    series = {outcome: [0] * days for outcome in ENVELOPE_EVENTS.values()}
    for row in rows:
        index = (row["day"] - first).days
        if 0 <= index < days:
            series[ENVELOPE_EVENTS[row["event_type"]]][index] += row["count"]
    return dates, series


def refusing_checks(*, now: datetime, days: int = REFUSAL_DAYS,
                    tenants: frozenset[str] | None = None) -> tuple[list[tuple[str, str, int]], int]:
    """How often each check refused an envelope lately: at submission (``envelope.rejected``) and when
    the worker re-checked an accepted one (``operation.failed`` at ``execution_recheck``)."""
    payloads = list(LedgerEvent.objects.filter(
        Q(event_type="envelope.rejected") | Q(event_type="operation.failed"), tenant_condition(tenants, "root_principal"),
        recorded_at__gte=now - timedelta(days=days),
    ).order_by("-sequence").values_list("event_type", "payload")[:REFUSALS_READ_MAX])
    counts: Counter = Counter()
    for event_type, payload in payloads:
        if event_type == "operation.failed" and payload.get("stage") != "execution_recheck":
            continue
        stage = "submission" if event_type == "envelope.rejected" else "execution"
        for item in payload.get("failed_checks") or []:
            if isinstance(item, dict) and item.get("check"):
                counts[(str(item["check"]), stage)] += 1
    return [(check, stage, count) for (check, stage), count in counts.most_common()], len(payloads)


def active_freezes(*, tenants: frozenset[str] | None = None) -> list[Freeze]:
    """Active freezes of ``tenants`` (None: every one), newest first (50 at most)."""
    return list(Freeze.objects.filter(tenant_condition(tenants, "root_principal"), status=FreezeStatus.ACTIVE)
                .order_by("-created_at")[:50])


def dashboard(*, now: datetime | None = None, tenants: frozenset[str] | None = None) -> Dashboard:
    """The figures of ``tenants`` (None: every tenant); the ledger's integrity is the whole ledger's."""
    now = now or timezone.now()
    days, series = envelopes_per_day(today=now.astimezone(UTC).date(), tenants=tenants)
    refusals, read = refusing_checks(now=now, tenants=tenants)
    by_status = dict(Operation.objects.filter(tenant_condition(tenants, "envelope__root_principal"))
                     .values_list("status").annotate(count=Count("pk")).order_by())
    open_escalations = Escalation.objects.filter(tenant_condition(tenants, "root_principal"),
                                                 status=EscalationStatus.OPEN)
    return Dashboard(
        integrity=ledger_integrity(), days=days, envelopes_per_day=series, refusals=refusals, refusals_read=read,
        operations_by_status={status: by_status.get(status, 0) for status in OperationStatus.values},
        open_escalations=list(open_escalations.order_by("-created_at")[:10]),
        open_escalation_count=open_escalations.count(), active_freezes=active_freezes(tenants=tenants))


# --- An action's timeline ----------------------------------------------------------------------


@dataclass
class TimelineEntry:
    at: datetime
    kind: str
    record: Any  # the model instance (linked from the page), or None
    label: str
    summary: str
    signature: SignatureStatus
    author: str = ""  # the API client that made the record, where one is recorded


@dataclass
class Timeline:
    envelope: ActionEnvelope
    entries: list[TimelineEntry]
    ledger: list[LedgerEvent] = field(default_factory=list)


def _entry(at, kind, record, label, summary) -> TimelineEntry:
    author = (getattr(record, "created_by", "") or getattr(record, "submitted_by", "")
              or getattr(record, "posted_by", ""))
    return TimelineEntry(at=at, kind=kind, record=record, label=label, summary=summary,
                         signature=signature_status(record), author=author)


def action_timeline(*, action_id: str, tenants: frozenset[str] | None = None) -> Timeline | None:
    """Everything that governed and executed one accepted action of ``tenants``, in time order."""
    envelope = (ActionEnvelope.objects.select_related("async_operation__receipt", "payment")
                .filter(tenant_condition(tenants, "root_principal"), action_id=action_id).first())
    if envelope is None:
        return None
    entries = []
    task = Task.objects.filter(task_id=envelope.task_id).first()
    if task is not None:
        entries.append(_entry(task.created_at, "task", task, task.task_id,
                              f"{task.title or 'untitled'} — {task.risk_level} risk, {task.action_class}, "
                              f"for {task.root_principal} by {task.agent_id}; now {task.status}"))
    evaluation = (PolicyEvaluation.objects.select_related("policy_set")
                  .filter(evaluation_id=envelope.policy_decision_ref).first())
    if evaluation is not None:
        reasons = ", ".join((evaluation.result or {}).get("reasons") or []) or "none"
        entries.append(_entry(evaluation.evaluated_at, "policy evaluation", evaluation, evaluation.evaluation_id,
                              f"{'allowed' if evaluation.allowed else 'NOT allowed'}"
                              f"{', approval required' if evaluation.require_approval else ''} under policy set "
                              f"{evaluation.policy_set_id} ({evaluation.policy_set.status}); deny reasons: {reasons}"))
    decision = Decision.objects.filter(decision_id=envelope.decision_ref).first()
    if decision is not None:
        entries.append(_entry(decision.created_at, "decision", decision, decision.decision_id,
                              f"{decision.outcome}, recorded as a draft: {decision.rationale[:160]}"))
        if decision.finalised_at:
            entries.append(_entry(decision.finalised_at, "decision finalised", decision, decision.decision_id,
                                  f"{decision.outcome}, final"))
        for assessment in ImpactAssessment.objects.filter(decision_id=decision.decision_id).order_by("assessed_at"):
            entries.append(_entry(assessment.assessed_at, "impact assessment", assessment, assessment.assessment_id,
                                  f"recommends {assessment.recommendation}"))
        for approval in Approval.objects.filter(decision_id=decision.decision_id).order_by("created_at"):
            cited = " (cited by the envelope)" if approval.approval_id == envelope.approval_ref else ""
            client = ", ".join(filter(None, [f"client {approval.approver_client}" if approval.approver_client else "",
                                             approval.approver_kind]))
            entries.append(_entry(approval.created_at, "approval", approval, approval.approval_id,
                                  f"{approval.verdict} by {approval.approver}{f' ({client})' if client else ''}"
                                  f"{f': {approval.reason}' if approval.reason else ''}{cited}"))
    failed = [item["check"] for item in envelope.checks or [] if isinstance(item, dict) and not item.get("passed")]
    entries.append(_entry(envelope.accepted_at, "action envelope", envelope, envelope.action_id,
                          f"{envelope.tool_id}:{envelope.operation} accepted for execution by "
                          f"{envelope.submitted_by or 'a client'}; checks at submission: "
                          f"{'all passed' if not failed else 'failed ' + ', '.join(failed)}; now {envelope.status}"))
    operation = getattr(envelope, "async_operation", None)
    payment = getattr(envelope, "payment", None)
    if payment is not None:
        entries.append(_entry(payment.created_at, "payment", payment, payment.payment_id,
                              f"{decimal_text(payment.amount)} {payment.currency} reserved on session {payment.session_id}; "
                              f"now {payment.status}"))
    receipt = None
    if operation is not None:
        entries.append(_entry(operation.created_at, "operation", operation, operation.operation_id,
                              f"created pending; now {operation.status} after {operation.attempts} attempt(s)"
                              f"{' by ' + operation.executor if operation.executor else ''}"))
        if operation.started_at:
            entries.append(_entry(operation.started_at, "operation started", operation, operation.operation_id,
                                  f"claimed by {operation.executor or '-'} ({operation.connector or '-'} connector)"))
        if operation.completed_at:
            error = (operation.error or {}).get("code")
            entries.append(_entry(operation.completed_at, "operation ended", operation, operation.operation_id,
                                  f"{operation.status}{' — ' + error if error else ''}"))
        receipt = getattr(operation, "receipt", None)
        if receipt is not None:
            entries.append(_entry(receipt.completed_at, "receipt", receipt, receipt.receipt_id,
                                  f"{receipt.status}, executed by {receipt.executor}; result hash "
                                  f"{receipt.result_hash[:23]}…"))
        for attempt in CallbackAttempt.objects.filter(operation_id=operation.operation_id).order_by("attempt"):
            entries.append(_entry(attempt.attempted_at, "callback", attempt, f"attempt {attempt.attempt}",
                                  f"{attempt.status} to {attempt.url}"
                                  f"{' — HTTP ' + str(attempt.response_status) if attempt.response_status else ''}"
                                  f"{' — ' + attempt.error if attempt.error else ''}"))
    entries.sort(key=lambda entry: entry.at)
    # (resource_type, resource_id) pairs: the ledger's index on them finds each record's events.
    resources = Q(resource_type="ActionEnvelope", resource_id=envelope.action_id)
    for resource_type, record, id_field in (("Operation", operation, "operation_id"),
                                            ("Receipt", receipt, "receipt_id"), ("Payment", payment, "payment_id")):
        if record is not None:
            resources |= Q(resource_type=resource_type, resource_id=getattr(record, id_field))
    ledger = list(LedgerEvent.objects.filter(resources).order_by("sequence")[:200])
    return Timeline(envelope=envelope, entries=entries, ledger=ledger)


# --- A delegation tree ---------------------------------------------------------------------------


@dataclass
class TreeNode:
    link: Delegation
    children: list["TreeNode"]
    signature: SignatureStatus
    expired: bool


@dataclass
class DelegationTree:
    root_principal: str
    root: TreeNode
    focus: Delegation
    links: int
    truncated: bool


def delegation_tree(*, delegation_id: str, now: datetime | None = None,
                    tenants: frozenset[str] | None = None) -> DelegationTree | None:
    """The whole tree ``delegation_id`` belongs to, from its root link down (one query over the
    materialised path), at most ``TREE_MAX_LINKS`` links; a tree is of one tenant, its root principal."""
    focus = Delegation.objects.filter(tenant_condition(tenants, "root_principal"), delegation_id=delegation_id).first()
    if focus is None:
        return None
    now = now or timezone.now()
    root_segment = focus.path.split("/", 1)[0] + "/" if focus.path else ""
    links = list(Delegation.objects.filter(path__startswith=root_segment).order_by("depth", "accepted_at")
                 [:TREE_MAX_LINKS + 1]) if root_segment else [focus]
    truncated = len(links) > TREE_MAX_LINKS
    links = links[:TREE_MAX_LINKS]
    nodes = {link.delegation_id: TreeNode(link=link, children=[], signature=signature_status(link),
                                          expired=link.expires_at <= now) for link in links}
    root = None
    for link in links:
        node = nodes[link.delegation_id]
        parent = nodes.get(link.parent_id) if link.parent_id else None
        if parent is not None:
            parent.children.append(node)
        elif root is None:
            root = node
    return DelegationTree(root_principal=focus.root_principal, root=root, focus=focus, links=len(links),
                          truncated=truncated)
