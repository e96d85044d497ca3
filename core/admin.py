"""Admin for the ledger (with its verification and its newest checkpoint), the ledger head, the
transparency log's checkpoints and tiles, idempotency records, users and groups."""

from django.apps import apps
from django.contrib import admin, messages
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group, User
from django.core.exceptions import PermissionDenied
from django.db import models
from django.db.models.functions import Cast
from django.http import HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import path
from django.utils.html import format_html

from agp_project.tenancy import NO_TENANT
from agp_project.timeutil import iso

from .admin_base import (
    AGPModelAdmin,
    AuditorReadOnlyMixin,
    ReadOnlyModelAdmin,
    admin_link,
    changelist_url,
    id_filter,
    id_link,
    pretty_json,
    short_hash,
)
from .ledger import GENESIS_HASH, canonical_event, chain_hash, payload_text_hash
from .ledger_verification import ledger_verify
from .models import (
    Checkpoint,
    IdempotencyRecord,
    LedgerEvent,
    LedgerHead,
    LedgerPendingEvent,
    MerkleTile,
    MerkleTreeLock,
    StaffTenancy,
)
from .selectors import checkpoint_newest, tree_verify

# Ledger ``resource_type`` -> (model, its public id field): where an event's resource lives.
RESOURCE_MODELS = {
    "Task": ("registry.Task", "task_id"),
    "DelegationChain": ("registry.Delegation", "delegation_id"),
    "PolicySet": ("registry.PolicySet", "policy_set_id"),
    "Capability": ("registry.Capability", "capability_id"),
    "Skill": ("registry.Skill", "skill_id"),
    "LiabilityBinding": ("registry.LiabilityBinding", "binding_id"),
    "Revocation": ("registry.Revocation", "revocation_id"),
    "Context": ("decision.Context", "context_id"),
    "EvidenceBundle": ("decision.EvidenceBundle", "bundle_id"),
    "PolicyEvaluation": ("decision.PolicyEvaluation", "evaluation_id"),
    "Decision": ("decision.Decision", "decision_id"),
    "ImpactAssessment": ("decision.ImpactAssessment", "assessment_id"),
    "Approval": ("decision.Approval", "approval_id"),
    "Escalation": ("decision.Escalation", "escalation_id"),
    "CommerceSession": ("decision.CommerceSession", "session_id"),
    "ActionEnvelope": ("execution.ActionEnvelope", "action_id"),
    "Operation": ("execution.Operation", "operation_id"),
    "Receipt": ("execution.Receipt", "receipt_id"),
    "Payment": ("execution.Payment", "payment_id"),
    "ApiClient": ("auth_tokens.Client", "client_id"),
    "AdminUser": ("auth.User", "username"),
}


def _resource_model(resource_type: str):
    entry = RESOURCE_MODELS.get(resource_type)
    if entry is None:
        return None, None
    try:
        return apps.get_model(entry[0]), entry[1]
    except LookupError:
        return None, None


def _trail_link(name: str, value: str | None) -> str:
    if not value:
        return "-"
    return format_html('{} &nbsp; <a href="{}">its whole trail</a>', value,
                       changelist_url(LedgerEvent, **{name: value}))


