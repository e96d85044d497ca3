"""The error (docs/reference/api.md) envelope on every /agp/ error this stage can produce, and its database effect."""

import json

import pytest
from rest_framework.test import APIClient

from core.models import IdempotencyRecord, LedgerEvent
from tests.platform.conftest import assert_envelope
from tests.platform.urls import SECRET_DETAIL

pytestmark = pytest.mark.django_db

EVENT = {"event_type": "client.note", "resource_type": "task", "resource_id": "tsk_1", "payload": {"n": 1}}


def post_raw(api, body, content_type="application/json", **extra):
    return api.generic("POST", "/agp/ledger-events", body, content_type=content_type, **extra)


# --- 400 AGP_INVALID_REQUEST ---------------------------------------------------------------

def test_it_rejects_malformed_json(api):
    error = assert_envelope(post_raw(api, b'{"event_type": "client.x",'), 400, "AGP_INVALID_REQUEST",
                            retryable=False)
    assert "Malformed" in error["message"]
    assert LedgerEvent.objects.count() == 0


def test_it_rejects_json_nested_too_deeply_as_malformed(api):
    error = assert_envelope(post_raw(api, b"[" * 100_000), 400, "AGP_INVALID_REQUEST")
    assert "nested too deeply" in error["message"]


def test_it_rejects_a_body_that_is_not_an_object(api):
    error = assert_envelope(post_raw(api, json.dumps([EVENT])), 400, "AGP_INVALID_REQUEST")
    assert error["details"]["errors"] == ["Expected a JSON object."]
    assert LedgerEvent.objects.count() == 0


def test_it_names_unknown_fields(api):
    response = api.post("/agp/ledger-events", {**EVENT, "resource_idd": "x", "colour": "red"}, format="json")
    error = assert_envelope(response, 400, "AGP_INVALID_REQUEST")
    assert error["details"]["fields"] == {"resource_idd": ["Unknown field."], "colour": ["Unknown field."]}
    assert LedgerEvent.objects.count() == 0


@pytest.mark.parametrize("field, value", [("sequence", 7), ("hash", "0" * 64), ("actor", "mallory"),
                                          ("recorded_at", "2026-01-01T00:00:00Z")])
def test_it_rejects_read_only_fields(api, field, value):
    response = api.post("/agp/ledger-events", {**EVENT, field: value}, format="json")
    error = assert_envelope(response, 400, "AGP_INVALID_REQUEST")
    assert error["details"]["fields"] == {field: ["This field is read-only."]}
    assert LedgerEvent.objects.count() == 0


def test_it_rejects_a_wrong_type_constant(api):
    response = api.post("/agp/ledger-events", {**EVENT, "type": "Task"}, format="json")
    error = assert_envelope(response, 400, "AGP_INVALID_REQUEST")
    assert error["details"]["fields"] == {"type": ["Must be 'LedgerEvent'."]}
    assert LedgerEvent.objects.count() == 0


