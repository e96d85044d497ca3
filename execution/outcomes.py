"""Writes that end an operation, in the caller's transaction on the locked operation row.

The runner (claim, execute, finish), an external executor's receipt and a cancellation all
end an operation through these: the envelope's status, the receipt, the ledger events and
the callback's outbox message are written together or not at all.
"""

from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from agp_project import errors
from agp_project.canonical import content_hash
from agp_project.ids import new_id
from agp_project.metrics import ENVELOPES, OPERATIONS_ENDED, count_on_commit
from agp_project.signing import sign_resource
from core.ledger import ledger_append
from core.outbox import outbox_enqueue

from .budgets import payment_commit, payment_release
from .choices import CALLBACK_TASK, WORKER_ACTOR, EnvelopeStatus, ReceiptStatus
from .documents import receipt_document
from .models import ActionEnvelope, Operation, Receipt
from .selectors import action_trail, receipt_governance

# Resource types as the rest of the execution ledger names them (execution/services.py).
OPERATION_RESOURCE = "Operation"


def envelope_status_set(*, envelope: ActionEnvelope, status: str, operation_id: str, actor: str) -> None:
    """Move the envelope to executed/failed and ledger it (docs/reference/ledger.md), in the caller's transaction."""
    ActionEnvelope.objects.filter(pk=envelope.pk).update(status=status)
    count_on_commit(ENVELOPES.labels(status))
    ledger_append(event_type=f"envelope.{status}", resource_type="ActionEnvelope", resource_id=envelope.action_id,
                  actor=actor, root_principal=envelope.root_principal,
                  payload={**action_trail(envelope), "from": envelope.status, "to": status,
                                        "operation_id": operation_id})
    envelope.status = status


def count_ended(operation: Operation) -> None:
    count_on_commit(OPERATIONS_ENDED.labels(operation.status))


def callback_enqueue(operation: Operation) -> None:
    if operation.callback_url:
        outbox_enqueue(task_name=CALLBACK_TASK, args=[operation.operation_id])


def operation_locked(operation_id: str) -> Operation | None:
    """The operation row, locked, with its envelope (one query; the lock is on the operation only).

    The row lock serialises every worker holding a message for this operation (a
    redelivery, a recovery nudge, a duplicate publish): one claims, the others see the
    claim when the lock is released.
    """
    return (Operation.objects.select_related("envelope").select_for_update(of=("self",))
            .filter(operation_id=operation_id).first())



def receipt_issue(*, operation: Operation, status: str, result: dict[str, Any], started_at: datetime,
                  completed_at: datetime, executor: str, receipt_id: str | None = None,
                  posted_by: str = WORKER_ACTOR, governance: dict[str, Any] | None = None) -> Receipt:
    """Create the operation's signed receipt (in the caller's transaction).

    ``governance``: its why-record, when the caller has it (``receipt_governance``); read otherwise.
    """
    receipt = Receipt(receipt_id=receipt_id or new_id("rcpt"), operation_id=operation.operation_id,
                      action_id=operation.envelope_id, status=status, result=result,
                      result_hash=content_hash(result), started_at=started_at, completed_at=completed_at,
                      executor=executor, posted_by=posted_by,
                      governance=governance or receipt_governance(envelope=operation.envelope),
                      created_at=completed_at)
    # Sign exactly what the API shows (the representation without its signature).
    receipt.signature = sign_resource(receipt_document(receipt))
    if receipt_id is None:  # a fresh id cannot collide: no savepoint needed
        receipt.save(force_insert=True)
        return receipt
    try:
        with transaction.atomic():
            receipt.save(force_insert=True)
    except IntegrityError:
        # Two external receipts with one receipt_id raced past receipt_submit's check: the
        # loser is a 409 and its whole transaction (operation, envelope, ledger) rolls back.
        raise errors.Conflict(f"A receipt with receipt_id {receipt.receipt_id!r} exists.") from None
    return receipt



def outcome_record(*, operation: Operation, status: str, result: dict[str, Any], executor: str,
                    error: dict[str, Any] | None, actor: str, receipt_id: str | None = None,
                    started_at: datetime | None = None, completed_at: datetime | None = None,
                    posted_by: str = WORKER_ACTOR, governance: dict[str, Any] | None = None) -> Receipt:
    """Write a running operation's outcome, in the caller's transaction, on the locked row.

    ``governance``: the receipt's why-record, when the caller built it (``receipt_issue``)."""
    now = timezone.now()
    succeeded = status == ReceiptStatus.SUCCEEDED
    envelope = operation.envelope
    if succeeded:
        # payment_ref was fixed (and signed) at acceptance; the payment moves under it.
        if envelope.payment_ref:
            payment_commit(action_id=envelope.action_id, actor=actor)
        operation.succeed()
        envelope_status = EnvelopeStatus.EXECUTED
    else:
        if envelope.payment_ref:
            payment_release(action_id=envelope.action_id, actor=actor)
        operation.fail()
        operation.error = error
        envelope_status = EnvelopeStatus.FAILED
    count_ended(operation)
    operation.completed_at = operation.updated_at = now
    operation.lease_expires_at = None
    operation.save()
    envelope_status_set(envelope=envelope, status=envelope_status, operation_id=operation.operation_id, actor=actor)
    receipt = receipt_issue(operation=operation, status=status, result=result,
                            started_at=started_at or operation.started_at or now,
                            completed_at=completed_at or now, executor=executor, receipt_id=receipt_id,
                            posted_by=posted_by, governance=governance)
    ledger_append(event_type=f"operation.{operation.status}", resource_type=OPERATION_RESOURCE,
                  resource_id=operation.operation_id, actor=actor, root_principal=envelope.root_principal,
                  payload={**action_trail(envelope), "receipt_id": receipt.receipt_id,
                           "executor": executor, "error_code": (error or {}).get("code")})
    ledger_append(event_type="receipt.issued", resource_type="Receipt", resource_id=receipt.receipt_id,
                  actor=actor, root_principal=envelope.root_principal, payload={**action_trail(envelope), "operation_id": operation.operation_id,
                                        "status": status, "result_hash": receipt.result_hash})
    callback_enqueue(operation)
    return receipt
