"""Scope enforcement on every /agp/ operation, discovered from the URL resolver (CONTRACT C3).

The routes are not listed here: the test walks the resolver, so every viewset the API
groups register is checked as it appears. The expected scopes come from C3's rule and its
exceptions, written out below independently of the views' own declarations:

- GET on a group's resource: the group's ``.read`` or ``.write``; POST/PATCH: ``.write``;
- POST approvals: ``agp.approval.write``; POST policy-evaluations: ``agp.policy.write``;
  POST revocations: ``agp.revocation.write``;
- GET operations: any of the execution and decision read/write scopes.
"""

from dataclasses import dataclass

import pytest
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.test import APIClient

from auth_tokens.scopes import ALL_SCOPES
from core.models import LedgerEvent

from .helpers import assert_insufficient_scope, assert_unauthenticated

pytestmark = pytest.mark.django_db

GROUP_OF_COLLECTION = {
    **dict.fromkeys(["delegations", "policy-sets", "tasks", "capabilities", "liability-bindings", "skills",
                     "revocations"], "registry"),
    **dict.fromkeys(["contexts", "evidence-bundles", "decisions", "policy-evaluations", "approvals", "escalations",
                     "commerce-sessions", "impact-assessments"], "decision"),
    **dict.fromkeys(["action-envelopes", "receipts", "ledger-events", "replay", "operations"], "execution"),
}
WRITE_EXCEPTIONS = {
    "approvals": {"agp.approval.write"},
    "policy-evaluations": {"agp.policy.write"},
    "revocations": {"agp.revocation.write"},
}
OPERATION_READERS = {"agp.execution.read", "agp.execution.write", "agp.decision.read", "agp.decision.write"}
OPEN_ROUTES = {"/agp/openapi.json"}
WRITE_METHODS = ("POST", "PATCH", "PUT", "DELETE")
SAMPLE_IDS = ("1", "sample-id")


def expected_scopes(collection: str, method: str) -> set[str]:
    group = GROUP_OF_COLLECTION[collection]
    if method == "GET":
        if collection == "operations":
            return OPERATION_READERS
        return {f"agp.{group}.read", f"agp.{group}.write"}
    if method == "POST" and collection in WRITE_EXCEPTIONS:
        return WRITE_EXCEPTIONS[collection]
    return {f"agp.{group}.write"}


@dataclass(frozen=True)
class Operation:
    method: str
    path: str
    route: str
    view: object

    @property
    def collection(self) -> str:
        return self.path.removeprefix("/agp/").split("/")[0]

    def __str__(self):
        return f"{self.method} /{_fill(self.route, lambda name: '{' + name + '}')}"


def _pattern_text(pattern) -> str:
    return str(pattern.pattern).lstrip("^").rstrip("$").replace("\\Z", "").replace("\\.", ".")


def _fill(route: str, value) -> str:
    """The route with every named group ``(?P<name>...)`` or converter ``<conv:name>`` replaced
    by ``value`` (a string, or a function of the parameter's name)."""
    out, i = [], 0
    while i < len(route):
        if route.startswith("(?P<", i):
            name = route[i + 4:route.index(">", i)]
            depth, j = 0, i
            while j < len(route):
                if route[j] == "\\":
                    j += 2
                    continue
                depth += route[j] == "("
                depth -= route[j] == ")"
                j += 1
                if depth == 0:
                    break
            out.append(value(name) if callable(value) else value)
            i = j
        elif route[i] == "<":
            name = route[i + 1:route.index(">", i)].split(":")[-1]
            out.append(value(name) if callable(value) else value)
            i = route.index(">", i) + 1
        else:
            out.append(route[i])
            i += 1
    return "".join(out)


def _walk(patterns, prefix: str = ""):
    for entry in patterns:
        text = prefix + _pattern_text(entry)
        if isinstance(entry, URLResolver):
            yield from _walk(entry.url_patterns, text)
        elif isinstance(entry, URLPattern):
            yield text, entry


def _methods(callback) -> list[str]:
    actions = getattr(callback, "actions", None)
    if actions is not None:  # a DRF viewset route: method -> action
        return sorted(m.upper() for m in actions if m.upper() in ("GET", *WRITE_METHODS))
    view_class = getattr(callback, "cls", None)
    if view_class is not None:  # a DRF APIView
        return sorted(m.upper() for m in ("get", "post", "patch", "put", "delete") if hasattr(view_class, m))
    return []


def _concrete_path(route: str, callback) -> str:
    for value in SAMPLE_IDS:
        path = "/" + _fill(route, value)
        try:
            match = get_resolver().resolve(path)
        except Exception:
            continue
        if match.func is callback:
            return path
    raise AssertionError(f"cannot build a sample path for {route}")


def discover() -> tuple[list[Operation], list[str]]:
    """Every (method, path) under /agp/, and the /agp/ routes that are not DRF views."""
    operations, not_drf = [], []
    for route, pattern in _walk(get_resolver().url_patterns):
        if not route.startswith("agp/") or "/" + route in OPEN_ROUTES:
            continue
        methods = _methods(pattern.callback)
        if not methods:
            not_drf.append(route)
            continue
        path = _concrete_path(route, pattern.callback)
        operations.extend(Operation(method, path, route, pattern.callback) for method in methods)
    return operations, not_drf


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
    assert unknown == [], f"collections without a C3 scope rule: {unknown}"


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
    assert _fill("agp/tasks/(?P<task_id>[A-Za-z0-9._:-]{1,128})", "1") == "agp/tasks/1"
    assert _fill("agp/replay/<str:action_id>", "x") == "agp/replay/x"
    assert _fill("agp/x/(?P<a>(b|c)\\))/y", "1") == "agp/x/1/y"
    assert _fill("agp/tasks/(?P<task_id>[a-z]+)", lambda name: f"{{{name}}}") == "agp/tasks/{task_id}"
