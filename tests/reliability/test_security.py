"""Security checks of the OWASP API Top 10 walk in docs/security.md that no other module covers."""

import pytest
from django.test import Client as DjangoClient
from drf_spectacular.generators import SchemaGenerator

from registry.models import Task
from tests.auth_tokens.routes import OPEN_ROUTES, discover

TASK = {"task_id": "task-sec-1", "root_principal": "org:acme", "agent_id": "agent-1", "title": "t",
        "risk_level": "low", "action_class": "read"}


# --- API9 improper inventory: the schema lists every route, and only routes ------------------------
def test_it_lists_every_agp_route_in_the_schema_and_nothing_else():
    schema = SchemaGenerator().get_schema(request=None, public=True)
    documented = {f"{method.upper()} {path}" for path, item in schema["paths"].items() for method in item
                  if method in ("get", "post", "put", "patch", "delete") and path.startswith("/agp/")}
    assert "post" in schema["paths"]["/oauth/token"]  # outside /agp/, described by auth_tokens/schema.py
    operations, _ = discover()
    routed = {str(op) for op in operations if op.method in ("GET", "POST", "PUT", "PATCH", "DELETE")
              and op.path not in OPEN_ROUTES}
    assert routed, "no /agp/ route found"
    assert routed - documented == set(), "routes missing from /agp/openapi.json"
    assert documented - routed == set(), "schema operations with no route"


# --- API4 resource consumption / API8: NUL characters never reach the database ---------------------
@pytest.mark.django_db(transaction=True)
def test_it_refuses_nul_characters_in_a_body_with_400_and_stores_nothing(api):
    for body in ({**TASK, "title": "a\x00b"}, {**TASK, "constraints": {"k\x00": 1}}):
        response = api.post("/agp/tasks", body, format="json")
        assert response.status_code == 400, response.content
        assert response.json()["error"]["code"] == "AGP_INVALID_REQUEST"
    assert not Task.objects.filter(task_id=TASK["task_id"]).exists()


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/agp/tasks?agent_id=a%00b", "/agp/decisions?context_ref=%00",
                                  "/agp/replay/act-1?policy_set_id=%00", "/agp/tasks?a%00=1"])
def test_it_refuses_nul_characters_in_a_query_with_400(api, path):
    response = api.get(path)
    assert response.status_code == 400, response.content
    assert response.json()["error"] == {"code": "AGP_INVALID_REQUEST", "retryable": False, "details": {},
                                        "message": "Query parameters must not contain NUL characters."}


# --- API8 security misconfiguration: headers on every kind of response -----------------------------
API_HEADERS = {"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer", "Cache-Control": "no-store",
               "X-Frame-Options": "DENY",
               "Content-Security-Policy": "default-src 'none'; frame-ancestors 'none'"}


@pytest.mark.django_db
@pytest.mark.parametrize("method,path,body,status", [
    ("get", "/agp/tasks", None, 200),                                # JSON
    ("post", "/agp/tasks", TASK, 201),                               # JSON, created
    ("get", "/agp/tasks/nope", None, 404),                           # error envelope from a view
    ("get", "/agp/no-such-collection", None, 404),                   # error envelope from the URL resolver
    ("post", "/agp/tasks", {"nope": 1}, 400),                        # validation error
    ("get", "/agp/tasks?limit=201", None, 400),                      # list limit over 200
])
def test_it_sends_the_security_headers_on_every_api_response(api, method, path, body, status):
    response = getattr(api, method)(path, body, format="json") if body is not None else getattr(api, method)(path)
    assert response.status_code == status
    for name, value in API_HEADERS.items():
        assert response[name] == value, name


def test_it_sends_the_security_headers_on_an_authentication_failure(auth_settings, api):
    response = api.get("/agp/tasks")
    assert response.status_code == 401
    for name, value in API_HEADERS.items():
        assert response[name] == value, name


@pytest.mark.django_db
def test_it_keeps_the_admin_unframeable_and_unsniffable():
    response = DjangoClient().get("/admin/login/")
    assert response.status_code == 200
    assert response["X-Frame-Options"] == "DENY"
    assert response["X-Content-Type-Options"] == "nosniff"
    # same-origin, not no-referrer: browsers send `Origin: null` under no-referrer, and
    # Django's CSRF check would refuse the admin's own login form.
    assert response["Referrer-Policy"] == "same-origin"


# --- API1 object-level access: the current model, stated by a test -------------------------------
def test_it_lets_any_client_with_the_read_scope_read_another_clients_records(make_token):
    from rest_framework.test import APIClient

    writer, reader, outsider = APIClient(), APIClient(), APIClient()
    writer.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(client_id='platform-a')}")
    reader.credentials(HTTP_AUTHORIZATION="Bearer " + make_token(["agp.registry.read"], client_id="platform-b"))
    outsider.credentials(HTTP_AUTHORIZATION="Bearer " + make_token(["agp.decision.read"], client_id="platform-c"))
    assert writer.post("/agp/tasks", TASK, format="json").status_code == 201

    # One organisation's trusted platforms: records are shared within a scope group...
    assert reader.get(f"/agp/tasks/{TASK['task_id']}").json()["task_id"] == TASK["task_id"]
    # ...and writes need the write scope, reads of other groups their read scope.
    assert reader.post("/agp/tasks", {**TASK, "task_id": "task-sec-2"}, format="json").status_code == 403
    assert outsider.get(f"/agp/tasks/{TASK['task_id']}").status_code == 403
    assert list(Task.objects.values_list("task_id", flat=True)) == [TASK["task_id"]]


# --- found by the fuzzer: a year before 1000 was stored and rendered unpadded ------------------------
@pytest.mark.django_db
def test_it_refuses_a_timestamp_before_the_year_1000(api):
    response = api.post("/agp/tasks", {**TASK, "created_at": "0010-08-14T21:00:00Z"}, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["details"]["fields"] == {
        "created_at": ["Must be a date-time in the years 1000 to 9999."]}
    assert not Task.objects.exists()
    ok = api.post("/agp/tasks", {**TASK, "created_at": "1000-01-01T00:00:00Z"}, format="json")
    assert ok.status_code == 201
    assert ok.json()["created_at"] == "1000-01-01T00:00:00.000000Z"
