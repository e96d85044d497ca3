"""The hash-chained ledger (docs/reference/ledger.md): an event's canonical form and hash, and
appends in the caller's transaction (``core.ledger_verification`` verifies the chain).

On PostgreSQL with the sequencer on (``AGP_LEDGER_SEQUENCER``), an append writes the event
into ``LedgerPendingEvent`` in the caller's transaction and ``core.sequencer`` gives it its
place in the chain after the commit; otherwise it is chained in the transaction, under the
head row's lock.
"""

import contextlib
import hashlib
import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from json.encoder import encode_basestring as _json_string
from typing import Any

import rfc8785
from django.conf import settings
from django.db import IntegrityError, connection, models, transaction
from django.db.models import Subquery, Value
from django.db.models.functions import Coalesce

from agp_project import errors
from agp_project.canonical import bytes_hash, canonical_json
from agp_project.ids import new_id
from agp_project.timeutil import iso

from .models import LedgerEvent, LedgerHead, LedgerPendingEvent

GENESIS_HASH = "0" * 64
_EVENTS = LedgerEvent._meta.db_table
_HEAD = LedgerHead._meta.db_table
_PENDING = LedgerPendingEvent._meta.db_table


def ledger_sequenced() -> bool:
    """Whether events are chained after their commit by the sequencer (PostgreSQL, the default)
    rather than inside their transaction (docs/reference/ledger.md)."""
    return connection.vendor == "postgresql" and settings.AGP_LEDGER_SEQUENCER


# The chained fields in RFC 8785 order (keys sorted); each string goes through the C
# escaper json.dumps(ensure_ascii=False) uses. The sequence comes last, so everything
# before it (the prefix) is known before the head is locked: appends on PostgreSQL hand the
# prefix to the database, which adds the sequence it assigns and hashes.
_EVENT_PREFIX = ('{"actor":%s,"event_id":%s,"event_type":%s,"payload_hash":%s,"recorded_at":%s,'
                 '"resource_id":%s,"resource_type":%s,"sequence":')
_EVENT_TEMPLATE = _EVENT_PREFIX + "%d}"


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


def _event_prefix(*, event_id: str, event_type: str, resource_type: str, resource_id: str, actor: str,
                  payload_hash: str, recorded_at: str) -> str:
    """``canonical_event`` up to the sequence number: the event is this, the sequence, ``}``."""
    return _EVENT_PREFIX % (
        _json_string(actor), _json_string(event_id), _json_string(event_type), _json_string(payload_hash),
        _json_string(recorded_at), _json_string(resource_id), _json_string(resource_type))


def chain_hash(prev_hash: str, event_bytes: bytes) -> str:
    """SHA-256 over the previous hash and the canonical event."""
    return hashlib.sha256(prev_hash.encode("ascii") + event_bytes).hexdigest()


def payload_text_hash(stored: str) -> str:
    """``payload_hash`` as recomputed from the stored payload text (its canonical JSON)."""
    return bytes_hash(stored.encode("utf-8"))


# ``recorded_at`` as chained (TIME_FORMAT), in SQL: the sequencer and the verification read
# it so (no datetime objects, no converters, the formatting done in the database process).
RECORDED_AT_SQL = """to_char(recorded_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')"""
# ``canonical_event`` in SQL. to_json(text) escapes exactly as json's encode_basestring
# (\" \\ \b \f \n \r \t, other characters below U+0020 as lowercase \u00xx, nothing else;
# PostgreSQL text cannot hold U+0000), to_char writes TIME_FORMAT, a bigint's text is %d.
# The verification and the Merkle tree (core.tree) hash events from these bytes in the database.
CANONICAL_EVENT_SQL = ("""'{"actor":' || to_json(actor)::text || ',"event_id":' || to_json(event_id)::text"""
                       """ || ',"event_type":' || to_json(event_type)::text"""
                       """ || ',"payload_hash":' || to_json(payload_hash)::text"""
                       """ || ',"recorded_at":"' || """ + RECORDED_AT_SQL +
                       """ || '","resource_id":' || to_json(resource_id)::text"""
                       """ || ',"resource_type":' || to_json(resource_type)::text || ',"sequence":' || sequence"""
                       """ || '}'""")


