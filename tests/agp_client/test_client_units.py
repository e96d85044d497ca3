"""The client library without a server: error typing, signature rules, retry timing, and a
method for every /agp/ operation the service routes."""

import inspect
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

import agp_client
from agp_client import AGPClient
from agp_client import errors as client_errors
from agp_client.signatures import payload_hash, verify_signature
from agp_client.transport import RetryPolicy, parse_retry_after
from agp_project import errors as server_errors
from agp_project.canonical import content_hash
from agp_project.signing import Signer, verify_resource
from tests.auth_tokens.routes import discover

pytestmark = pytest.mark.unit


def _server_error_classes():
    seen, todo = [], [server_errors.AGPError]
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if cls.code not in {c.code for c in seen}:
            seen.append(cls)
    return seen


def _instance(cls):
    if cls is server_errors.InsufficientScope:
        return cls(["agp.execution.write"])
    if cls is server_errors.Forbidden:
        return cls("another agent", field="agent_id")
    if cls is server_errors.InvalidTransition:
        return cls(from_state="active", to_state="revoked", allowed=["deprecated"])
    return cls("boom", details={"k": "v"})


@pytest.mark.parametrize("server_class", _server_error_classes(), ids=lambda c: c.code)
def test_it_raises_a_typed_error_for_every_code_the_server_has(server_class):
    exc = _instance(server_class)
    error = client_errors.error_from_body(exc.status_code, exc.as_body(), {"Retry-After": "3"})
    assert error.code == exc.code
    assert type(error).default_code == exc.code  # a class of its own, not a fallback
    assert (error.status, error.message, error.retryable, error.details) == (
        exc.status_code, exc.message, exc.retryable, exc.details)
    assert error.body == exc.as_body()
    assert isinstance(error, agp_client.AGPError)


@pytest.mark.parametrize("code,family", [
    ("AGP_DELEGATION_SCOPE_VIOLATION", agp_client.ConflictError),
    ("AGP_DELEGATION_HOP_LIMIT", agp_client.ConflictError),
    ("AGP_INVALID_TRANSITION", agp_client.ConflictError),
    ("AGP_IDEMPOTENCY_IN_PROGRESS", agp_client.ConflictError),
    ("AGP_FROZEN", agp_client.ConflictError),
    ("AGP_IMPACT_ASSESSMENT_REQUIRED", agp_client.PrerequisiteFailedError),
    ("AGP_PAYLOAD_TOO_LARGE", agp_client.ValidationError),
    ("AGP_UNAVAILABLE", agp_client.ServerError),
])
def test_it_groups_specific_codes_under_their_family(code, family):
    assert issubclass(client_errors.BY_CODE[code], family)


def test_it_exposes_the_useful_details_of_errors():
    scope = client_errors.error_from_body(403, server_errors.InsufficientScope(["agp.policy.write"]).as_body(), {})
    assert scope.required_scopes == ["agp.policy.write"]
    freezes = [{"freeze_id": "frz_1", "target_type": "agent", "target_id": "agent-7"}]
    frozen = client_errors.error_from_body(409, server_errors.Frozen(details={"freezes": freezes}).as_body(), {})
    assert isinstance(frozen, agp_client.FrozenError) and frozen.freezes == freezes
    checks = [{"check": "task_open", "reason": "closed"}]
    failed = client_errors.error_from_body(422, {"error": {"code": "AGP_PREREQUISITE_FAILED", "message": "m",
                                                           "retryable": False,
                                                           "details": {"failed_checks": checks}}}, {})
    assert failed.failed_checks == checks
    limited = client_errors.error_from_body(429, server_errors.RateLimited().as_body(), {"Retry-After": "7"})
    assert limited.retry_after == 7.0 and limited.retryable
    assert str(limited) == "429 AGP_RATE_LIMITED: Too many requests."


@pytest.mark.parametrize("status,body,cls,code", [
    (401, {"error": "invalid_client", "error_description": "no"}, agp_client.AuthenticationError, "invalid_client"),
    (400, {"error": "invalid_scope", "error_description": "no"}, agp_client.ScopeError, "invalid_scope"),
    (400, {"error": "unsupported_grant_type"}, agp_client.ValidationError, "unsupported_grant_type"),
    (429, {"error": "slow_down", "error_description": "wait"}, agp_client.RateLimitedError, "slow_down"),
    (502, "<html>Bad gateway</html>", agp_client.ServerError, None),
    (503, None, agp_client.UnavailableError, None),
    (418, {"unexpected": True}, agp_client.AGPError, None),
])
def test_it_maps_oauth_and_foreign_error_bodies(status, body, cls, code):
    error = client_errors.error_from_body(status, body, {})
    assert type(error) is cls
    assert error.status == status and error.body == body
    assert error.code == (code or cls.default_code)
    assert error.retryable == (status in (429, 502, 503))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**53 + 1, 2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False, width=64) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20)


@hypothesis_settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=10), json_values, max_size=6))
def test_it_hashes_resources_exactly_as_the_server_does(resource):
    resource = {**resource, "signature": {"value": "ignored"}}
    assert payload_hash(resource) == content_hash({k: v for k, v in resource.items() if k != "signature"})


