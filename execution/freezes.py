"""How a freeze reaches work already accepted (docs/reference/governance.md).

A freeze (``registry.services.freeze_create``) makes ``agp.enforce_freeze`` due through the
outbox in the transaction that records it; this is that task's body. It cancels every
operation the freeze matches (the envelope's agent or tool, the task's root principal, or
everything) that has not been passed to its connector:

- ``pending`` operations, queued or waiting behind busy worker processes;
- ``external`` operations waiting for their executor's receipt: nothing was called by the
  service, and the receipt that comes later is a 409.

An operation is *passed to its connector* when the worker's claim commits: the claim
re-runs every check, the freeze check included, holding the operation's row lock, and
calls the connector right after its commit. This task takes the same row lock, so each
operation is either cancelled here, or stopped by the claim's own freeze check, or was
claimed before the freeze existed and then runs to its end and is reported as it ended:
nothing already sent to a tool is killed, and nothing is lost.

Beat's recovery also runs ``freezes_enforce`` for every active freeze, in case the task's
message was lost after it was published.
"""

import logging

from django.db import transaction
from django.db.models import Q

from core.ledger import ledger_batch
from registry.choices import Connector, FreezeStatus, FreezeTarget
from registry.models import Freeze
from registry.selectors import freeze_summaries

from .cancellation import frozen_error, operation_cancelled_record
from .choices import WORKER_ACTOR, OperationStatus
from .models import Operation

logger = logging.getLogger(__name__)

# Operations cancelled per transaction: one ledger statement and one commit for each batch.
BATCH = 100


def _operation_match(freeze: Freeze) -> Q:
    """The operations ``freeze`` names, through their envelope (and its tenant, for a freeze bound to one)."""
    reach = Q() if freeze.root_principal is None else Q(envelope__root_principal=freeze.root_principal)
    if freeze.target_type == FreezeTarget.AGENT:
        return reach & Q(envelope__agent_id=freeze.target_id)
    if freeze.target_type == FreezeTarget.TOOL:
        return reach & Q(envelope__tool_id=freeze.target_id)
    if freeze.target_type == FreezeTarget.ROOT_PRINCIPAL:
        return reach & Q(envelope__root_principal=freeze.target_id)
    return reach & Q(pk__isnull=False)  # all


def _matches(freeze: Freeze, operation: Operation) -> bool:
    """``_operation_match`` for one loaded operation."""
    envelope = operation.envelope
    if freeze.root_principal is not None and envelope.root_principal != freeze.root_principal:
        return False
    if freeze.target_type == FreezeTarget.ALL:
        return True
    named = {FreezeTarget.AGENT: envelope.agent_id, FreezeTarget.TOOL: envelope.tool_id,
             FreezeTarget.ROOT_PRINCIPAL: envelope.root_principal}
    return named.get(freeze.target_type) == freeze.target_id


def operations_stoppable() -> Q:
    """Not yet passed to a connector: ``pending``, or an ``external`` one awaiting its receipt."""
    return Q(status=OperationStatus.PENDING) | Q(status=OperationStatus.RUNNING, connector=Connector.EXTERNAL)


def freezes_enforce(*, freeze_id: str | None = None) -> int:
    """Cancel the operations the active freeze ``freeze_id`` (or every active freeze) stops.

    Returns how many were cancelled. A lifted or unknown freeze stops nothing. Batches of
    ``BATCH``, each one transaction under the operations' row locks (taken in primary-key
    order, as a claim takes one of them); an operation a worker claimed meanwhile is no
    longer selected once its lock is released, since the locking read checks its status again.
    """
    freezes = Freeze.objects.filter(status=FreezeStatus.ACTIVE).order_by("pk")
    if freeze_id is not None:
        freezes = freezes.filter(freeze_id=freeze_id)
    freezes = list(freezes)
    if not freezes:
        return 0
    match = Q()
    for freeze in freezes:
        match |= _operation_match(freeze)
    cancelled = 0
    while True:
        with transaction.atomic(), ledger_batch():
            batch = list(Operation.objects.select_related("envelope").select_for_update(of=("self",))
                         .filter(operations_stoppable()).filter(match).order_by("pk")[:BATCH])

            for operation in batch:
                stopping = [freeze for freeze in freezes if _matches(freeze, operation)] or freezes
                stage = "awaiting_receipt" if operation.status == OperationStatus.RUNNING else "pending"
                operation.halt()
                operation_cancelled_record(
                    operation=operation, actor=WORKER_ACTOR, error=frozen_error(freeze_summaries(stopping)),
                    payload={"stage": stage, "freeze_ids": [freeze.freeze_id for freeze in stopping]})
        cancelled += len(batch)
        if not batch:
            break
    if cancelled:
        logger.info("freeze %s: cancelled %s operation(s)", freeze_id or "(all active)", cancelled)
    return cancelled
