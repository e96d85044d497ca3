"""Signed webhooks: the ``AGP-Signature`` every outbound event carries, and one delivery attempt.

Operation callbacks (execution/callbacks.py) and approval notifications
(decision/notifications.py) are signed and posted the same way (docs/reference/approvals.md):
the header ``AGP-Signature: t=<unix seconds>,v1=<hex>`` carries an HMAC-SHA256, keyed with
``AGP_CALLBACK_SECRET``, over ``"<t>.<body>"``, as Stripe signs its webhooks; the receiver
recomputes it over the raw body and rejects stale timestamps. A failed attempt is retried after
``AGP_CALLBACK_RETRY_BASE_SECONDS`` * 2^(n-1), up to ``AGP_CALLBACK_MAX_ATTEMPTS``; a URL the
SSRF guard refuses is not retried (it will not become allowed).
"""

import hashlib
import hmac
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

import requests
from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from agp_project.net import UnsafeURL, http_post

from .choices import DeliveryStatus
from .models import OutboxMessage, WebhookAttempt

SIGNATURE_HEADER = "AGP-Signature"
# How long past its due time a delivery must be missing before recovery sends it again.
RECOVERY_GRACE = timedelta(seconds=60)
RECOVERY_LOOKBACK = timedelta(hours=1)


def webhook_signature(*, body: bytes, timestamp: int, secret: str | None = None) -> str:
    """The ``AGP-Signature`` header value for ``body`` sent at ``timestamp``."""
    key = (secret or settings.AGP_CALLBACK_SECRET).encode()
    digest = hmac.new(key, f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def webhook_signature_verify(*, header: str, body: bytes, secret: str | None = None,
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
    expected = webhook_signature(body=body, timestamp=timestamp, secret=secret).split("v1=", 1)[1]
    return any(hmac.compare_digest(expected, candidate.strip()) for candidate in signatures)


@dataclass(frozen=True)
class DeliveryOutcome:
    """``delivered``, ``retry`` (after ``retry_in`` seconds), ``abandoned`` or ``skipped``."""

    outcome: str
    attempt: int | None = None
    retry_in: float | None = None


@dataclass(frozen=True)
class PostResult:
    """What one attempt got: the receiver's status, the problem (empty when delivered), and
    whether the problem is permanent (the SSRF guard refused the URL)."""

    response_status: int | None
    problem: str
    permanent: bool

    @property
    def delivered(self) -> bool:
        return not self.problem


def webhook_backoff(attempt: int) -> float:
    """Seconds to wait after failed attempt ``attempt`` (1-based)."""
    return settings.AGP_CALLBACK_RETRY_BASE_SECONDS * 2 ** (attempt - 1)


def webhook_post(*, url: str, body: bytes, headers: dict[str, str], field: str) -> PostResult:
    """POST ``body`` signed now, with ``headers``, to the guarded ``url``; never raises for the receiver's faults."""
    signed = {SIGNATURE_HEADER: webhook_signature(body=body, timestamp=int(time.time())), **headers}
    try:
        response = http_post(url=url, body=body, headers=signed, timeout=settings.AGP_CALLBACK_TIMEOUT_SECONDS,
                             max_bytes=4096, field=field)
    except UnsafeURL as exc:
        return PostResult(None, exc.reason, True)
    except (requests.RequestException, OSError) as exc:
        return PostResult(None, f"{type(exc).__name__}: {exc}"[:2000], False)
    return PostResult(response.status_code, "" if response.ok else f"HTTP {response.status_code}", False)


def attempt_reserve(*, attempts, owner: dict, url: str) -> WebhookAttempt | None:
    """Reserve the next attempt of a delivery: a ``pending`` row of ``attempts`` (a
    ``WebhookAttempt`` model) for ``owner`` (its foreign key, as filter arguments). None when
    the delivery already succeeded, used every attempt, or another copy of the message took
    this number: the number is unique per owner and reserved before the request leaves, so
    two copies of a task message cannot both send attempt n."""
    done = list(attempts.objects.filter(**owner).values_list("attempt", "status"))
    if any(status == DeliveryStatus.DELIVERED for _, status in done):
        return None
    number = max((attempt for attempt, _ in done), default=0) + 1
    if number > settings.AGP_CALLBACK_MAX_ATTEMPTS:
        return None
    try:
        with transaction.atomic():
            return attempts.objects.create(**owner, attempt=number, url=url, status=DeliveryStatus.PENDING,
                                           attempted_at=timezone.now())
    except IntegrityError:
        return None


def attempt_settle(record: WebhookAttempt, posted: PostResult) -> bool:
    """Record what attempt ``record`` got, in the caller's transaction; True when it is the last
    (delivered, refused for good, or the last allowed)."""
    type(record).objects.filter(pk=record.pk).update(
        status=DeliveryStatus.DELIVERED if posted.delivered else DeliveryStatus.FAILED,
        response_status=posted.response_status, error=posted.problem)
    return posted.delivered or posted.permanent or record.attempt >= settings.AGP_CALLBACK_MAX_ATTEMPTS


@dataclass(frozen=True)
class RecoveryWindow:
    """``slack``: how overdue a delivery must be before it is sent again; ``lookback``: how far
    back deliveries are looked for (twice the whole retry schedule, plus an hour in case
    recovery itself was down)."""

    slack: timedelta
    lookback: timedelta


def recovery_window() -> RecoveryWindow:
    max_attempts = settings.AGP_CALLBACK_MAX_ATTEMPTS
    schedule = (sum(webhook_backoff(n) for n in range(1, max_attempts))
                + max_attempts * settings.AGP_CALLBACK_TIMEOUT_SECONDS)
    slack = RECOVERY_GRACE + timedelta(seconds=settings.AGP_CALLBACK_TIMEOUT_SECONDS)
    return RecoveryWindow(slack=slack, lookback=2 * timedelta(seconds=schedule) + slack + RECOVERY_LOOKBACK)


def redelivery_due(*, task_name: str, key: str, since: datetime, tries: int, last_try: datetime | None,
                   now: datetime, window: RecoveryWindow) -> bool:
    """Whether a delivery that is neither delivered nor abandoned lost its message: due again
    ``backoff(n)`` after attempt n (or at ``since`` with no attempt yet), overdue by more than
    the window's slack, and not already nudged by a message not yet worked off."""
    due = since if not tries or last_try is None else last_try + timedelta(seconds=webhook_backoff(tries))
    if due + window.slack > now:
        return False
    return not OutboxMessage.objects.filter(task_name=task_name, args=[key],
                                            created_at__gte=now - window.slack).exists()
