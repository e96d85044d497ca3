"""The transactional outbox: a task is recorded with the change that makes it due.

It lives in core, the lowest app with records, so that every app can make work due after
its commit (execution's operations and callbacks, the registry's freezes, the decision
API's backtests); each names its task by its Celery name, never by importing it.

``outbox_enqueue`` writes an OutboxMessage in the caller's transaction and publishes it to
the broker after commit. If the process dies between commit and publish, or the broker is
briefly away, ``outbox_sweep`` (run periodically by beat) publishes what is still pending.
Task bodies are idempotent, so a message published twice does no harm.

A message carries the id of the request that caused it (``request_id``, from the request's
``X-Request-ID``, or from the task that enqueued it), published as the Celery header
``agp_request_id``: the worker's log lines of that task name the request.
"""

import logging
from datetime import timedelta

from django.db import DatabaseError, transaction
from django.utils import timezone

from agp_project.request_context import TASK_HEADER, current_request_id

from .choices import OutboxStatus
from .models import OutboxMessage

logger = logging.getLogger(__name__)

# A message younger than this is left to its own on-commit publish.
SWEEP_GRACE = timedelta(seconds=30)


def outbox_enqueue(*, task_name: str, args: list, request_id: str | None = None) -> OutboxMessage:
    """Record a task in the current transaction; publish it once the transaction commits.

    ``request_id``: the request the task serves; by default the one being handled (or whose
    task is running) now.
    """
    message = OutboxMessage.objects.create(task_name=task_name, args=args, created_at=timezone.now(),
                                           request_id=request_id or current_request_id() or "")
    # The committed row is exactly this object: publish it without reading it back. Robust:
    # whatever happens after the commit must not turn the committed request into an error
    # (``_publish`` already keeps its own failures to itself; this covers the unforeseen).
    transaction.on_commit(lambda: _publish(message), robust=True)
    return message


def outbox_request_id(*, args: list) -> str:
    """The request id of the newest message for these arguments (an operation's execution or
    callback): a task re-enqueued by recovery serves the same request."""
    return (OutboxMessage.objects.filter(args=args).exclude(request_id="").order_by("-pk")
            .values_list("request_id", flat=True).first() or "")


def outbox_publish(*, message_id: int) -> bool:
    """Send one pending message to the broker; True when it was sent by this call."""
    message = OutboxMessage.objects.filter(pk=message_id, status=OutboxStatus.PENDING).first()
    if message is None:
        return False
    return _publish(message)


def _publish(message: OutboxMessage) -> bool:
    from agp_project.celery import app

    message_id = message.pk
    try:
        headers = {TASK_HEADER: message.request_id} if message.request_id else None
        app.send_task(message.task_name, args=message.args, headers=headers)
    except Exception as exc:  # the broker is down: the sweep will retry
        _note(message_id, attempts=message.attempts + 1)
        logger.warning("outbox: publishing message %s failed: %s", message_id, exc)
        return False
    _note(message_id, status=OutboxStatus.PUBLISHED, published_at=timezone.now(), attempts=message.attempts + 1)
    return True


def _note(message_id: int, **fields) -> None:
    """Record a publish attempt on the row: best effort.

    It runs after the commit of the work that enqueued the message, so a database that fails
    now (a connection killed right after that commit) must not turn a committed request into
    an error saying nothing was written. A row left ``pending`` is only sent again by the
    sweep, and every task body is idempotent.
    """
    try:
        updated = OutboxMessage.objects.filter(pk=message_id)
        if fields.get("status") == OutboxStatus.PUBLISHED:
            updated = updated.filter(status=OutboxStatus.PENDING)
        updated.update(**fields)
    except DatabaseError as exc:
        logger.warning("outbox: recording the publish attempt of message %s failed (a row still pending is "
                       "sent again by the sweep): %s", message_id, exc)


def outbox_sweep(*, older_than: timedelta = SWEEP_GRACE, limit: int = 500) -> int:
    """Publish pending messages older than ``older_than``; returns how many were sent."""
    cutoff = timezone.now() - older_than
    ids = list(OutboxMessage.objects.filter(status=OutboxStatus.PENDING, created_at__lt=cutoff)
               .order_by("pk").values_list("pk", flat=True)[:limit])
    return sum(outbox_publish(message_id=pk) for pk in ids)
