"""Admin for the decision records: what was evaluated, assessed, decided and approved, and why.

Every model here is read-only for everyone: decisions and escalations move only through
their state machines, approvals and assessments are signed and immutable, evaluations and
hashed bundles are evidence, a commerce session's amounts move only with payments, and a
backtest is written only by its own run.
"""

from django.contrib import admin
from django.utils.html import format_html, format_html_join

from core.admin_base import (
    LedgeredModelAdmin,
    ReadOnlyModelAdmin,
    admin_link,
    html_table,
    id_filter,
    id_link,
    pretty_json,
)
from decision.models import (
    Approval,
    ApprovalNotificationAttempt,
    ApprovalWebhook,
    Backtest,
    CommerceSession,
    Context,
    Decision,
    Escalation,
    EvidenceBundle,
    ImpactAssessment,
    PolicyEvaluation,
)
from execution.models import ActionEnvelope, Payment
from registry.models import Delegation, PolicySet, Task

TASK_FILTER = id_filter("task", "task_id")
AGENT_FILTER = id_filter("agent", "agent_id")
DECISION_FILTER = id_filter("decision", "decision_id")


class TaskLinkMixin:
    @admin.display(description="task", ordering="task_id")
    def task_link(self, obj):
        """The task id, linking to the task list filtered on it (no join, no query)."""
        return id_link(Task, "task_id", obj.task_id)


class DecisionLinkMixin:
    @admin.display(description="decision", ordering="decision_id")
    def decision_link(self, obj):
        return id_link(Decision, "decision_id", obj.decision_id)


@admin.register(Context)
class ContextAdmin(TaskLinkMixin, ReadOnlyModelAdmin):
    tenant_field = "task__root_principal"
    list_display = ("context_id", "task_link", "agent_id", "content_hash", "created_at")
    list_filter = (TASK_FILTER, AGENT_FILTER, "created_at")
    search_fields = ("context_id", "=task__task_id", "agent_id", "=content_hash")
    date_hierarchy = "created_at"
    ordering = ("-created_at",)
    exclude = ("data",)
    readonly_fields = ("data_pretty",)

    @admin.display(description="data")
    def data_pretty(self, obj):
        return pretty_json(obj.data)


@admin.register(EvidenceBundle)
class EvidenceBundleAdmin(TaskLinkMixin, ReadOnlyModelAdmin):
    tenant_field = "task__root_principal"
    list_display = ("bundle_id", "task_link", "item_count", "bundle_hash", "created_at")
    list_filter = (TASK_FILTER, "created_at")
    search_fields = ("bundle_id", "=task__task_id", "=bundle_hash")
    date_hierarchy = "created_at"
    ordering = ("-created_at",)
    exclude = ("items",)
    readonly_fields = ("items_table",)

    @admin.display(description="items")
    def item_count(self, obj):
        return len(obj.items or [])

    @admin.display(description="items")
    def items_table(self, obj):
        items = obj.items or []
        if not items or not all(isinstance(item, dict) for item in items):
            return pretty_json(items)
        return html_table(["kind", "uri", "sha256"], [
            [item.get("kind", "-"), item.get("uri", "-"), item.get("sha256", "-")] for item in items])


@admin.register(PolicyEvaluation)
class PolicyEvaluationAdmin(TaskLinkMixin, ReadOnlyModelAdmin):
    tenant_field = "task__root_principal"
    list_display = ("evaluation_id", "policy_set_link", "task_link", "agent_id", "allowed", "require_approval",
                    "evaluated_at")
    list_filter = (TASK_FILTER, AGENT_FILTER, id_filter("policy set", "policy_set_id"), "allowed",
                   "require_approval", "evaluated_at")
    search_fields = ("evaluation_id", "=task__task_id", "agent_id", "=policy_set__policy_set_id", "=input_hash")
    date_hierarchy = "evaluated_at"
    ordering = ("-evaluated_at",)
    list_select_related = ("policy_set",)
    linked_fields = ("policy_set_record", "decisions_citing")
    exclude = ("input", "result")
    readonly_fields = ("result_pretty", "input_pretty")

    @admin.display(description="policy set", ordering="policy_set_id")
    def policy_set_link(self, obj):
        policy_set = obj.policy_set
        return admin_link(policy_set, f"{policy_set.policy_set_id} ({policy_set.name} {policy_set.version})")

    @admin.display(description="policy set")
    def policy_set_record(self, obj):
        policy_set = obj.policy_set
        unchanged = policy_set.ruleset_hash == obj.ruleset_hash
        return format_html("{} — status {}; ruleset {}", self.policy_set_link(obj), policy_set.status,
                           "unchanged since this evaluation" if unchanged else "CHANGED since this evaluation")

    @admin.display(description="decisions citing it")
    def decisions_citing(self, obj):
        return id_link(Decision, "policy_evaluation_id", obj.evaluation_id, "decisions citing this evaluation")

    @admin.display(description="result")
    def result_pretty(self, obj):
        return pretty_json(obj.result)

    @admin.display(description="input")
    def input_pretty(self, obj):
        return pretty_json(obj.input)


