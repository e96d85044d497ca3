"""The execution service (docs/reference/execution.md): claim, re-check, execute, record, exactly once in effect.

One operation runs like this (``operation_execute``, called by the ``agp.execute_operation``
task with nothing but the operation id):

1. **Claim** (one transaction, the operation row locked): a ``pending`` operation moves to
   ``running``; a ``running`` one whose lease has expired (its worker died) is taken over.
   Anything else (terminal, or running under a live lease, or waiting for an external
   receipt) is left alone, so a redelivered or duplicated message does nothing. Every
   prerequisite is re-checked here, at execution time: if one no longer holds the
   operation fails with the docs/reference/api.md ``AGP_PREREQUISITE_FAILED`` body, the budget is released,
   and nothing executes; if a freeze (docs/reference/governance.md) stops it, it is ``cancelled`` instead, with
   the ``AGP_FROZEN`` body. The claim's commit is the moment an operation is *passed to
   its connector*: the connector is called right after it, with nothing in between but
   starting the lease's heartbeat (docs/decisions/operator-controls.md).
2. **Execute** outside any transaction, while a heartbeat thread renews the lease. Each
   claim increments ``attempts``; that number is the fencing token of the claim.
3. **Finish** (one transaction): only if the operation is still ``running`` under the same
   fencing token, write everything at once: the operation's terminal state, the payment
   commit or release, the signed receipt, the envelope's status, the ledger events and the
   callback's outbox message. A kill at any point leaves all of it or none of it; a worker
   whose lease was taken over finds the token changed and writes nothing.

The connector call is the only step that may happen twice (a worker killed after calling
the tool but before step 3): ``noop`` is harmless and ``http`` sends the operation id as
``Idempotency-Key`` so the tool can recognise the repeat. An ``mcp`` call carries no such
key, so it is never made twice: the worker that takes over such an operation fails it,
saying the tool may have run (``_fail_interrupted``).
"""

import logging
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q, Subquery
from django.utils import timezone

from agp_project import errors
from agp_project.metrics import CONNECTOR_CALLS, ENVELOPE_FAILED_CHECKS, count_on_commit
from core.ledger import ledger_append, ledger_batch
from core.outbox import outbox_enqueue, outbox_request_id
from registry.models import Task
from registry.services import refuse_frozen

from .budgets import payment_release
from .cancellation import frozen_error, operation_cancelled_record
from .checks import envelope_recheck
from .choices import EXECUTE_TASK, OPERATION_TERMINAL, WORKER_ACTOR, EnvelopeStatus, OperationStatus, ReceiptStatus
from .connectors import Call, ExecutionFailed, connector_for
from .documents import envelope_document
from .models import ActionEnvelope, Operation, Receipt
from .outcomes import (
    OPERATION_RESOURCE,
    callback_enqueue,
    count_ended,
    envelope_status_set,
    operation_locked,
    outcome_record,
)
from .selectors import action_trail, receipt_governance

logger = logging.getLogger(__name__)


def _lease() -> timedelta:
    return timedelta(seconds=settings.AGP_OPERATION_LEASE_SECONDS)


@dataclass(frozen=True)
class Claim:
    """A worker's hold on a running operation; ``fence`` is ``Operation.attempts`` at claim time."""

    operation_id: str
    action_id: str
    fence: int
    connector: str
    call: Call
    # The receipt's why-record, from the re-check's records (none for an external executor,
    # whose receipt comes later through receipt_submit).
    governance: dict[str, Any]


