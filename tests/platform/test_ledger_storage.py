"""The ledger's storage: payloads as canonical text, appends hashed by PostgreSQL, and the
two verification paths agreeing on text that needs escaping."""

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.core import serializers
from django.db import IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from agp_project.canonical import canonical_json, content_hash
from core.fields import load_json
from core.ledger import (
    GENESIS_HASH,
    canonical_event,
    chain_hash,
    ledger_append,
    ledger_batch,
    ledger_record,
    payload_text_hash,
)
from core.ledger_verification import ledger_verify, verify_in_database, verify_in_python
from core.models import LedgerEvent, LedgerHead

# Everything the JSON escaper treats specially, and what it must leave alone: quotes,
# backslashes, the short escapes, other control characters (\u00xx), DEL and U+2028 (not
# escaped), non-ASCII, astral characters (4 bytes in UTF-8, a surrogate pair in UTF-16).
AWKWARD = ['a"b', "back\\slash", "\b\f\n\r\t", "\x01\x1f", "\x7f", "line\u2028sep", "caf\u00e9",
           "\u65e5\u672c", "\U0001f600", "</script>", "\u00a0 nbsp", ""]
AWKWARD_PAYLOADS = [
    {"text": "".join(AWKWARD)},
    {"\u00e9": 1, "z": 2, "\U0001f600": 3, "\ufb01": 4},  # non-ASCII keys: sorted by UTF-16 units
    {"floats": [0.1, 1e16, 1e-7, 5.0, -0.0, 1e21], "big": 2**53 - 1, "nested": {"b": [None, True, {}]}},
    {"controls": ["\x00", "\x1f", "\u2028"]},  # U+0000 inside the payload: escaped in the text, fine
]


def verifiers():
    yield "python", verify_in_python()
    if connection.vendor == "postgresql":
        yield "database", verify_in_database()


def assert_both(expected: dict):
    for name, result in verifiers():
        assert result.as_dict() == expected, name


def stored_payload(sequence: int) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT payload FROM core_ledgerevent WHERE sequence = %s", [sequence])
        return cursor.fetchone()[0]


def append_awkward():
    events = []
    for i, text in enumerate(AWKWARD):
        with transaction.atomic():
            events.append(ledger_append(event_type=f"test.{text}"[:64], resource_type=text or "t",
                                        resource_id=f"{text}-{i}", actor=text or "a",
                                        payload=AWKWARD_PAYLOADS[i % len(AWKWARD_PAYLOADS)]))
    return events


