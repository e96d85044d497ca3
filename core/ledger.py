"""The hash-chained ledger (CONTRACT C9): append in the caller's transaction, verify."""

import contextlib
import hashlib
import json
from json.encoder import encode_basestring as _json_string
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import rfc8785
from django.db import IntegrityError, connection, transaction

from agp_project import errors
from agp_project.canonical import content_hash
from agp_project.ids import new_id
from agp_project.timeutil import iso

from .models import LedgerEvent, LedgerHead

GENESIS_HASH = "0" * 64


# The chained fields in RFC 8785 order (keys sorted); each string goes through the C
# escaper json.dumps(ensure_ascii=False) uses.
_EVENT_TEMPLATE = ('{"actor":%s,"event_id":%s,"event_type":%s,"payload_hash":%s,"recorded_at":%s,'
                   '"resource_id":%s,"resource_type":%s,"sequence":%d}')


def canonical_event(*, sequence: int, event_id: str, event_type: str, resource_type: str, resource_id: str,
                    actor: str, payload_hash: str, recorded_at: str) -> bytes:
    """RFC 8785 JSON of the chained fields.

    Every member is a string or an integer, so JSON with sorted keys, compact separators
    and no ASCII escaping is exactly the JCS bytes (a test checks this against the
    rfc8785 library); it is several times faster, which matters when verification walks
    millions of events.
    """
    return (_EVENT_TEMPLATE % (
        _json_string(actor), _json_string(event_id), _json_string(event_type), _json_string(payload_hash),
        _json_string(recorded_at), _json_string(resource_id), _json_string(resource_type), int(sequence),
    )).encode("utf-8")


def chain_hash(prev_hash: str, event_bytes: bytes) -> str:
    """SHA-256 over the previous hash and the canonical event."""
    return hashlib.sha256(prev_hash.encode("ascii") + event_bytes).hexdigest()


def _locked_head() -> LedgerHead:
    """The head row, locked: the lock queues concurrent writers, so the head read here is
    the head the caller's event extends."""
    head = LedgerHead.objects.select_for_update().filter(pk=1).first()
    if head is not None:
        return head
    # Migration 0001 creates the row; a flushed database (``manage.py flush``, transactional
    # tests) lacks it. Recreate it at the tip of whatever chain is stored. Two writers racing
    # here both insert pk=1: the unique key makes the second wait and fail, and it then
    # locks the row the first one made.
    tip = LedgerEvent.objects.order_by("-sequence").values_list("sequence", "hash").first()
    with contextlib.suppress(IntegrityError), transaction.atomic():
        LedgerHead.objects.create(pk=1, sequence=tip[0] if tip else 0, hash=tip[1] if tip else GENESIS_HASH)
    return LedgerHead.objects.select_for_update().get(pk=1)


def ledger_append(*, event_type: str, resource_type: str, resource_id: str, actor: str,
                  payload: dict[str, Any] | None = None, event_id: str | None = None) -> LedgerEvent:
    """Append one event, in the caller's transaction, after every other writer's."""
    if not connection.in_atomic_block:
        raise RuntimeError("ledger_append must run inside the transaction of the change it records")
    payload = payload or {}
    return _append(event_type=event_type, resource_type=resource_type, resource_id=resource_id, actor=actor,
                   payload=payload, payload_hash=content_hash(payload), event_id=event_id)


def _append(*, event_type: str, resource_type: str, resource_id: str, actor: str, payload: dict[str, Any],
            payload_hash: str, event_id: str | None) -> LedgerEvent:
    head = _locked_head()
    sequence = head.sequence + 1
    recorded = datetime.now(UTC)
    event_id = event_id or new_id("evt")
    event_hash = chain_hash(head.hash, canonical_event(
        sequence=sequence, event_id=event_id, event_type=event_type, resource_type=resource_type,
        resource_id=resource_id, actor=actor, payload_hash=payload_hash,
        recorded_at=iso(recorded)))
    event = LedgerEvent.objects.create(
        sequence=sequence, event_id=event_id, event_type=event_type, resource_type=resource_type,
        resource_id=resource_id, actor=actor, payload=payload, payload_hash=payload_hash,
        prev_hash=head.hash, hash=event_hash, recorded_at=recorded)
    LedgerHead.objects.filter(pk=1).update(sequence=sequence, hash=event_hash)
    return event


@dataclass
class Verification:
    verified: bool
    events: int
    head_hash: str
    first_broken_sequence: int | None

    def as_dict(self) -> dict[str, Any]:
        return {"verified": self.verified, "events": self.events, "head_hash": self.head_hash,
                "first_broken_sequence": self.first_broken_sequence}


