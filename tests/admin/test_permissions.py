"""Auditors see everything and change nothing; superusers still edit the ordinary records, and nobody edits evidence."""

import pytest
from django.apps import apps
from django.contrib import admin
from django.contrib.auth.models import Group
from django.test import RequestFactory

from auth_tokens.models import Client as ClientModel
from core.admin_base import ImmutableMixin, LedgeredModelAdmin
from core.auditors import AUDITED_APPS, AUDITORS_GROUP
from core.ledger_verification import ledger_verify
from core.models import LedgerEvent
from decision.models import ApprovalWebhook
from registry.models import LiabilityBinding, Skill, Task

REGISTERED = [(model, admin.site.get_model_admin(model))
              for model in sorted(apps.get_models(), key=lambda m: m._meta.label) if admin.site.is_registered(model)]
MODELS = [model for model, _ in REGISTERED]
IMMUTABLE = [model for model, model_admin in REGISTERED if isinstance(model_admin, ImmutableMixin)]
LEDGERED = [model for model, model_admin in REGISTERED if isinstance(model_admin, LedgeredModelAdmin)]


def label(model) -> str:
    return model._meta.label


def url(model, view: str, pk=None) -> str:
    opts = model._meta
    base = f"/admin/{opts.app_label}/{opts.model_name}/"
    return {"changelist": base, "add": f"{base}add/", "change": f"{base}{pk}/change/",
            "delete": f"{base}{pk}/delete/"}[view]


def test_it_registers_every_model_of_the_service():
    for app_label in ("core", "auth_tokens", "registry", "decision", "execution"):
        for model in apps.get_app_config(app_label).get_models():
            assert admin.site.is_registered(model), f"{label(model)} has no admin"


def test_it_classifies_the_records_as_documented():
    assert set(LEDGERED) == {Task, Skill, LiabilityBinding, ApprovalWebhook}
    assert LedgerEvent in IMMUTABLE
    assert {label(m) for m in IMMUTABLE} >= {"core.LedgerEvent", "core.LedgerHead", "execution.Receipt",
                                             "execution.ActionEnvelope", "decision.Approval", "decision.Decision",
                                             "registry.Delegation", "registry.PolicySet"}


def test_it_gives_the_auditors_group_view_permissions_only(auditor):
    group = Group.objects.get(name=AUDITORS_GROUP)
    codenames = set(group.permissions.values_list("content_type__app_label", "codename"))
    expected = {(model._meta.app_label, f"view_{model._meta.model_name}")
                for app_label in AUDITED_APPS for model in apps.get_app_config(app_label).get_models()}
    assert codenames == expected
    assert auditor.is_staff and not auditor.is_superuser
    assert list(auditor.groups.values_list("name", flat=True)) == [AUDITORS_GROUP]


@pytest.mark.parametrize("model", MODELS, ids=label)
def test_it_lets_an_auditor_open_every_changelist_and_change_view_with_no_write_control(model, auditor,
                                                                                        auditor_client, admin_world):
    row = admin_world.rows[model]
    request = RequestFactory().get(url(model, "changelist"))
    request.user = auditor

    listing = auditor_client.get(url(model, "changelist"))
    page = auditor_client.get(url(model, "change", row.pk))
    actions = admin.site.get_model_admin(model).get_actions(request)

    assert listing.status_code == 200
    assert listing.context["cl"].result_count >= 1
    assert b'class="addlink"' not in listing.content
    assert page.status_code == 200
    assert page.context["original"].pk == row.pk
    assert b'name="_save"' not in page.content
    assert b'name="_continue"' not in page.content
    assert b'class="deletelink"' not in page.content
    assert actions == {}  # not even the ones without allowed_permissions, which Django offers to viewers


@pytest.mark.parametrize("model", MODELS, ids=label)
def test_it_refuses_an_auditor_every_add_change_and_delete_url(model, auditor_client, admin_world):
    row = admin_world.rows[model]
    count, events = model._default_manager.count(), LedgerEvent.objects.count()
    before = model._default_manager.filter(pk=row.pk).values().get()

    responses = {
        "GET add": auditor_client.get(url(model, "add")),
        "POST add": auditor_client.post(url(model, "add"), {}),
        "POST change": auditor_client.post(url(model, "change", row.pk), {}),
        "GET delete": auditor_client.get(url(model, "delete", row.pk)),
        "POST delete": auditor_client.post(url(model, "delete", row.pk), {"post": "yes"}),
    }

    assert {name: r.status_code for name, r in responses.items()} == dict.fromkeys(responses, 403)
    assert model._default_manager.count() == count
    assert model._default_manager.filter(pk=row.pk).values().get() == before
    assert LedgerEvent.objects.count() == events


@pytest.mark.parametrize("model", IMMUTABLE, ids=label)
def test_it_refuses_even_a_superuser_to_edit_evidence(model, superuser_client, admin_world):
    row = admin_world.rows[model]
    count = model._default_manager.count()

    codes = [superuser_client.get(url(model, "add")).status_code,
             superuser_client.post(url(model, "change", row.pk), {}).status_code,
             superuser_client.post(url(model, "delete", row.pk), {"post": "yes"}).status_code]
    page = superuser_client.get(url(model, "change", row.pk))

    assert codes == [403, 403, 403]
    assert model._default_manager.count() == count
    assert page.status_code == 200
    assert b'name="_save"' not in page.content


