"""The ledger's sequencer on PostgreSQL (docs/reference/ledger.md, "When an event joins the chain").

Transactional tests: the sequencer integrates committed events only, and each test's
appends commit. A second connection (a thread) plays the long transaction.
"""

import threading
import time

import pytest
from django.db import connection, transaction

from core.ledger import ledger_append, ledger_record
from core.ledger_verification import ledger_verify
from core.models import Checkpoint, LedgerEvent, LedgerHead, LedgerPendingEvent
from core.sequencer import ledger_integrate, sequencer_start
from core.services import checkpoint_create
from tests.platform.conftest import assert_envelope

pytestmark = [pytest.mark.postgres]


@pytest.fixture
def sequenced(transactional_db, settings):
    settings.AGP_LEDGER_SEQUENCER = True
    LedgerHead.objects.get_or_create(pk=1)  # transactional_db's flush removed it


@pytest.fixture
def sequencer(sequenced, settings):
    settings.AGP_LEDGER_WAIT_SECONDS = 30  # see ``integrated``
    thread = sequencer_start()
    yield thread
    thread.stop.set()
    thread.join(timeout=10)


def record(resource_id: str, **extra) -> None:
    ledger_record(event_type="test.recorded", resource_type="Probe", resource_id=resource_id, actor="tester",
                  payload={"id": resource_id}, **extra)


def integrated(count: int) -> None:
    """Integrate until ``count`` events are in the chain.

    The horizon is the whole PostgreSQL cluster's: another database's open transaction (a
    test suite running beside this one) delays integration, so the wait is generous.
    """
    deadline = time.monotonic() + 30
    while LedgerEvent.objects.count() < count:
        assert time.monotonic() < deadline, "not integrated"
        if not ledger_integrate():
            time.sleep(0.01)


def wait_until_chained(count: int) -> None:
    deadline = time.monotonic() + 30
    while LedgerEvent.objects.count() < count:
        assert time.monotonic() < deadline, "not integrated"
        time.sleep(0.01)


def chain() -> list[str]:
    return list(LedgerEvent.objects.order_by("sequence").values_list("resource_id", flat=True))


def test_it_writes_the_event_with_its_change_and_chains_it_after_the_commit(sequenced):
    record("a")
    record("b")
    assert (LedgerEvent.objects.count(), LedgerPendingEvent.objects.count()) == (0, 2)
    integrated(2)
    assert chain() == ["a", "b"]
    assert list(LedgerEvent.objects.order_by("sequence").values_list("sequence", flat=True)) == [1, 2]
    assert not LedgerPendingEvent.objects.exists()
    assert ledger_verify().verified
    assert LedgerHead.objects.values_list("sequence", flat=True).get() == 2


def test_it_writes_nothing_when_the_change_rolls_back(sequenced):
    with pytest.raises(RuntimeError), transaction.atomic():
        ledger_append(event_type="test.recorded", resource_type="Probe", resource_id="gone", actor="tester")
        raise RuntimeError("the change failed")
    assert ledger_integrate() == 0
    assert not LedgerPendingEvent.objects.exists()


def test_it_keeps_a_long_transaction_in_its_place(sequenced):
    written, release, done = threading.Event(), threading.Event(), threading.Event()

    def long_transaction():
        with transaction.atomic():
            ledger_append(event_type="test.recorded", resource_type="Probe", resource_id="long", actor="tester")
            written.set()
            release.wait(30)
        connection.close()
        done.set()

    threading.Thread(target=long_transaction).start()
    assert written.wait(10)
    record("later-1")
    record("later-2")
    # The long transaction is below the horizon's reach: nothing after it is integrated.
    assert ledger_integrate() == 0
    assert chain() == []
    release.set()
    assert done.wait(10)
    integrated(3)
    assert chain() == ["long", "later-1", "later-2"]
    assert ledger_verify().verified


def test_a_checkpoint_signs_only_integrated_events(sequenced):
    record("a")
    assert checkpoint_create() is None
    integrated(1)
    record("b")
    assert checkpoint_create().tree_size == 1
    integrated(2)
    assert checkpoint_create().tree_size == 2
    assert list(Checkpoint.objects.values_list("tree_size", flat=True)) == [2, 1]


def test_the_sequencer_thread_integrates_committed_events(sequencer):
    for i in range(50):
        record(f"e{i}")
    wait_until_chained(50)
    assert chain() == [f"e{i}" for i in range(50)]
    assert ledger_verify().verified


def test_a_client_event_is_answered_with_its_sequence(sequencer, api):
    record("first")
    response = api.post("/agp/ledger-events", {"event_type": "client.noted", "resource_type": "Probe",
                                               "resource_id": "note"}, format="json")
    assert response.status_code == 201
    assert response.json()["sequence"] == 2
    assert response["Location"].endswith("/agp/ledger-events/2")


def test_a_client_event_with_an_idempotency_key_is_chained_in_its_transaction(sequencer, api):
    response = api.post("/agp/ledger-events", {"event_type": "client.noted", "resource_type": "Probe",
                                               "resource_id": "note"}, format="json", HTTP_IDEMPOTENCY_KEY="k1")
    assert response.status_code == 201
    assert response.json()["sequence"] == 1
    replay = api.post("/agp/ledger-events", {"event_type": "client.noted", "resource_type": "Probe",
                                             "resource_id": "note"}, format="json", HTTP_IDEMPOTENCY_KEY="k1")
    assert replay.json() == response.json()
    record("after")
    wait_until_chained(2)
    assert chain() == ["note", "after"]
    assert ledger_verify().verified


def test_a_client_event_id_waiting_for_the_sequencer_is_taken(sequenced, api, settings):
    settings.AGP_LEDGER_WAIT_SECONDS = 1
    waiting = api.post("/agp/ledger-events", {"event_type": "client.noted", "resource_type": "Probe",
                                              "resource_id": "note", "event_id": "evt_mine"}, format="json")
    # No sequencer runs: the event is recorded, its place cannot be shown yet.
    assert_envelope(waiting, 503, "AGP_UNAVAILABLE")
    again = api.post("/agp/ledger-events", {"event_type": "client.noted", "resource_type": "Probe",
                                            "resource_id": "note", "event_id": "evt_mine"}, format="json")
    assert_envelope(again, 409, "AGP_CONFLICT")
    integrated(1)
    assert_envelope(api.post("/agp/ledger-events", {"event_type": "client.noted", "resource_type": "Probe",
                                                    "resource_id": "note", "event_id": "evt_mine"}, format="json"),
                    409, "AGP_CONFLICT")


@pytest.mark.django_db
def test_the_waiting_table_is_vacuumed_as_a_queue_after_a_few_thousand_deleted_rows():
    with connection.cursor() as cursor:
        cursor.execute("SELECT reloptions FROM pg_class WHERE relname = %s", [LedgerPendingEvent._meta.db_table])
        [options] = cursor.fetchone()
    assert set(options) >= {"autovacuum_vacuum_scale_factor=0", "autovacuum_vacuum_threshold=5000"}
