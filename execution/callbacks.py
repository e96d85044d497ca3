"""Signed callbacks when an operation ends (CONTRACT C8).

The body is the Operation JSON (the same representation ``GET /agp/operations/{id}``
returns). The header ``AGP-Signature: t=<unix seconds>,v1=<hex>`` carries an HMAC-SHA256,
keyed with ``AGP_CALLBACK_SECRET``, over ``"<t>.<body>"``, as Stripe signs its webhooks:
the receiver recomputes it over the raw body and rejects stale timestamps.

Delivery is at least once. Every attempt is a ``CallbackAttempt`` row, numbered from 1;
the number is reserved (unique per operation) before the request leaves, so two copies of
the task message cannot both send attempt n. A failed attempt is retried with exponential
backoff (``AGP_CALLBACK_RETRY_BASE_SECONDS`` * 2^(n-1)) up to ``AGP_CALLBACK_MAX_ATTEMPTS``;
a URL the SSRF guard refuses is not retried (it will not become allowed).
"""

import hashlib
import hmac
import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

import requests
from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Count, Exists, Max, OuterRef
from django.utils import timezone

from agp_project import exactjson
from agp_project.metrics import CALLBACK_DELIVERIES
from agp_project.net import UnsafeURL, http_post
from core.ledger import ledger_append
from core.models import LedgerEvent, OutboxMessage
from core.outbox import outbox_enqueue, outbox_request_id

from .choices import CALLBACK_TASK, OPERATION_TERMINAL, WORKER_ACTOR, CallbackStatus
from .models import CallbackAttempt, Operation
from .serializers_operations import operation_representation

logger = logging.getLogger(__name__)

SIGNATURE_HEADER = "AGP-Signature"
# How long past its due time a delivery must be missing before recovery sends it again.
RECOVERY_GRACE = timedelta(seconds=60)
RECOVERY_LOOKBACK = timedelta(hours=1)


def callback_body(operation: Operation) -> bytes:
    return exactjson.dumps(operation_representation(operation), sort_keys=True).encode()


