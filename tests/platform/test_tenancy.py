"""Tenants see only their own: every /agp/ route, walked as a client of another tenant.

The routes come from the URL resolver (tests/auth_tokens/routes.py), so a route added later is
walked too: a path parameter this file cannot fill with tenant A's record fails the test, and
a viewset that declares no tenant scoping answers 500 (ImproperlyConfigured), which fails it.
"""

import pytest
from rest_framework.test import APIClient

from auth_tokens.kinds import ClientKind
from auth_tokens.scopes import ADMIN_SCOPE, ALL_SCOPES
from core.models import LedgerEvent
from core.services import checkpoint_create
from execution.models import Receipt
from registry.models import Freeze, Revocation
from tests.auth_tokens.routes import discover, fill_route
from tests.execution.signed_world import make_executed_action
from tests.identity import client_api

pytestmark = pytest.mark.django_db

OPERATIONS, _ = discover()
# Routes that reveal hashes, not records: every authenticated client reads them.
PUBLIC = {"/agp/ledger-events/verify", "/agp/ledger-events/checkpoint", "/agp/ledger-events/checkpoints",
          "/agp/ledger-events/checkpoints/{tree_size}", "/agp/ledger-events/consistency"}
# A body each PATCH route accepts, so that only the record's tenant can refuse it.
PATCH_BODIES = {"policy-sets": {"status": "deprecated"}, "tasks": {"status": "closed"},
                "decisions": {"status": "finalised"}, "freezes": {"status": "lifted"},
                "operations": {"status": "cancelled"}, "clients": {"is_active": False},
                "escalations": {"status": "resolved", "outcome": "dismissed", "resolved_by": "b"}}


def client_of(kind: str, tenants: list[str], **bindings) -> APIClient:
    return client_api(kind, tenants, **bindings)[0]


@pytest.fixture
def tenant_a(authed_api):
    """Tenant A's records of every kind, made by an operator through the API: their ids by path parameter."""
    ids = make_executed_action(authed_api)
    root, task_id = ids["root_principal"], ids["task_id"]

    def post(path, body):
        response = authed_api.post(path, body, format="json")
        assert response.status_code in (201, 202), response.content
        return response.json()

    ids["context_id"] = post("/agp/contexts", {"task_id": task_id, "data": {"k": 1}})["context_id"]
    ids["bundle_id"] = post("/agp/evidence-bundles", {"task_id": task_id, "items": [
        {"uri": "https://example.com/a", "sha256": "0" * 64, "kind": "log"}]})["bundle_id"]
    ids["escalation_id"] = post("/agp/escalations", {"task_id": task_id, "raised_by": "a",
                                                     "reason": "look"})["escalation_id"]
    ids["freeze_id"] = post("/agp/freezes", {"target_type": "agent", "target_id": ids["agent_id"],
                                             "root_principal": root, "reason": "look"})["freeze_id"]
    ids["revocation_id"] = post("/agp/revocations", {"target_type": "liability_binding",
                                                     "target_id": ids["binding_id"]})["revocation_id"]
    ids["backtest_id"] = post("/agp/backtests", {"policy_set_id": ids["policy_set_id"], "root_principal": root})["result_url"].rsplit("/", 1)[1]
    ids["receipt_id"] = Receipt.objects.get(operation_id=ids["operation_id"]).receipt_id
    ids["sequence"] = str(LedgerEvent.objects.filter(root_principal=root).order_by("sequence").first().sequence)
    ids["tree_size"] = str(checkpoint_create().tree_size)
    ids["client_id"] = "test-client"
    return ids


@pytest.fixture
def tenant_b():
    """A person of another tenant holding every scope a person may hold."""
    return client_of(ClientKind.HUMAN, ["tenant-b"], subject="b@example.com",
                     scopes=[scope for scope in ALL_SCOPES if scope != ADMIN_SCOPE])


def test_another_tenants_records_are_404_on_every_route_and_absent_from_every_list(tenant_a, tenant_b):
    frozen_before = Freeze.objects.get(freeze_id=tenant_a["freeze_id"]).status
    walked = 0
    for op in OPERATIONS:
        route = "/" + fill_route(op.route, lambda name: "{" + name + "}")
        if op.method == "POST":
            continue  # writes that cite another tenant's records: test_a_citation_of_another_tenants_record...
        names = [name for name in _params(op.route)]
        missing = [name for name in names if name not in tenant_a]
        assert not missing, f"{route}: no record of tenant A for {missing}: seed one in tenant_a"
        path = "/" + fill_route(op.route, lambda name: tenant_a[name])
        if op.method == "PATCH":
            response = tenant_b.patch(path, PATCH_BODIES[op.collection], format="json")
        else:
            response = tenant_b.get(path)
        walked += 1
        if op.collection == "clients":
            assert response.status_code == 403, (route, response.content)  # agp.admin: operators only
        elif route in PUBLIC or route.endswith("/consistency"):
            assert response.status_code in (200, 400), (route, response.content)
        elif names:
            assert response.status_code == 404, (op.method, route, response.content)
            assert response.json()["error"]["code"] == "AGP_NOT_FOUND"
        else:
            assert response.status_code == 200, (route, response.content)
            assert response.json()["items"] == [], f"{route} shows another tenant's records"
    assert walked > 40
    assert Freeze.objects.get(freeze_id=tenant_a["freeze_id"]).status == frozen_before


