"""Writes to the cross-cutting records (the ledger's writes live in ``core.ledger``)."""

from datetime import datetime

from django.utils import timezone

from .models import IdempotencyRecord


def idempotency_record_purge_expired(*, now: datetime | None = None, batch_size: int = 1000) -> int:
    """Delete stored idempotent responses past their expiry; returns how many went.

    Expired records are also replaced lazily when their key is reused; this keeps the table
    from growing with keys that never come back. Deleting in batches keeps each
    transaction short, so request-path inserts never wait long behind the purge.
    """
    now = now or timezone.now()
    deleted = 0
    while True:
        ids = list(IdempotencyRecord.objects.filter(expires_at__lte=now).values_list("pk", flat=True)[:batch_size])
        if not ids:
            return deleted
        deleted += IdempotencyRecord.objects.filter(pk__in=ids, expires_at__lte=now).delete()[0]
