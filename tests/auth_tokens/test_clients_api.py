"""/agp/clients: operators create clients of a kind, bound to an agent or a person and tenants."""

import jwt
import pytest

from auth_tokens.kinds import DEFAULT_SCOPES
from auth_tokens.models import Client
from core.models import LedgerEvent
from tests.auth_tokens.helpers import token_request
from tests.conftest import AUTH_SECRET
from tests.identity import person_api

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("body", [
    {"kind": "agent", "agent_id": "billing-agent", "tenants": ["acme"]},
    {"kind": "human", "subject": "carol@acme.example", "tenants": ["acme", "acme-eu"]},
    {"kind": "auditor", "tenants": ["*"]},
    {"kind": "operator"},
], ids=lambda body: body["kind"])
def test_it_creates_a_client_of_each_kind_with_its_default_scopes_and_shows_the_secret_once(authed_api, api, body):
    response = authed_api.post("/agp/clients", {"client_id": "new-client", **body}, format="json")

    assert response.status_code == 201, response.content
    created = response.json()
    assert created["kind"] == body["kind"] and created["scopes"] == list(DEFAULT_SCOPES[body["kind"]])
    assert response["Cache-Control"] == "no-store"
    secret = created["client_secret"]
    assert "client_secret" not in authed_api.get("/agp/clients/new-client").json()
    token = token_request(api, {"grant_type": "client_credentials", "client_id": "new-client",
                                "client_secret": secret}).json()["access_token"]
    claims = jwt.decode(token, AUTH_SECRET, algorithms=["HS256"], audience="agp")
    assert {name: claims[name] for name in ("kind", "agent_id", "subject", "tenants")} == {
        "kind": body["kind"], "agent_id": body.get("agent_id", ""), "subject": body.get("subject", ""),
        "tenants": body.get("tenants", [])}
    event = LedgerEvent.objects.get(resource_id="new-client")
    assert secret not in str(event.payload) and event.root_principal is None


@pytest.mark.parametrize("body,field", [
    ({"kind": "agent", "tenants": ["acme"]}, "agent_id"),
    ({"kind": "agent", "agent_id": "a", "tenants": ["acme", "beta"]}, "tenants"),
    ({"kind": "human", "tenants": ["acme"]}, "subject"),
    ({"kind": "human", "subject": "x@y", "tenants": []}, "tenants"),
    ({"kind": "human", "subject": "x@y", "tenants": ["*"]}, "tenants"),
    ({"kind": "operator", "tenants": ["acme"]}, "tenants"),
    ({"kind": "auditor", "tenants": ["acme"], "agent_id": "a"}, "agent_id"),
    ({"kind": "agent", "agent_id": "a", "tenants": ["acme"], "scopes": ["agp.approval.write"]}, "scopes"),
    ({"kind": "human", "subject": "x@y", "tenants": ["acme"], "scopes": ["agp.admin"]}, "scopes"),
    ({"kind": "auditor", "tenants": ["acme"], "scopes": ["agp.registry.write"]}, "scopes"),
])
def test_it_refuses_bindings_the_kind_does_not_take_and_scopes_beyond_its_ceiling(authed_api, body, field):
    response = authed_api.post("/agp/clients", body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["details"]["fields"]
    assert Client.objects.count() == 1  # the test's own operator


def test_only_operators_manage_clients(auth_settings):
    person = person_api("carol@acme.example", ["acme"], scopes=["agp.registry.read", "agp.approval.write"])
    response = person.get("/agp/clients")
    assert response.status_code == 403
    assert response.json()["error"]["details"]["required_scopes"] == ["agp.admin"]


def test_disabling_a_client_kills_its_tokens_at_once_and_rotating_shows_a_new_secret(authed_api, api):
    created = authed_api.post("/agp/clients", {"client_id": "c1", "kind": "auditor", "tenants": ["acme"]},
                              format="json").json()
    token = token_request(api, {"grant_type": "client_credentials", "client_id": "c1",
                                "client_secret": created["client_secret"]}).json()["access_token"]
    reader = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    assert api.get("/agp/tasks", **reader).status_code == 200

    disabled = authed_api.patch("/agp/clients/c1", {"is_active": False}, format="json")
    rotated = authed_api.patch("/agp/clients/c1", {"rotate_secret": True}, format="json")

    assert disabled.json()["is_active"] is False
    assert api.get("/agp/tasks", **reader).status_code == 401
    assert rotated.json()["client_secret"] != created["client_secret"]
    assert authed_api.patch("/agp/clients/c1", {"kind": "operator"}, format="json").status_code == 400


def test_a_token_whose_bindings_are_no_longer_its_clients_is_refused(authed_api, api):
    created = authed_api.post("/agp/clients", {"client_id": "c2", "kind": "human", "subject": "dan@acme.example",
                                               "tenants": ["acme"]}, format="json").json()
    token = token_request(api, {"grant_type": "client_credentials", "client_id": "c2",
                                "client_secret": created["client_secret"]}).json()["access_token"]
    Client.objects.filter(client_id="c2").update(tenants=["acme", "beta"])  # not possible through the API

    response = api.get("/agp/tasks", HTTP_AUTHORIZATION=f"Bearer {token}")

    assert response.status_code == 401
    assert "bindings" in response.json()["error"]["message"]
