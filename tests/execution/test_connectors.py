"""Tool connectors (execution/connectors.py): noop, http, external."""

import time

import pytest

from agp_project.canonical import bytes_hash
from execution.connectors import Call, ExecutionFailed, connector_for
from tests.execution.receiver import receiver  # noqa: F401

pytestmark = pytest.mark.unit

ENVELOPE = {"type": "ActionEnvelope", "action_id": "act_1", "signature": {"alg": "EdDSA", "value": "x"}}


def call(connector="noop", endpoint_url="", parameters=None):
    return Call(operation_id="op_1", action_id="act_1", connector=connector, endpoint_url=endpoint_url,
                parameters=parameters or {}, envelope=ENVELOPE)


@pytest.fixture
def local_endpoints(settings):
    settings.AGP_ALLOW_PRIVATE_URLS = True
    settings.AGP_CONNECTOR_RETRY_BASE_SECONDS = 0
    settings.AGP_CONNECTOR_ATTEMPTS = 3
    return settings


def test_it_does_nothing_and_says_ok_with_noop():
    assert connector_for("noop").execute(call()) == {"ok": True}


def test_it_sleeps_as_asked_within_the_bound(settings):
    settings.AGP_NOOP_MAX_SLEEP_SECONDS = 0
    started = time.monotonic()
    assert connector_for("noop").execute(call(parameters={"sleep_seconds": 30})) == {"ok": True}
    assert time.monotonic() - started < 1  # bounded by AGP_NOOP_MAX_SLEEP_SECONDS
    settings.AGP_NOOP_MAX_SLEEP_SECONDS = 30
    started = time.monotonic()
    connector_for("noop").execute(call(parameters={"sleep_seconds": 0.3}))
    assert time.monotonic() - started >= 0.3


@pytest.mark.parametrize("value", ["5", True, None, -3, [1]])
def test_it_ignores_a_sleep_that_is_not_a_positive_number(value):
    started = time.monotonic()
    assert connector_for("noop").execute(call(parameters={"sleep_seconds": value})) == {"ok": True}
    assert time.monotonic() - started < 1


def test_it_posts_the_signed_envelope_with_the_operation_as_idempotency_key(local_endpoints, receiver):
    receiver.answer((201, {"ticket": "T-1"}))
    result = connector_for("http").execute(call("http", receiver.url("/tool")))
    [request] = receiver.requests
    assert request.path == "/tool"
    assert request.json() == ENVELOPE
    assert request.headers["Idempotency-Key"] == "op_1"
    assert request.headers["AGP-Operation-Id"] == "op_1"
    assert request.headers["Content-Type"] == "application/json"
    assert result == {"status_code": 201, "body": {"ticket": "T-1"}, "body_hash": bytes_hash(b'{"ticket": "T-1"}')}


def test_it_fails_without_retrying_when_the_tool_refuses(local_endpoints, receiver):
    receiver.answer((422, {"error": "bad amount"}))
    with pytest.raises(ExecutionFailed) as caught:
        connector_for("http").execute(call("http", receiver.url()))
    assert len(receiver.requests) == 1
    body = caught.value.as_body()["error"]
    assert body["code"] == "AGP_EXECUTION_FAILED" and body["retryable"] is False
    assert body["details"]["status_code"] == 422
    assert body["details"]["response"]["body"] == {"error": "bad amount"}


def test_it_retries_a_tool_that_is_briefly_unavailable(local_endpoints, receiver):
    receiver.answer((503,), (429,), (200, {"done": 1}))
    result = connector_for("http").execute(call("http", receiver.url()))
    assert result["body"] == {"done": 1}
    assert len(receiver.requests) == 3
    # The same call each time: one idempotency key for every repeat.
    assert {r.headers["Idempotency-Key"] for r in receiver.requests} == {"op_1"}


def test_it_gives_up_after_the_configured_attempts(local_endpoints, receiver):
    receiver.answer((500,))
    with pytest.raises(ExecutionFailed) as caught:
        connector_for("http").execute(call("http", receiver.url()))
    assert len(receiver.requests) == 3
    assert caught.value.details["attempts"] == 3
    assert caught.value.details["reason"] == "HTTP 500"


def test_it_fails_when_the_endpoint_cannot_be_reached(local_endpoints, receiver):
    url = receiver.url()
    receiver.server.shutdown()
    receiver.server.server_close()
    with pytest.raises(ExecutionFailed) as caught:
        connector_for("http").execute(call("http", url))
    assert "ConnectionError" in caught.value.details["reason"]


def test_it_refuses_an_endpoint_inside_the_network(settings, receiver):
    settings.AGP_ALLOW_PRIVATE_URLS = False
    with pytest.raises(ExecutionFailed) as caught:
        connector_for("http").execute(call("http", receiver.url()))
    assert "loopback" in caught.value.details["reason"]
    assert receiver.requests == []


def test_it_fails_an_http_skill_without_endpoint():
    with pytest.raises(ExecutionFailed):
        connector_for("http").execute(call("http", ""))


def test_it_leaves_external_operations_to_their_executor():
    external = connector_for("external")
    assert external.completes is False
    assert connector_for("noop").completes and connector_for("http").completes


def test_it_refuses_an_unknown_connector():
    with pytest.raises(ExecutionFailed) as caught:
        connector_for("carrier-pigeon")
    assert caught.value.details == {"connector": "carrier-pigeon"}
