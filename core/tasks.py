"""Periodic housekeeping of the cross-cutting records (scheduled by Celery beat)."""

from celery import shared_task

from .services import idempotency_record_purge_expired


@shared_task(name="core.purge_expired_idempotency_records")
def purge_expired_idempotency_records() -> int:
    return idempotency_record_purge_expired()
