"""Periodic work on the cross-cutting records (scheduled by Celery beat)."""

import logging

from celery import shared_task
from celery.signals import worker_ready, worker_shutdown

from .outbox import outbox_sweep as _outbox_sweep
from .sequencer import SequencerThread, sequencer_start
from .services import checkpoint_create, idempotency_record_purge_expired
from .tree import LedgerBroken

logger = logging.getLogger(__name__)

# The sequencer thread of this worker process (docs/reference/ledger.md): every worker runs
# one, and the one that holds the sequencer lock integrates; the others wait to take over.
# Worker lifecycle signals are Celery's hook for a service that lives as long as the worker.
_sequencers: list[SequencerThread] = []


@worker_ready.connect
def _start_ledger_sequencer(**kwargs):
    thread = sequencer_start()
    if thread is not None:
        _sequencers.append(thread)


@worker_shutdown.connect
def _stop_ledger_sequencer(**kwargs):
    while _sequencers:
        thread = _sequencers.pop()
        thread.stop.set()
        thread.join(timeout=5)


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


@shared_task(name="agp.outbox_sweep")
def outbox_sweep() -> int:
    """Publish outbox messages a crash between commit and publish left behind."""
    return _outbox_sweep()