def callback_signature(*, body: bytes, timestamp: int, secret: str | None = None) -> str:
    """The ``AGP-Signature`` header value for ``body`` sent at ``timestamp``."""
    key = (secret or settings.AGP_CALLBACK_SECRET).encode()
    digest = hmac.new(key, f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def callback_signature_verify(*, header: str, body: bytes, secret: str | None = None,
                              tolerance_seconds: int = 300, now: float | None = None) -> bool:
    """What a receiver does: parse ``t`` and every ``v1``, compare in constant time, check age."""
    parts = [item.split("=", 1) for item in header.split(",") if "=" in item]
    timestamps = [value for name, value in parts if name.strip() == "t"]
    signatures = [value for name, value in parts if name.strip() == "v1"]
    if len(timestamps) != 1 or not timestamps[0].isdigit() or not signatures:
        return False
    timestamp = int(timestamps[0])
    if abs((now if now is not None else time.time()) - timestamp) > tolerance_seconds:
        return False
    expected = callback_signature(body=body, timestamp=timestamp, secret=secret).split("v1=", 1)[1]
    return any(hmac.compare_digest(expected, candidate.strip()) for candidate in signatures)


@dataclass(frozen=True)
class DeliveryOutcome:
    """``delivered``, ``retry`` (after ``retry_in`` seconds), ``abandoned`` or ``skipped``."""

    outcome: str
    attempt: int | None = None
    retry_in: float | None = None


def _backoff(attempt: int) -> float:
    return settings.AGP_CALLBACK_RETRY_BASE_SECONDS * 2 ** (attempt - 1)


def callback_deliver(*, operation_id: str) -> DeliveryOutcome:
    """Make the next delivery attempt of an ended operation's callback, and record it."""
    operation = Operation.objects.select_related("envelope").filter(operation_id=operation_id).first()
    if operation is None or not operation.callback_url or operation.status not in OPERATION_TERMINAL:
        return DeliveryOutcome("skipped")
    done = list(CallbackAttempt.objects.filter(operation_id=operation_id).values_list("attempt", "status"))
    if any(status == CallbackStatus.DELIVERED for _, status in done):
        return DeliveryOutcome("skipped")
    number = max((attempt for attempt, _ in done), default=0) + 1
    max_attempts = settings.AGP_CALLBACK_MAX_ATTEMPTS
    if number > max_attempts:
        return DeliveryOutcome("skipped")
    try:
        # Reserve the attempt number first: a duplicate message racing this one loses here
        # instead of sending the same attempt twice.
        with transaction.atomic():
            record = CallbackAttempt.objects.create(
                operation_id=operation_id, attempt=number, url=operation.callback_url,
                status=CallbackStatus.PENDING, attempted_at=timezone.now())
    except IntegrityError:
        return DeliveryOutcome("skipped")

    body = callback_body(operation)
    headers = {SIGNATURE_HEADER: callback_signature(body=body, timestamp=int(time.time())),
               "AGP-Operation-Id": operation_id, "AGP-Delivery-Attempt": str(number)}
    permanent = False
    response_status, problem = None, ""
    try:
        response = http_post(url=operation.callback_url, body=body, headers=headers,
                             timeout=settings.AGP_CALLBACK_TIMEOUT_SECONDS, max_bytes=4096, field="callback_url")
        response_status = response.status_code
        if not response.ok:
            problem = f"HTTP {response.status_code}"
    except UnsafeURL as exc:
        permanent, problem = True, exc.reason
    except (requests.RequestException, OSError) as exc:
        problem = f"{type(exc).__name__}: {exc}"[:2000]

    delivered = not problem
    final = delivered or permanent or number >= max_attempts
    with transaction.atomic():
        CallbackAttempt.objects.filter(pk=record.pk).update(
            status=CallbackStatus.DELIVERED if delivered else CallbackStatus.FAILED,
            response_status=response_status, error=problem)
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
    logger.warning("callback for %s attempt %s/%s failed: %s", operation_id, number, max_attempts, problem)
    if final:
        CALLBACK_DELIVERIES.labels("abandoned").inc()
        return DeliveryOutcome("abandoned", number)
    CALLBACK_DELIVERIES.labels("failed").inc()
    return DeliveryOutcome("retry", number, _backoff(number))


def callbacks_recover(*, now: datetime | None = None, limit: int = 200) -> int:
    """Re-enqueue callback deliveries whose next attempt is overdue (its message was lost).

    Retries wait in the broker as countdown messages; a worker killed while holding one
    (or the embedded broker, which cannot redeliver) loses it. An operation that ended
    within twice the whole retry schedule plus an hour, has a callback URL, and whose delivery is neither
    delivered nor abandoned (the ledger records both), is due again ``backoff(n)`` after
    attempt n (or right after it ended, with no attempt yet); overdue by more than
    ``RECOVERY_GRACE`` plus the request timeout, it is enqueued again.
    """
    now = now or timezone.now()
    max_attempts = settings.AGP_CALLBACK_MAX_ATTEMPTS
    window = sum(_backoff(n) for n in range(1, max_attempts)) + max_attempts * settings.AGP_CALLBACK_TIMEOUT_SECONDS
    slack = RECOVERY_GRACE + timedelta(seconds=settings.AGP_CALLBACK_TIMEOUT_SECONDS)
    # Twice the whole retry schedule, plus an hour in case recovery itself was down.
    lookback = 2 * timedelta(seconds=window) + slack + RECOVERY_LOOKBACK
    settled = LedgerEvent.objects.filter(resource_type="Operation", resource_id=OuterRef("operation_id"),
                                         event_type__in=("callback.delivered", "callback.abandoned"))
    candidates = (Operation.objects
                  .filter(status__in=OPERATION_TERMINAL, completed_at__gte=now - lookback,
                          completed_at__lt=now - slack)
                  .exclude(callback_url="")
                  .annotate(tries=Count("callback_attempts"), last_try=Max("callback_attempts__attempted_at"),
                            settled=Exists(settled))
                  .filter(settled=False, tries__lt=max_attempts)
                  .order_by("completed_at").values_list("operation_id", "completed_at", "tries", "last_try")[:limit])
    count = 0
    for operation_id, completed_at, tries, last_try in candidates:
        due = completed_at if not tries else last_try + timedelta(seconds=_backoff(tries))
        if due + slack > now:
            continue
        if OutboxMessage.objects.filter(task_name=CALLBACK_TASK, args=[operation_id],
                                        created_at__gte=now - slack).exists():
            continue  # already nudged; its message has not been worked off yet
        with transaction.atomic():
            outbox_enqueue(task_name=CALLBACK_TASK, args=[operation_id],
                           request_id=outbox_request_id(args=[operation_id]))
        logger.info("recover: re-enqueued the callback of %s (after %s attempts)", operation_id, tries)
        count += 1
    return count