def _fail_prerequisites(*, operation: Operation, envelope: ActionEnvelope, failed_checks: list[dict],
                        executor: str, now: datetime) -> None:
    """Inside the claim transaction: the re-check failed, so nothing executes."""
    err = errors.PrerequisiteFailed(
        "A governance prerequisite no longer holds at execution time; nothing was executed.",
        details={"failed_checks": failed_checks})
    operation.fail()
    count_ended(operation)
    for item in failed_checks:
        count_on_commit(ENVELOPE_FAILED_CHECKS.labels(item["check"], "execution"))
    operation.error = err.as_body()["error"]
    operation.completed_at = operation.updated_at = now
    operation.lease_expires_at = None
    operation.executor = executor
    operation.save()
    payment_release(action_id=envelope.action_id, actor=WORKER_ACTOR)
    envelope_status_set(envelope=envelope, status=EnvelopeStatus.FAILED, operation_id=operation.operation_id,
                         actor=WORKER_ACTOR)
    ledger_append(event_type="operation.failed", resource_type=OPERATION_RESOURCE,
                  resource_id=operation.operation_id, actor=WORKER_ACTOR, root_principal=envelope.root_principal,
                  payload={**action_trail(envelope), "stage": "execution_recheck", "error_code": err.code,
                           "failed_checks": failed_checks, "executor": executor})
    callback_enqueue(operation)


def _fail_interrupted(*, operation: Operation, executor: str) -> None:
    """Inside the claim transaction: a worker died during a call that must not be repeated.

    The call may or may not have reached the tool; at most once is the only safe answer
    for a connector whose calls carry no idempotency key (``mcp``), so the operation fails
    saying so, with its receipt, instead of calling again.
    """
    connector = operation.connector
    error = ExecutionFailed(
        f"The worker running this operation ({operation.executor}) stopped during its {connector} call; the tool "
        f"may have run, and a {connector} call is not repeated.",
        details={"connector": connector, "previous_executor": operation.executor, "call_sent": None},
    ).as_body()["error"]
    outcome_record(operation=operation, status=ReceiptStatus.FAILED, result={"error": error}, executor=executor,
                    error=error, actor=WORKER_ACTOR)


def _claim_locked(*, operation: Operation | None, operation_id: str, executor: str) -> Claim | str:
    """The claim, inside the caller's transaction on the locked ``operation``."""
    if operation is None:
        logger.warning("execute: no operation %s", operation_id)
        return "missing"
    if operation.status in OPERATION_TERMINAL:
        return "done"
    now = timezone.now()
    takeover = operation.status == OperationStatus.RUNNING
    if takeover and (operation.lease_expires_at is None or operation.lease_expires_at > now):
        # A live worker holds it, or it waits for an external executor's receipt.
        return "busy"

    envelope = operation.envelope
    # The freeze check is one of the checks: a freeze committed before this statement stops
    # the operation here; one committed after it finds the operation claimed, which
    # ``execution.freezes`` (holding the row lock this claim holds) then leaves alone.
    report = envelope_recheck(envelope=envelope)
    if not report.passed:
        if report.freezes and not takeover:
            operation.halt()
            operation_cancelled_record(operation=operation, actor=WORKER_ACTOR, error=frozen_error(
                report.freezes, failed_checks=report.failed), payload={
                    "stage": "execution_recheck", "freeze_ids": [f["freeze_id"] for f in report.freezes]})
            return "cancelled"
        _fail_prerequisites(operation=operation, envelope=envelope, failed_checks=report.failed,
                            executor=executor, now=now)
        return "failed"
    if takeover and not connector_for(operation.connector or report.skill_connector).repeatable:
        _fail_interrupted(operation=operation, executor=executor)
        return "failed"

    return claim_start(operation=operation, envelope=envelope, report=report, executor=executor, now=now,
                       takeover=takeover)


