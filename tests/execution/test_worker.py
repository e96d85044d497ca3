"""Execution by a real Celery worker process (docs/reference/execution.md): PostgreSQL and Redis, not eager mode.

The one end-to-end path (REST submit, the worker consuming the broker, the signed receipt), and
the worker's own database connection. What the worker runs is ``operation_execute`` and the
outbox's sweep and recovery, tested in process in tests/execution/test_runner.py and
tests/execution/test_operations_api.py (an external executor's receipt).
"""

from decimal import Decimal

import pytest

from agp_project.signing import verify_resource
from core.ledger_verification import ledger_verify
from decision.models import CommerceSession
from execution.models import ActionEnvelope, Operation, Payment
from tests.execution.factories import make_world
from tests.execution.worker import (  # noqa: F401
    ledger_event_types,
    module_worker,
    poll_until_ended,
    submit_async,
    test_broker,
    wait_for,
    worker_db,
)

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


def test_it_keeps_its_database_connection_between_tasks_and_recovers_when_it_is_cut(api, module_worker, worker_db):
    from django.db import connection

    def worker_backends():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pid, backend_start FROM pg_stat_activity WHERE datname = current_database() "
                           "AND pid <> pg_backend_pid() AND backend_type = 'client backend'")
            return set(cursor.fetchall())

    first = poll_until_ended(api, submit_async(api, make_world().envelope_request())["operation_id"], module_worker)
    # Both pool processes have run a task and opened their connection. Beat's recovery runs
    # every second, but one process may take every short task: more work is sent meanwhile.
    def all_connected():
        backends = worker_backends()
        if len(backends) >= module_worker.concurrency:
            return backends
        submit_async(api, make_world().envelope_request())
        return None

    kept = wait_for(all_connected, interval=0.5, message="both pool processes to connect", worker=module_worker)
    second = poll_until_ended(api, submit_async(api, make_world().envelope_request())["operation_id"], module_worker)
    # Celery's Django fixup would open a new backend for every task; the worker keeps its own.
    assert (first["status"], second["status"]) == ("succeeded", "succeeded")
    assert kept and worker_backends() == kept

    with connection.cursor() as cursor:  # the database drops the worker's connections
        cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
                       "AND pid <> pg_backend_pid() AND backend_type = 'client backend'")
    third = poll_until_ended(api, submit_async(api, make_world().envelope_request())["operation_id"], module_worker)

    assert third["status"] == "succeeded"
    assert Operation.objects.get(operation_id=third["operation_id"]).attempts == 1
    assert worker_backends().isdisjoint(kept)
