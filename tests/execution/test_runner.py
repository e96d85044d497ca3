"""The execution service in process (execution/runner.py): claims, leases, fencing, fail closed, recovery.

The same code runs inside the Celery worker (tests/execution/test_worker.py, its one end-to-end
path); here each step is driven directly so every branch is reachable on SQLite and PostgreSQL alike.
"""

import time
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from agp_project import errors
from agp_project.canonical import content_hash
from agp_project.signing import get_signer, verify_resource
from core.ledger_verification import ledger_verify
from core.models import OutboxMessage
from core.outbox import outbox_sweep
from decision.models import CommerceSession
from execution import connectors
from execution.models import ActionEnvelope, Operation, Payment, Receipt
from execution.runner import (
    Claim,
    lease_kept,
    operation_claim,
    operation_execute,
    operation_finish,
    operations_recover,
)
from execution.serializers_operations import ReceiptSerializer
from registry.models import Capability, Task
from tests.execution.factories import make_world
from tests.execution.receiver import receiver  # noqa: F401
from tests.execution.worker import (  # noqa: F401
    ledger_event_types,
    publishing_fails,
    submit_async,
    test_broker,
    worker_db,
)


def jwks():
    return {"keys": [get_signer().jwk()]}


def accept(api, world, **overrides) -> str:
    return submit_async(api, world.envelope_request(**overrides))["operation_id"]


def session_amounts(world):
    session = CommerceSession.objects.get(session_id=world.session.session_id)
    return session.spent_amount, session.reserved_amount


def test_it_claims_executes_and_records_everything_at_once(api, db):
    world = make_world(action_class="transact")
    operation_id = accept(api, world)

    assert operation_execute(operation_id=operation_id, executor="worker-a/pid-1") == "succeeded"

    operation = Operation.objects.get(operation_id=operation_id)
    assert (operation.status, operation.attempts, operation.executor) == ("succeeded", 1, "worker-a/pid-1")
    assert operation.connector == "noop" and operation.lease_expires_at is None and operation.error is None
    assert operation.started_at <= operation.completed_at == operation.updated_at
    receipt = Receipt.objects.get(operation_id=operation_id)
    assert (receipt.status, receipt.result, receipt.executor) == ("succeeded", {"ok": True}, "worker-a/pid-1")
    assert receipt.result_hash == content_hash({"ok": True})
    assert receipt.action_id == operation.envelope_id
    assert verify_resource(ReceiptSerializer(receipt).data, jwks())
    assert Payment.objects.get(envelope_id=receipt.action_id).status == "committed"
    assert session_amounts(world) == (Decimal("50"), Decimal("0"))
    assert ActionEnvelope.objects.get(action_id=receipt.action_id).status == "executed"
    assert ledger_event_types(operation_id) == ["operation.created", "operation.running", "operation.succeeded"]
    assert ledger_event_types(receipt.receipt_id) == ["receipt.issued"]


def test_it_does_nothing_when_the_same_message_comes_again(api, db):
    world = make_world(action_class="transact")
    operation_id = accept(api, world)
    operation_execute(operation_id=operation_id, executor="worker-a")

    assert operation_execute(operation_id=operation_id, executor="worker-b") == "done"

    assert Operation.objects.get(operation_id=operation_id).attempts == 1
    assert Receipt.objects.filter(operation_id=operation_id).count() == 1
    assert session_amounts(world) == (Decimal("50"), Decimal("0"))
    assert ledger_event_types(operation_id) == ["operation.created", "operation.running", "operation.succeeded"]


def test_it_ignores_a_message_for_an_operation_that_does_not_exist(db):
    assert operation_execute(operation_id="op_missing", executor="worker-a") == "missing"


def test_it_leaves_an_operation_alone_while_another_worker_holds_its_lease(api, db):
    operation_id = accept(api, make_world())
    claim = operation_claim(operation_id=operation_id, executor="worker-a")
    assert isinstance(claim, Claim) and claim.fence == 1

    assert operation_execute(operation_id=operation_id, executor="worker-b") == "busy"

    operation = Operation.objects.get(operation_id=operation_id)
    assert (operation.status, operation.attempts, operation.executor) == ("running", 1, "worker-a")
    assert operation.lease_expires_at > timezone.now()
    assert not Receipt.objects.filter(operation_id=operation_id).exists()


