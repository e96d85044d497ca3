"""What every AGP model admin shares: read-only for auditors, immutability, id filters, links.

Three kinds of admin (docs/decisions/admin.md says which model is which):

- ``ReadOnlyModelAdmin``: records that are signed, hash-chained, moved only by a state
  machine, or immutable by the contract (ledger events, receipts, envelopes, approvals,
  decisions, ...). Nobody adds, changes or deletes them here, superusers included: an edit
  would make a signature or a hash lie, or skip a transition the services guard.
- ``LedgeredModelAdmin``: plain records a superuser may correct (tasks, skills, liability
  bindings). Every add, change and delete appends a ledger event in the same transaction,
  with the actor ``admin:<username>``, as the API's writes do.
- Both are ``AuditorReadOnlyMixin``: a member of the ``auditors`` group who is not a
  superuser never gets add, change or delete, and sees only actions marked read-only,
  whatever other permission someone may have granted the account.
"""

import json
from typing import Any
from urllib.parse import urlencode

from django.contrib import admin
from django.contrib.admin.utils import quote
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models, transaction
from django.db.models import Q
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from agp_project.tenancy import EVERY_TENANT, NO_TENANT, tenant_condition

from .auditors import AUDITORS_GROUP
from .ledger import ledger_append
from .models import StaffTenancy

READ_ONLY_ACTION = ("view",)


def is_auditor(request) -> bool:
    """True for an active non-superuser in the auditors group; memoised on the request.

    The admin asks for permissions many times per page; one group query per request is enough.
    """
    cached = getattr(request, "_agp_is_auditor", None)
    if cached is None:
        user = request.user
        cached = bool(user.is_authenticated and user.is_active and not user.is_superuser
                      and user.groups.filter(name=AUDITORS_GROUP).exists())
        request._agp_is_auditor = cached
    return cached


def staff_tenants(request) -> frozenset[str] | None:
    """The tenants whose records the signed-in user may see in the admin; None: every tenant.

    A user bound to tenants (``StaffTenancy``) sees theirs, as an API client bound to them
    would; a superuser, and a user bound to none, sees everything. Memoised on the request.
    """
    cached = getattr(request, "_agp_staff_tenants", False)
    if cached is False:
        user = request.user
        tenants = None
        if user.is_authenticated and not user.is_superuser:
            row = StaffTenancy.objects.filter(user=user).values_list("tenants", flat=True).first()
            if row is not None and EVERY_TENANT not in row:
                tenants = frozenset(row)
        cached = request._agp_staff_tenants = tenants
    return cached


def admin_actor(request) -> str:
    """The ledger ``actor`` of a change made through the admin."""
    return f"admin:{request.user.get_username()}"


class AuditorReadOnlyMixin:
    """Auditors may view; they never add, change or delete, and run only read-only actions.

    ``tenant_field``: the path from a record to its tenant's root principal. A user bound to
    tenants sees only their records; ``NO_TENANT`` marks records that reveal hashes, not
    records (every user sees them); a model admin that declares neither shows such a user
    nothing (fail closed).
    """

    tenant_field: str | None = None
    shared_when_no_tenant = False

    def get_queryset(self, request):
        queryset = super().get_queryset(request)
        tenants = staff_tenants(request)
        if tenants is None or self.tenant_field == NO_TENANT:
            return queryset
        if self.tenant_field is None:
            return queryset.none()
        return queryset.filter(tenant_condition(tenants, self.tenant_field,
                                                shared_when_null=self.shared_when_no_tenant))

    def has_add_permission(self, request, *args, **kwargs):
        if is_auditor(request):
            return False
        return super().has_add_permission(request, *args, **kwargs)

    def has_change_permission(self, request, obj=None):
        if is_auditor(request):
            return False
        return super().has_change_permission(request, obj)

    def has_delete_permission(self, request, obj=None):
        if is_auditor(request):
            return False
        return super().has_delete_permission(request, obj)

    def get_actions(self, request):
        actions = super().get_actions(request)
        if is_auditor(request):
            # An action without allowed_permissions is offered to anyone who can see the
            # list; for an auditor keep only the ones declared read-only.
            actions = {name: value for name, value in actions.items()
                       if tuple(getattr(value[0], "allowed_permissions", ())) == READ_ONLY_ACTION}
        return actions