@admin.register(Decision)
class DecisionAdmin(TaskLinkMixin, ReadOnlyModelAdmin):
    tenant_field = "task__root_principal"
    list_display = ("decision_id", "task_link", "task_risk", "agent_id", "outcome", "status", "evaluation",
                    "finalised_at", "created_at")
    list_filter = (TASK_FILTER, AGENT_FILTER, DECISION_FILTER, id_filter("policy evaluation", "policy_evaluation_id"),
                   "outcome", "status", "created_at", "finalised_at")
    search_fields = ("decision_id", "=task__task_id", "agent_id", "rationale")
    date_hierarchy = "created_at"
    ordering = ("-created_at",)
    list_select_related = ("task",)
    linked_fields = ("approvals", "impact_assessments", "escalations", "action_envelopes")

    @admin.display(description="risk / class")
    def task_risk(self, obj):
        return f"{obj.task.risk_level} / {obj.task.action_class}"

    @admin.display(description="policy evaluation", ordering="policy_evaluation_id")
    def evaluation(self, obj):
        return id_link(PolicyEvaluation, "evaluation_id", obj.policy_evaluation_id)

    @admin.display(description="approvals")
    def approvals(self, obj):
        rows = [[admin_link(a, a.approval_id), a.approver, a.verdict, a.expires_at or "-", a.created_at]
                for a in obj.approvals.order_by("created_at")]
        return html_table(["approval", "approver", "verdict", "expires", "created"], rows) if rows else "none"

    @admin.display(description="impact assessments")
    def impact_assessments(self, obj):
        rows = [[admin_link(a, a.assessment_id), a.recommendation, a.assessed_at]
                for a in obj.impact_assessments.order_by("assessed_at")]
        return html_table(["assessment", "recommendation", "assessed"], rows) if rows else "none"

    @admin.display(description="escalations")
    def escalations(self, obj):
        return id_link(Escalation, "decision_id", obj.decision_id, "escalations of this decision")

    @admin.display(description="action envelopes")
    def action_envelopes(self, obj):
        return id_link(ActionEnvelope, "decision_ref", obj.decision_id, "envelopes citing this decision")


@admin.register(ImpactAssessment)
class ImpactAssessmentAdmin(TaskLinkMixin, DecisionLinkMixin, ReadOnlyModelAdmin):
    tenant_field = "task__root_principal"
    list_display = ("assessment_id", "task_link", "decision_link", "agent_id", "recommendation", "assessed_at")
    list_filter = (TASK_FILTER, AGENT_FILTER, DECISION_FILTER, "recommendation", "assessed_at")
    search_fields = ("assessment_id", "=task__task_id", "=decision__decision_id", "agent_id")
    date_hierarchy = "assessed_at"
    ordering = ("-assessed_at",)


@admin.register(Approval)
class ApprovalAdmin(ReadOnlyModelAdmin):
    tenant_field = "decision__task__root_principal"
    list_display = ("approval_id", "decision_link", "task_link", "approver", "approver_client", "verdict",
                    "expires_at", "created_at")
    list_filter = (id_filter("task", "task_id", "decision__task_id"),
                   id_filter("agent", "agent_id", "decision__agent_id"), DECISION_FILTER, "verdict", "created_at",
                   "expires_at")
    search_fields = ("approval_id", "=decision__decision_id", "approver")
    date_hierarchy = "created_at"
    ordering = ("-created_at",)
    list_select_related = ("decision",)

    @admin.display(description="decision", ordering="decision_id")
    def decision_link(self, obj):
        return admin_link(obj.decision, f"{obj.decision_id} ({obj.decision.outcome}, {obj.decision.status})")

    @admin.display(description="task")
    def task_link(self, obj):
        return id_link(Task, "task_id", obj.decision.task_id)


@admin.register(ApprovalWebhook)
class ApprovalWebhookAdmin(LedgeredModelAdmin):
    """Where a tenant is told that a decision waits for its people (docs/reference/approvals.md)."""

    tenant_field = "root_principal"
    ledger_resource_type = "ApprovalWebhook"
    ledger_event_prefix = "approval_webhook"
    id_field = "root_principal"
    list_display = ("root_principal", "url", "is_active", "updated_at")
    list_filter = ("is_active",)
    search_fields = ("root_principal", "url")
    ordering = ("root_principal",)


@admin.register(ApprovalNotificationAttempt)
class ApprovalNotificationAttemptAdmin(DecisionLinkMixin, ReadOnlyModelAdmin):
    tenant_field = "decision__task__root_principal"
    list_display = ("decision_link", "attempt", "url", "status", "response_status", "attempted_at")
    list_filter = (DECISION_FILTER, "status", "attempted_at")
    search_fields = ("=decision__decision_id", "url")
    date_hierarchy = "attempted_at"
    ordering = ("-attempted_at",)