def _locked_head() -> LedgerHead:
    """The head row, locked: the lock queues concurrent writers, so the head read here is
    the head the caller's event extends. (PostgreSQL appends lock it in their own statement
    and come here only when the row is missing.)"""
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


_PG_HEAD_LOCK = f'SELECT sequence, hash FROM "{_HEAD}" WHERE id = 1 FOR UPDATE'


def ledger_head_lock() -> tuple[int, str]:
    """Lock the head row for the rest of the transaction; its (sequence, hash).

    On PostgreSQL one plain statement: the sequencer locks the head for every batch, and
    the queryset's compilation cost about 0.4 ms of CPU each time, a large part of a small
    batch's own.
    """
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(_PG_HEAD_LOCK)
            row = cursor.fetchone()
        if row is not None:
            return row
    head = _locked_head()
    return head.sequence, head.hash


def ledger_append(*, event_type: str, resource_type: str, resource_id: str, actor: str,
                  payload: dict[str, Any] | None = None, event_id: str | None = None,
                  root_principal: str | None = None) -> LedgerEvent | None:
    """Append one event, in the caller's transaction, after every other writer's.

    ``root_principal``: the tenant whose records the event is about (None: of no tenant).
    Inside ``ledger_batch`` the event is queued and written when the batch ends, and with
    the sequencer it has no place in the chain before the commit: None is returned then.
    """
    if not connection.in_atomic_block:
        raise RuntimeError("ledger_append must run inside the transaction of the change it records")
    payload = payload or {}
    batch = getattr(connection, _BATCH_ATTR, None)
    if batch is not None:
        batch.append(_Event.of(event_type=event_type, resource_type=resource_type, resource_id=resource_id,
                               actor=actor, payload=payload, event_id=event_id, root_principal=root_principal))
        return None
    return _append(_Event.of(event_type=event_type, resource_type=resource_type, resource_id=resource_id,
                             actor=actor, payload=payload, event_id=event_id, root_principal=root_principal))


def ledger_record(*, event_type: str, resource_type: str, resource_id: str, actor: str,
                  payload: dict[str, Any] | None = None, root_principal: str | None = None) -> None:
    """Append one event that stands on its own (a validation, a refusal).

    Inside a transaction (a request made with an ``Idempotency-Key`` runs in one) it joins
    it; otherwise it is a transaction of its own: with the sequencer, one ``INSERT`` in
    autocommit (durable when it returns; no ``BEGIN`` and ``COMMIT`` round trips).
    """
    event = {"event_type": event_type, "resource_type": resource_type, "resource_id": resource_id, "actor": actor,
             "payload": payload, "root_principal": root_principal}
    if connection.in_atomic_block:
        ledger_append(**event)
        return
    if ledger_sequenced():
        _pg_pend([_Event.of(**{**event, "payload": payload or {}})])
        return
    with transaction.atomic():
        ledger_append(**event)


_BATCH_ATTR = "_agp_ledger_batch"


@contextlib.contextmanager
def ledger_batch():
    """Queue the block's ``ledger_append`` calls and append them, in order, when it ends.

    On PostgreSQL the queued events go in one statement, so the head row is locked for the
    end of the transaction only (the commit), not from the first append on: concurrent
    writers queue for less time, and N events cost one round trip instead of N.

    The block must run inside the transaction that records the changes, and an exception
    leaving it discards the queue (the transaction is rolling back). Do not catch an error
    from a savepoint inside the block and carry on: events queued inside the rolled-back
    savepoint would still be written. A nested batch joins the outer one.
    """
    if not connection.in_atomic_block:
        raise RuntimeError("ledger_batch must run inside the transaction of the changes it records")
    if getattr(connection, _BATCH_ATTR, None) is not None:
        yield
        return
    queued: list[_Event] = []
    setattr(connection, _BATCH_ATTR, queued)
    try:
        yield
    finally:
        setattr(connection, _BATCH_ATTR, None)
    if connection.vendor == "postgresql":
        if queued:
            _pg_pend(queued) if ledger_sequenced() else _pg_append_locked(queued)
        return
    for event in queued:
        _append(event)