class ImmutableMixin:
    """No add, change or delete for anyone: the record is evidence."""

    def has_add_permission(self, request, *args, **kwargs):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class AGPModelAdmin(AuditorReadOnlyMixin, admin.ModelAdmin):
    """``linked_fields``: read-only methods shown first, in a "Linked records" section, on existing records.

    The remaining fields are the model's own, in model order, so a field added to a model
    shows up here without touching the admin.
    """

    list_per_page = 50
    # The filtered count is enough; a second COUNT(*) over a large ledger is not worth it.
    show_full_result_count = False
    view_on_site = False
    linked_fields: tuple[str, ...] = ()
    # Django 6's default; says what a scheme-less URL typed by a superuser means.
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}

    def get_readonly_fields(self, request, obj=None):
        fields = list(super().get_readonly_fields(request, obj))
        fields.extend(name for name in self.linked_fields if name not in fields)
        return fields

    def get_fieldsets(self, request, obj=None):
        if self.fieldsets:
            return self.fieldsets
        own = [name for name in self.get_fields(request, obj) if name not in self.linked_fields]
        fieldsets = [(None, {"fields": own})]
        if obj is not None and self.linked_fields:
            fieldsets.insert(0, ("Linked records", {"fields": list(self.linked_fields)}))
        return fieldsets


class ReadOnlyModelAdmin(ImmutableMixin, AGPModelAdmin):
    """For signed, chained or state-machine records (see the module docstring)."""


class LedgeredModelAdmin(AGPModelAdmin):
    """A superuser may add, change and delete; each write appends a ledger event.

    Subclasses set ``ledger_resource_type`` (the resource's ``type``: ``"Task"``),
    ``ledger_event_prefix`` (``"task"``) and ``id_field`` (``"task_id"``). The id becomes
    read-only once the record exists (other records refer to it), and ``created_at`` is
    set by the server.
    """

    ledger_resource_type: str
    ledger_event_prefix: str
    id_field: str
    server_set_fields: tuple[str, ...] = ("created_at",)

    def get_readonly_fields(self, request, obj=None):
        fields = list(super().get_readonly_fields(request, obj))
        fields.extend(name for name in self.server_set_fields if name not in fields)
        if obj is not None and self.id_field not in fields:
            fields.append(self.id_field)
        return fields

    def _ledger(self, request, obj, verb: str, fields: dict[str, Any] | None = None) -> None:
        payload: dict[str, Any] = {"source": "admin"}
        if fields is not None:
            payload["fields"] = json.loads(json.dumps(fields, cls=DjangoJSONEncoder))
        ledger_append(event_type=f"{self.ledger_event_prefix}.{verb}", resource_type=self.ledger_resource_type,
                      resource_id=getattr(obj, self.id_field), actor=admin_actor(request), payload=payload)

    def save_model(self, request, obj, form, change):
        if not change:
            for name in self.server_set_fields:
                if getattr(obj, name, None) is None:
                    setattr(obj, name, timezone.now())
        concrete = {field.name: field for field in obj._meta.concrete_fields}
        names = form.changed_data if change else [name for name in form.fields if name in concrete]
        values = {name: concrete[name].value_from_object(obj) for name in names if name in concrete}
        if not change:
            values.update({name: getattr(obj, name) for name in self.server_set_fields})
        # The admin's change view runs in a transaction: the row and its ledger event
        # commit together or not at all.
        super().save_model(request, obj, form, change)
        self._ledger(request, obj, "updated" if change else "created", values)

    def delete_model(self, request, obj):
        self._ledger(request, obj, "deleted")
        super().delete_model(request, obj)

    def delete_queryset(self, request, queryset):
        # The bulk "delete selected" action, unlike the delete view, has no transaction of its own.
        with transaction.atomic():
            for obj in queryset:
                self._ledger(request, obj, "deleted")
            super().delete_queryset(request, queryset)


