"""Signed callbacks when an operation ends (docs/reference/execution.md).

The body is the Operation JSON (the same representation ``GET /agp/operations/{id}``
returns), signed as every webhook of the service is (core/webhooks.py).

Delivery is at least once. Every attempt is a ``CallbackAttempt`` row, numbered from 1;
the number is reserved (unique per operation) before the request leaves, so two copies of
the task message cannot both send attempt n (``core.webhooks.attempt_reserve``). A failed
attempt is retried with exponential backoff (``AGP_CALLBACK_RETRY_BASE_SECONDS`` * 2^(n-1))
up to ``AGP_CALLBACK_MAX_ATTEMPTS``; a URL the SSRF guard refuses is not retried (it will not
become allowed).
"""

import logging
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Exists, Max, OuterRef
from django.utils import timezone

from agp_project import exactjson
from agp_project.metrics import CALLBACK_DELIVERIES
from core.ledger import ledger_append
from core.models import LedgerEvent
from core.outbox import outbox_enqueue, outbox_request_id
from core.webhooks import (
    DeliveryOutcome,
    attempt_reserve,
    attempt_settle,
    recovery_window,
    redelivery_due,
    webhook_backoff,
    webhook_post,
    webhook_signature,
    webhook_signature_verify,
)

from .choices import CALLBACK_TASK, OPERATION_TERMINAL, WORKER_ACTOR
from .models import CallbackAttempt, Operation
from .serializers_operations import operation_representation

logger = logging.getLogger(__name__)



def callback_body(operation: Operation) -> bytes:
    return exactjson.dumps(operation_representation(operation), sort_keys=True).encode()


# The names callers and receivers' tests know the signature by.
callback_signature = webhook_signature
callback_signature_verify = webhook_signature_verify


def callback_deliver(*, operation_id: str) -> DeliveryOutcome:
    """Make the next delivery attempt of an ended operation's callback, and record it."""
    operation = Operation.objects.select_related("envelope").filter(operation_id=operation_id).first()
    if operation is None or not operation.callback_url or operation.status not in OPERATION_TERMINAL:
        return DeliveryOutcome("skipped")
    record = attempt_reserve(attempts=CallbackAttempt, owner={"operation_id": operation_id}, url=operation.callback_url)
    if record is None:
        return DeliveryOutcome("skipped")
    number = record.attempt
    posted = webhook_post(url=operation.callback_url, body=callback_body(operation), field="callback_url",
                          headers={"AGP-Operation-Id": operation_id, "AGP-Delivery-Attempt": str(number)})
    response_status, problem, delivered = posted.response_status, posted.problem, posted.delivered
    with transaction.atomic():
        final = attempt_settle(record, posted)
        if final:
            ledger_append(event_type="callback.delivered" if delivered else "callback.abandoned",
                          resource_type="Operation", resource_id=operation_id, actor=WORKER_ACTOR,
                          root_principal=operation.envelope.root_principal,
                          payload={"task_id": operation.envelope.task_id, "action_id": operation.envelope_id,
                                   "url": operation.callback_url, "attempts": number,
                                   "response_status": response_status, "error": problem})
    if delivered:
        CALLBACK_DELIVERIES.labels("delivered").inc()
        logger.info("callback for %s delivered (attempt %s, HTTP %s)", operation_id, number, response_status)
        return DeliveryOutcome("delivered", number)
    logger.warning("callback for %s attempt %s/%s failed: %s", operation_id, number,
                   settings.AGP_CALLBACK_MAX_ATTEMPTS, problem)
    if final:
        CALLBACK_DELIVERIES.labels("abandoned").inc()
        return DeliveryOutcome("abandoned", number)
    CALLBACK_DELIVERIES.labels("failed").inc()
    return DeliveryOutcome("retry", number, webhook_backoff(number))


def callbacks_recover(*, now: datetime | None = None, limit: int = 200) -> int:
    """Re-enqueue callback deliveries whose next attempt is overdue (its message was lost).

    Retries wait in the broker as countdown messages; a worker killed while holding one
    (or the embedded broker, which cannot redeliver) loses it. An operation that ended
    within twice the whole retry schedule plus an hour, has a callback URL, and whose delivery is neither
    delivered nor abandoned (the ledger records both), is due again ``backoff(n)`` after
    attempt n (or right after it ended, with no attempt yet); overdue by more than
    ``core.webhooks.RECOVERY_GRACE`` plus the request timeout, it is enqueued again.
    """
    now = now or timezone.now()
    window = recovery_window()
    settled = LedgerEvent.objects.filter(resource_type="Operation", resource_id=OuterRef("operation_id"),
                                         event_type__in=("callback.delivered", "callback.abandoned"))
    candidates = (Operation.objects
                  .filter(status__in=OPERATION_TERMINAL, completed_at__gte=now - window.lookback,
                          completed_at__lt=now - window.slack)
                  .exclude(callback_url="")
                  .annotate(tries=Count("callback_attempts"), last_try=Max("callback_attempts__attempted_at"),
                            settled=Exists(settled))
                  .filter(settled=False, tries__lt=settings.AGP_CALLBACK_MAX_ATTEMPTS)
                  .order_by("completed_at").values_list("operation_id", "completed_at", "tries", "last_try")[:limit])
    count = 0
    for operation_id, completed_at, tries, last_try in candidates:
        if not redelivery_due(task_name=CALLBACK_TASK, key=operation_id, since=completed_at, tries=tries,
                              last_try=last_try, now=now, window=window):
            continue
        with transaction.atomic():
            outbox_enqueue(task_name=CALLBACK_TASK, args=[operation_id],
                           request_id=outbox_request_id(args=[operation_id]))
        logger.info("recover: re-enqueued the callback of %s (after %s attempts)", operation_id, tries)
        count += 1
    return count