FORMS = {
    Task: ({"task_id": "task_by_admin", "title": "fix typo", "root_principal": "acme", "agent_id": "agent-7",
            "risk_level": "low", "action_class": "read", "status": "open"}, "title", "corrected title"),
    Skill: ({"skill_id": "skl_by_admin", "agent_id": "agent-7", "name": "crm", "version": "1", "tool_id": "crm",
             "connector": "noop", "endpoint_url": ""}, "name", "crm v2"),
    LiabilityBinding: ({"binding_id": "lb_by_admin", "root_principal": "acme", "agent_id": "agent-7",
                        "liable_party": "acme", "coverage_currency": "USD", "coverage_amount": "1000",
                        "expires_at_0": "", "expires_at_1": ""}, "liable_party", "acme insurance"),
    ApprovalWebhook: ({"root_principal": "acme", "url": "https://hooks.acme.example/approvals", "is_active": "on"},
                      "url", "https://hooks.acme.example/approvals-v2"),
}


@pytest.mark.parametrize("model", LEDGERED, ids=label)
def test_it_lets_a_superuser_add_change_and_delete_an_ordinary_record_and_ledgers_each(model, superuser_client):
    data, field, new_value = FORMS[model]
    id_field = admin.site.get_model_admin(model).id_field
    prefix = admin.site.get_model_admin(model).ledger_event_prefix

    added = superuser_client.post(url(model, "add"), data)
    row = model._default_manager.get(**{id_field: data[id_field]})
    changed = superuser_client.post(url(model, "change", row.pk), {**data, field: new_value})
    row.refresh_from_db()
    changed_value = getattr(row, field)
    deleted = superuser_client.post(url(model, "delete", row.pk), {"post": "yes"})

    assert (added.status_code, changed.status_code, deleted.status_code) == (302, 302, 302)
    assert changed_value == new_value
    assert not model._default_manager.filter(**{id_field: data[id_field]}).exists()
    events = list(LedgerEvent.objects.order_by("sequence"))
    assert [e.event_type for e in events] == [f"{prefix}.created", f"{prefix}.updated", f"{prefix}.deleted"]
    assert {e.actor for e in events} == {"admin:root"}
    assert {e.resource_id for e in events} == {data[id_field]}
    assert events[0].payload["fields"][field] == data[field]
    assert events[0].payload["fields"]["created_at"]
    assert events[1].payload == {"source": "admin", "fields": {field: new_value}}
    assert ledger_verify().verified


def test_it_keeps_the_id_of_an_existing_record_read_only_for_a_superuser(superuser_client, admin_world):
    task = admin_world.world.task
    data, _, _ = FORMS[Task]

    response = superuser_client.post(url(Task, "change", task.pk), {**data, "task_id": "renamed"})

    assert response.status_code == 302
    task.refresh_from_db()
    assert task.task_id != "renamed"
    assert task.title == data["title"]


def test_it_refuses_to_delete_a_task_that_records_depend_on(superuser_client, admin_world):
    task = admin_world.world.task

    response = superuser_client.post(url(Task, "delete", task.pk), {"post": "yes"})

    assert response.status_code == 200  # the admin's "cannot delete: protected related objects" page
    assert Task.objects.filter(pk=task.pk).exists()
    assert not LedgerEvent.objects.filter(event_type="task.deleted").exists()


@pytest.mark.parametrize("model", [m for m in MODELS if m not in IMMUTABLE], ids=label)
def test_it_lets_a_superuser_open_the_add_page_of_every_editable_model(model, superuser_client):
    assert superuser_client.get(url(model, "add")).status_code == 200


def test_it_refuses_an_auditor_the_client_actions_that_write(auditor_client, admin_world):
    client = admin_world.rows[ClientModel]
    secret_hash = client.secret_hash
    changelist = url(ClientModel, "changelist")

    rotate = auditor_client.post(changelist, {"action": "rotate_secret", "_selected_action": [client.pk]})
    disable = auditor_client.post(changelist, {"action": "disable_clients", "_selected_action": [client.pk]})

    client.refresh_from_db()
    # No action is offered, so the POST just shows the list again: no secret page, no change.
    assert (rotate.status_code, disable.status_code) == (200, 200)
    assert [t.name for t in rotate.templates][0] == "admin/change_list.html"
    assert client.secret_hash == secret_hash
    assert client.is_active
    assert not LedgerEvent.objects.filter(resource_type="ApiClient").exists()


def test_view_site_leads_to_the_api_documentation(auditor_client):
    page = auditor_client.get("/admin/")
    assert page.status_code == 200
    assert b'<a href="/agp/docs">View site</a>' in page.content
    docs = auditor_client.get("/agp/docs", HTTP_ACCEPT="text/html")
    assert docs.status_code == 200 and b"swagger-ui" in docs.content