# The resources whose own events belong to a task's or an action's trail by their id.
TRAIL_RESOURCES = {"task_id": "Task", "action_id": "ActionEnvelope"}


def event_trail(*, resource_type: str, resource_id: str, payload: dict[str, Any],
                from_payload: bool = True) -> dict[str, str | None]:
    """The task and action an event belongs to (docs/reference/governance.md): its payload's ``task_id`` and
    ``action_id`` members, or its own resource's id for a task's or an envelope's event.

    Stored beside the chained fields, as an index: the payload, which the chain covers,
    holds what they say. ``from_payload=False`` (a client's own event): only through its
    resource, since a client's payload may name any action, and an action's trail and
    evidence hold only events about its own records.
    """
    trail = {}
    for name, own in TRAIL_RESOURCES.items():
        value = payload.get(name) if from_payload else None
        if not isinstance(value, str) or not value:
            value = resource_id if resource_type == own else None
        trail[name] = value
    return trail


@dataclass(frozen=True)
class _Event:
    """An event ready to chain: every member but the sequence and the hashes."""

    fields: dict[str, str]  # event_id, event_type, resource_type, resource_id, actor, payload_hash
    payload: dict[str, Any]
    payload_text: str  # the canonical JSON that payload_hash covers
    recorded: datetime
    # task_id, action_id (an index of the payload, ``event_trail``) and root_principal: not chained.
    trail: dict[str, str | None]

    @classmethod
    def of(cls, *, event_type: str, resource_type: str, resource_id: str, actor: str, payload: dict[str, Any],
           event_id: str | None = None, payload_json: bytes | None = None, trail_from_payload: bool = True,
           root_principal: str | None = None) -> "_Event":
        payload_json = canonical_json(payload) if payload_json is None else payload_json
        fields = {"event_id": event_id or new_id("evt"), "event_type": event_type, "resource_type": resource_type,
                  "resource_id": resource_id, "actor": actor, "payload_hash": bytes_hash(payload_json)}
        return cls(fields=fields, payload=payload, payload_text=payload_json.decode("utf-8"),
                   recorded=datetime.now(UTC),
                   trail={**event_trail(resource_type=resource_type, resource_id=resource_id, payload=payload,
                                        from_payload=trail_from_payload), "root_principal": root_principal})

    @property
    def prefix(self) -> str:
        return _event_prefix(recorded_at=iso(self.recorded), **self.fields)