def test_it_takes_over_an_operation_whose_worker_stopped_renewing_its_lease(api, db):
    world = make_world(action_class="transact")
    operation_id = accept(api, world)
    dead = operation_claim(operation_id=operation_id, executor="worker-dead")
    Operation.objects.filter(operation_id=operation_id).update(lease_expires_at=timezone.now() - timedelta(seconds=1))

    assert operation_execute(operation_id=operation_id, executor="worker-alive") == "succeeded"

    operation = Operation.objects.get(operation_id=operation_id)
    assert (operation.status, operation.attempts) == ("succeeded", 2)
    assert Receipt.objects.get(operation_id=operation_id).executor == "worker-alive"
    assert ledger_event_types(operation_id) == ["operation.created", "operation.running", "operation.reclaimed",
                                                "operation.succeeded"]
    # The first worker was only slow, not dead: its late outcome is fenced off.
    assert operation_finish(operation_id=operation_id, fence=dead.fence, status="succeeded", result={"late": 1},
                            executor="worker-dead") is None
    assert Receipt.objects.filter(operation_id=operation_id).count() == 1
    assert session_amounts(world) == (Decimal("50"), Decimal("0"))


def test_it_drops_the_outcome_of_a_claim_taken_over_while_it_ran(api, db):
    operation_id = accept(api, make_world())
    first = operation_claim(operation_id=operation_id, executor="worker-slow")
    Operation.objects.filter(operation_id=operation_id).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    second = operation_claim(operation_id=operation_id, executor="worker-new")
    assert second.fence == first.fence + 1

    assert operation_finish(operation_id=operation_id, fence=first.fence, status="succeeded", result={},
                            executor="worker-slow") is None
    assert Operation.objects.get(operation_id=operation_id).status == "running"
    receipt = operation_finish(operation_id=operation_id, fence=second.fence, status="succeeded", result={"n": 2},
                               executor="worker-new")
    assert receipt.result == {"n": 2}
    assert Operation.objects.get(operation_id=operation_id).status == "succeeded"


def test_it_fails_closed_when_a_prerequisite_breaks_before_execution(api, db):
    world = make_world(action_class="transact")
    operation_id = accept(api, world)
    Task.objects.filter(pk=world.task.pk).update(status="closed")

    assert operation_execute(operation_id=operation_id, executor="worker-a") == "failed"

    operation = Operation.objects.get(operation_id=operation_id)
    assert operation.status == "failed" and operation.started_at is None and operation.attempts == 0
    assert operation.error["code"] == "AGP_PREREQUISITE_FAILED"
    assert operation.error["retryable"] is False
    assert operation.error["details"]["failed_checks"] == [
        {"check": "task", "reason": f"task {world.task.task_id!r} is closed, not open"}]
    assert not Receipt.objects.filter(operation_id=operation_id).exists()
    assert Payment.objects.get(envelope_id=operation.envelope_id).status == "released"
    assert session_amounts(world) == (Decimal("0"), Decimal("0"))
    assert ActionEnvelope.objects.get(action_id=operation.envelope_id).status == "failed"
    assert ledger_event_types(operation_id) == ["operation.created", "operation.failed"]


def test_it_checks_again_before_taking_over(api, db):
    world = make_world(action_class="transact")
    operation_id = accept(api, world)
    operation_claim(operation_id=operation_id, executor="worker-dead")
    Operation.objects.filter(operation_id=operation_id).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    Capability.objects.filter(pk=world.capability.pk).update(status="revoked")

    assert operation_execute(operation_id=operation_id, executor="worker-alive") == "failed"

    operation = Operation.objects.get(operation_id=operation_id)
    assert [c["check"] for c in operation.error["details"]["failed_checks"]] == ["capability"]
    assert not Receipt.objects.filter(operation_id=operation_id).exists()
    assert session_amounts(world) == (Decimal("0"), Decimal("0"))


def test_it_records_a_tool_failure_with_a_failed_receipt_and_releases_the_budget(api, db, settings):
    settings.AGP_ALLOW_PRIVATE_URLS = False
    world = make_world(action_class="transact", connector="http", endpoint_url="http://127.0.0.1:9/tool")
    operation_id = accept(api, world)

    assert operation_execute(operation_id=operation_id, executor="worker-a") == "failed"

    operation = Operation.objects.get(operation_id=operation_id)
    assert operation.error["code"] == "AGP_EXECUTION_FAILED"
    assert "loopback" in operation.error["details"]["reason"]
    receipt = Receipt.objects.get(operation_id=operation_id)
    assert receipt.status == "failed" and receipt.result == {"error": operation.error}
    assert verify_resource(ReceiptSerializer(receipt).data, jwks())
    assert session_amounts(world) == (Decimal("0"), Decimal("0"))
    assert ledger_event_types(operation_id) == ["operation.created", "operation.running", "operation.failed"]


def test_it_fails_the_operation_when_a_connector_breaks_unexpectedly(api, db, monkeypatch):
    def broken(self, call):
        raise RuntimeError("bug")

    monkeypatch.setattr(connectors.NoopConnector, "execute", broken)
    operation_id = accept(api, make_world())

    assert operation_execute(operation_id=operation_id, executor="worker-a") == "failed"

    operation = Operation.objects.get(operation_id=operation_id)
    assert operation.error["details"] == {"connector": "noop", "reason": "RuntimeError"}
    assert Receipt.objects.get(operation_id=operation_id).status == "failed"


