"""Celery tasks of the execution API: stable names, JSON arguments (ids), idempotent bodies.

Every task is late-acknowledged (settings: ``CELERY_TASK_ACKS_LATE``,
``CELERY_TASK_REJECT_ON_WORKER_LOST``): a worker that dies mid-task leaves its message to
be delivered again, and the body, which claims its row with a guarded state move, makes
the repeat harmless. Expected domain errors are logged, never retried; a database that is
briefly away is retried with backoff.
"""

import gc
import logging
import os
import socket

from celery import shared_task
from celery.signals import task_postrun, task_prerun, worker_process_init, worker_ready
from django.db import InterfaceError, OperationalError, connections

from agp_project.errors import AGPError
from decision.backtests import backtest_run, backtests_recover
from decision.choices import BACKTEST_TASK
from decision.notifications import approval_notices_recover
from registry.choices import FREEZE_TASK

from .callbacks import callback_deliver, callbacks_recover
from .choices import CALLBACK_TASK, EXECUTE_TASK
from .freezes import freezes_enforce
from .runner import operation_execute, operations_recover
from .selectors import action_ids_citing

logger = logging.getLogger(__name__)

TRANSIENT = (OperationalError, InterfaceError)


def executor_name(hostname: str | None) -> str:
    """Who executed: the worker's node name and the process, as receipts record it."""
    return f"{hostname or socket.gethostname()}/pid-{os.getpid()}"


@shared_task(name=EXECUTE_TASK, bind=True, autoretry_for=TRANSIENT, retry_backoff=True,
             retry_backoff_max=60, max_retries=8)
def execute_operation(self, operation_id: str) -> str:
    """Claim, re-check and execute one operation (execution/runner.py)."""
    try:
        return operation_execute(operation_id=operation_id, executor=executor_name(self.request.hostname))
    except AGPError as exc:
        logger.warning("execute_operation %s: %s %s", operation_id, exc.code, exc.message)
        return "error"


@shared_task(name=CALLBACK_TASK, bind=True, autoretry_for=TRANSIENT, retry_backoff=True,
             retry_backoff_max=60, max_retries=None)
def deliver_callback(self, operation_id: str) -> str:
    """One delivery attempt of an ended operation's callback; schedules the next on failure."""
    outcome = callback_deliver(operation_id=operation_id)
    if outcome.retry_in is not None:
        # A new message with a countdown: the worker slot is free while the receiver recovers.
        raise self.retry(countdown=outcome.retry_in, max_retries=None)
    return outcome.outcome


@shared_task(name=FREEZE_TASK, autoretry_for=TRANSIENT, retry_backoff=True, retry_backoff_max=10,
             max_retries=None)
def enforce_freeze(freeze_id: str) -> int:
    """Cancel the operations a new freeze stops that were not yet passed to their connector (docs/reference/governance.md)."""
    return freezes_enforce(freeze_id=freeze_id)


@shared_task(name=BACKTEST_TASK, bind=True, autoretry_for=TRANSIENT, retry_backoff=True, retry_backoff_max=60,
             max_retries=8)
def run_backtest(self, backtest_id: str, attempt: int | None = None, slice_number: int | None = None) -> str:
    """Re-evaluate a slice of a backtest's window under its candidate (decision/backtests.py);
    the slice sends the next one's message (``attempt``, ``slice_number``) when it yields.

    Registered here, not in decision: a change names the envelopes that cited the
    evaluation, which only execution can read; it hands that reader to the service.
    """
    return backtest_run(backtest_id=backtest_id, executor=executor_name(self.request.hostname),
                        action_ids_of=action_ids_citing, attempt=attempt, slice_number=slice_number)


@shared_task(name="agp.recover_operations")
def recover_operations() -> int:
    """Re-enqueue pending operations and backtests whose message was lost, running ones whose
    worker died, and callback deliveries and approval notices whose retry message was lost;
    cancel what an active freeze stops, should the freeze's own task have been lost."""
    return (operations_recover() + callbacks_recover() + approval_notices_recover() + freezes_enforce()
            + backtests_recover())


@worker_process_init.connect
def _freeze_start_up_objects(**kwargs):
    # As agp_project/wsgi.py does for web workers: a full collection walks only what tasks created.
    gc.collect()
    gc.freeze()


@task_prerun.connect
@task_postrun.connect
def _connections_recycle(**kwargs):
    # What Django does around each web request (close_old_connections): drop a connection that
    # broke or outlived CONN_MAX_AGE, and health-check a kept one before its next use. Not one
    # inside a transaction: a task applied in its caller's process (``apply()``) runs in the
    # caller's transaction, whose connection is the caller's to keep.
    for connection in connections.all(initialized_only=True):
        if not connection.in_atomic_block:
            connection.close_if_unusable_or_obsolete()


@worker_ready.connect
def _sweep_on_start(sender=None, **kwargs):
    # A worker that starts after a crash need not wait for beat's next tick.
    app = sender.app if sender is not None else None
    if app is None:
        return
    for name in ("agp.outbox_sweep", "agp.recover_operations"):
        try:
            app.send_task(name)
        except Exception as exc:  # the broker is away: beat will run them later
            logger.warning("worker start: could not send %s: %s", name, exc)
