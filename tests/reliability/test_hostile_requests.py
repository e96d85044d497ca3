"""Hostile request bodies and retries against the running stack (gunicorn as scripts/serve
runs it, PostgreSQL): the red-team findings about stored input (docs/security.md, "Hostile
clients").

- A lone UTF-16 surrogate or a NUL, in a key or a value, on each of the seven paths where
  the red-team run got a 500 (contexts, evaluation input, ledger payloads, capability
  ranges, receipts, envelope parameters, evidence items): a 400 in the error envelope naming
  where it is, and nothing written.
- Idempotency: a validate-only answer is not replayed for the same key and body sent with
  ``Prefer: respond-async``, and 413 and 415 answers are not stored, so the corrected
  request with the same key runs.
"""

import json

import pytest

from core.models import IdempotencyRecord, LedgerEvent
from decision.models import Context, EvidenceBundle, PolicyEvaluation
from execution.models import ActionEnvelope, Operation, Receipt
from registry.models import Capability
from tests.execution.factories import make_world
from tests.reliability.hostile import assert_envelope

pytestmark = pytest.mark.postgres

JSON = {"Content-Type": "application/json"}
# Each path: (the model a success would add a row to, the body with ``member`` added to its
# free-form object, the dotted path of that object).
SEVEN_PATHS = {
    "/agp/contexts": (Context, lambda w, op, member: {"task_id": w.task.task_id, "data": {"k": "v", **member}},
                      "data"),
    "/agp/policy-evaluations": (PolicyEvaluation, lambda w, op, member: {
        "policy_set_id": w.policy_set.policy_set_id, "task_id": w.task.task_id, "agent_id": w.agent_id,
        "input": {"action_class": "read", **member}}, "input"),
    "/agp/ledger-events": (LedgerEvent, lambda w, op, member: {
        "event_type": "client.note", "resource_type": "Note", "resource_id": "n-1", "payload": {"k": 1, **member}},
        "payload"),
    "/agp/capabilities": (Capability, lambda w, op, member: {
        "agent_id": w.agent_id, "delegation_id": w.delegation.delegation_id, "tool_id": w.tool_id,
        "operations": [w.operation], "allowed_parameter_ranges": {"limit": {"min": 0, "max": 10}, **member}},
        "allowed_parameter_ranges"),
    "/agp/receipts": (Receipt, lambda w, op, member: {
        "action_id": op["action_id"], "operation_id": op["operation_id"], "status": "succeeded",
        "result": {"ok": True, **member}}, "result"),
    "/agp/action-envelopes": (ActionEnvelope, lambda w, op, member: w.envelope_request(
        parameters={**w.parameters, **member}), "parameters"),
    "/agp/evidence-bundles": (EvidenceBundle, lambda w, op, member: {"task_id": w.task.task_id, "items": [
        {"uri": "https://evidence.example/1", "sha256": "0" * 64, "kind": "log", **member}]}, "items.0"),
}
HOSTILE = {  # member of the free-form object -> the name it gets in details.fields, under the object's path
    "lone surrogate in a value": ({"note": "\ud800"}, "note"),
    "lone surrogate in a key": ({"\udfff": 1}, "\\udfff"),
    "NUL in a value": ({"note": "a\x00b"}, "note"),
}