def test_it_verifies_signatures_by_the_servers_rules():
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    signer = Signer(Ed25519PrivateKey.generate(), "agp")
    jwks = {"keys": [signer.jwk()]}
    resource = {"type": "Approval", "approval_id": "apr-1", "conditions": ["€ 100 max"], "amount": 1e-7}
    resource["signature"] = signer.sign(resource)
    assert verify_signature(resource, jwks) is True
    assert verify_resource(resource, jwks) is True
    for changed in ({**resource, "amount": 2e-7}, {**resource, "extra": None},
                    {**resource, "signature": {**resource["signature"], "value": resource["signature"]["value"][::-1]}},
                    {**resource, "signature": {**resource["signature"], "alg": "none"}},
                    {k: v for k, v in resource.items() if k != "signature"}):
        assert verify_signature(changed, jwks) is False
        assert verify_resource(changed, jwks) is False
    other = Signer(Ed25519PrivateKey.generate(), "agp")
    assert verify_signature(resource, {"keys": [{**other.jwk(), "kid": signer.kid}]}) is False
    # The same signature bytes spelt with other unused low bits in the last character.
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    value = resource["signature"]["value"]
    respelt = {**resource, "signature": {**resource["signature"],
                                         "value": value[:-1] + alphabet[alphabet.index(value[-1]) ^ 1]}}
    assert verify_signature(respelt, jwks) is False
    assert verify_resource(respelt, jwks) is False


def test_it_backs_off_exponentially_with_jitter_up_to_a_ceiling():
    policy = RetryPolicy(backoff=0.5, max_backoff=4.0)
    for attempt, ceiling in enumerate([0.5, 1.0, 2.0, 4.0, 4.0, 4.0]):
        delays = [policy.delay(attempt) for _ in range(200)]
        assert all(ceiling / 2 <= d <= ceiling for d in delays)
        assert len(set(delays)) > 100  # jittered, so clients do not retry in lockstep


def test_it_reads_retry_after_as_seconds_or_an_http_date():
    assert parse_retry_after("5") == 5.0
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None
    in_ten = format_datetime(datetime.now(UTC) + timedelta(seconds=10), usegmt=True)
    assert 8 <= parse_retry_after(in_ten) <= 10
    assert parse_retry_after(format_datetime(datetime(2000, 1, 1, tzinfo=UTC), usegmt=True)) == 0.0


def test_it_needs_both_credentials_or_neither():
    with pytest.raises(ValueError):
        AGPClient("http://agp.example", client_id="only-id")
    assert AGPClient("http://agp.example/").base_url == "http://agp.example"
    assert AGPClient("http://agp.example").auth is None


# Operations that are not plain create/get/list of a collection, and the client method for each.
SPECIAL_METHODS = {
    ("PATCH", "policy-sets"): ["policy_sets.update", "policy_sets.deprecate", "policy_sets.revoke"],
    ("PATCH", "decisions"): ["decisions.finalise"],
    ("PATCH", "escalations"): ["escalations.resolve"],
    ("PATCH", "tasks"): ["tasks.close"],
    ("PATCH", "freezes"): ["freezes.lift"],
    ("PATCH", "clients"): ["clients.disable", "clients.enable", "clients.rotate_secret", "clients.update"],

    ("PATCH", "operations"): ["operations.cancel"],
    ("POST", "action-envelopes"): ["action_envelopes.validate", "action_envelopes.submit"],
    ("GET", "replay"): ["replay"],
    ("GET", "operations"): ["operations.get", "operations.wait"],
}


# Routes below a collection (the transparency log, docs/reference/ledger.md) and their client methods.
SPECIAL_ROUTES = {
    "GET /agp/ledger-events/checkpoints": ["ledger_events.checkpoints.list", "ledger_events.checkpoints.page"],
    "GET /agp/ledger-events/checkpoints/{tree_size}": ["ledger_events.checkpoints.get"],
    "GET /agp/ledger-events/{sequence}/proof": ["ledger_events.proof"],
    "GET /agp/action-envelopes/{action_id}/evidence": ["action_envelopes.evidence"],
}


def _client_methods(op) -> list[str]:
    if str(op) in SPECIAL_ROUTES:
        return SPECIAL_ROUTES[str(op)]
    rest = op.path.removeprefix("/agp/").split("/")[1:]
    attr = op.collection.replace("-", "_")
    if (op.method, op.collection) in SPECIAL_METHODS:
        return SPECIAL_METHODS[(op.method, op.collection)]
    if op.method == "GET" and not rest:
        return [f"{attr}.list", f"{attr}.page"]
    if op.method == "GET" and len(rest) == 1:
        # /agp/<collection>/{id} or a named collection action such as /ledger-events/verify
        return [f"{attr}.{rest[0]}"] if rest[0] not in ("1", "sample-id") else [f"{attr}.get"]
    if op.method == "POST" and not rest:
        return [f"{attr}.create"]
    return [f"{attr}.<{op.method} {op.path}>"]


@pytest.mark.parametrize("op", discover()[0], ids=str)
def test_it_has_a_method_for_every_operation_of_the_service(op):
    client = AGPClient("http://agp.example")
    for dotted in _client_methods(op):
        target = client
        for part in dotted.split("."):
            target = getattr(target, part, None)
        assert callable(target), f"the client has no {dotted} for {op}"
        assert inspect.getdoc(target), f"{dotted} is undocumented"


def test_it_turns_a_failed_operations_error_into_its_typed_exception():
    failed = {"operation_id": "op_1", "status": "failed",
              "error": {"code": "AGP_EXECUTION_FAILED", "message": "tool said no", "retryable": False,
                        "details": {"status": 500}}}
    error = client_errors.error_from_operation(failed)
    assert type(error) is agp_client.ExecutionFailedError
    assert (error.status, error.code, error.message, error.details, error.body) == (
        None, "AGP_EXECUTION_FAILED", "tool said no", {"status": 500}, failed)
    recheck = client_errors.error_from_operation({**failed, "error": {
        "code": "AGP_PREREQUISITE_FAILED", "message": "revoked", "retryable": False,
        "details": {"failed_checks": [{"check": "delegation_active", "reason": "revoked"}]}}})
    assert isinstance(recheck, agp_client.PrerequisiteFailedError)
    assert recheck.failed_checks[0]["check"] == "delegation_active"