# Appends on PostgreSQL, one statement for any number of events: lock the head, chain the
# events from it (the recursive part; the database finishes each canonical event from its
# prefix, ``canonical_event`` being prefix + sequence + "}", and hashes it as ``chain_hash``
# does), move the head to the last, insert them. The locking subquery is what queues
# concurrent writers: once it has waited, it returns the head the previous writer committed.
# The events arrive as one JSON array of records (``_events_json``): one text parameter,
# which psycopg sends as it is (about 5 µs with the ``json.dumps``), where nine arrays (one
# per column) cost its Python array dumpers about 21 µs an append. ``recorded_at`` is the
# string the prefix holds, so the stored time is the hashed one. No head row: no event
# is inserted.
_PG_APPEND = f"""
WITH RECURSIVE
locked AS (SELECT sequence, hash FROM "{_HEAD}" WHERE id = 1 FOR UPDATE),
input AS (SELECT * FROM json_to_recordset(%s::json)
          AS i(n bigint, prefix text, event_id text, event_type text, resource_type text, resource_id text,
               actor text, payload text, payload_hash text, recorded_at timestamptz, task_id text,
               action_id text, root_principal text)),
chain AS (
    SELECT 0::bigint AS n, sequence, ''::text AS prev_hash, hash::text AS hash FROM locked
    UNION ALL
    SELECT i.n, c.sequence + 1, c.hash,
           encode(sha256(convert_to(c.hash || i.prefix || (c.sequence + 1) || '}}', 'UTF8')), 'hex')
      FROM chain AS c JOIN input AS i ON i.n = c.n + 1),
moved AS (
    UPDATE "{_HEAD}" AS head SET sequence = tip.sequence, hash = tip.hash
      FROM (SELECT sequence, hash FROM chain ORDER BY n DESC LIMIT 1) AS tip
     WHERE head.id = 1
 RETURNING head.sequence)
INSERT INTO "{_EVENTS}" (sequence, event_id, event_type, resource_type, resource_id, actor, payload, payload_hash,
                         prev_hash, hash, recorded_at, task_id, action_id, root_principal)
SELECT c.sequence, i.event_id, i.event_type, i.resource_type, i.resource_id, i.actor, i.payload, i.payload_hash,
       c.prev_hash, c.hash, i.recorded_at, i.task_id, i.action_id, i.root_principal
  FROM chain AS c JOIN input AS i ON i.n = c.n
 WHERE EXISTS (SELECT 1 FROM moved)
RETURNING sequence, prev_hash, hash
"""


def _events_json(events: list[_Event], *, prefix: bool = True) -> str:
    """The append statement's one parameter: the events as JSON records, numbered from 1."""
    return json.dumps([{"n": n, **({"prefix": e.prefix} if prefix else {}), **e.fields, **e.trail,
                        "payload": e.payload_text, "recorded_at": iso(e.recorded)}
                       for n, e in enumerate(events, start=1)], ensure_ascii=False)


# The sequencer's write path: the events as they are, with the id of the writing transaction
# (``pg_current_xact_id()``, which assigns one if the transaction has none yet), in one
# statement. No lock: writers do not wait for each other, so their commits share WAL flushes.
_PENDING_COLUMNS = ("event_id", "event_type", "resource_type", "resource_id", "actor", "payload", "payload_hash",
                    "recorded_at", "task_id", "action_id", "root_principal")
_PENDING_INSERT = f'INSERT INTO "{_PENDING}" (xid, {", ".join(_PENDING_COLUMNS)})'
_PG_PEND = f"""
{_PENDING_INSERT}
SELECT pg_current_xact_id(), {", ".join(f"i.{column}" for column in _PENDING_COLUMNS)}
  FROM json_to_recordset(%s::json)
       AS i(n bigint, event_id text, event_type text, resource_type text, resource_id text, actor text,
            payload text, payload_hash text, recorded_at timestamptz, task_id text, action_id text,
            root_principal text)
 ORDER BY i.n
"""
# The same for one event (most appends: a ``ledger_record`` outside a transaction, an
# ``ledger_append`` outside a batch): a plain row of parameters, which PostgreSQL plans and
# runs in about two thirds of the time it takes to parse and sort a JSON array of one.
_PG_PEND_ONE = f"{_PENDING_INSERT} VALUES (pg_current_xact_id(), {', '.join(['%s'] * len(_PENDING_COLUMNS))})"


def _pg_pend(events: list[_Event]) -> None:
    """Write ``events`` for the sequencer, in the caller's transaction (one statement)."""
    with connection.cursor() as cursor:
        if len(events) == 1:
            [event] = events
            row = {**event.fields, **event.trail, "payload": event.payload_text, "recorded_at": event.recorded}
            cursor.execute(_PG_PEND_ONE, [row[column] for column in _PENDING_COLUMNS])
        else:
            cursor.execute(_PG_PEND, [_events_json(events, prefix=False)])