def claim_start(*, operation: Operation, envelope: ActionEnvelope, report, executor: str, now: datetime,
                takeover: bool = False, actor: str = WORKER_ACTOR) -> Claim:
    """Move ``operation`` (unsaved changes, the caller saves it) to running for ``executor`` with a
    lease, record it in the ledger, and return the claim: what to call, and the receipt's why-record.

    ``report``: the checks that just passed for the envelope, at ``now``. The worker claims in
    ``_claim_locked``; the MCP gateway claims the operation it accepts, to call the tool itself.
    """
    connector = report.skill_connector  # the skill the checks found, read in the same statement
    previous_executor = operation.executor
    if not takeover:
        operation.start()
    operation.attempts += 1
    operation.executor = executor
    operation.connector = connector
    operation.started_at = operation.updated_at = now
    # external: no lease; the operation waits for POST /agp/receipts, and no
    # recovery may take it over.
    external = not connector_for(connector).completes
    operation.lease_expires_at = None if external else now + _lease()
    if external:
        # Only this client's receipt completes it: anyone else's would be signed as the outcome.
        operation.receipt_client_id = report.skill_executor_client_id or envelope.submitted_by
    payload = {**action_trail(envelope), "attempt": operation.attempts, "executor": executor,
               "connector": connector, "skill_id": report.skill_id}
    if external:
        payload["receipt_client_id"] = operation.receipt_client_id
    if takeover:
        payload["previous_executor"] = previous_executor
    ledger_append(event_type="operation.reclaimed" if takeover else "operation.running",
                  resource_type=OPERATION_RESOURCE, resource_id=operation.operation_id, actor=actor,
                  root_principal=envelope.root_principal, payload=payload)
    call = Call(operation_id=operation.operation_id, action_id=envelope.action_id, connector=connector,
                endpoint_url=report.skill_endpoint_url, parameters=dict(envelope.parameters or {}),
                envelope=envelope_document(envelope) if connector == "http" else {},
                operation=envelope.operation, tool_pins=report.skill_tool_pins)
    return Claim(operation_id=operation.operation_id, action_id=envelope.action_id, fence=operation.attempts,
                 connector=connector, call=call,
                 governance={} if external else receipt_governance(envelope=envelope, report=report))


def operation_claim(*, operation_id: str, executor: str) -> Claim | str:
    """Claim the operation for ``executor``; a Claim, or a word saying why there is nothing to do."""
    with transaction.atomic():
        operation = operation_locked(operation_id)
        claim = _claim_locked(operation=operation, operation_id=operation_id, executor=executor)
        if isinstance(claim, Claim):
            operation.save()
        return claim


@contextmanager
def lease_kept(*, operation_id: str, fence: int):
    """Renew the claim's lease every third of its length while the body runs.

    The renewal is conditional on the fencing token, so a worker that lost its claim
    stops renewing. The thread uses (and closes) its own database connection.
    """
    stop = threading.Event()
    interval = settings.AGP_OPERATION_LEASE_SECONDS / 3

    def renew():
        try:
            while not stop.wait(interval):
                renewed = Operation.objects.filter(
                    operation_id=operation_id, status=OperationStatus.RUNNING, attempts=fence,
                ).update(lease_expires_at=timezone.now() + _lease())
                if renewed != 1:
                    logger.warning("execute: lost the claim on %s (attempt %s)", operation_id, fence)
                    return
        except Exception:  # a database hiccup: the lease may lapse; fencing keeps it safe
            logger.exception("execute: lease renewal of %s failed", operation_id)
        finally:
            connection.close()

    thread = threading.Thread(target=renew, name=f"lease-{operation_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def operation_finish(*, operation_id: str, fence: int | None, status: str, result: dict[str, Any],
                     executor: str, error: dict[str, Any] | None = None, actor: str = WORKER_ACTOR,
                     receipt_id: str | None = None, started_at: datetime | None = None,
                     completed_at: datetime | None = None, posted_by: str = WORKER_ACTOR,
                     governance: dict[str, Any] | None = None) -> Receipt | None:
    """Record the outcome of a running operation, all in one transaction.

    ``fence``: the claim's token; None for an ``external`` completion (no claim involved).
    ``governance``: the receipt's why-record as the claim built it; read here when None.
    Returns None when the claim was superseded (nothing is written).
    """
    with transaction.atomic(), ledger_batch():
        operation = operation_locked(operation_id)
        if operation is None or operation.status != OperationStatus.RUNNING or (
                fence is not None and operation.attempts != fence):
            logger.warning("execute: claim %s of %s superseded; outcome dropped", fence, operation_id)
            return None
        return outcome_record(operation=operation, status=status, result=result, executor=executor, error=error,
                               actor=actor, receipt_id=receipt_id, started_at=started_at, completed_at=completed_at,
                               posted_by=posted_by, governance=governance)


Ran = tuple[ReceiptStatus, dict[str, Any], dict[str, Any] | None]