def test_it_accepts_the_right_type_constant(api):
    response = api.post("/agp/ledger-events", {**EVENT, "type": "LedgerEvent"}, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["type"] == "LedgerEvent"
    assert LedgerEvent.objects.count() == 1


def test_it_rejects_schema_violations_field_by_field(api):
    response = api.post("/agp/ledger-events", {"event_type": "delegation.created", "resource_id": "bad id!"},
                        format="json")
    error = assert_envelope(response, 400, "AGP_INVALID_REQUEST")
    assert set(error["details"]["fields"]) == {"event_type", "resource_type", "resource_id"}
    assert error["details"]["fields"]["resource_type"] == ["This field is required."]


def test_it_rejects_a_payload_with_no_canonical_form(api):
    response = api.post("/agp/ledger-events", {**EVENT, "payload": {"n": 2**60}}, format="json")
    error = assert_envelope(response, 400, "AGP_INVALID_REQUEST")
    assert list(error["details"]["fields"]) == ["payload"]
    assert LedgerEvent.objects.count() == 0


@pytest.mark.parametrize("query, field", [("limit=0", "limit"), ("limit=201", "limit"), ("limit=x", "limit"),
                                          ("cursor=!!", "cursor"), ("cursor=djI6MQ", "cursor"),
                                          ("colour=red", "colour")])
def test_it_rejects_bad_list_parameters(api, query, field):
    error = assert_envelope(api.get(f"/agp/ledger-events?{query}"), 400, "AGP_INVALID_REQUEST")
    assert list(error["details"]["fields"]) == [field]


@pytest.mark.parametrize("path", [
    "/agp/ledger-events?actor=a&actor=b", "/agp/ledger-events?limit=1&limit=2",
    "/agp/ledger-events/consistency?first=1&first=2", "/agp/ledger-events/1/proof?tree_size=1&tree_size=2",
    "/agp/replay/act-1?policy_set_id=a&policy_set_id=b"])
def test_a_query_parameter_given_twice_is_a_400_naming_it(api, path):
    # One reader would take the first, another the last: which one was meant is unknown.
    error = assert_envelope(api.get(path), 400, "AGP_INVALID_REQUEST")
    assert list(error["details"]["fields"].values()) == [["Given more than once."]]


@pytest.mark.parametrize("path", ["/agp/ledger-events/verify?x=1", "/agp/ledger-events/checkpoint?x=1",
                                  "/agp/replay/act-1?x=1"])
def test_an_unknown_query_parameter_is_a_400_on_every_ledger_and_replay_read(api, path):
    error = assert_envelope(api.get(path), 400, "AGP_INVALID_REQUEST")
    assert error["details"]["fields"] == {"x": ["Unknown query parameter."]}


# --- 401 / 403 -------------------------------------------------------------------------------

def test_it_requires_a_token_when_authentication_is_on(auth_settings, api):
    response = api.post("/agp/ledger-events", EVENT, format="json")
    assert_envelope(response, 401, "AGP_UNAUTHENTICATED", retryable=False)
    assert response["WWW-Authenticate"] == 'Bearer error="invalid_token"'
    assert LedgerEvent.objects.count() == 0


@pytest.mark.parametrize("header", ["Bearer not-a-jwt", "Basic dXNlcjpwYXNz", "Bearer ",
                                    "Bearer eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.eyJzdWIiOiJ0ZXN0LWNsaWVudCJ9."])
def test_it_rejects_malformed_or_unsigned_tokens(auth_settings, api, header):
    api.credentials(HTTP_AUTHORIZATION=header)
    response = api.get("/agp/ledger-events")
    assert_envelope(response, 401, "AGP_UNAUTHENTICATED")
    assert response["WWW-Authenticate"] == 'Bearer error="invalid_token"'


def test_it_rejects_a_token_signed_with_another_secret(make_token, settings, api):
    token = make_token()
    settings.AGP_AUTH_SECRET = "another-secret-0123456789abcdef0123456789abcdef"
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert_envelope(api.get("/agp/ledger-events"), 401, "AGP_UNAUTHENTICATED")


def test_it_refuses_a_token_without_the_scope(make_token, api):
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(scopes=['agp.execution.read'])}")
    response = api.post("/agp/ledger-events", EVENT, format="json")
    error = assert_envelope(response, 403, "AGP_INSUFFICIENT_SCOPE", retryable=False)
    assert error["details"] == {"required_scopes": ["agp.execution.write"]}
    assert response["WWW-Authenticate"] == 'Bearer error="insufficient_scope", scope="agp.execution.write"'
    assert LedgerEvent.objects.count() == 0


def test_it_lets_a_read_scope_read_but_not_another_group(make_token, api):
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(scopes=['agp.execution.read'])}")
    assert api.get("/agp/ledger-events").status_code == 200
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(scopes=['agp.registry.write'])}")
    error = assert_envelope(api.get("/agp/ledger-events"), 403, "AGP_INSUFFICIENT_SCOPE")
    assert error["details"] == {"required_scopes": ["agp.execution.read", "agp.execution.write"]}


def test_it_keeps_health_and_the_openapi_document_open_when_authentication_is_on(auth_settings, api):
    assert api.get("/healthz").status_code == 200
    assert api.get("/readyz").status_code == 200
    assert api.get("/agp/openapi.json").status_code == 200


# --- 404 / 405 -------------------------------------------------------------------------------

@pytest.mark.parametrize("path", ["/agp/nothing-here", "/agp/ledger-events/", "/agp/ledger-events/abc", "/agp/docs/"])
def test_it_answers_unknown_paths_with_the_envelope(api, path):
    error = assert_envelope(api.get(path), 404, "AGP_NOT_FOUND", retryable=False)
    assert error["details"] == {}


def test_it_answers_unknown_ids_with_the_envelope(api):
    error = assert_envelope(api.get("/agp/ledger-events/999"), 404, "AGP_NOT_FOUND")
    assert "999" in error["message"]