@pytest.mark.django_db
class TestAwkwardText:
    def test_events_with_escapes_and_non_ascii_chain_as_in_python(self):
        events = append_awkward()
        for event in events:
            stored = LedgerEvent.objects.get(sequence=event.sequence)
            assert stored.hash == event.hash == chain_hash(stored.prev_hash, canonical_event(
                sequence=stored.sequence, event_id=stored.event_id, event_type=stored.event_type,
                resource_type=stored.resource_type, resource_id=stored.resource_id, actor=stored.actor,
                payload_hash=stored.payload_hash, recorded_at=stored.recorded_at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")))
        assert_both({"verified": True, "events": len(AWKWARD), "head_hash": events[-1].hash,
                     "first_broken_sequence": None})

    @pytest.mark.parametrize("column, value", [("actor", "caf\u00e8"), ("resource_id", "\x01\x1e-1"),
                                               ("resource_type", "\U0001f601"), ("payload", '{"text":"\u2029"}')])
    def test_a_changed_awkward_value_is_named_by_both_paths(self, column, value):
        events = append_awkward()
        with connection.cursor() as cursor:
            cursor.execute(f"UPDATE core_ledgerevent SET {column} = %s WHERE sequence = 2", [value])
        assert_both({"verified": False, "events": 1, "head_hash": events[0].hash, "first_broken_sequence": 2})


@given(st.lists(st.tuples(*(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                                    min_size=1, max_size=size) for size in (64, 64, 128, 128)),
                          st.dictionaries(st.text(max_size=8), st.one_of(st.text(), st.integers(-99, 99),
                                                                          st.floats(allow_nan=False,
                                                                                    allow_infinity=False)),
                                          max_size=4)),
                min_size=1, max_size=3))
@hypothesis_settings(max_examples=60, deadline=None)
@pytest.mark.django_db
def test_any_text_appends_and_verifies_the_same_in_both_paths(events):
    """The hash PostgreSQL computes on append is the hash Python recomputes, and back."""
    with transaction.atomic():
        for event_type, resource_type, resource_id, actor, payload in events:
            with transaction.atomic():
                last = ledger_append(event_type=event_type, resource_type=resource_type, resource_id=resource_id,
                                     actor=actor, payload=payload)
        total = LedgerEvent.objects.count()
        assert_both({"verified": True, "events": total, "head_hash": last.hash, "first_broken_sequence": None})
        transaction.set_rollback(True)


@pytest.mark.django_db
class TestCanonicalPayload:
    def test_the_payload_is_stored_as_its_canonical_text_and_read_back_as_json(self):
        payload = AWKWARD_PAYLOADS[2]
        with transaction.atomic():
            event = ledger_append(event_type="t", resource_type="t", resource_id="t", actor="a", payload=payload)
        assert stored_payload(event.sequence) == canonical_json(payload).decode("utf-8")
        assert LedgerEvent.objects.get().payload == json.loads(canonical_json(payload), parse_float=Decimal)  # fractions exact
        assert event.payload_hash == content_hash(payload)

    def test_the_orm_writes_canonical_text_too(self):
        with transaction.atomic():
            event = ledger_append(event_type="t", resource_type="t", resource_id="t", actor="a")
        LedgerEvent.objects.filter(pk=event.pk).update(payload={"b": 1, "a": [1.0, "\u00e9"]})
        assert stored_payload(event.sequence) == '{"a":[1,"\u00e9"],"b":1}'

    def test_text_that_is_no_longer_json_reads_as_stored_and_fails_verification(self):
        with transaction.atomic():
            first, second = (ledger_append(event_type="t", resource_type="t", resource_id=str(i), actor="a",
                                           payload={"i": i}) for i in range(2))
        with connection.cursor() as cursor:
            cursor.execute("UPDATE core_ledgerevent SET payload = %s WHERE sequence = 2", ['{"i":'])
        assert LedgerEvent.objects.get(sequence=2).payload == '{"i":'
        assert_both({"verified": False, "events": 1, "head_hash": first.hash, "first_broken_sequence": 2})

    def test_dumpdata_and_loaddata_keep_the_payload(self):
        with transaction.atomic():
            event = ledger_append(event_type="t", resource_type="t", resource_id="t", actor="a",
                                  payload=AWKWARD_PAYLOADS[1])
        dumped = serializers.serialize("json", LedgerEvent.objects.all())
        assert json.loads(dumped)[0]["fields"]["payload"] == AWKWARD_PAYLOADS[1]
        LedgerEvent.objects.all().delete()
        for obj in serializers.deserialize("json", dumped):
            obj.save()
        assert stored_payload(event.sequence) == canonical_json(AWKWARD_PAYLOADS[1]).decode("utf-8")
        # (Not a whole verification: Django's JSON serialiser cuts recorded_at to milliseconds.)
        assert payload_text_hash(stored_payload(event.sequence)) == event.payload_hash


@pytest.mark.django_db
class TestAppendStatements:
    def test_an_append_is_one_statement_on_postgresql(self, django_assert_num_queries):
        with transaction.atomic():
            ledger_append(event_type="t", resource_type="t", resource_id="t", actor="a")  # the head exists
            # SQLite keeps the ORM path: lock the head, insert, move the head.
            with django_assert_num_queries(1 if connection.vendor == "postgresql" else 3):
                event = ledger_append(event_type="t", resource_type="task", resource_id="r", actor="a",
                                      payload={"k": "v"})
        stored = LedgerEvent.objects.get(sequence=event.sequence)
        fields = [f.attname for f in LedgerEvent._meta.concrete_fields]
        assert [getattr(event, f) for f in fields] == [getattr(stored, f) for f in fields]
        assert not event._state.adding and event._state.db == stored._state.db
        assert LedgerHead.objects.values_list("sequence", "hash").get() == (2, event.hash)

    def test_a_duplicate_event_id_rolls_back_the_head_move(self):
        with transaction.atomic():
            event = ledger_append(event_type="t", resource_type="t", resource_id="t", actor="a", event_id="evt_x")
        with pytest.raises(IntegrityError), transaction.atomic():
            ledger_append(event_type="t", resource_type="t", resource_id="t", actor="a", event_id="evt_x")
        assert LedgerHead.objects.values_list("sequence", "hash").get() == (1, event.hash)


# --- indexes: one each, none for LIKE -----------------------------------------------------------------------
@pytest.mark.django_db
def test_event_id_and_event_type_have_one_index_each_and_none_for_like():
    # unique=True / db_index=True would add varchar_pattern_ops twins on PostgreSQL,
    # maintained on every append for LIKE queries nothing runs (migration 0003).
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, LedgerEvent._meta.db_table)
    indexed = {}
    for constraint in constraints.values():
        if constraint["index"] or constraint["unique"]:
            indexed.setdefault(tuple(constraint["columns"]), []).append(constraint)
    assert len(indexed[("event_id",)]) == 1 and indexed[("event_id",)][0]["unique"]
    assert len(indexed[("event_type",)]) == 1


