"""Client management commands: create (secret shown once), list, rotate, disable, enable, scopes."""

import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from auth_tokens.models import Client
from auth_tokens.scopes import ALL_SCOPES
from core.models import LedgerEvent

from .helpers import token_request

pytestmark = pytest.mark.django_db

COMMANDS = ["create_client", "list_clients", "rotate_client_secret", "disable_client", "enable_client",
            "set_client_scopes"]


def run(*args) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def token_for(api, client_id: str, secret: str):
    return token_request(api, {"grant_type": "client_credentials"}, basic=(client_id, secret))


def test_it_creates_a_client_and_prints_its_secret_once(api, auth_settings):
    output = run("create_client", "svc-billing", "--kind", "operator", "--scopes", "agp.registry.read,agp.decision.read",
                 "--description", "billing agent")
    secret = next(line.split(":", 1)[1].strip() for line in output.splitlines() if line.startswith("client_secret:"))
    assert len(secret) >= 40
    row = Client.objects.get(client_id="svc-billing")
    assert row.scopes == ["agp.registry.read", "agp.decision.read"]
    assert row.description == "billing agent"
    assert secret not in row.secret_hash and row.check_secret(secret)
    assert secret not in run("list_clients") and secret not in run("list_clients", "--json")
    response = token_for(api, "svc-billing", secret)
    assert response.status_code == 200
    assert response.json()["scope"] == "agp.registry.read agp.decision.read"
    event = LedgerEvent.objects.get(event_type="api_client.created")
    assert (event.resource_type, event.resource_id) == ("ApiClient", "svc-billing")
    assert event.actor.startswith("cli")
    assert secret not in json.dumps(event.payload)


def test_it_creates_a_client_with_every_scope_and_json_output(auth_settings):
    data = json.loads(run("create_client", "ops", "--kind", "operator", "--scopes", "all", "--json"))
    assert data["client_id"] == "ops"
    assert data["scopes"] == list(ALL_SCOPES)
    assert Client.objects.get(client_id="ops").check_secret(data["client_secret"])


@pytest.mark.parametrize("args,message", [
    (["create_client", "bad id", "--kind", "operator", "--scopes", "all"], "client_id"),
    (["create_client", "svc", "--kind", "operator", "--scopes", "agp.everything"], "agp.everything"),
    (["create_client", "svc", "--kind", "operator", "--scopes", "all", "agp.registry.read"], "'all'"),
    (["rotate_client_secret", "nobody"], "nobody"),
    (["disable_client", "nobody"], "nobody"),
])
def test_it_refuses_bad_arguments_without_writing(args, message):
    with pytest.raises(CommandError, match=message):
        run(*args)
    assert not Client.objects.exists()
    assert not LedgerEvent.objects.exists()


def test_it_refuses_a_duplicate_client_id():
    run("create_client", "svc", "--kind", "operator", "--scopes", "all")
    with pytest.raises(CommandError, match="exists"):
        run("create_client", "svc", "--kind", "operator", "--scopes", "agp.registry.read")
    assert Client.objects.get(client_id="svc").scopes == list(ALL_SCOPES)


def test_it_lists_clients_with_their_state_and_scopes():
    run("create_client", "a-client", "--kind", "operator", "--scopes", "agp.registry.read")
    run("create_client", "b-client", "--kind", "operator", "--scopes", "agp.execution.read", "agp.execution.write")
    run("disable_client", "b-client")
    rows = json.loads(run("list_clients", "--json"))
    assert [(r["client_id"], r["active"], r["scopes"]) for r in rows] == [
        ("a-client", True, ["agp.registry.read"]),
        ("b-client", False, ["agp.execution.read", "agp.execution.write"])]
    table = run("list_clients").splitlines()
    assert table[0].split() == ["CLIENT_ID", "KIND", "ACTIVE", "CREATED_AT", "SCOPES"]
    assert table[2].split()[:3] == ["b-client", "operator", "no"]


def test_it_rotates_a_secret_so_only_the_new_one_works(api, auth_settings):
    old = json.loads(run("create_client", "svc", "--kind", "operator", "--scopes", "all", "--json"))["client_secret"]
    new = json.loads(run("rotate_client_secret", "svc", "--json"))["client_secret"]
    assert new != old
    assert token_for(api, "svc", old).status_code == 401
    assert token_for(api, "svc", new).status_code == 200
    assert list(LedgerEvent.objects.order_by("sequence").values_list("event_type", flat=True)) == [
        "api_client.created", "api_client.secret_rotated"]


def test_it_disables_and_enables_a_client(api, auth_settings):
    secret = json.loads(run("create_client", "svc", "--kind", "operator", "--scopes", "all", "--json"))["client_secret"]
    token = token_for(api, "svc", secret).json()["access_token"]
    assert "Disabled" in run("disable_client", "svc")
    assert token_for(api, "svc", secret).status_code == 401
    assert api.get("/agp/ledger-events", HTTP_AUTHORIZATION=f"Bearer {token}").status_code == 401
    assert "Enabled" in run("enable_client", "svc")
    assert Client.objects.get(client_id="svc").is_active
    fresh = token_for(api, "svc", secret).json()["access_token"]
    assert api.get("/agp/ledger-events", HTTP_AUTHORIZATION=f"Bearer {fresh}").status_code == 200


def test_it_sets_a_clients_scopes():
    run("create_client", "svc", "--kind", "operator", "--scopes", "all")
    run("set_client_scopes", "svc", "--scopes", "agp.execution.read")
    assert Client.objects.get(client_id="svc").scopes == ["agp.execution.read"]
    assert LedgerEvent.objects.filter(event_type="api_client.updated").get().payload == {
        "scopes": ["agp.execution.read"]}


def test_it_refuses_to_rotate_the_bootstrap_client(settings, api, auth_settings):
    settings.AGP_CLIENT_ID, settings.AGP_CLIENT_SECRET = "boot", "boot-secret-0123456789abcdef0123456789"
    assert token_for(api, "boot", "boot-secret-0123456789abcdef0123456789").status_code == 200
    with pytest.raises(CommandError, match="bootstrap"):
        run("rotate_client_secret", "boot")
    assert Client.objects.get(client_id="boot").check_secret("boot-secret-0123456789abcdef0123456789")


@pytest.mark.parametrize("command", COMMANDS)
def test_it_documents_every_command_in_its_help(command):
    from django.core.management import load_command_class

    parser = load_command_class("auth_tokens", command).create_parser("manage.py", command)
    text = parser.format_help()
    assert "usage: manage.py " + command in text
    assert len(parser.description) > 40
    assert "client" in parser.description.lower()


def test_create_client_registers_keys_and_requires_dpop(tmp_path):
    from agp_client.keys import ClientKey

    key = ClientKey.generate()
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(key.public_jwks()))
    run("create_client", "svc-keyed", "--kind", "operator", "--jwks", str(path), "--require-dpop")
    client = Client.objects.get(client_id="svc-keyed")
    assert (client.jwks, client.require_dpop) == (key.public_jwks(), True)


def test_create_client_refuses_a_jwks_file_it_cannot_use(tmp_path):
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [{"kty": "oct", "k": "c2VjcmV0", "kid": "h"}]}))
    with pytest.raises(CommandError, match="jwks"):
        run("create_client", "svc-keyed", "--kind", "operator", "--jwks", str(path))
    with pytest.raises(CommandError, match="--jwks"):
        run("create_client", "svc-keyed", "--kind", "operator", "--jwks", str(tmp_path / "missing.json"))
