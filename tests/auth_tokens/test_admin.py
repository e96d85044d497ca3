"""The Django admin for API clients: scopes editable, secrets never shown or editable."""

import re

import pytest

from auth_tokens.models import Client
from auth_tokens.scopes import ALL_SCOPES
from auth_tokens.services import client_create
from core.models import LedgerEvent

pytestmark = pytest.mark.django_db

CHANGELIST = "/admin/auth_tokens/client/"


def test_it_creates_a_client_and_shows_the_secret_once(admin_client):
    response = admin_client.post(CHANGELIST + "add/", {"client_id": "svc-admin", "kind": "operator",
                                                       "description": "from the admin",
                                                       "scopes": ["agp.registry.read", "agp.registry.write"]})
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    secret = re.search(r'<code id="client-secret">([^<]+)</code>', response.content.decode()).group(1)
    row = Client.objects.get(client_id="svc-admin")
    assert row.scopes == ["agp.registry.read", "agp.registry.write"]
    assert row.check_secret(secret) and secret not in row.secret_hash
    event = LedgerEvent.objects.get(event_type="api_client.created")
    assert event.actor == "admin:admin"
    change = admin_client.get(f"{CHANGELIST}{row.pk}/change/").content.decode()
    assert secret not in change and row.secret_hash not in change and "secret_hash" not in change


def test_it_does_not_let_the_secret_hash_be_edited(admin_client):
    client, secret = client_create(client_id="svc", kind="operator", scopes=list(ALL_SCOPES), actor="test")
    response = admin_client.post(f"{CHANGELIST}{client.pk}/change/", {
        "description": "edited", "scopes": ["agp.execution.read"], "secret_hash": "md5$$forged", "is_active": "",
        "client_id": "renamed"})
    assert response.status_code == 302
    row = Client.objects.get(pk=client.pk)
    assert (row.client_id, row.description, row.scopes, row.is_active) == ("svc", "edited", ["agp.execution.read"], True)
    assert row.check_secret(secret)
    assert LedgerEvent.objects.filter(event_type="api_client.updated").get().payload == {
        "scopes": ["agp.execution.read"], "description": "edited"}


def test_it_disables_clients_with_an_action_and_offers_no_delete(admin_client):
    client, _ = client_create(client_id="svc", kind="operator", scopes=list(ALL_SCOPES), actor="test")
    response = admin_client.post(CHANGELIST, {"action": "disable_clients", "_selected_action": [client.pk]})
    assert response.status_code == 302
    assert not Client.objects.get(pk=client.pk).is_active
    assert admin_client.get(f"{CHANGELIST}{client.pk}/delete/").status_code == 403
    assert Client.objects.filter(pk=client.pk).exists()


def test_it_rotates_a_secret_from_the_admin_showing_it_once(admin_client):
    client, old = client_create(client_id="svc", kind="operator", scopes=list(ALL_SCOPES), actor="test")
    response = admin_client.post(CHANGELIST, {"action": "rotate_secret", "_selected_action": [client.pk]})
    assert response.status_code == 200
    new = re.search(r'<code id="client-secret">([^<]+)</code>', response.content.decode()).group(1)
    row = Client.objects.get(pk=client.pk)
    assert row.check_secret(new) and not row.check_secret(old)
    assert row.tokens_not_before is not None