def test_tenant_a_sees_its_own_records_on_the_same_routes(tenant_a):
    # The same walk as a person of tenant A finds every record: the 404s above are scoping, not absence.
    own = client_of(ClientKind.AUDITOR, [tenant_a["root_principal"]])
    for op in OPERATIONS:
        if op.method != "GET" or op.collection == "clients" or not _params(op.route):
            continue
        path = "/" + fill_route(op.route, lambda name: tenant_a[name])
        if op.collection == "replay" or path.endswith("/evidence"):
            continue  # heavier reads, covered by their own tests; they share the lookup checked here
        response = own.get(path)
        assert response.status_code == 200, (path, response.content)


def test_an_auditor_of_every_tenant_sees_the_events_of_no_tenant_and_a_tenants_auditor_does_not(tenant_a):
    every = client_of(ClientKind.AUDITOR, ["*"])
    mine = client_of(ClientKind.AUDITOR, [tenant_a["root_principal"]])
    created = {"event_type": "api_client.created"}
    assert every.get("/agp/ledger-events", created).json()["items"]
    assert mine.get("/agp/ledger-events", created).json()["items"] == []
    assert {event["root_principal"] for event in mine.get("/agp/ledger-events").json()["items"]} == {
        tenant_a["root_principal"]}


CITATIONS = [
    ("/agp/contexts", lambda a: {"task_id": a["task_id"], "data": {}}, "task_id"),
    ("/agp/policy-evaluations", lambda a: {"policy_set_id": a["policy_set_id"], "task_id": "t", "agent_id": "x",
                                           "input": {}}, "policy_set_id"),
    ("/agp/decisions", lambda a: {"task_id": a["task_id"], "agent_id": "x", "outcome": "approve"}, "task_id"),
    ("/agp/approvals", lambda a: {"decision_ref": a["decision_id"], "verdict": "approved",
                                  "expires_at": "2099-01-01T00:00:00Z"}, "decision_ref"),
    ("/agp/capabilities", lambda a: {"agent_id": "x", "delegation_id": a["delegation_id"], "tool_id": "payments",
                                     "operations": ["refund"]}, "delegation_id"),
    ("/agp/backtests", lambda a: {"policy_set_id": a["policy_set_id"]}, "policy_set_id"),
    ("/agp/receipts", lambda a: {"action_id": a["action_id"], "operation_id": a["operation_id"],
                                 "status": "succeeded", "result": {}}, "operation_id"),
    ("/agp/revocations", lambda a: {"target_type": "delegation", "target_id": a["delegation_id"]}, "target_id"),
]


@pytest.mark.parametrize("path,body,field", CITATIONS, ids=[c[0] for c in CITATIONS])
def test_a_citation_of_another_tenants_record_fails_as_a_missing_one_does(tenant_a, tenant_b, path, body, field):
    cited = body(tenant_a)
    missing = tenant_b.post(path, {**cited, field: "no-such-record"}, format="json")
    response = tenant_b.post(path, cited, format="json")
    assert response.status_code == missing.status_code == 400, response.content
    assert response.json()["error"]["details"]["fields"].keys() == missing.json()["error"]["details"]["fields"].keys()
    assert field in response.json()["error"]["details"]["fields"]
    assert Revocation.objects.filter(target_id=tenant_a["delegation_id"]).count() == 0


def test_an_envelope_citing_another_tenants_task_fails_the_task_check_as_a_missing_one(tenant_a, tenant_b):
    body = {"task_id": tenant_a["task_id"], "agent_id": tenant_a["agent_id"], "tool_id": "payments",
            "operation": "refund", "capability_token_ref": tenant_a["capability_id"],
            "decision_ref": tenant_a["decision_id"], "policy_decision_ref": tenant_a["evaluation_id"],
            "parameters": {"amount": 1, "currency": "USD"}}
    response = tenant_b.post("/agp/action-envelopes", body, format="json")
    assert response.status_code == 422, response.content
    failed = {item["check"]: item["reason"] for item in response.json()["error"]["details"]["failed_checks"]}
    assert failed["task"] == f"task {tenant_a['task_id']!r} does not exist"
    # Nothing of tenant A's records is named back: they are as missing as the task.
    assert tenant_a["root_principal"] not in response.content.decode()


def _params(route: str) -> list[str]:
    names = []
    fill_route(route, lambda name: names.append(name) or "")
    return names
