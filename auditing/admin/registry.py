"""Admin for the registry: who may act for whom (delegations), with which tools, under which rules.

Tasks, skills and liability bindings are plain records a superuser may correct (each
write is ledgered); delegations, policy sets, capabilities, revocations and freezes are
signed, state-machine or irreversible records, read-only for everyone (docs/decisions/admin.md).
"""

from django.contrib import admin
from django.db.models import Count, Q, TextField
from django.db.models.fields.json import KeyTransform
from django.db.models.functions import Cast
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from agp_project.exactjson import decimal_text
from core.admin_base import (
    LedgeredModelAdmin,
    ReadOnlyModelAdmin,
    admin_link,
    changelist_url,
    html_table,
    id_filter,
    id_link,
    pretty_json,
)
from core.models import LedgerEvent
from decision.models import (
    Approval,
    CommerceSession,
    Context,
    Decision,
    Escalation,
    EvidenceBundle,
    ImpactAssessment,
    PolicyEvaluation,
)
from execution.models import ActionEnvelope, Operation, Receipt
from registry.models import Capability, Delegation, Freeze, LiabilityBinding, PolicySet, Revocation, Skill, Task

TASK_FILTER = id_filter("task", "task_id")
AGENT_FILTER = id_filter("agent", "agent_id")
PRINCIPAL_FILTER = id_filter("root principal", "root_principal")
# Every list whose admin filters on ``task_id``, in the order a task's story unfolds.
TASK_SCOPED_MODELS = (Context, EvidenceBundle, PolicyEvaluation, Decision, ImpactAssessment, Approval, Escalation,
                      CommerceSession, ActionEnvelope, Operation, Receipt)
# The longest chain walked by parent links when a link has no materialised path.
MAX_CHAIN_WALK = 64


@admin.register(Task)
class TaskAdmin(LedgeredModelAdmin):
    tenant_field = "root_principal"
    ledger_resource_type = "Task"
    ledger_event_prefix = "task"
    id_field = "task_id"
    # Closing goes through PATCH /agp/tasks/{id} (FSM, ledgered task.closed); the field is protected.
    readonly_fields = ("status",)

    list_display = ("task_id", "title", "root_principal", "agent_id", "risk_level", "action_class", "status",
                    "created_at")
    list_filter = (TASK_FILTER, AGENT_FILTER, PRINCIPAL_FILTER, "status", "risk_level", "action_class", "created_at")
    search_fields = ("task_id", "title", "agent_id", "root_principal")
    date_hierarchy = "created_at"
    ordering = ("-created_at",)
    linked_fields = ("records_of_this_task",)

    @admin.display(description="records of this task")
    def records_of_this_task(self, obj):
        """Links to every list filtered on this task: no query, whatever the task's size."""
        return format_html_join(" · ", '<a href="{}">{}</a>', (
            (changelist_url(model, task_id=obj.task_id), model._meta.verbose_name_plural)
            for model in TASK_SCOPED_MODELS))


