"""The ledger's sequencer runs in the Celery worker, one at a time, and another worker takes
over when the one holding its lock dies (docs/reference/ledger.md). Real workers, PostgreSQL."""

import time

import pytest

from core.ledger import ledger_record
from core.ledger_verification import ledger_verify
from core.models import LedgerEvent
from tests.execution.worker import (  # noqa: F401
    test_broker,
    worker_db,
    worker_factory,
)

pytestmark = pytest.mark.postgres


@pytest.fixture
def sequenced(worker_db, settings):
    settings.AGP_LEDGER_SEQUENCER = True


def record(n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        ledger_record(event_type="test.recorded", resource_type="Probe", resource_id=f"p{i}", actor="tester")


def wait_for_chain(count: int) -> None:
    deadline = time.monotonic() + 60
    while LedgerEvent.objects.count() < count:
        assert time.monotonic() < deadline, f"{LedgerEvent.objects.count()} of {count} events integrated"
        time.sleep(0.05)


def test_a_worker_integrates_and_another_takes_over_when_it_dies(sequenced, worker_factory):
    first = worker_factory.start(AGP_LEDGER_SEQUENCER="1")
    second = worker_factory.start(AGP_LEDGER_SEQUENCER="1")
    record(20)
    wait_for_chain(20)
    holder = first if "holding the lock" in first.log() else second
    assert ("holding the lock" in first.log()) != ("holding the lock" in second.log())
    holder.kill()
    record(20, start=20)
    wait_for_chain(40)
    assert list(LedgerEvent.objects.order_by("sequence").values_list("resource_id", flat=True)) == [
        f"p{i}" for i in range(40)]
    assert ledger_verify().verified
