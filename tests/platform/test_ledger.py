"""The hash-chained ledger (docs/reference/ledger.md): gap-free under concurrency, and tamper-evident."""

import json
import threading
from datetime import timedelta

import pytest
import rfc8785
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, transaction
from django.db.models import TextField
from django.db.models.functions import Cast
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from agp_project.canonical import content_hash
from core.ledger import GENESIS_HASH, canonical_event, chain_hash, ledger_append
from core.ledger_verification import ledger_verify, verify_in_database, verify_in_python
from core.models import LedgerEvent, LedgerHead
from tests.platform.conftest import assert_envelope


def append(n=1, **overrides):
    events = []
    for i in range(n):
        with transaction.atomic():
            events.append(ledger_append(**{"event_type": "test.appended", "resource_type": "task",
                                           "resource_id": f"tsk_{i}", "actor": "tester", "payload": {"i": i},
                                           **overrides}))
    return events


def tamper(sql, params):
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


@pytest.fixture(params=["python", pytest.param("database", marks=pytest.mark.postgres)])
def verify(request):
    """Each verification path; both must give the same verdict on the same ledger.

    ``ledger_verify`` takes the database path on PostgreSQL and the Python walk elsewhere;
    the Python walk also runs on PostgreSQL, so there the two are compared. The database
    path is marked ``postgres``: skipped on SQLite, a failure in CI when PostgreSQL is missing.
    """
    if request.param == "python":
        return verify_in_python
    return lambda batch_size=None: verify_in_database()