@admin.register(Delegation)
class DelegationAdmin(ReadOnlyModelAdmin):
    tenant_field = "root_principal"
    list_display = ("delegation_id", "root_principal", "delegator_agent", "delegate_agent", "scope", "depth",
                    "max_hops_remaining", "status", "expires_at", "accepted_at")
    list_filter = (id_filter("agent", "agent_id", "delegator_agent", "delegate_agent"), PRINCIPAL_FILTER,
                   id_filter("delegation", "delegation_id"), "status", "depth", "accepted_at", "expires_at")
    search_fields = ("delegation_id", "root_principal", "delegator_agent", "delegate_agent")
    date_hierarchy = "accepted_at"
    ordering = ("-accepted_at",)
    linked_fields = ("tree_link", "chain_to_root", "delegated_further", "capabilities_granted")
    exclude = ("signature_chain",)
    readonly_fields = ("signature_chain_pretty",)

    @admin.display(description="scope")
    def scope(self, obj):
        return ", ".join(obj.authority_scope or [])

    @admin.display(description="tree")
    def tree_link(self, obj):
        return format_html('<a href="{}">The whole delegation tree of {}, drawn</a>',
                           reverse("audit:delegation-tree", args=[obj.delegation_id]), obj.root_principal)

    def _ancestors(self, obj) -> list[Delegation]:
        """Root first, this link last: one query over the materialised path."""
        pks = [int(part) for part in (obj.path or "").strip("/").split("/") if part.isdigit()]
        if pks:
            chain = {d.pk: d for d in Delegation.objects.filter(pk__in=pks)}
            chain[obj.pk] = obj
            return sorted(chain.values(), key=lambda d: (d.depth, pks.index(d.pk) if d.pk in pks else len(pks)))
        # No path (a row written before paths existed): follow the parent links.
        chain, current = [obj], obj
        while current.parent_id and len(chain) < MAX_CHAIN_WALK:
            current = Delegation.objects.filter(delegation_id=current.parent_id).first()
            if current is None:
                break
            chain.append(current)
        return list(reversed(chain))

    @admin.display(description="chain up to the root")
    def chain_to_root(self, obj):
        rows = []
        for link in self._ancestors(obj):
            spend = f"{decimal_text(link.spend_amount)} {link.spend_currency}" if link.spend_amount is not None else "none"
            name = format_html("<strong>{} (this delegation)</strong>", link.delegation_id) if link.pk == obj.pk \
                else admin_link(link, link.delegation_id)
            rows.append([link.depth, name, f"{link.delegator_agent} → {link.delegate_agent}",
                         ", ".join(link.authority_scope or []), spend, link.max_hops_remaining, link.status,
                         link.expires_at or "-"])
        return html_table(["depth", "delegation", "delegator → delegate", "scope", "spend limit", "hops left",
                           "status", "expires"], rows)

    @admin.display(description="delegated further")
    def delegated_further(self, obj):
        children = list(Delegation.objects.filter(parent_id=obj.delegation_id).order_by("accepted_at")[:50])
        if not children:
            return "-"
        return html_table(["delegation", "delegate", "scope", "status"], [
            [admin_link(child, child.delegation_id), child.delegate_agent, ", ".join(child.authority_scope or []),
             child.status] for child in children])

    @admin.display(description="capabilities")
    def capabilities_granted(self, obj):
        return id_link(Capability, "delegation_id", obj.delegation_id, "capabilities granted under this delegation")

    @admin.display(description="signature chain")
    def signature_chain_pretty(self, obj):
        return pretty_json(obj.signature_chain)


@admin.register(PolicySet)
class PolicySetAdmin(ReadOnlyModelAdmin):
    tenant_field = "root_principal"
    shared_when_no_tenant = True
    list_display = ("policy_set_id", "name", "version", "status", "attestation_level", "publisher",
                    "effective_from", "expires_at", "created_at")
    list_filter = (id_filter("policy set", "policy_set_id"), "status", "attestation_level", "ruleset_engine",
                   "created_at")
    search_fields = ("policy_set_id", "name", "publisher", "=ruleset_hash")
    date_hierarchy = "created_at"
    ordering = ("-created_at",)
    linked_fields = ("evaluations", "shadows", "shadowing")
    exclude = ("ruleset",)
    readonly_fields = ("ruleset_source",)

    @admin.display(description="evaluations")
    def evaluations(self, obj):
        return id_link(PolicyEvaluation, "policy_set_id", obj.policy_set_id, "evaluations under this policy set")

    @admin.display(description="shadows (docs/reference/governance.md)")
    def shadows(self, obj):
        """Each shadow of this set and how often it agreed with it: one aggregate per shadow."""
        shadows = list(PolicySet.objects.filter(shadow_of_id=obj.policy_set_id).order_by("policy_set_id"))
        if not shadows:
            return "none"
        return html_table(["shadow", "status", "evaluations", "agreed", "agreement rate"], [
            [admin_link(shadow, shadow.policy_set_id), shadow.status, *shadow_agreement(primary=obj, shadow=shadow)]
            for shadow in shadows])

    @admin.display(description="shadow of")
    def shadowing(self, obj):
        """For a shadow: the set it shadows, and its agreement with it."""
        if obj.shadow_of_id is None:
            return "-"
        primary = obj.shadow_of
        total, agreed, rate = shadow_agreement(primary=primary, shadow=obj)
        return format_html("{} — {} of {} evaluations agreed ({})", admin_link(primary, primary.policy_set_id),
                           agreed, total, rate)

    @admin.display(description="ruleset")
    def ruleset_source(self, obj):
        return format_html('<pre style="margin:0;white-space:pre-wrap">{}</pre>', obj.ruleset)


