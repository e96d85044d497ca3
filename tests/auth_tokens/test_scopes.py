"""Scope enforcement on every /agp/ operation, discovered from the URL resolver (docs/reference/api.md).

The routes are not listed here: the test walks the resolver, so every viewset the API
groups register is checked as it appears. The expected scopes come from docs/reference/api.md's rule and its
exceptions, written out below independently of the views' own declarations:

- GET on a group's resource: the group's ``.read`` or ``.write``; POST/PATCH: ``.write``;
- POST approvals: ``agp.approval.write``; POST policy-evaluations: ``agp.policy.write``;
  POST revocations: ``agp.revocation.write`` (or ``agp.registry.write``, for an agent client
  revoking a delegation its agent granted);
- every method on clients: ``agp.admin``;

- GET operations: any of the execution and decision read/write scopes;
- POST and PATCH freezes (docs/reference/governance.md): ``agp.revocation.write``; GET freezes: the registry's;
- POST backtests (docs/reference/governance.md): ``agp.policy.write``; PATCH operations: ``agp.execution.write``, or
  for a backtest's operation ``agp.decision.write`` or ``agp.policy.write`` (which one applies
  depends on the operation found: tests/decision/test_backtests.py).
"""

import pytest
from rest_framework.test import APIClient

from auth_tokens.scopes import ALL_SCOPES
from core.models import LedgerEvent

from .helpers import assert_insufficient_scope, assert_unauthenticated
from .routes import Operation, discover, fill_route

pytestmark = pytest.mark.django_db

GROUP_OF_COLLECTION = {
    **dict.fromkeys(["delegations", "policy-sets", "tasks", "capabilities", "liability-bindings", "skills",
                     "revocations", "freezes"], "registry"),
    **dict.fromkeys(["contexts", "evidence-bundles", "decisions", "policy-evaluations", "approvals", "escalations",
                     "commerce-sessions", "impact-assessments", "backtests"], "decision"),
    **dict.fromkeys(["action-envelopes", "receipts", "ledger-events", "replay", "operations"], "execution"),
    "clients": "admin",
}
WRITE_EXCEPTIONS = {
    ("POST", "approvals"): {"agp.approval.write"},
    ("POST", "policy-evaluations"): {"agp.policy.write"},
    # An agent client may revoke a delegation its agent granted with the registry scope it holds.
    ("POST", "revocations"): {"agp.revocation.write", "agp.registry.write"},
    ("POST", "freezes"): {"agp.revocation.write"},
    ("PATCH", "freezes"): {"agp.revocation.write"},
    ("POST", "backtests"): {"agp.policy.write"},
    ("PATCH", "operations"): {"agp.execution.write", "agp.decision.write", "agp.policy.write"},
}
OPERATION_READERS = {"agp.execution.read", "agp.execution.write", "agp.decision.read", "agp.decision.write"}


def expected_scopes(collection: str, method: str) -> set[str]:
    group = GROUP_OF_COLLECTION[collection]
    if group == "admin":
        return {"agp.admin"}
    if method == "GET":
        if collection == "operations":
            return OPERATION_READERS
        return {f"agp.{group}.read", f"agp.{group}.write"}
    if (method, collection) in WRITE_EXCEPTIONS:
        return WRITE_EXCEPTIONS[method, collection]
    return {f"agp.{group}.write"}


OPERATIONS, NOT_DRF_ROUTES = discover()


def test_it_discovers_the_agp_routes():
    assert OPERATIONS, "no /agp/ routes found"
    assert {(op.method, op.path) for op in OPERATIONS} >= {("GET", "/agp/ledger-events"),
                                                           ("POST", "/agp/ledger-events"),
                                                           ("GET", "/agp/ledger-events/verify")}


def test_it_guards_every_agp_route_with_a_drf_view():
    # Only DRF views run the bearer authentication and the scope permission; a plain
    # Django view under /agp/ would be open to anyone.
    assert NOT_DRF_ROUTES == []


def test_it_knows_the_c3_group_of_every_collection():
    unknown = sorted({op.collection for op in OPERATIONS} - set(GROUP_OF_COLLECTION))
    assert unknown == [], f"collections without a scope (docs/reference/api.md) rule: {unknown}"


def _request(api: APIClient, op: Operation, token: str | None = None):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    if op.method == "GET":
        return api.get(op.path, **headers)
    return api.generic(op.method, op.path, data="{}", content_type="application/json", **headers)


@pytest.mark.parametrize("op", OPERATIONS, ids=str)
def test_it_needs_a_token(op, auth_settings):
    assert_unauthenticated(_request(APIClient(), op))
    assert not LedgerEvent.objects.exists()


@pytest.mark.parametrize("op", OPERATIONS, ids=str)
def test_it_refuses_a_token_without_the_needed_scope_naming_it(op, make_token):
    needed = expected_scopes(op.collection, op.method)
    token = make_token(scopes=[s for s in ALL_SCOPES if s not in needed])
    assert_insufficient_scope(_request(APIClient(), op, token), needed)
    assert not LedgerEvent.objects.exists()


@pytest.mark.parametrize("op", OPERATIONS, ids=str)
def test_it_accepts_a_token_holding_any_one_of_the_needed_scopes(op, make_token):
    for scope in sorted(expected_scopes(op.collection, op.method)):
        response = _request(APIClient(), op, make_token(scopes=[scope]))
        assert response.status_code not in (401, 403), (scope, response.status_code, response.content)


@pytest.mark.parametrize("op", OPERATIONS, ids=str)
def test_it_needs_no_token_when_authentication_is_off(op, settings):
    settings.AGP_AUTH_SECRET = None
    response = _request(APIClient(), op)
    assert response.status_code not in (401, 403), (response.status_code, response.content)
    assert "WWW-Authenticate" not in response


def test_it_fills_route_parameters_for_regex_and_converter_routes():
    assert fill_route("agp/tasks/(?P<task_id>[A-Za-z0-9._:-]{1,128})", "1") == "agp/tasks/1"
    assert fill_route("agp/replay/<str:action_id>", "x") == "agp/replay/x"
    assert fill_route("agp/x/(?P<a>(b|c)\\))/y", "1") == "agp/x/1/y"
    assert fill_route("agp/tasks/(?P<task_id>[a-z]+)", lambda name: f"{{{name}}}") == "agp/tasks/{task_id}"