# --- Filters --------------------------------------------------------------------------


class IdInputFilter(admin.SimpleListFilter):
    """A text box filtering by an exact id over one or more field paths (OR-ed).

    Ids like task and agent ids have too many values for a list of links; auditors paste them.
    """

    template = "admin/agp/input_filter.html"
    field_paths: tuple[str, ...] = ()

    def lookups(self, request, model_admin):
        # SimpleListFilter shows nothing without a lookup; the box itself is the one choice.
        return (("", ""),)

    def get_facet_counts(self, pk_attname, filtered_qs):
        return {}

    def queryset(self, request, queryset):
        value = (self.value() or "").strip()
        if not value:
            return queryset
        condition = Q()
        for path in self.field_paths:
            condition |= Q(**{path: value})
        return queryset.filter(condition)

    def choices(self, changelist):
        yield {
            "selected": not self.value(),
            "query_string": changelist.get_query_string(remove=[self.parameter_name]),
            "display": "All",
            # Other filters, the search and the ordering survive a submit of the box.
            "hidden_params": [(key, value) for key, value in changelist.params.items()
                              if key != self.parameter_name],
            "value": self.value() or "",
        }


def id_filter(title: str, parameter_name: str, *field_paths: str) -> type[IdInputFilter]:
    """``id_filter("task", "task_id", "decision__task_id")``: a filter class for ``list_filter``."""
    return type(f"{parameter_name.title().replace('_', '')}Filter", (IdInputFilter,),
                {"title": title, "parameter_name": parameter_name, "field_paths": field_paths or (parameter_name,)})


# --- Rendering helpers -------------------------------------------------------------------


def change_url(obj: models.Model) -> str | None:
    opts = obj._meta
    try:
        return reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[quote(obj.pk)])
    except NoReverseMatch:
        return None


def changelist_url(model: type[models.Model], **params: str) -> str:
    opts = model._meta
    url = reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")
    if params:
        url = f"{url}?{urlencode(params)}"
    return url


def admin_link(obj: models.Model | None, label: Any = None) -> str:
    """A link to the record's change page (its view page for a read-only user), or a dash."""
    if obj is None:
        return "-"
    url = change_url(obj)
    text = str(obj) if label is None else label
    return format_html('<a href="{}">{}</a>', url, text) if url else format_html("{}", text)


def id_link(model: type[models.Model], field: str, value: str | None, label: Any = None) -> str:
    """A link to the list of ``model`` filtered on ``field == value``: no query needed to render it."""
    if not value:
        return "-"
    return format_html('<a href="{}">{}</a>', changelist_url(model, **{field: value}),
                       value if label is None else label)


def pretty_json(value: Any) -> str:
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, cls=DjangoJSONEncoder)
    return format_html('<pre class="agp-json" style="margin:0;white-space:pre-wrap">{}</pre>', text)


def short_hash(value: str | None, length: int = 12) -> str:
    if not value:
        return "-"
    return format_html('<code title="{}">{}…</code>', value, value[:length])


def html_table(headers: list[str], rows: list[list[Any]]) -> str:
    """A small table for read-only fields; cells are escaped unless already safe."""
    head = format_html_join("", "<th>{}</th>", ((h,) for h in headers))
    body = format_html_join("", "<tr>{}</tr>", (
        (format_html_join("", "<td>{}</td>", ((cell,) for cell in row)),) for row in rows))
    return format_html('<table class="agp-table"><thead><tr>{}</tr></thead><tbody>{}</tbody></table>', head, body)