# --- migration 0002: jsonb (or JSON text on SQLite) to canonical text ----------------------------------------
MIGRATED = AWKWARD_PAYLOADS[:3] * 2  # jsonb cannot hold U+0000, so not the fourth
BEFORE = [("core", "0001_initial")]
AFTER = [("core", "0002_ledger_payload_canonical_text")]


def _migrate(targets):
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


@pytest.mark.django_db(transaction=True)
def test_migration_0002_rewrites_each_payload_as_its_canonical_text_and_back():
    old_apps = _migrate(BEFORE)
    try:
        old_events = old_apps.get_model("core", "LedgerEvent").objects
        prev, recorded = GENESIS_HASH, datetime(2026, 11, 21, 19, 31, 24, 123456, tzinfo=UTC)
        for sequence, payload in enumerate(MIGRATED, 1):
            fields = {"sequence": sequence, "event_id": f"evt_{sequence}", "event_type": "t.migrated",
                      "resource_type": "t", "resource_id": "\u00e9", "actor": "a\n",
                      "payload_hash": content_hash(payload)}
            recorded += timedelta(seconds=1)
            event_hash = chain_hash(prev, canonical_event(recorded_at=recorded.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                                                          **fields))
            old_events.create(payload=payload, prev_hash=prev, hash=event_hash, recorded_at=recorded, **fields)
            prev = event_hash
        old_apps.get_model("core", "LedgerHead").objects.update_or_create(
            pk=1, defaults={"sequence": len(MIGRATED), "hash": prev})

        _migrate(AFTER)
        expected = [canonical_json(p).decode("utf-8") for p in MIGRATED]
        assert [stored_payload(s) for s in range(1, len(expected) + 1)] == expected
        assert_both({"verified": True, "events": len(expected), "head_hash": prev, "first_broken_sequence": None})

        _migrate(BEFORE)  # and back to JSON: the values still hash as recorded
        with connection.cursor() as cursor:
            cast = "::text" if connection.vendor == "postgresql" else ""
            cursor.execute(f"SELECT payload{cast}, payload_hash FROM core_ledgerevent ORDER BY sequence")
            rows = cursor.fetchall()
        assert [content_hash(load_json(text)) for text, _ in rows] == [recorded for _, recorded in rows]
    finally:
        # Every app's latest, not only core's: going back to core 0001 also unapplied the
        # migrations of other apps that depend on later core ones (execution's, for one).
        _migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
    assert ledger_verify().verified