def _pg_append(events: list[_Event]) -> list[tuple[int, str, str]]:
    """Append ``events`` in one statement: their (sequence, prev_hash, hash), none without a head row."""
    with connection.cursor() as cursor:
        cursor.execute(_PG_APPEND, [_events_json(events)])
        return sorted(cursor.fetchall())  # in sequence order, which is the events' order


def _pg_append_locked(events: list[_Event]) -> list[tuple[int, str, str]]:
    """``_pg_append`` in a transaction, recreating a missing head row (a flushed database) first."""
    rows = _pg_append(events)
    if not rows:
        _locked_head()
        rows = _pg_append(events)
    if len(rows) != len(events):
        raise RuntimeError("the ledger head could not be locked")
    return rows


def _append(event: _Event) -> LedgerEvent | None:
    """One event, in the caller's transaction: one statement on PostgreSQL, the ORM elsewhere.

    With the sequencer, the event is written for it and has no sequence yet: None.
    """
    if ledger_sequenced():
        _pg_pend([event])
        return None
    return _append_chained(event)


def _append_chained(event: _Event) -> LedgerEvent:
    """One event chained in the caller's transaction, under the head row's lock."""
    if connection.vendor == "postgresql":
        [(sequence, prev_hash, event_hash)] = _pg_append_locked([event])
        values = {"sequence": sequence, "payload": event.payload, "prev_hash": prev_hash, "hash": event_hash,
                  "recorded_at": event.recorded, **event.fields, **event.trail}
        names = [field.attname for field in LedgerEvent._meta.concrete_fields]  # from_db's order
        return LedgerEvent.from_db(connection.alias, names, [values[name] for name in names])
    head = _locked_head()
    sequence = head.sequence + 1
    event_hash = chain_hash(head.hash, canonical_event(sequence=sequence, recorded_at=iso(event.recorded),
                                                       **event.fields))
    stored = LedgerEvent.objects.create(sequence=sequence, payload=event.payload, prev_hash=head.hash,
                                        hash=event_hash, recorded_at=event.recorded, **event.fields, **event.trail)
    LedgerHead.objects.filter(pk=1).update(sequence=sequence, hash=event_hash)
    return stored


def ledger_events_in_chain() -> models.QuerySet:
    """The events of the chain: sequence 1 up to the head's, nothing the service did not chain.

    A row written into the table directly with a sequence below 1, or beyond the head, is
    not part of the ledger: lists and reads leave it out (verification reports it as a
    break). Without a head row (a flushed database) only the lower bound applies.
    """
    head = LedgerHead.objects.filter(pk=1).values("sequence")
    return LedgerEvent.objects.filter(sequence__gte=1, sequence__lte=Coalesce(Subquery(head), Value(2**63 - 1)))


def _lock_event_id(event_id: str) -> None:
    """Queue the transactions that append an event with this ``event_id`` (PostgreSQL).

    With the sequencer an event sits in ``LedgerPendingEvent`` before it is in
    ``LedgerEvent``; neither table's unique index sees the other's rows, so two requests
    naming the same id could both be written and the sequencer could never integrate the
    second. Taken before the check for an existing one and held to the commit, the lock
    makes the second request's check see the first one's committed event.
    """
    key = int.from_bytes(hashlib.sha256(f"agp-ledger-event:{event_id}".encode()).digest()[:8], "big", signed=True)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [key])


def _event_id_taken(event_id: str) -> bool:
    """Whether an event with this id is in the chain or waiting for it.

    The waiting ones first: the sequencer only moves events from there into the chain, so an
    event missed among them (already moved) is found in the chain by the second read.
    """
    return (LedgerPendingEvent.objects.filter(event_id=event_id).exists()
            or LedgerEvent.objects.filter(event_id=event_id).exists())