def _connector_run(connector, claim: Claim) -> Ran:
    """The receipt's status and result, and the error body of a failure (None on success):
    a connector never leaves an operation hanging."""
    try:
        result = connector.execute(claim.call)
    except Exception as exc:
        return _connector_failed(claim, exc)
    return _connector_succeeded(claim, result)


async def connector_run_async(connector, claim: Claim, **options) -> Ran:
    """``_connector_run`` in the caller's event loop (the MCP gateway's server), with the
    connector's ``options`` (``McpConnector.execute_async``)."""
    try:
        result = await connector.execute_async(claim.call, **options)
    except Exception as exc:
        return _connector_failed(claim, exc)
    return _connector_succeeded(claim, result)


def _connector_succeeded(claim: Claim, result: dict[str, Any]) -> Ran:
    CONNECTOR_CALLS.labels(claim.connector, "succeeded").inc()
    return ReceiptStatus.SUCCEEDED, result, None


def _connector_failed(claim: Claim, exc: Exception) -> Ran:
    if isinstance(exc, ExecutionFailed):
        error = exc.as_body()["error"]
    else:  # a connector bug must fail the operation, never leave it hanging
        logger.error("execute: connector %s raised on %s", claim.connector, claim.operation_id, exc_info=exc)
        error = ExecutionFailed("The connector raised an unexpected error.",
                                details={"connector": claim.connector,
                                         "reason": type(exc).__name__}).as_body()["error"]
    CONNECTOR_CALLS.labels(claim.connector, "failed").inc()
    logger.warning("execute: the %s call of operation %s failed: %s %s", claim.connector, claim.operation_id,
                   error.get("code"), error.get("message"))
    return ReceiptStatus.FAILED, {"error": error}, error


def operation_execute(*, operation_id: str, executor: str) -> str:
    """Run one operation to its end (or to waiting for an external receipt); returns what happened.

    A call the connector can make inside the claim's transaction (``runs_in_claim``) is
    claimed, executed and recorded in that one transaction; any other is claimed and
    committed first, executed under a lease, and recorded in a second transaction.
    """
    # ledger_batch: the events of the transaction go in one statement at its end, so the
    # ledger head is locked for the commit only.
    with transaction.atomic(), ledger_batch():
        operation = operation_locked(operation_id)
        claim = _claim_locked(operation=operation, operation_id=operation_id, executor=executor)
        if isinstance(claim, str):
            return claim
        connector = connector_for(claim.connector)
        if connector.completes and connector.runs_in_claim(claim.call):
            status, result, error = _connector_run(connector, claim)
            outcome_record(operation=operation, status=status, result=result, error=error, executor=executor,
                            actor=WORKER_ACTOR, governance=claim.governance)
            transaction.on_commit(lambda: _log_outcome(claim, status.value))
            return status.value
        operation.save()
    if not connector.completes:
        logger.info("operation %s of %s handed to its external executor", operation_id, claim.action_id)
        return "awaiting_receipt"
    with lease_kept(operation_id=operation_id, fence=claim.fence):
        status, result, error = _connector_run(connector, claim)
    receipt = operation_finish(operation_id=operation_id, fence=claim.fence, status=status, result=result,
                               error=error, executor=executor, governance=claim.governance)
    if receipt is None:
        return "superseded"
    _log_outcome(claim, status.value)
    return status.value


def _log_outcome(claim: Claim, status: str) -> None:
    logger.info("operation %s of %s %s (%s connector, attempt %s)", claim.operation_id, claim.action_id, status,
                claim.connector, claim.fence)


