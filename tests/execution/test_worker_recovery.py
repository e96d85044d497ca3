"""A worker that is not there yet, or dies mid-execution (CONTRACT C8): real worker processes.

Each test starts (and kills) its own workers, so no shared worker may run in this module.
"""

import time
from decimal import Decimal

import pytest

from core.ledger import ledger_verify
from decision.models import CommerceSession
from execution.models import ActionEnvelope, Operation, Payment, Receipt
from tests.execution.factories import make_world
from tests.execution.worker import (  # noqa: F401
    ledger_event_types,
    poll_until_ended,
    submit_async,
    test_broker,
    wait_for,
    worker_db,
    worker_factory,
)

pytestmark = pytest.mark.postgres


def test_it_fails_an_operation_whose_delegation_is_revoked_before_a_worker_runs_it(api, worker_factory, worker_db):
    world = make_world(action_class="transact")
    accepted = submit_async(api, world.envelope_request())  # no worker yet: the message waits in the broker
    operation_id = accepted["operation_id"]
    revoked = api.post("/agp/revocations", {"target_type": "delegation", "target_id": world.delegation.delegation_id,
                                            "reason": "compromised agent", "revoked_by": world.root_principal},
                       format="json")
    assert revoked.status_code == 201, revoked.content

    worker = worker_factory.start()
    final = poll_until_ended(api, operation_id, worker)

    assert final["status"] == "failed"
    assert final["error"]["code"] == "AGP_PREREQUISITE_FAILED"
    assert final["error"]["retryable"] is False
    failed_checks = {item["check"] for item in final["error"]["details"]["failed_checks"]}
    assert "delegation" in failed_checks
    assert not Receipt.objects.filter(operation_id=operation_id).exists()  # nothing executed
    operation = Operation.objects.get(operation_id=operation_id)
    assert operation.started_at is None
    action_id = operation.envelope_id
    assert Payment.objects.get(envelope_id=action_id).status == "released"
    session = CommerceSession.objects.get(session_id=world.session.session_id)
    assert (session.spent_amount, session.reserved_amount) == (Decimal("0"), Decimal("0"))
    assert ActionEnvelope.objects.get(action_id=action_id).status == "failed"
    assert ledger_event_types(operation_id) == ["operation.created", "operation.failed"]
    assert ledger_verify().verified


def test_it_finishes_exactly_once_after_the_worker_is_killed_mid_execution(api, worker_factory, worker_db):
    world = make_world(action_class="transact", allowed_parameter_ranges={
        "amount": {"min": 0, "max": 100}, "currency": {"enum": ["USD"]}, "sleep_seconds": {"min": 0, "max": 30}})
    first = worker_factory.start()
    parameters = {"amount": 50, "currency": "USD", "sleep_seconds": 4}
    accepted = submit_async(api, world.bound_request(parameters=parameters))
    operation_id = accepted["operation_id"]
    wait_for(lambda: Operation.objects.filter(operation_id=operation_id, status="running").exists(),
             message="the operation to start", worker=first)
    time.sleep(0.5)  # well inside the 4 s noop

    first.kill()
    assert Operation.objects.get(operation_id=operation_id).status == "running"
    second = worker_factory.start()
    final = poll_until_ended(api, operation_id, second, timeout=40)

    assert final["status"] == "succeeded", final
    operation = Operation.objects.get(operation_id=operation_id)
    assert operation.attempts == 2
    assert Receipt.objects.filter(operation_id=operation_id).count() == 1
    receipt = Receipt.objects.get(operation_id=operation_id)
    assert receipt.executor.startswith(second.name)
    assert Payment.objects.filter(envelope_id=operation.envelope_id).count() == 1
    assert Payment.objects.get(envelope_id=operation.envelope_id).status == "committed"
    session = CommerceSession.objects.get(session_id=world.session.session_id)
    assert (session.spent_amount, session.reserved_amount) == (Decimal("50"), Decimal("0"))
    assert ledger_event_types(operation_id) == ["operation.created", "operation.running", "operation.reclaimed",
                                        "operation.succeeded"]
    assert ledger_verify().verified
