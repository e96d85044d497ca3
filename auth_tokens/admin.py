"""Admin for API clients: scopes and description are editable, secrets never are.

A new or rotated secret is shown once on the page that answers the request (never put in
a message, which would travel in a cookie); only its hash is stored. Clients are disabled,
not deleted, so the ledger's actors stay resolvable.
"""

from django import forms
from django.contrib import admin, messages
from django.template.response import TemplateResponse

from agp_project import errors
from agp_project.ids import is_valid_id
from agp_project.tenancy import NO_TENANT
from core.admin_base import AuditorReadOnlyMixin, ReadOnlyModelAdmin

from .approvers import client_person_link
from .kinds import ClientKind
from .models import Client, UsedJti
from .scopes import ALL_SCOPES
from .services import (
    client_bindings_problems,
    client_create,
    client_rotate_secret,
    client_scopes_for,
    client_set_active,
    client_update,
)

SECRET_TEMPLATE = "admin/auth_tokens/client/secret_shown.html"


def _admin_actor(request) -> str:
    return f"admin:{request.user.get_username()}"[:128]  # the ledger's actor column holds 128


class ClientForm(forms.ModelForm):
    scopes = forms.MultipleChoiceField(choices=[(s, s) for s in ALL_SCOPES], required=False,
                                       widget=forms.CheckboxSelectMultiple,
                                       help_text="None ticked on a new client: the kind's default scopes.")
    tenants = forms.CharField(required=False, help_text="Root principals, separated by spaces (not for operators; "
                                                        "'*' for an auditor of every tenant).")

    class Meta:
        model = Client
        fields = ["client_id", "kind", "agent_id", "subject", "tenants", "description", "scopes", "user"]
        labels = {"user": "approves in the inbox as"}
        help_texts = {"user": "A human client only: the admin user who approves as this person in the approvals "
                              "inbox (/admin/approvals/), bound to its tenants."}

    def clean_tenants(self):
        value = self.cleaned_data["tenants"]
        return value.split() if isinstance(value, str) else list(value or [])

    def clean(self):
        data = super().clean()
        if self.instance.pk is None and "kind" in data:
            # Which bindings a kind needs, and which scopes it may hold, is the service's rule.
            problems = client_bindings_problems(kind=data["kind"], agent_id=data.get("agent_id", ""),
                                                subject=data.get("subject", ""), tenants=data.get("tenants", []))
            try:
                client_scopes_for(data["kind"], data.get("scopes") or None)
            except errors.AGPError as exc:
                problems |= exc.details.get("fields", {})
            for field, messages_ in problems.items():
                self.add_error(field if field in self.fields else None, messages_)
        return data

    def clean_client_id(self):
        client_id = self.cleaned_data["client_id"]
        if not is_valid_id(client_id):
            raise forms.ValidationError("Must be 1-128 characters of [A-Za-z0-9._:-].")
        return client_id


def _secret_page(request, admin_site, *, client_id: str, secret: str, title: str):
    context = {**admin_site.each_context(request), "title": title, "client_id": client_id, "secret": secret,
               "opts": Client._meta}
    response = TemplateResponse(request, SECRET_TEMPLATE, context)
    response["Cache-Control"] = "no-store"
    return response


@admin.register(Client)
class ClientAdmin(AuditorReadOnlyMixin, admin.ModelAdmin):
    form = ClientForm
    list_display = ["client_id", "kind", "bound_to", "is_active", "scope_list", "description", "created_at"]
    list_filter = ["kind", "is_active"]
    search_fields = ["client_id", "agent_id", "subject", "description"]
    actions = ["disable_clients", "enable_clients", "rotate_secret"]

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return []
        # Who a client is never changes: a token's kind and bindings must stay its client's.
        return ["client_id", "kind", "agent_id", "subject", "tenant_list", "is_active", "tokens_not_before",
                "created_at", "updated_at"]

    def get_fields(self, request, obj=None):
        if obj is None:
            return ["client_id", "kind", "agent_id", "subject", "tenants", "description", "scopes"]
        person = ["user"] if obj.kind == ClientKind.HUMAN else []
        return ["client_id", "kind", "agent_id", "subject", "tenant_list", "is_active", "description", "scopes",
                *person, "tokens_not_before", "created_at", "updated_at"]

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.display(description="scopes")
    def scope_list(self, obj):
        return " ".join(obj.scopes) or "(none)"

    @admin.display(description="tenants")
    def tenant_list(self, obj):
        return " ".join(obj.tenants) or "(every tenant)"

    @admin.display(description="bound to")
    def bound_to(self, obj):
        return " ".join(filter(None, [obj.agent_id or obj.subject, *obj.tenants])) or "-"

    def save_model(self, request, obj, form, change):
        data = form.cleaned_data
        if change:
            client_update(client_id=obj.client_id, scopes=data["scopes"], description=data["description"],
                          actor=_admin_actor(request))
            if "user" in form.changed_data:
                client_person_link(client_id=obj.client_id, actor=_admin_actor(request),
                                   username=data["user"].get_username() if data.get("user") else None)
            return
        client, secret = client_create(client_id=data["client_id"], kind=data["kind"], scopes=data["scopes"] or None,
                                       agent_id=data["agent_id"], subject=data["subject"], tenants=data["tenants"],
                                       description=data["description"], actor=_admin_actor(request))
        obj.pk = client.pk
        request._agp_new_secret = secret

    def response_add(self, request, obj, post_url_continue=None):
        secret = getattr(request, "_agp_new_secret", None)
        if secret is None:
            return super().response_add(request, obj, post_url_continue)
        return _secret_page(request, self.admin_site, client_id=obj.client_id, secret=secret,
                            title=f"API client {obj.client_id} created")

    @admin.action(description="Disable the selected clients (their live tokens stop working)", permissions=["change"])
    def disable_clients(self, request, queryset):
        for client in queryset:
            client_set_active(client_id=client.client_id, active=False, actor=_admin_actor(request))
        self.message_user(request, f"Disabled {queryset.count()} client(s).")

    @admin.action(description="Enable the selected clients", permissions=["change"])
    def enable_clients(self, request, queryset):
        for client in queryset:
            client_set_active(client_id=client.client_id, active=True, actor=_admin_actor(request))
        self.message_user(request, f"Enabled {queryset.count()} client(s).")

    @admin.action(description="Rotate the secret of the selected client (exactly one)", permissions=["change"])
    def rotate_secret(self, request, queryset):
        if queryset.count() != 1:
            self.message_user(request, "Select exactly one client to rotate its secret.", messages.ERROR)
            return None
        client = queryset.get()
        try:
            secret = client_rotate_secret(client_id=client.client_id, actor=_admin_actor(request))
        except errors.AGPError as exc:
            self.message_user(request, exc.message, messages.ERROR)
            return None
        return _secret_page(request, self.admin_site, client_id=client.client_id, secret=secret,
                            title=f"Secret of API client {client.client_id} rotated")


@admin.register(UsedJti)
class UsedJtiAdmin(ReadOnlyModelAdmin):
    """Spent jtis of client assertions and DPoP proofs, kept until what carried them expires."""

    tenant_field = NO_TENANT  # hashes, not records
    list_display = ("key", "expires_at")
    date_hierarchy = "expires_at"
    ordering = ("-expires_at",)
