"""Cancellation of an operation before its connector is called: by its submitter, an operator,
or a freeze (docs/reference/execution.md, docs/reference/governance.md)."""

from typing import Any

from django.db import transaction
from django.utils import timezone
from django_fsm import can_proceed

from agp_project import errors
from core.ledger import ledger_append

from .budgets import payment_release
from .choices import CANCEL_ANY_SCOPE, EnvelopeStatus, OperationStatus
from .models import Operation
from .outcomes import OPERATION_RESOURCE, callback_enqueue, count_ended, envelope_status_set, operation_locked
from .selectors import action_trail


def frozen_error(freezes: list[dict[str, Any]], **details: Any) -> dict[str, Any]:
    """The ``error`` of an operation a freeze cancelled: 409 ``AGP_FROZEN``'s error object."""
    return errors.Frozen("Cancelled by a freeze before its connector was called; nothing was executed.",
                         details={"freezes": freezes, **details}).as_body()["error"]


def operation_cancelled_record(*, operation: Operation, actor: str, error: dict[str, Any] | None = None,
                               payload: dict[str, Any] | None = None) -> None:
    """Record a cancellation the caller just moved (``cancel`` or ``halt``) on the locked row.

    In the caller's transaction: nothing was executed, so the budget reservation is
    released, the envelope is ``failed``, ``operation.cancelled`` is ledgered and the
    callback enqueued. No receipt: a receipt records an execution.
    """
    count_ended(operation)
    now = timezone.now()
    operation.error = error
    operation.completed_at = operation.updated_at = now
    operation.lease_expires_at = None
    operation.save()
    envelope = operation.envelope
    payment_release(action_id=envelope.action_id, actor=actor)
    envelope_status_set(envelope=envelope, status=EnvelopeStatus.FAILED, operation_id=operation.operation_id,
                         actor=actor)
    ledger_append(event_type="operation.cancelled", resource_type=OPERATION_RESOURCE,
                  resource_id=operation.operation_id, actor=actor, root_principal=envelope.root_principal,
                  payload={**action_trail(envelope), **(payload or {})})
    callback_enqueue(operation)


def operation_cancel(*, operation_id: str, actor: str, operator: bool = False) -> Operation:
    """``PATCH /agp/operations/{id}`` ``{"status": "cancelled"}``: stop a pending operation (docs/reference/execution.md).

    Only the client that submitted the envelope may, or an operator (``operator``: the
    caller holds ``CANCEL_ANY_SCOPE``); anyone else is a 403. Under the row lock the workers
    claim with: a pending operation becomes ``cancelled``, its budget reservation is
    released, its envelope ``failed`` (nothing executed), all ledgered in this transaction;
    a worker that then receives its message sees a terminal operation and skips it. Any
    other state is 409 ``AGP_INVALID_TRANSITION``.
    """
    with transaction.atomic():
        operation = operation_locked(operation_id)
        if operation is None:
            raise errors.NotFound(f"No operation with id {operation_id!r}.")
        if not operator and actor != operation.envelope.submitted_by:
            raise errors.InsufficientScope(
                [CANCEL_ANY_SCOPE], message=f"Only the client that submitted operation {operation_id!r}, or a "
                                            f"client holding {CANCEL_ANY_SCOPE}, may cancel it.")
        if not can_proceed(operation.cancel):
            raise errors.InvalidTransition(
                from_state=operation.status, to_state=OperationStatus.CANCELLED, allowed=[],
                message=f"Operation {operation_id!r} is {operation.status}; only a pending operation can be "
                        f"cancelled.")
        operation.cancel()
        operation_cancelled_record(operation=operation, actor=actor)
    return operation
