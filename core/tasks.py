"""Periodic housekeeping of the cross-cutting records (scheduled by Celery beat)."""

from celery import shared_task

from .outbox import outbox_sweep as _outbox_sweep
from .services import idempotency_record_purge_expired


@shared_task(name="core.purge_expired_idempotency_records")
def purge_expired_idempotency_records() -> int:
    return idempotency_record_purge_expired()


@shared_task(name="agp.outbox_sweep")
def outbox_sweep() -> int:
    """Publish outbox messages a crash between commit and publish left behind."""
    return _outbox_sweep()
