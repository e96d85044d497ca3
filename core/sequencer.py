"""The ledger's sequencer (docs/reference/ledger.md, "When an event joins the chain").

On PostgreSQL a change's event is written into ``LedgerPendingEvent`` in the change's own
transaction, with that transaction's id. One sequencer at a time (a session advisory lock)
moves committed events into the chain in batches: each batch takes the events of the
transactions that have all ended, the ones below the oldest transaction still running
(``pg_snapshot_xmin(pg_current_snapshot())``), in the order (transaction id, row id), gives
them the next sequences and their hashes from the head, inserts them into ``LedgerEvent``,
deletes them from the pending table and moves the head, in one transaction.

Why the horizon and not "whatever is committed": transaction ids are handed out in one
order and commits happen in another. Taking only what lies below the oldest running
transaction makes the set taken final (nothing can commit below it later), so the order is
fixed and a transaction still running is waited for, never passed: a long transaction
delays the events after it and never loses its place to them.

Killed at any point, a batch's transaction rolls back: the events stay pending and the head
where it was, and the next sequencer (the lock is released with the dead one's connection)
starts again from the head.
"""

import hashlib
import json
import logging
import threading

from django.conf import settings
from django.db import DatabaseError, connection, transaction

from .ledger import RECORDED_AT_SQL, canonical_event, chain_hash, ledger_head_lock, ledger_sequenced
from .models import LedgerEvent, LedgerHead, LedgerPendingEvent

logger = logging.getLogger(__name__)

APPLICATION_NAME = "agp-ledger-sequencer"
# The session advisory lock one sequencer holds while it runs; released by PostgreSQL when
# its connection ends, however the process ended.
SEQUENCER_LOCK = int.from_bytes(hashlib.sha256(b"agp-ledger-sequencer").digest()[:8], "big", signed=True)

_PENDING = LedgerPendingEvent._meta.db_table
_EVENTS = LedgerEvent._meta.db_table
_HEAD = LedgerHead._meta.db_table

# One statement, so the horizon and the rows are read in one snapshot: every transaction
# below the snapshot's xmin has ended, and the snapshot sees all of those that committed.
_PG_TAKE = f"""
SELECT id, event_id, event_type, resource_type, resource_id, actor, payload_hash, {RECORDED_AT_SQL}
  FROM "{_PENDING}"
 WHERE xid < pg_snapshot_xmin(pg_current_snapshot())
 ORDER BY xid, id
 LIMIT %s
"""

# Move the batch: delete it from the pending table and insert it, chained, into the ledger;
# move the head to the batch's last event. The count returned is checked against the batch:
# rows another sequencer took first (only possible if two ran at once) roll the batch back.
_PG_MOVE = f"""
WITH input AS (SELECT * FROM json_to_recordset(%s::json) AS i(id bigint, sequence bigint, prev_hash text, hash text)),
gone AS (DELETE FROM "{_PENDING}" AS p USING input WHERE p.id = input.id RETURNING p.*),
moved AS (UPDATE "{_HEAD}" SET sequence = %s, hash = %s WHERE id = 1 RETURNING id)
INSERT INTO "{_EVENTS}" (sequence, event_id, event_type, resource_type, resource_id, actor, payload, payload_hash,
                         prev_hash, hash, recorded_at, task_id, action_id, root_principal)
SELECT input.sequence, gone.event_id, gone.event_type, gone.resource_type, gone.resource_id, gone.actor,
       gone.payload, gone.payload_hash, input.prev_hash, input.hash, gone.recorded_at, gone.task_id,
       gone.action_id, gone.root_principal
  FROM gone JOIN input ON input.id = gone.id
 WHERE EXISTS (SELECT 1 FROM moved)
"""


class SequencerConflict(RuntimeError):
    """A batch found its events gone or the head missing: nothing of it was written."""


