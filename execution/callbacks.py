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
import json
import logging
import time
from dataclasses import dataclass

import requests
from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from core.ledger import ledger_append

from .choices import OPERATION_TERMINAL, CallbackStatus
from .models import CallbackAttempt, Operation
from .net import UnsafeURL, http_post
from .serializers_operations import operation_representation

logger = logging.getLogger(__name__)

SIGNATURE_HEADER = "AGP-Signature"
SYSTEM_ACTOR = "agp-worker"


def callback_body(operation: Operation) -> bytes:
    return json.dumps(operation_representation(operation), separators=(",", ":"), sort_keys=True).encode()


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
    operation = Operation.objects.filter(operation_id=operation_id).first()
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
                          resource_type="Operation", resource_id=operation_id, actor=SYSTEM_ACTOR,
                          payload={"url": operation.callback_url, "attempts": number,
                                   "response_status": response_status, "error": problem})
    if delivered:
        return DeliveryOutcome("delivered", number)
    logger.warning("callback for %s attempt %s/%s failed: %s", operation_id, number, max_attempts, problem)
    if final:
        return DeliveryOutcome("abandoned", number)
    return DeliveryOutcome("retry", number, _backoff(number))