def test_it_sends_the_signed_envelope_to_an_http_tool(api, db, settings, receiver):
    settings.AGP_ALLOW_PRIVATE_URLS = True
    world = make_world(connector="http", endpoint_url=receiver.url("/crm"))
    operation_id = accept(api, world)

    assert operation_execute(operation_id=operation_id, executor="worker-a") == "succeeded"

    [request] = receiver.requests
    document = request.json()
    assert verify_resource(document, jwks())
    assert document["action_id"] == Operation.objects.get(operation_id=operation_id).envelope_id
    assert request.headers["Idempotency-Key"] == operation_id
    assert Receipt.objects.get(operation_id=operation_id).result["body"] == {"received": True}


def test_it_leaves_an_external_operation_running_for_its_executor(api, db):
    operation_id = accept(api, make_world(connector="external"))

    assert operation_execute(operation_id=operation_id, executor="worker-a") == "awaiting_receipt"

    operation = Operation.objects.get(operation_id=operation_id)
    assert (operation.status, operation.connector, operation.lease_expires_at) == ("running", "external", None)
    assert operation_execute(operation_id=operation_id, executor="worker-b") == "busy"
    Operation.objects.filter(operation_id=operation_id).update(updated_at=timezone.now() - timedelta(days=1))
    assert operations_recover() == 0  # no lease to expire: nothing to take over


def test_it_re_enqueues_stalled_operations_once_per_period(api, db, settings):
    settings.AGP_RECOVER_PENDING_AFTER_SECONDS = 60
    settings.AGP_OPERATION_LEASE_SECONDS = 30
    lost = accept(api, make_world())
    dead = accept(api, make_world())
    alive = accept(api, make_world())
    fresh = accept(api, make_world())
    operation_claim(operation_id=dead, executor="worker-dead")
    operation_claim(operation_id=alive, executor="worker-alive")
    an_hour_ago = timezone.now() - timedelta(hours=1)
    Operation.objects.filter(operation_id__in=[lost, dead, alive]).update(updated_at=an_hour_ago)
    Operation.objects.filter(operation_id=dead).update(lease_expires_at=an_hour_ago)

    def messages(operation_id):
        return sum(1 for args in OutboxMessage.objects.filter(task_name="agp.execute_operation")
                   .values_list("args", flat=True) if args == [operation_id])

    before = {op: messages(op) for op in (lost, dead, alive, fresh)}
    assert operations_recover() == 2
    after = {op: messages(op) for op in (lost, dead, alive, fresh)}
    assert {op: after[op] - before[op] for op in after} == {lost: 1, dead: 1, alive: 0, fresh: 0}
    assert operations_recover() == 0  # nudged: not again before the period has passed
    # The message whose first one was lost runs the operation once.
    assert operation_execute(operation_id=lost, executor="worker-a") == "succeeded"
    assert Operation.objects.get(operation_id=lost).attempts == 1


def test_the_sweep_publishes_what_a_failed_publish_after_the_commit_left_in_the_outbox(api, db):
    # The on-commit publish fails (as if the web process died right after its commit).
    with publishing_fails():
        operation_id = accept(api, make_world())
    message = OutboxMessage.objects.get(task_name="agp.execute_operation", status="pending")
    assert message.args == [operation_id]
    assert outbox_sweep() == 0  # younger than the sweep's grace: its own publish may still come

    OutboxMessage.objects.filter(pk=message.pk).update(created_at=timezone.now() - timedelta(minutes=1))
    assert outbox_sweep() == 1

    assert OutboxMessage.objects.get(pk=message.pk).status == "published"
    assert outbox_sweep() == 0
    assert operation_execute(operation_id=operation_id, executor="worker-a") == "succeeded"
    assert Receipt.objects.filter(operation_id=operation_id).count() == 1


def test_it_fails_an_operation_whose_delegation_was_revoked_before_a_worker_ran_it(api, db):
    world = make_world(action_class="transact")
    operation_id = accept(api, world)
    revoked = api.post("/agp/revocations", {"target_type": "delegation", "target_id": world.delegation.delegation_id,
                                            "reason": "compromised agent", "revoked_by": world.root_principal},
                       format="json")
    assert revoked.status_code == 201, revoked.content

    assert operation_execute(operation_id=operation_id, executor="worker-a") == "failed"

    operation = Operation.objects.get(operation_id=operation_id)
    assert operation.status == "failed" and operation.started_at is None
    assert operation.error["code"] == "AGP_PREREQUISITE_FAILED"
    assert operation.error["retryable"] is False
    assert "delegation" in {item["check"] for item in operation.error["details"]["failed_checks"]}
    assert not Receipt.objects.filter(operation_id=operation_id).exists()  # nothing executed
    assert Payment.objects.get(envelope_id=operation.envelope_id).status == "released"
    assert session_amounts(world) == (Decimal("0"), Decimal("0"))
    assert ActionEnvelope.objects.get(action_id=operation.envelope_id).status == "failed"
    assert ledger_event_types(operation_id) == ["operation.created", "operation.failed"]
    assert ledger_verify().verified