def ledger_integrate(*, limit: int | None = None) -> int:
    """Integrate one batch of committed events into the chain; how many (0: none ready).

    Safe to call from anywhere at any time: the head row's lock orders it with other
    batches and with events chained in their own transaction.
    """
    limit = limit or settings.AGP_LEDGER_SEQUENCER_BATCH
    # Read before the batch's transaction, which takes a transaction id of its own (the
    # head's lock) and must not hold the horizon back for itself; a poll that finds nothing
    # is then this one statement. The rows read are final (committed, below the horizon)
    # and only a sequencer removes them: the move below checks that it removed them all.
    with connection.cursor() as cursor:
        cursor.execute(_PG_TAKE, [limit])
        rows = cursor.fetchall()
    if not rows:
        return 0
    with transaction.atomic(), connection.cursor() as cursor:
        sequence, prev_hash = ledger_head_lock()
        chained = []
        for (pending_id, event_id, event_type, resource_type, resource_id, actor, payload_hash,
             recorded_at) in rows:
            sequence += 1
            event_hash = chain_hash(prev_hash, canonical_event(
                sequence=sequence, event_id=event_id, event_type=event_type, resource_type=resource_type,
                resource_id=resource_id, actor=actor, payload_hash=payload_hash, recorded_at=recorded_at))
            chained.append({"id": pending_id, "sequence": sequence, "prev_hash": prev_hash, "hash": event_hash})
            prev_hash = event_hash
        cursor.execute(_PG_MOVE, [json.dumps(chained), sequence, prev_hash])
        if cursor.rowcount != len(chained):
            raise SequencerConflict(f"{len(chained)} events taken, {cursor.rowcount} moved")
    return len(rows)


def _lock_session() -> bool:
    """Take the sequencer lock for this connection's session (False: another sequencer holds it)."""
    with connection.cursor() as cursor:
        cursor.execute("SET application_name = %s", [APPLICATION_NAME])
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [SEQUENCER_LOCK])
        return bool(cursor.fetchone()[0])


def sequencer_run(*, stop: threading.Event, idle_seconds: float = 0.05, retry_seconds: float = 1.0) -> None:
    """Run as the sequencer until ``stop`` is set: hold the lock (waiting while another holds
    it) and integrate batch after batch.

    A batch smaller than the limit means the sequencer caught up: it waits ``idle_seconds``
    so the next batch has something in it. A batch costs about 2 ms of CPU whatever its size
    (its statements, in this process and in its backend) and then about 30 µs an event, so
    under a steady stream of appends the wait sets the sequencer's overhead: a batch every
    10 ms is a fifth of a core, every 50 ms a twenty-fifth, for 20 ms more on average before
    an event joins the chain. A database error (a restart, the backend terminated) drops
    the connection and with it the lock: the loop connects again and
    competes for the lock like any other sequencer.
    """
    limit = settings.AGP_LEDGER_SEQUENCER_BATCH
    holding = False
    try:
        while not stop.is_set():
            try:
                if not holding:
                    holding = _lock_session()
                    if not holding:
                        stop.wait(retry_seconds)
                        continue
                    logger.info("ledger sequencer: holding the lock")
                if ledger_integrate(limit=limit) < limit:
                    stop.wait(idle_seconds)
            except Exception as exc:
                # A database error (a restart, the backend terminated) has ended the session
                # and its lock; anything else (a bug) must not end the thread silently. Either
                # way: give the lock up, say why, and compete for it again.
                expected = isinstance(exc, (DatabaseError, SequencerConflict))
                logger.log(logging.WARNING if expected else logging.ERROR, "ledger sequencer: %s; connecting again",
                           exc, exc_info=not expected)
                holding = False
                connection.close()
                stop.wait(retry_seconds)
    finally:
        connection.close()  # ends the session, releasing the lock


class SequencerThread(threading.Thread):
    """``sequencer_run`` in a daemon thread of a Celery worker (started when the worker is ready)."""

    def __init__(self):
        super().__init__(name="agp-ledger-sequencer", daemon=True)
        self.stop = threading.Event()

    def run(self) -> None:
        sequencer_run(stop=self.stop)


def sequencer_start() -> SequencerThread | None:
    """Start a sequencer thread when events are sequenced (PostgreSQL and ``AGP_LEDGER_SEQUENCER``)."""
    if not ledger_sequenced():
        return None
    thread = SequencerThread()
    thread.start()
    return thread
