"""Verifying the hash-chained ledger (docs/reference/ledger.md): every link, the payloads and the head.

``ledger_verify`` walks the chain in one PostgreSQL statement (``verify_in_database``), or in
Python elsewhere (``verify_in_python``); both name the first broken event.
"""

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db import connection, models
from django.db.models.functions import Cast

from agp_project.timeutil import iso

from .ledger import CANONICAL_EVENT_SQL, GENESIS_HASH, RECORDED_AT_SQL, canonical_event, chain_hash
from .models import LedgerEvent, LedgerHead

_EVENTS = LedgerEvent._meta.db_table
_HEAD = LedgerHead._meta.db_table


@dataclass
class Verification:
    verified: bool
    events: int
    head_hash: str
    first_broken_sequence: int | None

    def as_dict(self) -> dict[str, Any]:
        return {"verified": self.verified, "events": self.events, "head_hash": self.head_hash,
                "first_broken_sequence": self.first_broken_sequence}


def ledger_verify(*, batch_size: int = 5000) -> Verification:
    """Check the whole chain; name the first event whose link is broken.

    A link is broken when its sequence leaves a gap, its ``prev_hash`` is not the previous
    event's hash, its payload does not hash to ``payload_hash``, or its own ``hash`` does
    not match the recomputed one; a head that remembers more events than the table holds
    names the first missing one (a deleted tail). On PostgreSQL the database does it in
    one statement (``verify_in_database``); elsewhere Python walks the chain.
    """
    if connection.vendor == "postgresql":
        return verify_in_database()
    return verify_in_python(batch_size=batch_size)


def _verified_up_to(count: int, last_hash: str, head: tuple[int, str] | None) -> Verification:
    """The verdict once ``count`` events chained intact up to ``last_hash``: the head must agree."""
    if head is not None and (head[0] != count or head[1] != last_hash):
        # Events were deleted from the tail: the head remembers more than the table holds.
        return Verification(False, count, last_hash, count + 1)
    return Verification(True, count, last_hash, None)


# --- verification in Python: every database -------------------------------------------------------------

_PG_ROWS = (f"SELECT sequence, event_id, event_type, resource_type, resource_id, actor, payload, payload_hash, "
            f'prev_hash, hash, {RECORDED_AT_SQL} FROM "{_EVENTS}" WHERE sequence > %s ORDER BY sequence LIMIT %s')

_ROW_FIELDS = ("sequence", "event_id", "event_type", "resource_type", "resource_id", "actor",
               Cast("payload", models.TextField()), "payload_hash", "prev_hash", "hash", "recorded_at")


def _iter_rows(batch_size: int) -> Iterable[tuple]:
    """Every event in sequence order, ``payload`` as its stored text and ``recorded_at`` as chained.

    Keyset batches keep memory flat whatever the ledger's size.
    """
    last = 0
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            while True:
                cursor.execute(_PG_ROWS, [last, batch_size])
                rows = cursor.fetchall()
                if not rows:
                    return
                yield from rows
                last = rows[-1][0]
    while True:
        rows = list(LedgerEvent.objects.filter(sequence__gt=last).order_by("sequence")
                    .values_list(*_ROW_FIELDS)[:batch_size])
        if not rows:
            return
        for row in rows:
            yield (*row[:10], iso(row[10]))
        last = rows[-1][0]


def verify_in_python(*, batch_size: int = 5000) -> Verification:
    """Walk the chain from the first event in keyset batches, recomputing every hash here.

    The chain is the events 1..head and nothing else: a row numbered below 1 (only a direct
    write into the table makes one) is a break, named by its sequence, before anything else.

    The payload check hashes the stored text itself: it is the canonical JSON that
    ``payload_hash`` was computed over, so no parsing or re-serialising is needed, and a
    stored text that merely parses to the same value no longer passes either.
    """
    outside = LedgerEvent.objects.filter(sequence__lt=1).order_by("sequence").values_list("sequence", flat=True).first()
    if outside is not None:
        return Verification(False, 0, GENESIS_HASH, outside)
    prev_hash = GENESIS_HASH
    expected_sequence = 1
    count = 0
    sha256 = hashlib.sha256
    for (sequence, event_id, event_type, resource_type, resource_id, actor, payload, payload_hash,
         prev, stored_hash, recorded_at) in _iter_rows(batch_size):
        recomputed = chain_hash(prev_hash, canonical_event(
            sequence=sequence, event_id=event_id, event_type=event_type, resource_type=resource_type,
            resource_id=resource_id, actor=actor, payload_hash=payload_hash, recorded_at=recorded_at))
        if (sequence != expected_sequence or prev != prev_hash or stored_hash != recomputed
                or "sha256:" + sha256(payload.encode("utf-8")).hexdigest() != payload_hash):
            return Verification(False, count, prev_hash, sequence)
        prev_hash = stored_hash
        expected_sequence += 1
        count += 1
    return _verified_up_to(count, prev_hash, LedgerHead.objects.filter(pk=1).values_list("sequence", "hash").first())