def shadow_agreement(*, primary: PolicySet, shadow: PolicySet) -> tuple[int, int, str]:
    """(evaluations of ``primary`` that ``shadow`` saw, how many it agreed with, the rate as text).

    ``shadow_results`` is keyed by the shadow's id, so this is a key lookup in the
    database, on PostgreSQL and SQLite alike, over the primary's evaluations. A shadow the
    worker has not evaluated yet (``matches`` null) is not counted.
    """
    counts = (PolicyEvaluation.objects.filter(policy_set_id=primary.policy_set_id,
                                              shadow_results__has_key=shadow.policy_set_id)
              .alias(matches=KeyTransform("matches", KeyTransform(shadow.policy_set_id, "shadow_results")))
              .aggregate(total=Count("pk", filter=Q(matches=True) | Q(matches=False)),
                         agreed=Count("pk", filter=Q(matches=True))))
    total, agreed = counts["total"], counts["agreed"]
    return total, agreed, f"{100 * agreed / total:.1f} %" if total else "-"


@admin.register(Capability)
class CapabilityAdmin(ReadOnlyModelAdmin):
    tenant_field = "delegation__root_principal"
    list_display = ("capability_id", "agent_id", "delegation_link", "tool_id", "operation_list", "status",
                    "expires_at", "created_at")
    list_filter = (AGENT_FILTER, id_filter("delegation", "delegation_id"), "status", "tool_id", "created_at",
                   "expires_at")
    search_fields = ("capability_id", "agent_id", "tool_id", "=delegation__delegation_id")
    date_hierarchy = "created_at"
    ordering = ("-created_at",)
    list_select_related = ("delegation",)
    linked_fields = ("delegation_record",)

    @admin.display(description="delegation", ordering="delegation_id")
    def delegation_link(self, obj):
        return admin_link(obj.delegation, obj.delegation_id)

    @admin.display(description="operations")
    def operation_list(self, obj):
        return ", ".join(obj.operations or [])

    @admin.display(description="delegation")
    def delegation_record(self, obj):
        delegation = obj.delegation
        return format_html("{} ({} → {}, {})", admin_link(delegation, delegation.delegation_id),
                           delegation.delegator_agent, delegation.delegate_agent, delegation.status)


@admin.register(Skill)
class SkillAdmin(LedgeredModelAdmin):
    tenant_field = "root_principal"
    ledger_resource_type = "Skill"
    ledger_event_prefix = "skill"
    id_field = "skill_id"
    # Revoking goes through a Revocation (recorded, cascading), never an edit of status.
    readonly_fields = ("status",)

    list_display = ("skill_id", "name", "version", "agent_id", "tool_id", "connector", "endpoint_url", "status",
                    "created_at")
    list_filter = (AGENT_FILTER, "connector", "status", "tool_id", "created_at")
    search_fields = ("skill_id", "name", "agent_id", "tool_id")
    date_hierarchy = "created_at"
    ordering = ("-created_at",)