def receipt_submit(*, action_id: str, operation_id: str, status: str, actor: str, result: dict | None = None,
                   executor: str | None = None, receipt_id: str | None = None,
                   started_at: datetime | None = None, completed_at: datetime | None = None) -> Receipt:
    """``POST /agp/receipts``: an external executor reports the outcome of its operation.

    Only the client the operation is bound to (``Operation.receipt_client_id``: the skill's
    ``executor_client_id``, else the envelope's submitter) may: any other client's receipt
    is a 403, since the service would sign a made-up outcome as the tool's. The receipt
    records the client that posted it (``posted_by``).
    """
    operation = Operation.objects.select_related("envelope").filter(operation_id=operation_id).first()
    if operation is None:
        raise errors.invalid_fields({"operation_id": [f"No operation with id {operation_id!r}."]})
    if operation.envelope_id != action_id:
        raise errors.invalid_fields({"action_id": [f"Operation {operation_id!r} belongs to another action."]})
    # An operation handed over before the binding existed falls back to its submitter.
    bound_client = operation.receipt_client_id or operation.envelope.submitted_by
    if operation.connector == "external" and actor != bound_client:
        raise errors.Forbidden(f"only the executor client bound to operation {operation_id!r} may post its receipt",
                               field="operation_id")
    if receipt_id and Receipt.objects.filter(receipt_id=receipt_id).exists():
        raise errors.duplicate_id("receipt", "receipt_id", receipt_id)
    if operation.status != OperationStatus.RUNNING or operation.connector != "external":
        raise errors.InvalidTransition(
            from_state=operation.status, to_state=status, allowed=[],
            message=(f"Operation {operation_id!r} is {operation.status} and does not wait for an external "
                     f"executor's receipt."))
    if started_at and completed_at and completed_at < started_at:
        raise errors.invalid_fields({"completed_at": ["Must not be earlier than started_at."]})
    envelope = operation.envelope
    # docs/reference/governance.md: a freeze stops an operation that awaits its receipt. The freeze's own task cancels
    # it; until it has, the receipt is refused here all the same (fail closed).
    refuse_frozen(acting=f"the receipt of operation {operation_id!r}", agent_id=envelope.agent_id,
                  tool_id=envelope.tool_id,
                  root_principal=Subquery(Task.objects.filter(task_id=envelope.task_id).values("root_principal")[:1]))
    result = result or {}
    error = None
    if status == ReceiptStatus.FAILED:
        error = ExecutionFailed("The external executor reported a failure.",
                                details={"connector": "external", "result": result}).as_body()["error"]
    receipt = operation_finish(operation_id=operation_id, fence=None, status=status, result=result, error=error,
                               executor=executor or actor, actor=actor, receipt_id=receipt_id,
                               started_at=started_at, completed_at=completed_at, posted_by=actor)
    if receipt is None:  # another receipt won the race for this operation
        raise errors.InvalidTransition(from_state=OperationStatus.SUCCEEDED, to_state=status, allowed=[],
                                       message=f"Operation {operation_id!r} has already ended.")
    return receipt



def operations_recover(*, now: datetime | None = None, limit: int = 500) -> int:
    """Re-enqueue operations no message is moving (defence in depth behind the outbox).

    - ``pending`` for longer than ``AGP_RECOVER_PENDING_AFTER_SECONDS`` (a lost message);
    - ``running`` with an expired lease (its worker died; with the embedded broker, or
      before the broker's visibility timeout redelivers the message).

    ``updated_at`` records the nudge, so an operation is re-enqueued at most once per period.
    """
    now = now or timezone.now()
    pending_cutoff = now - timedelta(seconds=settings.AGP_RECOVER_PENDING_AFTER_SECONDS)
    running_cutoff = now - _lease()
    stalled = list(Operation.objects.filter(
        Q(status=OperationStatus.PENDING, updated_at__lt=pending_cutoff)
        | Q(status=OperationStatus.RUNNING, lease_expires_at__lt=now, updated_at__lt=running_cutoff),
    ).order_by("updated_at").values_list("pk", "operation_id", "updated_at")[:limit])
    count = 0
    for pk, operation_id, updated_at in stalled:
        with transaction.atomic():
            # Conditional on the updated_at just read: two sweeps never both nudge.
            if Operation.objects.filter(pk=pk, updated_at=updated_at).update(updated_at=now) != 1:
                continue
            outbox_enqueue(task_name=EXECUTE_TASK, args=[operation_id],
                           request_id=outbox_request_id(args=[operation_id]))
        logger.info("recover: re-enqueued operation %s", operation_id)
        count += 1
    return count
