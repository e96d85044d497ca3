"""/healthz, /readyz (with real outages), /agp/openapi.json, and the bootstrap command."""

import json

import pytest
import requests
from django.core.management import call_command

from auth_tokens.models import Client
from auth_tokens.scopes import ALL_SCOPES
from core.models import LedgerEvent

EVENT = {"event_type": "client.note", "resource_type": "task", "resource_id": "tsk_1"}


def test_healthz_answers_without_touching_anything(api):
    response = api.get("/healthz")
    assert (response.status_code, response.json()) == (200, {"status": "ok"})


@pytest.mark.django_db
def test_readyz_is_ready_on_the_embedded_defaults(api, settings, broker_at):
    assert settings.CELERY_BROKER_URL.startswith("sqlite:")
    # The app as the settings configure it, whatever broker an earlier test in this process
    # pointed it at (tests/execution/worker.py's session broker).
    broker_at(settings.CELERY_BROKER_URL)
    response = api.get("/readyz")
    assert response.status_code == 200
    assert response.json() == {"status": "ready", "checks": {"database": True, "broker": True}}


@pytest.mark.django_db
def test_readyz_is_ready_with_a_redis_broker_that_answers(api, broker_at, redis_url):
    broker_at(redis_url)
    response = api.get("/readyz")
    assert response.status_code == 200, response.content
    assert response.json()["checks"] == {"database": True, "broker": True}


@pytest.mark.django_db
def test_readyz_is_503_when_the_broker_does_not_answer(api, broker_at):
    broker_at("redis://127.0.0.1:1/0")
    response = api.get("/readyz")
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert response.json() == {"error": {
        "code": "AGP_UNAVAILABLE", "message": "Not ready: broker unreachable.", "retryable": True,
        "details": {"checks": {"database": True, "broker": False}}}}


def test_a_server_whose_broker_is_down_is_alive_but_not_ready(run_server):
    server = run_server({"AGP_BROKER_URL": "redis://127.0.0.1:1/0"})
    assert requests.get(f"{server.url}/healthz", timeout=10).status_code == 200
    response = requests.get(f"{server.url}/readyz", timeout=10)
    assert response.status_code == 503
    assert response.json()["error"]["details"] == {"checks": {"database": True, "broker": False}}


def test_a_server_whose_database_is_down_is_not_ready_and_answers_503(run_server):
    server = run_server({"AGP_DATABASE_URL": "postgres://postgres@127.0.0.1:1/agp", "AGP_DB_CONNECT_TIMEOUT": "2"})
    assert requests.get(f"{server.url}/healthz", timeout=10).status_code == 200
    ready = requests.get(f"{server.url}/readyz", timeout=10)
    assert ready.status_code == 503
    assert ready.json()["error"]["code"] == "AGP_UNAVAILABLE"
    assert ready.json()["error"]["details"] == {"checks": {"database": False, "broker": True}}
    for headers in ({}, {"Idempotency-Key": "k-503"}):  # the view, and the idempotency middleware before it
        response = requests.post(f"{server.url}/agp/ledger-events", data=json.dumps(EVENT), timeout=10,
                                 headers={"Content-Type": "application/json", **headers})
        assert response.status_code == 503, response.text
        assert response.headers["Retry-After"] == "5"
        assert response.json()["error"] == {"code": "AGP_UNAVAILABLE", "retryable": True, "details": {},
                                            "message": "A backing service is unavailable; nothing was written."}
        assert "127.0.0.1" not in response.text and "Traceback" not in response.text


def test_the_openapi_document_is_openapi_3_1_and_lists_the_ledger(api):
    response = api.get("/agp/openapi.json")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/")
    document = json.loads(response.content)
    assert document["openapi"].startswith("3.1")
    assert {"/agp/ledger-events", "/agp/ledger-events/{sequence}", "/agp/ledger-events/verify"} <= set(
        document["paths"])
    assert {"get", "post"} <= set(document["paths"]["/agp/ledger-events"])
    assert not any(path.startswith("/agp/test/") for path in document["paths"])


@pytest.mark.django_db
def test_bootstrap_migrates_and_ensures_the_client_and_key_and_is_safe_twice(settings, tmp_path, capsys):
    settings.AGP_AUTH_SECRET = "x" * 40
    settings.AGP_CLIENT_ID = "bootstrap-admin"
    settings.AGP_CLIENT_SECRET = "s3cret-value"
    settings.AGP_SIGNING_KEY = None
    settings.AGP_SIGNING_KEY_FILE = tmp_path / "signing-key.pem"
    call_command("bootstrap")
    events = LedgerEvent.objects.count()
    call_command("bootstrap")
    client = Client.objects.get()
    assert client.client_id == "bootstrap-admin"
    assert set(client.scopes) == set(ALL_SCOPES)
    assert client.check_secret("s3cret-value")
    assert settings.AGP_SIGNING_KEY_FILE.exists()
    assert LedgerEvent.objects.count() == events  # the second run changed nothing
    out = capsys.readouterr().out
    assert out.count("bootstrap client 'bootstrap-admin' has every scope") == 2


@pytest.mark.django_db
def test_bootstrap_says_when_authentication_is_off(settings, tmp_path, capsys):
    settings.AGP_AUTH_SECRET = None
    settings.AGP_SIGNING_KEY_FILE = tmp_path / "signing-key.pem"
    call_command("bootstrap")
    assert "authentication is off" in capsys.readouterr().out


def test_healthz_names_the_instance_it_was_started_as(api, settings):
    settings.AGP_INSTANCE_ID = "f00d"
    response = api.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "instance": "f00d"}


def test_the_openapi_document_is_generated_without_a_warning(tmp_path):
    # A warning would be printed on the first /agp/openapi.json of every server process.
    call_command("spectacular", "--fail-on-warn", "--file", str(tmp_path / "openapi.yaml"))
    assert "/agp/action-envelopes" in (tmp_path / "openapi.yaml").read_text()


# --- /agp/: the index of the API, and its documentation ---------------------------------------------------
@pytest.mark.django_db
def test_the_api_index_links_every_group_the_openapi_document_and_the_docs(api, auth_settings):
    # Open with authentication on, as the OpenAPI document is; the links are absolute.
    response = api.get("/agp/")
    assert response.status_code == 200, response.content
    index = response.json()
    assert (index["openapi"], index["docs"]) == ("http://testserver/agp/openapi.json", "http://testserver/agp/docs")
    groups = {group["name"]: group for group in index["groups"]}
    assert list(groups) == ["registry", "decision", "execution", "admin"]
    assert groups["registry"]["collections"]["delegations"] == "http://testserver/agp/delegations"
    assert "http://testserver/agp/operations/{operation_id}" in groups["execution"]["paths"]
    collections = {name for group in groups.values() for name in group["collections"]}
    assert {"policy-sets", "tasks", "decisions", "commerce-sessions", "action-envelopes", "ledger-events"} <= collections

    # Every collection it names is one: each lists (authentication off again).
    auth_settings.AGP_AUTH_SECRET = None
    for group in groups.values():
        for name, url in group["collections"].items():
            listed = api.get(url.removeprefix("http://testserver"))
            assert listed.status_code == 200, (name, listed.content)
            assert set(listed.json()) == {"items", "next_cursor"}
    assert api.get("/agp/openapi.json").status_code == 200


def test_the_api_index_answers_other_methods_with_the_error_envelope(api):
    response = api.post("/agp/", {}, format="json")
    assert response.status_code == 405
    assert response.json()["error"]["code"] == "AGP_METHOD_NOT_ALLOWED"