# --- verification in PostgreSQL ---------------------------------------------------------------------------

# One statement, so one snapshot: appends committed meanwhile cannot make the head and the
# table disagree. Two passes over the events:
# - ``links`` walks them in sequence order (a window over the primary key) for the first
#   event whose sequence is not its position or whose prev_hash is not its predecessor's
#   hash. Cheap: no hashing.
# - ``content`` recomputes each event's hash from its own prev_hash, and its payload hash
#   from the stored text. Each row stands alone, so PostgreSQL may spread this pass over
#   parallel workers; a plain min(sequence) WHERE ... would be planned as an ordered index
#   scan stopping at the first match, serial and slower on an intact chain.
# The first broken event is the earlier of the two. Before a content break with no link
# break before it, events 1..n-1 are exactly the sequences 1..n-1, so the count is n - 1
# and the head hash is event n - 1's hash. (An event whose prev_hash is wrong fails
# ``links`` whatever ``content`` says of it, so recomputing from its own prev_hash finds
# the same first break as recomputing from the predecessor's hash.) A row numbered below 1
# is outside the chain the service writes: its presence is the first break (``outside``).
_PG_VERIFY = f"""
WITH outside AS (
    SELECT min(sequence) AS sequence FROM "{_EVENTS}" WHERE sequence < 1
), links AS (
    SELECT sequence, position, expected_prev FROM (
        SELECT sequence, prev_hash, row_number() OVER chain AS position,
               lag(hash, 1, %s) OVER chain AS expected_prev
          FROM "{_EVENTS}" WHERE sequence > 0 WINDOW chain AS (ORDER BY sequence)) AS walked
     WHERE sequence <> position OR prev_hash <> expected_prev
     ORDER BY sequence LIMIT 1
), content AS (
    SELECT min(sequence) FILTER (WHERE NOT intact) AS sequence FROM (
        SELECT sequence,
               encode(sha256(convert_to(prev_hash || {CANONICAL_EVENT_SQL}, 'UTF8')), 'hex') = hash
               AND 'sha256:' || encode(sha256(convert_to(payload, 'UTF8')), 'hex') = payload_hash AS intact
          FROM "{_EVENTS}" WHERE sequence > 0) AS checked
)
SELECT outside.sequence, links.sequence, links.position, links.expected_prev,
       content.sequence, (SELECT hash FROM "{_EVENTS}" WHERE sequence = content.sequence - 1),
       tip.sequence, tip.hash, head.sequence, head.hash
  FROM content
  CROSS JOIN outside
  LEFT JOIN links ON true
  LEFT JOIN (SELECT sequence, hash FROM "{_EVENTS}" WHERE sequence > 0 ORDER BY sequence DESC LIMIT 1) AS tip ON true
  LEFT JOIN "{_HEAD}" AS head ON head.id = 1
"""


def verify_in_database() -> Verification:
    """``verify_in_python``'s verdict, computed by PostgreSQL in one statement (``_PG_VERIFY``)."""
    with connection.cursor() as cursor:
        cursor.execute(_PG_VERIFY, [GENESIS_HASH])
        (outside_sequence, link_sequence, link_position, link_prev, content_sequence, content_prev,
         tip_sequence, tip_hash, head_sequence, head_hash) = cursor.fetchone()
    if outside_sequence is not None:
        return Verification(False, 0, GENESIS_HASH, outside_sequence)
    if link_sequence is not None and (content_sequence is None or link_sequence <= content_sequence):
        return Verification(False, link_position - 1, link_prev, link_sequence)
    if content_sequence is not None:
        return Verification(False, content_sequence - 1, content_prev or GENESIS_HASH, content_sequence)
    head = None if head_sequence is None else (head_sequence, head_hash)
    return _verified_up_to(tip_sequence or 0, tip_hash or GENESIS_HASH, head)