@admin.register(LedgerEvent)
class LedgerEventAdmin(ReadOnlyModelAdmin):
    """The hash chain, newest first; immutable for everyone. "Verify ledger" walks the whole chain."""
    tenant_field = "root_principal"

    list_display = ("sequence", "event_type", "resource_type", "resource", "actor", "recorded_at",
                    "prev_hash_short", "hash_short")
    list_display_links = ("sequence", "event_type")
    # The ledger is the largest table: no date hierarchy and no value list over an unindexed
    # column (each is a DISTINCT over every event); event_type is indexed.
    # task and action: the trail of a task or of an action (docs/reference/governance.md), on indexed columns.
    list_filter = (id_filter("task", "task_id"), id_filter("action", "action_id"), id_filter("resource", "resource_id"),
                   id_filter("resource type", "resource_type"), id_filter("actor", "actor"), "event_type",
                   "recorded_at")
    search_fields = ("=event_id", "resource_id", "=task_id", "=action_id", "actor", "event_type", "=hash",
                     "=prev_hash")
    ordering = ("-sequence",)
    fieldsets = (
        ("Chain position", {"fields": ("sequence", "chain_position", "prev_hash", "hash", "link_check")}),
        ("Event", {"fields": ("event_id", "event_type", "resource_type", "resource_id", "resource_record",
                              "actor", "recorded_at")}),
        ("Trail", {"fields": ("task_trail", "action_trail")}),
        ("Payload", {"fields": ("payload_hash", "payload_pretty")}),
    )
    readonly_fields = ("chain_position", "link_check", "resource_record", "payload_pretty", "task_trail",
                       "action_trail")

    def get_queryset(self, request):
        # The payload as stored (its canonical text), for link_check: the text is what was hashed.
        return super().get_queryset(request).annotate(payload_text=Cast("payload", models.TextField()))

    def get_urls(self):
        verify = path("verify/", self.admin_site.admin_view(self.verify_view), name="core_ledgerevent_verify")
        return [verify, *super().get_urls()]

    def changelist_view(self, request, extra_context=None):
        return super().changelist_view(request, {**(extra_context or {}), "checkpoint": checkpoint_newest()})

    def verify_view(self, request):
        """POST only: verification reads the whole chain, not something a prefetch should start."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_view_permission(request):
            raise PermissionDenied
        result = ledger_verify()
        if result.verified:
            messages.success(request, f"Ledger verified: all {result.events} events chain correctly "
                                      f"(head hash {result.head_hash}).")
        else:
            broken = LedgerEvent.objects.filter(sequence=result.first_broken_sequence).first()
            if broken is not None:
                messages.error(request, format_html(
                    "Ledger verification FAILED: the first broken link is event {} "
                    "({} events before it verified).",
                    admin_link(broken, f"#{broken.sequence}"), result.events))
            else:
                messages.error(request, format_html(
                    "Ledger verification FAILED at sequence {}: the ledger head records events that are "
                    "no longer in the table ({} events verified).", result.first_broken_sequence, result.events))
        self._report_tree(request, tree_verify())
        return HttpResponseRedirect(changelist_url(LedgerEvent))

    def _report_tree(self, request, tree) -> None:
        if not tree.tree_size:
            messages.info(request, "No checkpoint yet: the worker signs one when the ledger grows.")
        elif tree.verified:
            messages.success(request, f"Merkle tree verified: the first {tree.tree_size} events make the tree "
                                      f"whose root checkpoint {tree.tree_size} signed ({tree.root_hash}).")
        else:
            messages.error(request, f"Merkle tree verification FAILED against checkpoint {tree.tree_size}: "
                                    f"{tree.problem}.")

    @admin.display(description="resource")
    def resource(self, obj):
        model, field = _resource_model(obj.resource_type)
        if model is None:
            return obj.resource_id
        return id_link(model, field, obj.resource_id)

    @admin.display(description="task")
    def task_trail(self, obj):
        """The task this event is about, with every event of its trail."""
        return _trail_link("task_id", obj.task_id)

    @admin.display(description="action")
    def action_trail(self, obj):
        """The action this event is about, with every event of its trail."""
        return _trail_link("action_id", obj.action_id)

    @admin.display(description="prev hash", ordering="prev_hash")
    def prev_hash_short(self, obj):
        return short_hash(obj.prev_hash)

    @admin.display(description="hash", ordering="hash")
    def hash_short(self, obj):
        return short_hash(obj.hash)

    @admin.display(description="resource record")
    def resource_record(self, obj):
        model, field = _resource_model(obj.resource_type)
        if model is None:
            return "-"
        record = model._default_manager.filter(**{field: obj.resource_id}).first()
        if record is None:
            return id_link(model, field, obj.resource_id)
        return admin_link(record, f"{model._meta.verbose_name} {obj.resource_id}")

    def _neighbours(self, obj):
        # Memoised: chain_position and link_check both need them (two queries per page, not four).
        cached = getattr(obj, "_agp_neighbours", None)
        if cached is None:
            previous = LedgerEvent.objects.filter(sequence=obj.sequence - 1).first()
            following = LedgerEvent.objects.filter(sequence=obj.sequence + 1).first()
            cached = obj._agp_neighbours = (previous, following)
        return cached

    @admin.display(description="position")
    def chain_position(self, obj):
        previous, following = self._neighbours(obj)
        head = LedgerHead.objects.filter(pk=1).values_list("sequence", flat=True).first()
        prev_html = admin_link(previous, f"← #{previous.sequence}") if previous else (
            "genesis" if obj.sequence == 1 else format_html("<strong>#{} missing</strong>", obj.sequence - 1))
        next_html = admin_link(following, f"#{following.sequence} →") if following else "(head)"
        return format_html("event #{} of {} &nbsp; {} &nbsp; {}", obj.sequence, head if head is not None else "?",
                           prev_html, next_html)

    @admin.display(description="link check")
    def link_check(self, obj):
        """This one link: does it extend its predecessor, and do its own hashes recompute?"""
        previous, _ = self._neighbours(obj)
        problems = []
        expected_prev = previous.hash if previous else (GENESIS_HASH if obj.sequence == 1 else None)
        if expected_prev is None:
            problems.append(f"the previous event #{obj.sequence - 1} is missing")
        elif obj.prev_hash != expected_prev:
            problems.append("prev_hash is not the previous event's hash")
        recomputed = chain_hash(obj.prev_hash, canonical_event(
            sequence=obj.sequence, event_id=obj.event_id, event_type=obj.event_type,
            resource_type=obj.resource_type, resource_id=obj.resource_id, actor=obj.actor,
            payload_hash=obj.payload_hash, recorded_at=iso(obj.recorded_at)))
        if recomputed != obj.hash:
            problems.append("hash does not recompute from the event")
        if payload_text_hash(obj.payload_text) != obj.payload_hash:
            problems.append("payload does not hash to payload_hash")
        if problems:
            return format_html('<strong style="color:var(--error-fg)">broken: {}</strong>', "; ".join(problems))
        return format_html('<strong style="color:#1e7b34">{}</strong>',
                           "✓ intact: extends its predecessor, and its hashes recompute")

    @admin.display(description="payload")
    def payload_pretty(self, obj):
        return pretty_json(obj.payload)


@admin.register(LedgerPendingEvent)
class LedgerPendingEventAdmin(ReadOnlyModelAdmin):
    """Events committed with their change and waiting for the sequencer to give them their place
    in the chain (docs/reference/ledger.md); a long list here means the sequencer is behind."""
    tenant_field = "root_principal"

    list_display = ("event_type", "resource_type", "resource_id", "actor", "recorded_at")
    list_filter = ("event_type",)
    search_fields = ("=event_id", "resource_id", "=task_id", "=action_id")
    ordering = ("id",)
    fields = ("event_id", "event_type", "resource_type", "resource_id", "actor", "recorded_at", "task_id",
              "action_id", "root_principal", "payload_hash", "payload")


@admin.register(LedgerHead)
class LedgerHeadAdmin(ReadOnlyModelAdmin):
    """The row every append locks: the chain's last sequence and hash."""
    tenant_field = NO_TENANT  # hashes, not records

    list_display = ("id", "sequence", "hash")