def ledger_event_integrated(*, event_id: str, timeout: float | None = None) -> LedgerEvent:
    """The event with ``event_id`` once the sequencer has integrated it (it was committed).

    Waits at most ``timeout`` seconds (``AGP_LEDGER_WAIT_SECONDS``); then 503: the event is
    recorded and will be integrated, but its place cannot be shown yet.
    """
    event = _polled(lambda: ledger_events_in_chain().filter(event_id=event_id).first(), timeout)
    if event is None:
        raise errors.Unavailable("The event is recorded but not yet in the chain; read it later by its event_id.",
                                 details={"event_id": event_id})
    return event


def ledger_settle(*, timeout: float | None = None) -> bool:
    """Wait until the events committed before this call are in the chain (with the sequencer);
    False when ``timeout`` (``AGP_LEDGER_WAIT_SECONDS``) passed first.

    For a reader that must see everything written so far (an evidence bundle signed right
    after its action). It waits for the pending events visible now; one that commits later
    with a smaller id is waited for too, which only makes the wait longer.
    """
    if not ledger_sequenced():
        return True
    newest = LedgerPendingEvent.objects.order_by("-pk").values_list("pk", flat=True).first()
    if newest is None:
        return True
    return _polled(lambda: not LedgerPendingEvent.objects.filter(pk__lte=newest).exists(), timeout)


def _polled(check, timeout: float | None):
    """``check()``'s first truthy answer, asked again with a pause growing from 2 to 50 ms,
    or its last answer once ``timeout`` seconds (``AGP_LEDGER_WAIT_SECONDS``) have passed."""
    deadline = time.monotonic() + (settings.AGP_LEDGER_WAIT_SECONDS if timeout is None else timeout)
    pause = 0.002
    while not (answer := check()) and time.monotonic() < deadline:
        time.sleep(pause)
        pause = min(pause * 2, 0.05)
    return answer


def ledger_append_client_event(*, event_type: str, resource_type: str, resource_id: str, actor: str,
                               payload: dict[str, Any], event_id: str | None = None,
                               root_principal: str | None = None) -> LedgerEvent:
    """Append a client's own event (``POST /agp/ledger-events``) and return it with its place in the chain.

    A payload that has no RFC 8785 form (an integer beyond 2**53, a float overflowing to
    infinity) is a 400; an ``event_id`` already in the ledger is a 409, also when two
    requests race for it.

    With the sequencer and no transaction around the call, the event is committed on its
    own and the call waits for its integration (``ledger_event_integrated``). Inside a
    transaction (a request with an ``Idempotency-Key``, whose answer is stored in the same
    transaction) it cannot be integrated before that commit, so it is chained in the
    transaction under the head row's lock, as without the sequencer: the head row orders it
    with the sequencer's batches, and the chain stays one.
    """
    try:
        payload_json = canonical_json(payload)
    except rfc8785.CanonicalizationError as exc:
        raise errors.invalid_fields({"payload": [f"Not representable as canonical JSON: {exc}"]}) from None
    event = _Event.of(event_type=event_type, resource_type=resource_type, resource_id=resource_id, actor=actor,
                      payload=payload, event_id=event_id, payload_json=payload_json, trail_from_payload=False,
                      root_principal=root_principal)
    wait = ledger_sequenced() and not connection.in_atomic_block
    try:
        with transaction.atomic():
            if event_id and connection.vendor == "postgresql":
                _lock_event_id(event_id)
            if event_id and _event_id_taken(event_id):
                raise errors.duplicate_id("ledger event", "event_id", event_id)
            if wait:
                _pg_pend([event])
            else:
                return _append_chained(event)
    except IntegrityError:
        if event_id and _event_id_taken(event_id):
            raise errors.duplicate_id("ledger event", "event_id", event_id) from None
        raise
    return ledger_event_integrated(event_id=event.fields["event_id"])
