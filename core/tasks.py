"""Periodic work on the cross-cutting records (scheduled by Celery beat)."""

import logging

from celery import shared_task

from .services import checkpoint_create, idempotency_record_purge_expired
from .tree import LedgerBroken

logger = logging.getLogger(__name__)


@shared_task(name="core.purge_expired_idempotency_records")
def purge_expired_idempotency_records() -> int:
    return idempotency_record_purge_expired()


@shared_task(name="core.checkpoint")
def checkpoint() -> int | None:
    """Sign a checkpoint of the ledger's Merkle tree when the ledger grew (every
    ``AGP_CHECKPOINT_SECONDS``); the new tree size, or None when there was nothing new.

    A broken ledger is logged, not retried: the next tick finds it broken too, and no
    checkpoint vouches for it until an operator looks (``manage.py verify_ledger``).
    """
    try:
        made = checkpoint_create()
    except LedgerBroken as exc:
        logger.error("checkpoint refused: %s", exc)
        return None
    if made is None:
        logger.debug("checkpoint: the ledger has not grown")
        return None
    logger.info("checkpoint: tree size %s, root %s", made.tree_size, made.root_hash)
    return made.tree_size