def test_it_answers_a_post_to_an_unknown_path_with_the_envelope(api):
    assert_envelope(api.post("/agp/nothing-here", EVENT, format="json"), 404, "AGP_NOT_FOUND")


@pytest.mark.parametrize("method, path", [("DELETE", "/agp/ledger-events"), ("PUT", "/agp/ledger-events"),
                                          ("PATCH", "/agp/ledger-events/1"), ("DELETE", "/agp/ledger-events/1"),
                                          ("POST", "/agp/ledger-events/verify"), ("POST", "/agp/openapi.json")])
def test_it_answers_unsupported_methods_with_405(api, method, path):
    response = api.generic(method, path, "{}", content_type="application/json")
    assert_envelope(response, 405, "AGP_METHOD_NOT_ALLOWED", retryable=False)
    assert "GET" in response["Allow"]
    assert LedgerEvent.objects.count() == 0


# --- 409 -------------------------------------------------------------------------------------

def test_it_refuses_a_duplicate_event_id(api):
    first = api.post("/agp/ledger-events", {**EVENT, "event_id": "evt-client-1"}, format="json")
    assert first.status_code == 201
    second = api.post("/agp/ledger-events", {**EVENT, "event_id": "evt-client-1", "payload": {}}, format="json")
    error = assert_envelope(second, 409, "AGP_CONFLICT", retryable=False)
    assert "evt-client-1" in error["message"]
    assert list(LedgerEvent.objects.values_list("event_id", flat=True)) == ["evt-client-1"]


# --- 413 / 415 -------------------------------------------------------------------------------

def test_it_refuses_bodies_over_one_mebibyte(api):
    body = json.dumps({**EVENT, "payload": {"blob": "x" * (1024 * 1024)}})
    error = assert_envelope(post_raw(api, body), 413, "AGP_PAYLOAD_TOO_LARGE", retryable=False)
    assert error["details"] == {"max_bytes": 1024 * 1024}
    assert LedgerEvent.objects.count() == 0


def test_it_accepts_a_body_just_under_the_limit(api):
    body = json.dumps({**EVENT, "payload": {"blob": "x" * (1024 * 1024 - 200)}})
    assert len(body) <= 1024 * 1024
    assert post_raw(api, body).status_code == 201
    assert LedgerEvent.objects.count() == 1


def test_it_refuses_a_too_large_body_before_the_idempotency_key_is_taken(api):
    body = json.dumps({"blob": "x" * (1024 * 1024 + 1)})
    assert_envelope(post_raw(api, body, HTTP_IDEMPOTENCY_KEY="k-413"), 413, "AGP_PAYLOAD_TOO_LARGE")
    assert IdempotencyRecord.objects.count() == 0


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "application/xml"])
def test_it_refuses_bodies_that_are_not_json(api, content_type):
    response = post_raw(api, "event_type=client.x", content_type=content_type)
    error = assert_envelope(response, 415, "AGP_UNSUPPORTED_MEDIA_TYPE", retryable=False)
    assert content_type in error["message"]
    assert LedgerEvent.objects.count() == 0


# --- 500 / 503 -------------------------------------------------------------------------------

@pytest.mark.urls("tests.platform.urls")
@pytest.mark.parametrize("path", ["/agp/test/boom", "/agp/test/plain-boom"])
def test_it_hides_unhandled_exceptions_behind_a_500_envelope(path):
    response = APIClient(raise_request_exception=False).get(path)
    error = assert_envelope(response, 500, "AGP_INTERNAL_ERROR", retryable=True)
    assert error["details"] == {}
    assert SECRET_DETAIL not in response.content.decode()
    assert "Traceback" not in response.content.decode()
    assert "RuntimeError" not in response.content.decode()


@pytest.mark.urls("tests.platform.urls")
@pytest.mark.parametrize("path", ["/agp/test/database-down", "/agp/test/plain-database-down"])
def test_it_maps_a_database_outage_to_503_saying_when_to_retry(path):
    response = APIClient(raise_request_exception=False).get(path)
    assert_envelope(response, 503, "AGP_UNAVAILABLE", retryable=True)
    assert response["Retry-After"] == "5"
    assert SECRET_DETAIL not in response.content.decode()


def test_it_marks_api_responses_not_cacheable_and_not_sniffable(api):
    response = api.get("/agp/nothing-here")
    assert response["Cache-Control"] == "no-store"
    assert response["X-Content-Type-Options"] == "nosniff"
