"""Freezes reaching running work (docs/reference/governance.md), with a real Celery worker on PostgreSQL and Redis.

A freeze is created through the API while the worker runs: what it stops must be cancelled
within 5 seconds (reservation released, callback delivered, ``operation.cancelled``
ledgered), also behind a backlog of other work, and lifting must restore service.

What a freeze matches (tools, principals, everything), and that it leaves an operation already
passed to its connector to complete, are the enforcement's logic: tests/execution/test_freezes.py
drives it in process; lifting twice is tests/registry/test_freezes_api.py's.
"""

import time
from decimal import Decimal

import pytest

from core.models import LedgerEvent
from decision.models import CommerceSession
from execution.models import Operation, Receipt
from tests.execution.factories import make_world
from tests.execution.receiver import receiver  # noqa: F401
from tests.execution.worker import (  # noqa: F401
    ledger_event_types,
    module_worker,
    poll_until_ended,
    publishing_fails,
    submit_async,
    test_broker,
    wait_for,
    worker_db,
)

pytestmark = pytest.mark.postgres

# docs/reference/governance.md: how soon a running worker must have cancelled what a freeze stops.
REACH_SECONDS = 5


def status(operation_id):
    return Operation.objects.get(operation_id=operation_id).status


def freeze(api, target_type, target_id):
    response = api.post("/agp/freezes", {"target_type": target_type, "target_id": target_id,
                                         "reason": "operator stop"}, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def lift(api, freeze_id):
    return api.patch(f"/agp/freezes/{freeze_id}", {"status": "lifted"}, format="json")


def validate(api, world, **overrides):
    return api.post("/agp/action-envelopes", world.envelope_request(**overrides), format="json")


def failed_checks(response):
    assert response.status_code == 422, response.content
    return [item["check"] for item in response.json()["error"]["details"]["failed_checks"]]


def callbacks_of(receiver, operation_id):
    return [r.json() for r in receiver.requests if r.json().get("operation_id") == operation_id]


def test_an_agent_freeze_stops_everything_of_the_agent_within_five_seconds_and_lifting_restores_it(
        api, settings, receiver, module_worker, worker_db):
    settings.AGP_ALLOW_PRIVATE_URLS = True  # the callback receiver listens on 127.0.0.1
    world = make_world(action_class="transact", connector="external")
    hook = receiver.url("/hook")
    # One operation waiting for its external executor's receipt...
    awaiting = submit_async(api, world.envelope_request(callback_url=hook))["operation_id"]
    wait_for(lambda: status(awaiting) == "running", message="the external operation to await its receipt",
             worker=module_worker)
    # ... and one pending: accepted, its message not published yet (as if the web process
    # died right after its commit: the outbox sweep would publish it 30 s later).
    with publishing_fails():
        pending = submit_async(api, world.envelope_request(callback_url=hook))["operation_id"]
    session = CommerceSession.objects.get(pk=world.session.pk)
    assert session.reserved_amount == Decimal("100")

    started = time.monotonic()
    frozen = freeze(api, "agent", world.agent_id)
    wait_for(lambda: status(awaiting) == status(pending) == "cancelled", timeout=REACH_SECONDS,
             interval=0.05, message="the freeze to cancel both operations", worker=module_worker)
    assert time.monotonic() - started < REACH_SECONDS

    # The pending one is cancelled by the freeze's enforcement, or, when the outbox sweep has
    # published its message first, by the worker's re-check before the connector, or, when the
    # worker had already handed it to its external executor, by the enforcement while it
    # awaited the receipt: each time by this freeze and before anything ran (the enforcement
    # of pending operations alone is tests/execution/test_freezes.py's).
    for operation_id, stages in ((awaiting, {"awaiting_receipt"}),
                                 (pending, {"pending", "execution_recheck", "awaiting_receipt"})):
        body = api.get(f"/agp/operations/{operation_id}").json()
        assert body["status"] == "cancelled"
        assert body["error"]["code"] == "AGP_FROZEN"
        assert body["error"]["details"]["freezes"][0]["freeze_id"] == frozen["freeze_id"]
        cancelled = LedgerEvent.objects.get(resource_id=operation_id, event_type="operation.cancelled")
        assert cancelled.payload["stage"] in stages

        assert cancelled.payload["freeze_ids"] == [frozen["freeze_id"]]
        assert not Receipt.objects.filter(operation_id=operation_id).exists()
    session.refresh_from_db()
    assert (session.reserved_amount, session.spent_amount) == (Decimal("0"), Decimal("0"))
    wait_for(lambda: callbacks_of(receiver, awaiting) and callbacks_of(receiver, pending),
             message="both callbacks", worker=module_worker)
    assert callbacks_of(receiver, awaiting)[0]["status"] == callbacks_of(receiver, pending)[0]["status"] == "cancelled"

    # The executor's receipt comes after the freeze: refused.
    action_id = Operation.objects.get(operation_id=awaiting).envelope_id
    late = api.post("/agp/receipts", {"action_id": action_id, "operation_id": awaiting, "status": "succeeded"},
                    format="json")
    assert late.status_code == 409 and status(awaiting) == "cancelled"

    # The next envelope fails with `freeze` listed among every failed check.
    assert failed_checks(validate(api, world)) == ["freeze"]
    assert failed_checks(validate(api, world, created_at="2999-01-01T00:00:00Z")) == ["created_at", "freeze"]
    # The agent's evaluations are refused.
    evaluation = {"policy_set_id": world.policy_set.policy_set_id, "task_id": world.task.task_id,
                  "agent_id": world.agent_id, "input": {"action_class": "transact"}}
    refused = api.post("/agp/policy-evaluations", evaluation, format="json")
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "AGP_FROZEN"

    # Lifting restores service; cancelled operations stay cancelled; lifting twice is a 409.
    assert lift(api, frozen["freeze_id"]).status_code == 200
    assert lift(api, frozen["freeze_id"]).status_code == 409
    assert api.post("/agp/policy-evaluations", evaluation, format="json").status_code == 201
    resumed = submit_async(api, world.envelope_request())["operation_id"]
    wait_for(lambda: status(resumed) == "running", message="the resumed operation to reach its executor",
             worker=module_worker)
    action_id = Operation.objects.get(operation_id=resumed).envelope_id
    done = api.post("/agp/receipts", {"action_id": action_id, "operation_id": resumed, "status": "succeeded"},
                    format="json")
    assert done.status_code == 201 and status(resumed) == "succeeded"
    assert (status(awaiting), status(pending)) == ("cancelled", "cancelled")


def test_a_freeze_reaches_a_frozen_agents_operation_ahead_of_a_backlog_of_other_work(
        api, module_worker, worker_db):
    # Twelve 2-second operations of another agent: six seconds of work per worker process,
    # queued before the frozen agent's operation.
    busy = make_world(parameters={"limit": 10, "sleep_seconds": 2})
    backlog = [submit_async(api, busy.envelope_request())["operation_id"] for _ in range(12)]
    world = make_world()
    pending = submit_async(api, world.envelope_request())["operation_id"]
    # The backlog has started when any of it has been claimed (which one first is the broker's
    # business, and a 2-second operation may end between two looks).
    wait_for(lambda: any(status(operation_id) != "pending" for operation_id in backlog),
             message="the backlog to start", worker=module_worker)

    started = time.monotonic()
    frozen = freeze(api, "agent", world.agent_id)
    wait_for(lambda: status(pending) == "cancelled", timeout=REACH_SECONDS, interval=0.05,
             message="the freeze to cancel the operation behind the backlog", worker=module_worker)
    assert time.monotonic() - started < REACH_SECONDS
    # The freeze's enforcement cancelled it while it waited (stage "pending"), not the worker's
    # re-check when its turn came behind the backlog.
    body = api.get(f"/agp/operations/{pending}").json()
    assert body["error"]["details"]["freezes"][0]["freeze_id"] == frozen["freeze_id"]
    assert LedgerEvent.objects.get(resource_id=pending, event_type="operation.cancelled").payload["stage"] == "pending"

    # The rest of the backlog is stopped too, and what was running ends as it would.
    freeze(api, "agent", busy.agent_id)
    ended = [poll_until_ended(api, operation_id, module_worker)["status"] for operation_id in backlog]
    assert set(ended) <= {"succeeded", "cancelled"} and "cancelled" in ended