@pytest.mark.django_db
class TestBatch:
    """``ledger_batch``: the block's events are written at its end, in order, in one statement."""

    @staticmethod
    def queue(n, **overrides):
        for i in range(n):
            assert ledger_append(**{"event_type": "batch.appended", "resource_type": "task", "resource_id": f"r{i}",
                                    "actor": AWKWARD[i % len(AWKWARD)] or "a", "payload": AWKWARD_PAYLOADS[i % 4],
                                    **overrides}) is None

    def test_queued_events_are_chained_in_call_order_and_verify_on_both_paths(self, django_assert_num_queries):
        with transaction.atomic():
            ledger_append(event_type="t", resource_type="t", resource_id="t", actor="a")  # the head exists
            # The count, then one statement for the five events (SQLite: three per event).
            with django_assert_num_queries(2 if connection.vendor == "postgresql" else 16):
                with ledger_batch():
                    self.queue(5)
                    assert LedgerEvent.objects.count() == 1  # nothing written yet
        events = list(LedgerEvent.objects.order_by("sequence"))
        assert [e.sequence for e in events] == [1, 2, 3, 4, 5, 6]
        assert [e.resource_id for e in events[1:]] == ["r0", "r1", "r2", "r3", "r4"]
        # Read back with fractions as Decimals (exact): the same JSON values, the same canonical bytes.
        assert [canonical_json(e.payload) for e in events[1:]] == [canonical_json(AWKWARD_PAYLOADS[i % 4])
                                                                   for i in range(5)]
        assert all(e.prev_hash == p.hash for p, e in zip(events, events[1:]))
        assert LedgerHead.objects.values_list("sequence", "hash").get() == (6, events[-1].hash)
        assert verify_in_python().verified
        if connection.vendor == "postgresql":
            assert verify_in_database().as_dict() == verify_in_python().as_dict()

    def test_an_error_in_the_block_writes_nothing(self):
        with pytest.raises(ValueError), transaction.atomic(), ledger_batch():
            self.queue(3)
            raise ValueError("the change failed")
        assert LedgerEvent.objects.count() == 0
        with transaction.atomic(), ledger_batch():
            self.queue(2)
        assert list(LedgerEvent.objects.values_list("sequence", flat=True).order_by("sequence")) == [1, 2]
        assert ledger_verify().verified

    def test_a_nested_batch_joins_the_outer_one(self):
        with transaction.atomic(), ledger_batch():
            self.queue(1)
            with ledger_batch():
                self.queue(2, event_type="batch.inner")
            assert LedgerEvent.objects.count() == 0
        assert list(LedgerEvent.objects.order_by("sequence").values_list("event_type", flat=True)) == [
            "batch.appended", "batch.inner", "batch.inner"]

    def test_a_missing_head_is_recreated_at_the_tip(self):
        with transaction.atomic():
            ledger_append(event_type="t", resource_type="t", resource_id="t", actor="a")
        LedgerHead.objects.all().delete()
        with transaction.atomic(), ledger_batch():
            self.queue(2)
        assert LedgerHead.objects.values_list("sequence", flat=True).get() == 3
        assert ledger_verify().verified


@pytest.mark.django_db(transaction=True)
def test_a_batch_needs_a_transaction():
    with pytest.raises(RuntimeError, match="inside the transaction"), ledger_batch():
        pytest.fail("the block ran outside a transaction")


@pytest.mark.django_db(transaction=True)
class TestRecord:
    """``ledger_record``: one event in a transaction of its own."""

    def test_it_is_one_statement_in_a_transaction_of_its_own_on_postgresql(self, django_assert_num_queries):
        ledger_record(event_type="t", resource_type="t", resource_id="t", actor="a")  # the head exists
        # BEGIN and COMMIT around one statement on PostgreSQL, around the ORM path on SQLite
        # (lock the head, insert, move the head).
        with django_assert_num_queries(3 if connection.vendor == "postgresql" else 5):
            ledger_record(event_type="validated", resource_type="task", resource_id="r", actor=AWKWARD[0],
                          payload=AWKWARD_PAYLOADS[0])
        event = LedgerEvent.objects.get(sequence=2)
        assert (event.event_type, event.actor, event.payload) == ("validated", AWKWARD[0], AWKWARD_PAYLOADS[0])
        assert ledger_verify().as_dict() == verify_in_python().as_dict()
        assert ledger_verify().verified

    def test_it_recreates_a_missing_head_at_the_tip(self):
        ledger_record(event_type="t", resource_type="t", resource_id="t", actor="a")
        LedgerHead.objects.all().delete()
        ledger_record(event_type="t", resource_type="t", resource_id="u", actor="a")
        assert LedgerHead.objects.values_list("sequence", flat=True).get() == 2
        assert ledger_verify().verified

    def test_inside_a_transaction_it_rolls_back_with_it(self):
        with pytest.raises(ValueError), transaction.atomic():
            ledger_record(event_type="t", resource_type="t", resource_id="t", actor="a")
            raise ValueError("the change failed")
        assert LedgerEvent.objects.count() == 0