@pytest.mark.django_db
class TestAppend:
    def test_it_chains_each_event_to_the_previous_one(self):
        first, second = append(2)
        assert (first.sequence, second.sequence) == (1, 2)
        assert first.prev_hash == GENESIS_HASH
        assert second.prev_hash == first.hash
        assert first.payload_hash == content_hash({"i": 0})
        assert second.hash == chain_hash(first.hash, canonical_event(
            sequence=2, event_id=second.event_id, event_type="test.appended", resource_type="task",
            resource_id="tsk_1", actor="tester", payload_hash=second.payload_hash,
            recorded_at=second.recorded_at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")))
        assert LedgerHead.objects.values_list("sequence", "hash").get() == (2, second.hash)

    def test_a_rolled_back_change_leaves_no_gap(self):
        append(1)
        with pytest.raises(ValueError), transaction.atomic():
            ledger_append(event_type="test.lost", resource_type="task", resource_id="t", actor="a")
            raise ValueError("the change failed")
        (event,) = append(1)
        assert event.sequence == 2
        assert list(LedgerEvent.objects.order_by("sequence").values_list("sequence", flat=True)) == [1, 2]
        assert ledger_verify().verified

    def test_it_recreates_a_missing_head_at_the_tip_of_the_chain(self):
        append(3)
        LedgerHead.objects.all().delete()
        (event,) = append(1)
        assert event.sequence == 4
        assert ledger_verify().as_dict() == {"verified": True, "events": 4, "head_hash": event.hash,
                                             "first_broken_sequence": None}


@pytest.mark.django_db(transaction=True)
def test_it_refuses_to_append_outside_a_transaction():
    with pytest.raises(RuntimeError, match="inside the transaction"):
        ledger_append(event_type="x", resource_type="task", resource_id="t", actor="a")
    assert LedgerEvent.objects.count() == 0


@given(st.text(), st.text(), st.text(min_size=1), st.text(), st.integers(min_value=0, max_value=2**53 - 1))
@hypothesis_settings(max_examples=300, deadline=None)
def test_canonical_event_is_exactly_rfc8785(event_type, resource_id, actor, event_id, sequence):
    fields = {"sequence": sequence, "event_id": event_id, "event_type": event_type, "resource_type": "t\u00e9st",
              "resource_id": resource_id, "actor": actor, "payload_hash": "sha256:" + "a" * 64,
              "recorded_at": "2026-11-21T19:31:24.123456Z"}
    assert canonical_event(**fields) == rfc8785.dumps(fields)


@pytest.mark.django_db
class TestVerification:
    def test_an_intact_chain_verifies(self, verify):
        events = append(5)
        assert verify(batch_size=2).as_dict() == {
            "verified": True, "events": 5, "head_hash": events[-1].hash, "first_broken_sequence": None}

    def test_an_empty_ledger_verifies(self, verify):
        assert verify().as_dict() == {"verified": True, "events": 0, "head_hash": GENESIS_HASH,
                                      "first_broken_sequence": None}

    def test_ledger_verify_takes_the_database_path_on_postgresql(self, django_assert_num_queries):
        events = append(3)
        # Python: rows numbered below 1, 2 batches, head
        with django_assert_num_queries(1 if connection.vendor == "postgresql" else 4):
            result = ledger_verify(batch_size=5)
        assert result.as_dict() == verify_in_python().as_dict() == {
            "verified": True, "events": 3, "head_hash": events[-1].hash, "first_broken_sequence": None}

    @pytest.mark.parametrize("column, flip", [
        ("actor", lambda v: "T" + v[1:]),
        ("resource_id", lambda v: v[:-1] + "9"),
        ("resource_type", lambda v: v.upper()),
        ("event_type", lambda v: v.replace("appended", "appendec")),
        ("event_id", lambda v: v + "x"),
        ("hash", lambda v: ("1" if v[0] != "1" else "2") + v[1:]),
        ("prev_hash", lambda v: ("1" if v[0] != "1" else "2") + v[1:]),
        ("payload_hash", lambda v: v[:-1] + ("0" if v[-1] != "0" else "1")),
        ("payload", lambda v: v.replace("3", "4")),
        ("payload", lambda v: v + " "),  # the same JSON value, but not the bytes that were hashed
        ("payload", lambda v: v.replace(":", ": ")),
    ])
    def test_flipping_one_byte_of_a_stored_event_names_that_event(self, verify, column, flip):
        append(6)
        (value,) = LedgerEvent.objects.filter(sequence=4).values_list(Cast(column, TextField()), flat=True)
        tamper(f"UPDATE core_ledgerevent SET {column} = %s WHERE sequence = %s", [flip(value), 4])
        result = verify(batch_size=2)
        assert (result.verified, result.first_broken_sequence, result.events) == (False, 4, 3)
        assert result.head_hash == LedgerEvent.objects.get(sequence=3).hash

    def test_a_moved_recorded_at_names_that_event(self, verify):
        append(4)
        tamper("UPDATE core_ledgerevent SET recorded_at = %s WHERE sequence = %s",
               [LedgerEvent.objects.get(sequence=2).recorded_at + timedelta(microseconds=1), 2])
        assert (verify().first_broken_sequence, verify().events) == (2, 1)

    def test_a_changed_payload_names_that_event(self, verify):
        append(3)
        event = LedgerEvent.objects.get(sequence=2)
        event.payload = {"i": 7}
        event.save(update_fields=["payload"])
        assert verify().first_broken_sequence == 2

    def test_a_deleted_event_in_the_middle_names_the_gap(self, verify):
        append(4)
        tamper("DELETE FROM core_ledgerevent WHERE sequence = %s", [2])
        assert verify().first_broken_sequence == 3

    def test_a_deleted_first_event_names_the_new_first(self, verify):
        append(3)
        tamper("DELETE FROM core_ledgerevent WHERE sequence = %s", [1])
        assert verify().as_dict() == {"verified": False, "events": 0, "head_hash": GENESIS_HASH,
                                      "first_broken_sequence": 2}

    def test_a_renumbered_event_names_the_gap_it_leaves(self, verify):
        events = append(6)
        tamper("UPDATE core_ledgerevent SET sequence = %s WHERE sequence = %s", [40, 4])
        assert verify(batch_size=2).as_dict() == {"verified": False, "events": 3, "head_hash": events[2].hash,
                                                  "first_broken_sequence": 5}

    @pytest.mark.parametrize("sequences", [[0], [-5], [0, -2]])
    def test_a_row_numbered_below_one_is_the_first_break(self, verify, sequences):
        append(3)
        for sequence in sequences:  # a copy of event 1 written straight into the table
            tamper("INSERT INTO core_ledgerevent (sequence, event_id, event_type, resource_type, resource_id, actor, "
                   "payload, payload_hash, prev_hash, hash, recorded_at) SELECT %s, %s, event_type, resource_type, "
                   "resource_id, actor, payload, payload_hash, prev_hash, hash, recorded_at FROM core_ledgerevent "
                   "WHERE sequence = 1", [sequence, f"forged{sequence}"])
        assert verify().as_dict() == {"verified": False, "events": 0, "head_hash": GENESIS_HASH,
                                      "first_broken_sequence": min(sequences)}

    def test_a_deleted_tail_is_noticed_through_the_head(self, verify):
        append(4)
        tamper("DELETE FROM core_ledgerevent WHERE sequence = %s", [4])
        result = verify()
        assert (result.verified, result.events, result.first_broken_sequence) == (False, 3, 4)

    def test_a_head_with_another_hash_is_noticed(self, verify):
        events = append(3)
        LedgerHead.objects.filter(pk=1).update(hash="f" * 64)
        assert verify().as_dict() == {"verified": False, "events": 3, "head_hash": events[-1].hash,
                                      "first_broken_sequence": 4}

    def test_a_missing_head_leaves_an_intact_chain_verified(self, verify):
        events = append(2)
        LedgerHead.objects.all().delete()
        assert verify().as_dict() == {"verified": True, "events": 2, "head_hash": events[-1].hash,
                                      "first_broken_sequence": None}

    @pytest.mark.parametrize("content, link, first", [(2, 5, 2), (5, 2, 2), (3, 3, 3)])
    def test_of_two_breaks_the_earlier_is_named(self, verify, content, link, first):
        events = append(6)
        tamper("UPDATE core_ledgerevent SET actor = %s WHERE sequence = %s", ["intruder", content])
        tamper("UPDATE core_ledgerevent SET prev_hash = %s WHERE sequence = %s", ["e" * 64, link])
        assert verify(batch_size=2).as_dict() == {"verified": False, "events": first - 1,
                                                  "head_hash": events[first - 2].hash,
                                                  "first_broken_sequence": first}


@pytest.mark.django_db
class TestVerifyCommandAndEndpoint:
    def test_the_command_reports_an_intact_chain_and_exits_zero(self, capsys):
        events = append(3)
        call_command("verify_ledger")
        assert capsys.readouterr().out.strip() == (f"ledger verified: 3 events, head hash {events[-1].hash}; "
                                                   "no checkpoint yet")

    def test_the_command_names_the_first_broken_sequence_and_fails(self, capsys):
        append(5)
        tamper("UPDATE core_ledgerevent SET actor = %s WHERE sequence = %s", ["Tester", 3])
        with pytest.raises(CommandError, match=r"ledger broken at sequence 3 \(2 events before it verified\)"):
            call_command("verify_ledger", "--json")
        assert json.loads(capsys.readouterr().out)["first_broken_sequence"] == 3

    def test_the_command_exits_non_zero_from_the_shell(self, capsys):
        append(2)
        tamper("UPDATE core_ledgerevent SET actor = %s WHERE sequence = %s", ["Tester", 1])
        with pytest.raises(SystemExit) as exit_info:
            from django.core.management import ManagementUtility

            ManagementUtility(["manage.py", "verify_ledger"]).execute()
        assert exit_info.value.code == 1
        assert "ledger broken at sequence 1" in capsys.readouterr().err

    def test_the_endpoint_reports_the_verification(self, api):
        events = append(3)
        response = api.get("/agp/ledger-events/verify")
        assert response.status_code == 200
        no_checkpoint = {"verified": True, "tree_size": 0, "root_hash": None, "first_broken_sequence": None,
                         "problem": None}
        assert response.json() == {"verified": True, "events": 3, "head_hash": events[-1].hash,
                                   "first_broken_sequence": None, "tree": no_checkpoint}
        tamper("UPDATE core_ledgerevent SET resource_id = %s WHERE sequence = %s", ["tsk_X", 2])
        assert api.get("/agp/ledger-events/verify").json() == {
            "verified": False, "events": 1, "head_hash": events[0].hash, "first_broken_sequence": 2,
            "tree": no_checkpoint}

    def test_the_endpoint_needs_an_execution_scope(self, make_token, api):
        api.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(scopes=['agp.decision.read'])}")
        assert_envelope(api.get("/agp/ledger-events/verify"), 403, "AGP_INSUFFICIENT_SCOPE")


@pytest.mark.django_db
class TestLedgerEventsApi:
    def test_a_client_event_is_appended_with_the_caller_as_actor(self, make_token, api):
        api.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(client_id='auditor-1')}")
        response = api.post("/agp/ledger-events", {"event_type": "client.reviewed", "resource_type": "task",
                                                   "resource_id": "tsk_9", "payload": {"ok": True}}, format="json")
        assert response.status_code == 201
        body = response.json()
        event = LedgerEvent.objects.get()
        assert response["Location"] == f"http://testserver/agp/ledger-events/{event.sequence}"
        assert body == {"type": "LedgerEvent", "sequence": 1, "event_id": event.event_id,
                        "event_type": "client.reviewed", "resource_type": "task", "resource_id": "tsk_9",
                        "actor": "auditor-1", "payload": {"ok": True}, "payload_hash": content_hash({"ok": True}),
                        "prev_hash": GENESIS_HASH, "hash": event.hash,
                        "recorded_at": event.recorded_at.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                        "task_id": None, "action_id": None, "root_principal": None}
        assert event.event_id.startswith("evt_")
        assert api.get(f"/agp/ledger-events/{event.sequence}").json() == body

    def test_the_location_uses_the_configured_base_url(self, api, settings):
        settings.AGP_BASE_URL = "https://agp.example.org"
        response = api.post("/agp/ledger-events", {"event_type": "client.x", "resource_type": "task",
                                                   "resource_id": "t"}, format="json")
        assert response["Location"] == "https://agp.example.org/agp/ledger-events/1"

    def test_lists_are_newest_first_with_a_cursor(self, api):
        append(5)
        first = api.get("/agp/ledger-events?limit=2").json()
        assert [e["sequence"] for e in first["items"]] == [5, 4]
        second = api.get(f"/agp/ledger-events?limit=2&cursor={first['next_cursor']}").json()
        assert [e["sequence"] for e in second["items"]] == [3, 2]
        third = api.get(f"/agp/ledger-events?limit=2&cursor={second['next_cursor']}").json()
        assert ([e["sequence"] for e in third["items"]], third["next_cursor"]) == ([1], None)

    def test_lists_filter_by_exact_match(self, api):
        append(3)
        append(1, resource_id="tsk_0", event_type="test.other")
        body = api.get("/agp/ledger-events?resource_id=tsk_0").json()
        assert [e["sequence"] for e in body["items"]] == [4, 1]
        body = api.get("/agp/ledger-events?resource_id=tsk_0&event_type=test.other").json()
        assert [e["sequence"] for e in body["items"]] == [4]

    def test_client_events_must_be_in_the_client_namespace(self, api):
        response = api.post("/agp/ledger-events", {"event_type": "delegation.created", "resource_type": "task",
                                                   "resource_id": "t"}, format="json")
        error = assert_envelope(response, 400, "AGP_INVALID_REQUEST")
        assert list(error["details"]["fields"]) == ["event_type"]
        assert LedgerEvent.objects.count() == 0


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_eight_threads_of_two_hundred_appends_give_one_gap_free_chain():
    start = threading.Barrier(8)
    failures = []

    def writer(n):
        try:
            start.wait(timeout=30)
            for i in range(200):
                with transaction.atomic():
                    ledger_append(event_type="test.concurrent", resource_type="writer", resource_id=f"w{n}",
                                  actor=f"writer-{n}", payload={"i": i})
        except Exception as exc:  # reported below; a thread's exception is otherwise lost
            failures.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert failures == []
    sequences = list(LedgerEvent.objects.order_by("sequence").values_list("sequence", flat=True))
    assert sequences == list(range(1, 1601))
    for n in range(8):
        assert LedgerEvent.objects.filter(actor=f"writer-{n}").count() == 200
    result = ledger_verify()
    assert (result.verified, result.events, result.first_broken_sequence) == (True, 1600, None)
    assert result.head_hash == LedgerEvent.objects.get(sequence=1600).hash
    assert LedgerHead.objects.values_list("sequence", "hash").get() == (1600, result.head_hash)
