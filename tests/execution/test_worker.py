"""Execution by a real Celery worker process (CONTRACT C8): PostgreSQL and Redis, not eager mode."""

from decimal import Decimal

import pytest

from agp_project.signing import verify_resource
from core.ledger import ledger_verify
from decision.models import CommerceSession
from execution.models import ActionEnvelope, Operation, Payment, Receipt
from tests.execution.factories import make_world
from tests.execution.worker import (  # noqa: F401
    ledger_event_types, module_worker, poll_until_ended, submit_async, test_broker, worker_db)

pytestmark = pytest.mark.postgres


def test_it_executes_an_accepted_envelope_and_issues_a_receipt_that_verifies_against_the_jwks(
        api, module_worker, worker_db):
    world = make_world(action_class="transact")
    accepted = submit_async(api, world.envelope_request())
    operation_id = accepted["operation_id"]
    assert accepted["status"] == "pending"

    final = poll_until_ended(api, operation_id, module_worker)

    assert final["status"] == "succeeded", final
    assert final["error"] is None
    assert final["status_url"] == f"http://testserver/agp/operations/{operation_id}"
    listing = api.get("/agp/receipts", {"operation_id": operation_id})
    assert listing.status_code == 200
    [receipt] = listing.json()["items"]
    assert receipt["type"] == "Receipt"
    assert receipt["status"] == "succeeded"
    assert receipt["action_id"] == accepted["result_url"].rsplit("/", 1)[1]
    assert receipt["executor"].startswith("w")
    jwks = api.get("/.well-known/jwks.json").json()
    assert verify_resource(receipt, jwks)
    assert not verify_resource({**receipt, "status": "failed"}, jwks)
    assert api.get(f"/agp/receipts/{receipt['receipt_id']}").json() == receipt

    operation = Operation.objects.get(operation_id=operation_id)
    assert operation.attempts == 1 and operation.lease_expires_at is None
    payment = Payment.objects.get(envelope_id=receipt["action_id"])
    assert payment.status == "committed"
    session = CommerceSession.objects.get(session_id=world.session.session_id)
    assert (session.spent_amount, session.reserved_amount) == (Decimal("50"), Decimal("0"))
    assert ActionEnvelope.objects.get(action_id=receipt["action_id"]).status == "executed"
    assert ledger_event_types(operation_id) == ["operation.created", "operation.running", "operation.succeeded"]
    assert ledger_event_types(receipt["receipt_id"]) == ["receipt.issued"]
    assert ledger_event_types(payment.payment_id) == ["payment.reserved", "payment.committed"]
    verification = ledger_verify()
    assert verification.verified and verification.first_broken_sequence is None