@pytest.mark.postgres
def test_it_renews_the_lease_while_the_connector_runs(api, worker_db, test_broker, settings):
    settings.AGP_OPERATION_LEASE_SECONDS = 1
    operation_id = accept(api, make_world())
    claim = operation_claim(operation_id=operation_id, executor="worker-a")
    first = Operation.objects.get(operation_id=operation_id).lease_expires_at

    with lease_kept(operation_id=operation_id, fence=claim.fence):
        time.sleep(1.5)
    renewed = Operation.objects.get(operation_id=operation_id).lease_expires_at
    assert renewed - first >= timedelta(seconds=1)

    # A stale claim renews nothing.
    with lease_kept(operation_id=operation_id, fence=claim.fence + 1):
        time.sleep(0.8)
    assert Operation.objects.get(operation_id=operation_id).lease_expires_at == renewed


def test_it_ledgers_the_envelope_becoming_executed_with_the_operation(api, db):
    from core.models import LedgerEvent

    world = make_world(action_class="transact")
    operation_id = accept(api, world)
    action_id = Operation.objects.get(operation_id=operation_id).envelope_id

    assert operation_execute(operation_id=operation_id, executor="worker-a") == "succeeded"

    assert ActionEnvelope.objects.get(action_id=action_id).status == "executed"
    event = LedgerEvent.objects.filter(resource_id=action_id).order_by("sequence").last()
    assert (event.event_type, event.resource_type) == ("envelope.executed", "ActionEnvelope")
    assert event.payload == {"from": "accepted", "to": "executed", "operation_id": operation_id,
                             "task_id": event.task_id, "action_id": action_id}
    assert event.task_id == ActionEnvelope.objects.get(action_id=action_id).task_id


def test_it_ledgers_the_envelope_failing_when_a_prerequisite_breaks(api, db):
    from core.models import LedgerEvent

    world = make_world(action_class="transact")
    operation_id = accept(api, world)
    action_id = Operation.objects.get(operation_id=operation_id).envelope_id
    Task.objects.filter(pk=world.task.pk).update(status="closed")

    assert operation_execute(operation_id=operation_id, executor="worker-a") == "failed"

    assert ActionEnvelope.objects.get(action_id=action_id).status == "failed"
    event = LedgerEvent.objects.filter(resource_id=action_id).order_by("sequence").last()
    assert (event.event_type, event.payload) == (
        "envelope.failed", {"from": "accepted", "to": "failed", "operation_id": operation_id,
                            "task_id": ActionEnvelope.objects.get(action_id=action_id).task_id, "action_id": action_id})


def test_it_answers_a_receipt_id_that_lost_the_race_with_409_and_rolls_back(api, db):
    from core.models import LedgerEvent

    first = accept(api, make_world(connector="external"))
    second = accept(api, make_world(connector="external"))
    for operation_id in (first, second):
        assert operation_execute(operation_id=operation_id, executor="worker-a") == "awaiting_receipt"
    first_action = Operation.objects.get(operation_id=first).envelope_id
    second_action = Operation.objects.get(operation_id=second).envelope_id
    assert api.post("/agp/receipts", {"action_id": first_action, "operation_id": first, "status": "succeeded",
                                      "receipt_id": "rcpt-raced"}, format="json").status_code == 201
    events_before = LedgerEvent.objects.count()

    # The loser of the race has passed receipt_submit's existence check already: its
    # INSERT is what collides.
    with pytest.raises(errors.Conflict):
        operation_finish(operation_id=second, fence=None, status="succeeded", result={}, executor="ext",
                         actor="ext", receipt_id="rcpt-raced")

    assert Operation.objects.get(operation_id=second).status == "running"
    assert ActionEnvelope.objects.get(action_id=second_action).status == "accepted"
    assert Receipt.objects.get(receipt_id="rcpt-raced").operation_id == first
    assert LedgerEvent.objects.count() == events_before
    response = api.post("/agp/receipts", {"action_id": second_action, "operation_id": second,
                                          "status": "succeeded", "receipt_id": "rcpt-raced"}, format="json")
    assert response.status_code == 409 and response.json()["error"]["code"] == "AGP_CONFLICT"