@admin.register(Escalation)
class EscalationAdmin(TaskLinkMixin, DecisionLinkMixin, ReadOnlyModelAdmin):
    tenant_field = "root_principal"
    list_display = ("escalation_id", "task_link", "decision_link", "action_id", "raised_by", "status", "outcome",
                    "resolved_by", "resolved_at", "created_at")
    list_filter = (TASK_FILTER, id_filter("agent", "agent_id", "decision__agent_id"), DECISION_FILTER,
                   id_filter("action", "action_id"), "status", "outcome", "created_at", "resolved_at")
    search_fields = ("escalation_id", "=task__task_id", "=decision__decision_id", "=action_id", "raised_by",
                     "reason")
    date_hierarchy = "created_at"
    ordering = ("-created_at",)


@admin.register(CommerceSession)
class CommerceSessionAdmin(TaskLinkMixin, ReadOnlyModelAdmin):
    tenant_field = "task__root_principal"
    list_display = ("session_id", "task_link", "agent_id", "delegation_link", "merchant", "currency", "amount_limit",
                    "reserved_amount", "spent_amount", "status", "expires_at")
    list_filter = (TASK_FILTER, AGENT_FILTER, id_filter("delegation", "delegation_id"), "status", "currency",
                   "created_at", "expires_at")
    search_fields = ("session_id", "=task__task_id", "agent_id", "merchant")
    date_hierarchy = "created_at"
    ordering = ("-created_at",)
    linked_fields = ("payments",)

    @admin.display(description="delegation", ordering="delegation_id")
    def delegation_link(self, obj):
        return id_link(Delegation, "delegation_id", obj.delegation_id)

    @admin.display(description="payments")
    def payments(self, obj):
        return id_link(Payment, "session_id", obj.session_id, "payments on this session")



@admin.register(Backtest)
class BacktestAdmin(ReadOnlyModelAdmin):
    """A candidate policy set re-evaluated over recorded evaluations (docs/reference/governance.md): its summary and its changes."""
    tenant_field = "root_principal"

    list_display = ("backtest_id", "candidate_link", "status", "evaluations", "newly_denied", "newly_allowed",
                    "approval_changed", "errors", "since", "until", "created_at")
    list_filter = (id_filter("policy set", "policy_set_id"), id_filter("baseline", "baseline_policy_set_id"),
                   "status", "created_at")
    search_fields = ("backtest_id", "=operation_id", "=policy_set__policy_set_id", "requested_by")
    date_hierarchy = "created_at"
    ordering = ("-created_at",)
    linked_fields = ("summary", "reasons", "changes_table")
    exclude = ("changes", "by_reason")

    @admin.display(description="candidate", ordering="policy_set_id")
    def candidate_link(self, obj):
        return id_link(PolicySet, "policy_set_id", obj.policy_set_id)

    @admin.display(description="summary")
    def summary(self, obj):
        window = (f"{obj.since:%Y-%m-%d %H:%M} – {obj.until:%Y-%m-%d %H:%M}"
                  + (f", baseline {obj.baseline_policy_set_id}" if obj.baseline_policy_set_id else ", every set")
                  + (f", task {obj.task_id}" if obj.task_id else "") + (f", agent {obj.agent_id}" if obj.agent_id else ""))
        return html_table(["status", "window", "re-evaluated", "unchanged", "newly denied", "newly allowed",
                           "approval changed", "errors"], [[
            obj.status, window, f"{obj.evaluations} of {obj.total if obj.total is not None else '?'}",
            obj.unchanged, obj.newly_denied, obj.newly_allowed, obj.approval_changed, obj.errors]])

    @admin.display(description="newly denied, by reason")
    def reasons(self, obj):
        counts = sorted((obj.by_reason or {}).items(), key=lambda item: (-item[1], item[0]))
        return html_table(["reason", "evaluations"], [[reason, count] for reason, count in counts]) if counts else "-"

    @admin.display(description="changes (first 1,000)")
    def changes_table(self, obj):
        changes = obj.changes or []
        if not changes:
            return "none"

        def verdict(result):
            result = result or {}
            text = "allow" if result.get("allow") else "deny"
            if result.get("require_approval"):
                text += " + approval"
            reasons = result.get("reasons") or []
            return f"{text} ({'; '.join(map(str, reasons))})" if reasons else text

        return html_table(["evaluation", "before", "after", "envelopes that cited it"], [
            [id_link(PolicyEvaluation, "evaluation_id", change.get("evaluation_id")), verdict(change.get("before")),
             verdict(change.get("after")),
             format_html_join(", ", "{}", ((id_link(ActionEnvelope, "action_id", a),)
                                           for a in change.get("action_ids") or [])) or "-"]
            for change in changes])
