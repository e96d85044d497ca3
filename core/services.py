"""Writes to the cross-cutting records (the ledger's appends live in ``core.ledger``)."""

import contextlib
from datetime import datetime

from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone

from agp_project.signing import get_signer
from agp_project.timeutil import iso

from .models import Checkpoint, IdempotencyRecord, LedgerEvent, MerkleTreeLock
from .tree import BATCH, LedgerBroken, StoredTiles, event_hash, event_segment, tree_extend


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


def _tree_lock() -> None:
    """Take the tree lock for the rest of the transaction: the second of two checkpoint runs
    waits here, then finds the tree the first one committed and extends that."""
    now = timezone.now()
    if MerkleTreeLock.objects.filter(pk=1).update(locked_at=now):
        return
    # Migration 0004 creates the row; a flushed database (transactional tests) lacks it. Two
    # runs racing here both insert pk=1: the second waits for the first and fails, then updates.
    with contextlib.suppress(IntegrityError), transaction.atomic():
        MerkleTreeLock.objects.create(pk=1, locked_at=now)
    MerkleTreeLock.objects.filter(pk=1).update(locked_at=now)


def checkpoint_create() -> Checkpoint | None:
    """Extend the Merkle tree by the events appended since the newest checkpoint, and sign a
    checkpoint of its new size (docs/reference/ledger.md); None when the ledger has not grown.

    The work is proportional to the new events: each is read once (its leaf hash computed
    and its link to the previous event checked), and the tiles they fill are written. Runs
    take the tree lock one at a time; appends never wait for it. New events that do not
    chain (a gap, a broken link, a hash that does not recompute) raise ``LedgerBroken``
    and nothing is signed.
    """
    with transaction.atomic():
        _tree_lock()
        size = Checkpoint.objects.order_by("-tree_size").values_list("tree_size", flat=True).first() or 0
        # Events enter the chain under the ledger head's lock (chained in their transaction, or
        # a sequencer's whole batch in one), so committed events are always 1..max: no gap
        # below the largest sequence a reader sees, and nothing not yet integrated is signed.
        head = LedgerEvent.objects.aggregate(head=Max("sequence"))["head"] or 0
        if head < size:
            raise LedgerBroken(head + 1, f"missing, though the newest checkpoint covers {size} events")
        if head == size:
            return None
        prev_hash = event_hash(size)
        while size < head:
            upto = min(size + BATCH, head)
            segment = event_segment(after=size, upto=upto, prev_hash=prev_hash)
            tree_extend(size=size, leaves=segment.leaves)
            size, prev_hash = upto, segment.last_hash
        issued = timezone.now()
        body = {"tree_size": head, "root_hash": StoredTiles().root(head).hex(), "issued_at": iso(issued)}
        return Checkpoint.objects.create(tree_size=head, root_hash=body["root_hash"], issued_at=issued,
                                         signature=get_signer().sign(body, issued_at=issued))
