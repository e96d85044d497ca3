"""Admin for execution: accepted envelopes with everything that governed them, operations, receipts.

All read-only for everyone: an envelope is signed and was checked as submitted, an
operation moves only through its state machine, a receipt is signed evidence, payments
move only with their commerce session, and the outbox and callback attempts are the
service's own bookkeeping.

The envelope page answers an auditor's question "why did this run?" on one screen: its
operation and receipt (one query, planned with ``select_related``), the decision, the
policy evaluation and the approvals it cites, and links to the task, capability,
delegation and commerce session; a fixed number of queries whatever their size.
"""

from types import SimpleNamespace

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse
from django.urls import path, reverse
from django.utils.html import format_html

from agp_project import errors, exactjson
from core.admin_base import (
    ReadOnlyModelAdmin,
    admin_link,
    changelist_url,
    html_table,
    id_filter,
    id_link,
    pretty_json,
    short_hash,
)
from core.models import LedgerEvent, OutboxMessage
from decision.models import Approval, CommerceSession, Decision, PolicyEvaluation
from execution.evidence import action_evidence
from execution.models import ActionEnvelope, CallbackAttempt, Operation, Payment, Receipt
from registry.models import Capability, Delegation, Task


def _operation_of(envelope: ActionEnvelope) -> Operation | None:
    try:
        return envelope.async_operation
    except Operation.DoesNotExist:
        return None


def _receipt_of(operation: Operation | None) -> Receipt | None:
    if operation is None:
        return None
    try:
        return operation.receipt
    except Receipt.DoesNotExist:
        return None


def _payment_of(envelope: ActionEnvelope) -> Payment | None:
    try:
        return envelope.payment
    except Payment.DoesNotExist:
        return None


def checks_table(checks) -> str:
    """The check (docs/reference/execution.md) outcomes as a table when they have the usual shape, else as JSON."""
    if not checks:
        return "-"
    if not isinstance(checks, list) or not all(isinstance(item, dict) for item in checks):
        return pretty_json(checks)
    rows = []
    for item in checks:
        passed = item.get("passed")
        mark = "passed" if passed is True else "FAILED" if passed is False else "-"
        rows.append([item.get("check", "-"), mark, item.get("reason") or ""])
    return html_table(["check", "outcome", "reason"], rows)