@pytest.mark.parametrize("path", SEVEN_PATHS)
def test_a_lone_surrogate_or_a_nul_on_each_path_that_was_a_500_is_a_400_naming_it(stack, as_client, path):
    api = as_client()
    world = make_world()
    # A pending operation (no worker runs here) and the envelope it executes, for the receipt.
    accepted = api.post(f"{stack.url}/agp/action-envelopes", json=world.bound_request(), timeout=30,
                        headers={"Prefer": "respond-async"})
    assert accepted.status_code == 202, accepted.text
    operation = {"operation_id": accepted.json()["operation_id"],
                 "action_id": Operation.objects.get(operation_id=accepted.json()["operation_id"]).envelope_id}
    model, body_with, where = SEVEN_PATHS[path]
    valid = api.post(f"{stack.url}{path}", json=body_with(world, operation, {}), timeout=30)
    assert valid.status_code < 500, valid.text  # the bodies are real requests, not refused for their shape

    for case, (member, name) in HOSTILE.items():
        before = (LedgerEvent.objects.count(), model.objects.count())
        # As the red-team run sent them: JSON escapes (\ud800, \u0000) in ASCII text; with a key, so
        # the answer is stored (a 400 is) without anything malformed reaching the database.
        text = json.dumps(body_with(world, operation, member), ensure_ascii=True)
        assert "\\ud800" in text or "\\udfff" in text or "\\u0000" in text

        response = api.post(f"{stack.url}{path}", data=text.encode(), timeout=30,
                            headers={**JSON, "Idempotency-Key": f"hostile-{case.replace(' ', '-')}"})

        error = assert_envelope(response, 400, "AGP_INVALID_REQUEST")
        assert list(error["details"]["fields"]) == [f"{where}.{name}"], (case, error)
        assert (LedgerEvent.objects.count(), model.objects.count()) == before


def test_a_validation_s_answer_is_not_replayed_for_an_execution_with_the_same_key_and_body(stack, as_client):
    api = as_client()
    text = json.dumps(make_world().bound_request())
    headers = {**JSON, "Idempotency-Key": "validate-then-execute"}

    validated = api.post(f"{stack.url}/agp/action-envelopes", data=text, headers=headers, timeout=30)
    assert validated.status_code == 200, validated.text
    executed = api.post(f"{stack.url}/agp/action-envelopes", data=text, timeout=30,
                        headers={**headers, "Prefer": "respond-async"})

    assert_envelope(executed, 422, "AGP_IDEMPOTENCY_KEY_MISMATCH")
    assert "Idempotent-Replayed" not in executed.headers
    assert not Operation.objects.exists()
    # The execution under a key of its own runs.
    fresh = api.post(f"{stack.url}/agp/action-envelopes", data=text, timeout=30,
                     headers={**JSON, "Idempotency-Key": "execute", "Prefer": "respond-async"})
    assert fresh.status_code == 202, fresh.text
    assert Operation.objects.filter(operation_id=fresh.json()["operation_id"]).exists()


@pytest.mark.parametrize(("status", "code"), [(415, "AGP_UNSUPPORTED_MEDIA_TYPE"), (413, "AGP_PAYLOAD_TOO_LARGE")])
def test_a_413_or_415_is_not_stored_and_the_corrected_request_with_the_same_key_runs(stack, as_client, status, code):
    api = as_client()
    event = {"event_type": "client.note", "resource_type": "Note", "resource_id": "n-1", "payload": {"n": 1}}
    key = {"Idempotency-Key": f"corrected-after-{status}"}
    if status == 415:
        refused = api.post(f"{stack.url}/agp/ledger-events", data=json.dumps(event), timeout=30,
                           headers={**key, "Content-Type": "text/plain"})
    else:
        too_large = {**event, "payload": {"blob": "x" * (1024 * 1024 + 1)}}
        # gunicorn closes a connection after answering when more than 64 KiB of its body was
        # left unread, and a WSGI application cannot say so in the answer: the client sends
        # the corrected request on a new connection (docs/reference/api.md).
        refused = api.post(f"{stack.url}/agp/ledger-events", data=json.dumps(too_large), timeout=30,
                           headers={**key, **JSON, "Connection": "close"})
    assert_envelope(refused, status, code)
    assert not IdempotencyRecord.objects.exists() and not LedgerEvent.objects.filter(event_type="client.note")

    corrected = api.post(f"{stack.url}/agp/ledger-events", data=json.dumps(event), headers={**key, **JSON},
                         timeout=30)

    assert corrected.status_code == 201, corrected.text
    assert "Idempotent-Replayed" not in corrected.headers
    assert LedgerEvent.objects.filter(event_type="client.note").count() == 1
    again = api.post(f"{stack.url}/agp/ledger-events", data=json.dumps(event), headers={**key, **JSON}, timeout=30)
    assert (again.status_code, again.headers.get("Idempotent-Replayed")) == (201, "true")