@admin.register(Checkpoint)
class CheckpointAdmin(ReadOnlyModelAdmin):
    """Signed checkpoints of the ledger's Merkle tree, newest first (docs/decisions/ledger.md)."""
    tenant_field = NO_TENANT  # hashes, not records

    list_display = ("tree_size", "root_hash", "issued_at", "key")
    date_hierarchy = "issued_at"
    ordering = ("-tree_size",)
    fields = ("tree_size", "root_hash", "issued_at", "signature_pretty")
    readonly_fields = ("signature_pretty",)

    @admin.display(description="key")
    def key(self, obj):
        return (obj.signature or {}).get("kid", "-")

    @admin.display(description="signature")
    def signature_pretty(self, obj):
        return pretty_json(obj.signature)


@admin.register(MerkleTile)
class MerkleTileAdmin(ReadOnlyModelAdmin):
    """The stored Merkle tree: 16 node hashes a tile, level 0 the leaves (core/tree.py)."""
    tenant_field = NO_TENANT  # hashes, not records

    list_display = ("level", "index", "width")
    list_filter = ("level",)
    ordering = ("level", "index")
    fields = ("level", "index", "width", "hashes_hex")
    readonly_fields = ("width", "hashes_hex")

    @admin.display(description="hashes")
    def width(self, obj):
        return len(obj.hashes) // 32

    @admin.display(description="node hashes")
    def hashes_hex(self, obj):
        data = bytes(obj.hashes)
        return format_html("<pre>{}</pre>", "\n".join(data[i:i + 32].hex() for i in range(0, len(data), 32)))


@admin.register(MerkleTreeLock)
class MerkleTreeLockAdmin(ReadOnlyModelAdmin):
    """The row checkpoint runs lock, one run at a time."""
    tenant_field = NO_TENANT  # hashes, not records

    list_display = ("id", "locked_at")


@admin.register(IdempotencyRecord)
class IdempotencyRecordAdmin(ReadOnlyModelAdmin):
    """Stored answers to requests sent with an Idempotency-Key; the body is shown by size only."""

    list_display = ("key", "client_id", "method", "path", "response_status", "created_at", "expires_at")
    list_filter = (id_filter("client", "client_id"), "method", "response_status", "expires_at")
    search_fields = ("=key", "client_id", "path")
    date_hierarchy = "expires_at"
    ordering = ("-created_at",)
    fields = ("client_id", "method", "path", "key", "fingerprint", "response_status", "response_size",
              "response_headers", "created_at", "expires_at")
    readonly_fields = ("response_size",)

    @admin.display(description="response body")
    def response_size(self, obj):
        return "-" if obj.response_body is None else f"{len(obj.response_body)} bytes"


# Users and groups: the standard admin, read-only for auditors like everything else.
# "View site" goes to the API's documentation: the service has no other site.
admin.site.site_url = "/agp/docs"

admin.site.unregister(User)
admin.site.unregister(Group)


@admin.register(StaffTenancy)
class StaffTenancyAdmin(AGPModelAdmin):
    """The tenants a staff user is bound to (no row: every tenant); like users, changed by superusers only."""

    list_display = ("user", "tenant_list")

    @admin.display(description="tenants")
    def tenant_list(self, obj):
        return " ".join(obj.tenants)


@admin.register(User)
class AuditedUserAdmin(AuditorReadOnlyMixin, UserAdmin):
    """Django's user admin, view-only for auditors."""


@admin.register(Group)
class AuditedGroupAdmin(AuditorReadOnlyMixin, GroupAdmin):
    """Django's group admin, view-only for auditors."""