@admin.register(ActionEnvelope)
class ActionEnvelopeAdmin(ReadOnlyModelAdmin):
    tenant_field = "root_principal"
    list_display = ("action_id", "task", "agent_id", "tool_id", "operation", "status", "operation_status",
                    "accepted_at")
    list_filter = (id_filter("task", "task_id"), id_filter("agent", "agent_id"), id_filter("decision", "decision_ref"),
                   id_filter("action", "action_id"), "status", "tool_id", "accepted_at")
    search_fields = ("action_id", "task_id", "agent_id", "=decision_ref", "tool_id")
    date_hierarchy = "accepted_at"
    ordering = ("-accepted_at",)
    linked_fields = ("timeline_link", "trail_link", "evidence_download", "operation_record", "receipt_record",
                     "decision_record", "policy_evaluation_record", "approvals_record", "payment_record",
                     "governance_links")
    exclude = ("parameters", "checks", "inputs")
    readonly_fields = ("parameters_pretty", "checks_record", "inputs_pretty")

    def get_queryset(self, request):
        # The operation, its receipt and the payment come with the envelope: one query for
        # the list's operation column and for the page's operation and receipt sections.
        return super().get_queryset(request).select_related("async_operation__receipt", "payment")

    def _governance(self, obj) -> SimpleNamespace:
        """The records the envelope cites by id (string references, not foreign keys); loaded once per page."""
        cached = getattr(obj, "_agp_governance", None)
        if cached is None:
            cached = obj._agp_governance = SimpleNamespace(
                decision=Decision.objects.select_related("task").filter(decision_id=obj.decision_ref).first(),
                evaluation=PolicyEvaluation.objects.select_related("policy_set")
                .filter(evaluation_id=obj.policy_decision_ref).first(),
                approvals=list(Approval.objects.filter(decision_id=obj.decision_ref).order_by("created_at")),
            )
        return cached

    @admin.display(description="task", ordering="task_id")
    def task(self, obj):
        return id_link(Task, "task_id", obj.task_id)

    @admin.display(description="timeline")
    def timeline_link(self, obj):
        return format_html('<a href="{}">Everything about this action on one page, in time order, with each '
                           'record\'s signature checked</a>', reverse("audit:timeline", args=[obj.action_id]))

    @admin.display(description="ledger trail")
    def trail_link(self, obj):
        return format_html('<a href="{}">Every ledger event of this action</a> (envelope, operation, payment, '
                           'receipt, callbacks), in the hash-chained ledger',
                           changelist_url(LedgerEvent, action_id=obj.action_id))

    def get_urls(self):
        evidence = path("<path:object_id>/evidence/", self.admin_site.admin_view(self.evidence_view),
                        name="execution_actionenvelope_evidence")
        return [evidence, *super().get_urls()]

    def evidence_view(self, request, object_id):
        """The action's evidence bundle as a file, as ``GET /agp/action-envelopes/{id}/evidence`` serves it."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        envelope = self.get_object(request, object_id)
        if envelope is None:
            raise Http404
        try:
            bundle = action_evidence(action_id=envelope.action_id)
        except errors.AGPError as exc:
            return HttpResponse(exc.message, status=exc.status_code, content_type="text/plain; charset=utf-8")
        # Exact numbers, as the API sends it: a rounded amount would not verify.
        response = HttpResponse(exactjson.dumps(bundle), content_type="application/json")
        response["Content-Disposition"] = f'attachment; filename="evidence-{envelope.pk}.json"'
        return response

    @admin.display(description="evidence")
    def evidence_download(self, obj):
        return format_html('<a href="{}" download>Download the evidence bundle</a> (every record, every ledger '
                           "event with its inclusion proof, the checkpoint, the JWKS; check it offline with "
                           "<code>python -m agp_client verify-evidence FILE</code>)",
                           reverse("admin:execution_actionenvelope_evidence", args=[obj.pk]))

    @admin.display(description="operation status")
    def operation_status(self, obj):
        operation = _operation_of(obj)
        return operation.status if operation else "-"

    @admin.display(description="operation")
    def operation_record(self, obj):
        operation = _operation_of(obj)
        if operation is None:
            return "none (validated only, or not executed)"
        error = format_html("; error {}", pretty_json(operation.error)) if operation.error else ""
        return format_html("{} — {}, {} attempt(s), started {}, completed {}{}",
                           admin_link(operation, operation.operation_id), operation.status, operation.attempts,
                           operation.started_at or "-", operation.completed_at or "-", error)

    @admin.display(description="receipt")
    def receipt_record(self, obj):
        receipt = _receipt_of(_operation_of(obj))
        if receipt is None:
            return "none yet"
        return format_html("{} — {} by {} at {}; result hash {}", admin_link(receipt, receipt.receipt_id),
                           receipt.status, receipt.executor, receipt.completed_at, short_hash(receipt.result_hash, 20))

    @admin.display(description="decision")
    def decision_record(self, obj):
        decision = self._governance(obj).decision
        if decision is None:
            return format_html("{} (not found)", obj.decision_ref or "-")
        return format_html("{} — outcome {}, {}{}; task {} ({} risk, {})", admin_link(decision, decision.decision_id),
                           decision.outcome, decision.status,
                           f" at {decision.finalised_at}" if decision.finalised_at else "",
                           decision.task_id, decision.task.risk_level, decision.task.action_class)

    @admin.display(description="policy evaluation")
    def policy_evaluation_record(self, obj):
        evaluation = self._governance(obj).evaluation
        if evaluation is None:
            return format_html("{} (not found)", obj.policy_decision_ref or "-")
        policy_set = evaluation.policy_set
        reasons = ", ".join((evaluation.result or {}).get("reasons") or []) or "none"
        return format_html("{} — {}{}; policy set {} ({}); deny reasons: {}",
                           admin_link(evaluation, evaluation.evaluation_id),
                           "allowed" if evaluation.allowed else "NOT allowed",
                           ", approval required" if evaluation.require_approval else "",
                           admin_link(policy_set, f"{policy_set.policy_set_id} {policy_set.version}"),
                           policy_set.status, reasons)

    @admin.display(description="approvals")
    def approvals_record(self, obj):
        approvals = self._governance(obj).approvals
        if not approvals:
            return "none"
        rows = []
        for approval in approvals:
            cited = " (cited by this envelope)" if approval.approval_id == obj.approval_ref else ""
            rows.append([format_html("{}{}", admin_link(approval, approval.approval_id), cited), approval.approver,
                         approval.verdict, approval.expires_at or "-", approval.created_at])
        return html_table(["approval", "approver", "verdict", "expires", "created"], rows)

    @admin.display(description="payment")
    def payment_record(self, obj):
        payment = _payment_of(obj)
        if payment is None:
            return "none"
        return format_html("{} — {} {} {} on session {}", admin_link(payment, payment.payment_id), payment.status,
                           payment.amount, payment.currency, id_link(CommerceSession, "session_id", payment.session_id))

    @admin.display(description="task, capability, delegation, commerce session")
    def governance_links(self, obj):
        return format_html("task {} · capability {} · delegation {} · commerce session {}",
                           id_link(Task, "task_id", obj.task_id),
                           id_link(Capability, "capability_id", obj.capability_token_ref),
                           id_link(Delegation, "delegation_id", obj.delegation_ref),
                           id_link(CommerceSession, "session_id", obj.commerce_session_ref))

    @admin.display(description="parameters")
    def parameters_pretty(self, obj):
        return pretty_json(obj.parameters)

    @admin.display(description="checks at submission")
    def checks_record(self, obj):
        return checks_table(obj.checks)

    @admin.display(description="inputs (the request as received)")
    def inputs_pretty(self, obj):
        return pretty_json(obj.inputs)


@admin.register(Operation)
class OperationAdmin(ReadOnlyModelAdmin):
    tenant_field = "envelope__root_principal"
    list_display = ("operation_id", "envelope_link", "task", "agent", "status", "attempts", "connector",
                    "started_at", "completed_at", "created_at")
    list_filter = (id_filter("task", "task_id", "envelope__task_id"),
                   id_filter("agent", "agent_id", "envelope__agent_id"),
                   id_filter("action", "action_id", "envelope_id"), "status", "connector", "created_at")
    search_fields = ("operation_id", "=envelope__action_id", "executor")
    date_hierarchy = "created_at"
    ordering = ("-created_at",)
    list_select_related = ("envelope",)
    linked_fields = ("receipt_record", "callback_attempts")

    @admin.display(description="action envelope", ordering="envelope_id")
    def envelope_link(self, obj):
        return admin_link(obj.envelope, obj.envelope_id)

    @admin.display(description="task")
    def task(self, obj):
        return id_link(Task, "task_id", obj.envelope.task_id)

    @admin.display(description="agent")
    def agent(self, obj):
        return obj.envelope.agent_id

    @admin.display(description="receipt")
    def receipt_record(self, obj):
        receipt = _receipt_of(obj)
        return admin_link(receipt, f"{receipt.receipt_id} ({receipt.status})") if receipt else "none yet"

    @admin.display(description="callback attempts")
    def callback_attempts(self, obj):
        rows = [[attempt.attempt, attempt.url, attempt.status, attempt.response_status or "-", attempt.error or "",
                 attempt.attempted_at] for attempt in obj.callback_attempts.order_by("attempt")]
        return html_table(["#", "url", "status", "HTTP", "error", "at"], rows) if rows else "none"


@admin.register(Receipt)
class ReceiptAdmin(ReadOnlyModelAdmin):
    tenant_field = "operation__envelope__root_principal"
    list_display = ("receipt_id", "action", "operation_link", "status", "executor", "result_hash_short",
                    "started_at", "completed_at")
    list_filter = (id_filter("task", "task_id", "operation__envelope__task_id"),
                   id_filter("agent", "agent_id", "operation__envelope__agent_id"), id_filter("action", "action_id"),
                   "status", "completed_at")
    search_fields = ("receipt_id", "=action_id", "=operation__operation_id", "executor", "=result_hash")
    date_hierarchy = "completed_at"
    ordering = ("-completed_at",)
    list_select_related = ("operation",)
    exclude = ("result",)
    readonly_fields = ("result_pretty",)

    @admin.display(description="action envelope", ordering="action_id")
    def action(self, obj):
        return id_link(ActionEnvelope, "action_id", obj.action_id)

    @admin.display(description="operation", ordering="operation_id")
    def operation_link(self, obj):
        return admin_link(obj.operation, f"{obj.operation_id} ({obj.operation.status})")

    @admin.display(description="result hash", ordering="result_hash")
    def result_hash_short(self, obj):
        return short_hash(obj.result_hash, 20)

    @admin.display(description="result")
    def result_pretty(self, obj):
        return pretty_json(obj.result)


@admin.register(Payment)
class PaymentAdmin(ReadOnlyModelAdmin):
    tenant_field = "envelope__root_principal"
    list_display = ("payment_id", "action", "session", "amount", "currency", "status", "created_at", "updated_at")
    list_filter = (id_filter("task", "task_id", "envelope__task_id"),
                   id_filter("agent", "agent_id", "envelope__agent_id"), id_filter("commerce session", "session_id"),
                   "status", "currency", "created_at")
    search_fields = ("payment_id", "=envelope__action_id", "=session_id")
    date_hierarchy = "created_at"
    ordering = ("-created_at",)

    @admin.display(description="action envelope", ordering="envelope_id")
    def action(self, obj):
        return id_link(ActionEnvelope, "action_id", obj.envelope_id)

    @admin.display(description="commerce session", ordering="session_id")
    def session(self, obj):
        return id_link(CommerceSession, "session_id", obj.session_id)


@admin.register(OutboxMessage)
class OutboxMessageAdmin(ReadOnlyModelAdmin):
    list_display = ("id", "task_name", "args", "status", "attempts", "created_at", "published_at")
    list_filter = ("status", "task_name", "created_at")
    search_fields = ("task_name",)
    date_hierarchy = "created_at"
    ordering = ("-created_at",)


@admin.register(CallbackAttempt)
class CallbackAttemptAdmin(ReadOnlyModelAdmin):
    tenant_field = "operation__envelope__root_principal"
    list_display = ("operation_link", "attempt", "url", "status", "response_status", "attempted_at")
    list_filter = (id_filter("task", "task_id", "operation__envelope__task_id"),
                   id_filter("agent", "agent_id", "operation__envelope__agent_id"), "status", "attempted_at")
    search_fields = ("=operation__operation_id", "url")
    date_hierarchy = "attempted_at"
    ordering = ("-attempted_at",)
    list_select_related = ("operation",)

    @admin.display(description="operation", ordering="operation_id")
    def operation_link(self, obj):
        return admin_link(obj.operation, obj.operation_id)