@admin.register(LiabilityBinding)
class LiabilityBindingAdmin(LedgeredModelAdmin):
    tenant_field = "root_principal"
    ledger_resource_type = "LiabilityBinding"
    ledger_event_prefix = "liability_binding"
    id_field = "binding_id"
    readonly_fields = ("status",)

    list_display = ("binding_id", "root_principal", "agent_id", "liable_party", "coverage", "status", "expires_at",
                    "created_at")
    list_filter = (AGENT_FILTER, PRINCIPAL_FILTER, "status", "coverage_currency", "created_at", "expires_at")
    search_fields = ("binding_id", "agent_id", "root_principal", "liable_party")
    date_hierarchy = "created_at"
    ordering = ("-created_at",)

    @admin.display(description="coverage")
    def coverage(self, obj):
        if obj.coverage_amount is None:
            return "-"
        return f"{decimal_text(obj.coverage_amount) if obj.coverage_amount is not None else ''} {obj.coverage_currency or ''}".strip()


# Revocation targets -> (model, id field) for the link from a revocation to what it revoked.
REVOCATION_TARGETS = {
    "delegation": (Delegation, "delegation_id"),
    "capability": (Capability, "capability_id"),
    "skill": (Skill, "skill_id"),
    "liability_binding": (LiabilityBinding, "binding_id"),
    # An agent is not a record: show the delegations it received.
    "agent": (Delegation, "delegate_agent"),
}


@admin.register(Revocation)
class RevocationAdmin(ReadOnlyModelAdmin):
    tenant_field = "root_principal"
    list_display = ("revocation_id", "target_type", "target", "reason", "revoked_by", "revoked_at")
    list_filter = (id_filter("target", "target_id"), "target_type", "revoked_by", "revoked_at")
    search_fields = ("revocation_id", "target_id", "revoked_by", "reason")
    date_hierarchy = "revoked_at"
    ordering = ("-revoked_at",)

    @admin.display(description="target", ordering="target_id")
    def target(self, obj):
        model, field = REVOCATION_TARGETS.get(obj.target_type, (None, None))
        if model is None:
            return obj.target_id
        return id_link(model, field, obj.target_id)


# Cancelled operations listed on a freeze's page.
MAX_CANCELLED_SHOWN = 50


@admin.register(Freeze)
class FreezeAdmin(ReadOnlyModelAdmin):
    """Emergency stops (docs/reference/governance.md): created and lifted only through the API or manage.py freeze / unfreeze."""
    tenant_field = "root_principal"

    list_display = ("freeze_id", "target_type", "target", "status", "reason", "frozen_by", "created_at",
                    "lifted_at", "lifted_by")
    list_filter = (id_filter("target", "target_id"), "target_type", "status", "frozen_by", "created_at",
                   "lifted_at")
    search_fields = ("freeze_id", "target_id", "frozen_by", "lifted_by", "reason")
    date_hierarchy = "created_at"
    ordering = ("-created_at",)
    linked_fields = ("ledger_trail", "operations_cancelled")
    exclude = ("signature",)
    readonly_fields = ("signature_pretty",)

    @admin.display(description="target", ordering="target_id")
    def target(self, obj):
        if not obj.target_id:
            return "everything"
        if obj.target_type == "tool":
            return id_link(Skill, "tool_id", obj.target_id)
        return id_link(Task, obj.target_type if obj.target_type == "root_principal" else "agent_id", obj.target_id)

    @admin.display(description="ledger")
    def ledger_trail(self, obj):
        return id_link(LedgerEvent, "resource_id", obj.freeze_id, "freeze.created and freeze.lifted events")

    @admin.display(description="operations it cancelled")
    def operations_cancelled(self, obj):
        """From the ledger: each ``operation.cancelled`` event names the freezes that stopped it."""
        events = list(LedgerEvent.objects.filter(event_type="operation.cancelled")
                      .annotate(payload_text=Cast("payload", TextField()))
                      .filter(payload_text__contains=f'"{obj.freeze_id}"')
                      .order_by("sequence")[:MAX_CANCELLED_SHOWN])
        if not events:
            return "none"
        return html_table(["operation", "stage", "ledger sequence", "recorded"], [
            [id_link(Operation, "operation_id", event.resource_id), event.payload.get("stage", "-"), event.sequence,
             event.recorded_at] for event in events])

    @admin.display(description="signature")
    def signature_pretty(self, obj):
        return pretty_json(obj.signature)