_ROW_FIELDS = ("sequence", "event_id", "event_type", "resource_type", "resource_id", "actor",
               "payload", "payload_hash", "prev_hash", "hash", "recorded_at")


# PostgreSQL formats recorded_at as chained (TIME_FORMAT) and hands the payload over as
# text: no datetime objects, no converters, and the formatting runs in the database
# process, beside this one. Other databases read through the ORM.
_PG_ROWS = ("SELECT sequence, event_id, event_type, resource_type, resource_id, actor, payload::text, payload_hash, "
            "prev_hash, hash, to_char(recorded_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') "
            "FROM {table} WHERE sequence > %s ORDER BY sequence LIMIT %s")


def _iter_rows(batch_size: int) -> Iterable[tuple]:
    """Every event in sequence order, ``payload`` parsed and ``recorded_at`` as chained.

    Keyset batches keep memory flat whatever the ledger's size.
    """
    last = 0
    if connection.vendor == "postgresql":
        sql = _PG_ROWS.format(table=connection.ops.quote_name(LedgerEvent._meta.db_table))
        loads = json.loads
        with connection.cursor() as cursor:
            while True:
                cursor.execute(sql, [last, batch_size])
                rows = cursor.fetchall()
                if not rows:
                    return
                for row in rows:
                    yield (*row[:6], loads(row[6]), *row[7:])
                last = rows[-1][0]
    while True:
        rows = list(LedgerEvent.objects.filter(sequence__gt=last).order_by("sequence")
                    .values_list(*_ROW_FIELDS)[:batch_size])
        if not rows:
            return
        for row in rows:
            yield (*row[:10], iso(row[10]))
        last = rows[-1][0]


def ledger_verify(*, batch_size: int = 5000) -> Verification:
    """Walk the chain from the first event; name the first event whose link is broken.

    A link is broken when its sequence leaves a gap, its ``prev_hash`` is not the previous
    event's hash, its payload does not hash to ``payload_hash``, or its own ``hash`` does
    not match the recomputed one.
    """
    prev_hash = GENESIS_HASH
    expected_sequence = 1
    count = 0
    for (sequence, event_id, event_type, resource_type, resource_id, actor, payload, payload_hash,
         prev, stored_hash, recorded_at) in _iter_rows(batch_size):
        recomputed = chain_hash(prev_hash, canonical_event(
            sequence=sequence, event_id=event_id, event_type=event_type, resource_type=resource_type,
            resource_id=resource_id, actor=actor, payload_hash=payload_hash, recorded_at=recorded_at))
        if (sequence != expected_sequence or prev != prev_hash or stored_hash != recomputed
                or content_hash(payload) != payload_hash):
            return Verification(False, count, prev_hash, sequence)
        prev_hash = stored_hash
        expected_sequence += 1
        count += 1
    head = LedgerHead.objects.filter(pk=1).values_list("sequence", "hash").first()
    if head is not None and (head[0] != count or head[1] != prev_hash):
        # Events were deleted from the tail: the head remembers more than the table holds.
        return Verification(False, count, prev_hash, count + 1)
    return Verification(True, count, prev_hash, None)


def ledger_append_client_event(*, event_type: str, resource_type: str, resource_id: str, actor: str,
                               payload: dict[str, Any], event_id: str | None = None) -> LedgerEvent:
    """Append a client's own event (``POST /agp/ledger-events``) in its own transaction.

    A payload that has no RFC 8785 form (an integer beyond 2**53, a float overflowing to
    infinity) is a 400; an ``event_id`` already in the ledger is a 409, also when two
    requests race for it (the unique index decides, after the head lock queued them).
    """
    try:
        payload_hash = content_hash(payload)
    except rfc8785.CanonicalizationError as exc:
        raise errors.invalid_fields({"payload": [f"Not representable as canonical JSON: {exc}"]}) from None
    if event_id and LedgerEvent.objects.filter(event_id=event_id).exists():
        raise errors.duplicate_id("ledger event", "event_id", event_id)
    try:
        with transaction.atomic():
            return _append(event_type=event_type, resource_type=resource_type, resource_id=resource_id,
                           actor=actor, payload=payload, payload_hash=payload_hash, event_id=event_id)
    except IntegrityError:
        if event_id and LedgerEvent.objects.filter(event_id=event_id).exists():
            raise errors.duplicate_id("ledger event", "event_id", event_id) from None
        raise
