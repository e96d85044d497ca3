"""The sequencer under faults, with real processes on PostgreSQL (docs/reference/ledger.md).

Eight writer processes append changes with their events while a sequencer process
(``manage.py ledger_sequencer``) integrates them and this process signs checkpoints.
The sequencer is SIGKILLed in the middle of a batch (a standby sequencer, waiting for the
lock, takes over), or backends are terminated with ``pg_terminate_backend``. Afterwards
every committed change has exactly one event in the chain, the chain verifies, its
positions are 1..n once each, and every checkpoint signed during the run is the root of the
first events of the final chain: none claimed a position that was not integrated.
"""

import collections
import os
import signal
import subprocess
import sys
import threading
import time

import psycopg
import pytest
from django.db import connection

from agp_project.timeutil import iso
from core.ledger import canonical_event
from core.ledger_verification import ledger_verify
from core.models import Checkpoint, LedgerEvent, LedgerHead, LedgerPendingEvent
from core.sequencer import APPLICATION_NAME, SEQUENCER_LOCK, ledger_integrate
from core.services import checkpoint_create
from tests.execution.worker import REPO, database_url
from tests.rfc9162 import Tree

pytestmark = [pytest.mark.system, pytest.mark.postgres]

WRITERS = 8
WRITER_APP = "agp-fault-writer"


@pytest.fixture
def faults(transactional_db, settings, tmp_path):
    settings.AGP_LEDGER_SEQUENCER = True
    LedgerHead.objects.get_or_create(pk=1)
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE IF NOT EXISTS fault_change (id text PRIMARY KEY)")
        cursor.execute("TRUNCATE fault_change")
    run = Run(tmp_path / "stop-writing")
    yield run
    run.stop()
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS fault_change")


class Sequencer:
    """A ``manage.py ledger_sequencer`` process, its log in a file of its own."""

    def __init__(self, env, log_path):
        self.log_path = log_path
        with open(log_path, "wb") as log:
            self.process = subprocess.Popen([sys.executable, "manage.py", "ledger_sequencer"], cwd=REPO,
                                            env={**env, "AGP_LOG_LEVEL": "INFO"}, stdout=log, stderr=subprocess.STDOUT)

    def holds_the_lock(self) -> bool:
        """Alive, and its last word on the lock is that it holds it."""
        if self.process.poll() is not None:
            return False
        said = [line for line in self.log_path.read_text(errors="replace").splitlines()
                if "holding the lock" in line or "connecting again" in line]
        return bool(said) and "holding the lock" in said[-1]

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)


class Run:
    def __init__(self, stop_file):
        self.stop_file = stop_file

        self.env = {**os.environ, "DJANGO_SETTINGS_MODULE": "agp_project.settings.test",
                    "AGP_DATABASE_URL": database_url(), "AGP_LEDGER_SEQUENCER": "1", "PYTHONUNBUFFERED": "1"}
        self.env.pop("AGP_AUTH_SECRET", None)
        self.writers: list[subprocess.Popen] = []
        self.sequencers: list[Sequencer] = []
        self.signing = threading.Event()

    def start_writers(self, seconds: float) -> None:
        self.writers = [subprocess.Popen([sys.executable, "-m", "tests.core.ledger_writer", str(seconds), str(i),
                                          str(self.stop_file)],
                                         cwd=REPO, env={**self.env, "PGAPPNAME": WRITER_APP})
                        for i in range(WRITERS)]

    def start_sequencers(self, count: int) -> None:
        """Sequencer processes that compete for the lock: one integrates, the others stand by."""
        self.sequencers += [Sequencer(self.env, self.stop_file.with_name(f"sequencer-{len(self.sequencers) + i}.log"))
                            for i in range(count)]

    def sign_checkpoints(self) -> None:
        """Sign checkpoints from a thread of this process while the run lasts."""
        def loop():
            try:
                while not self.signing.wait(0.2):
                    if checkpoint_create() is not None:
                        self.signed += 1
            except Exception as exc:  # noqa: BLE001 - reported by the test
                self.signing_failed = exc
            finally:
                connection.close()

        self.signed, self.signing_failed = 0, None
        self.signer = threading.Thread(target=loop)
        self.signer.start()

    def wait_for_a_checkpoint(self) -> None:
        """Wait until a checkpoint has been signed while the writers write and the sequencers integrate."""
        deadline = time.monotonic() + 90
        while self.signed < 1:
            assert self.signing_failed is None, self.signing_failed
            assert time.monotonic() < deadline, "no checkpoint was signed during the run"
            time.sleep(0.1)

    def stop_signing(self) -> None:
        self.signing.set()
        self.signer.join(timeout=120)
        assert not self.signer.is_alive(), "the signing thread did not end"
        assert self.signing_failed is None, self.signing_failed

    def writers_done(self) -> None:
        """Stop the writers once the faults are done: each ends its change in flight and exits 0."""
        self.stop_file.touch()
        for writer in self.writers:
            assert writer.wait(timeout=120) == 0

    def stop(self) -> None:
        self.signing.set()
        for process in [*self.writers, *(sequencer.process for sequencer in self.sequencers)]:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=10)


def backend(application_name: str, *, in_batch: bool = False) -> int | None:
    """The pid of a backend of that application (``in_batch``: inside a transaction that took rows
    or locked the head, between its statements or holding a transaction id)."""
    condition = " AND (backend_xid IS NOT NULL OR state = 'idle in transaction')" if in_batch else ""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                       "AND application_name = %s" + condition + " ORDER BY random() LIMIT 1", [application_name])
        row = cursor.fetchone()
    return row[0] if row else None


def wait_for_pending(count: int) -> None:
    """Wait until the writers (slow to start on a busy machine) have left ``count`` events pending."""
    deadline = time.monotonic() + 60
    while LedgerPendingEvent.objects.count() < count:
        assert time.monotonic() < deadline, "the writers wrote too little"
        time.sleep(0.1)


def wait_for_sequencers(count: int) -> None:
    """Wait until ``count`` sequencers have connected and asked for the lock."""
    deadline = time.monotonic() + 60
    while True:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                           "AND application_name = %s", [APPLICATION_NAME])
            if cursor.fetchone()[0] >= count:
                return
        assert time.monotonic() < deadline, "the sequencers did not start"
        time.sleep(0.1)


def wait_until_integrated() -> None:
    """Wait until the running sequencer has integrated every pending event."""
    deadline = time.monotonic() + 90
    while LedgerPendingEvent.objects.exists():
        assert time.monotonic() < deadline, "the sequencer did not integrate the pending events"
        time.sleep(0.1)


def drain() -> None:
    """Integrate until a batch finds nothing left."""
    integrated = True
    while integrated:
        integrated = ledger_integrate()


def assert_one_chain_of_the_committed_changes() -> None:
    assert not LedgerPendingEvent.objects.exists()
    with connection.cursor() as cursor:
        cursor.execute("SELECT id FROM fault_change")
        changes = {row[0] for row in cursor.fetchall()}
    events = collections.Counter(LedgerEvent.objects.filter(resource_type="FaultChange")
                                 .values_list("resource_id", flat=True))
    assert changes and set(events) == changes
    assert max(events.values()) == 1
    verification = ledger_verify()
    assert verification.verified, verification
    sequences = list(LedgerEvent.objects.order_by("sequence").values_list("sequence", flat=True))
    assert sequences == list(range(1, len(sequences) + 1))
    # Every checkpoint signed during the run is the root of the final chain's first events.
    rows = LedgerEvent.objects.order_by("sequence").values_list(
        "sequence", "event_id", "event_type", "resource_type", "resource_id", "actor", "payload_hash", "recorded_at")
    tree = Tree([canonical_event(sequence=s, event_id=e, event_type=t, resource_type=rt, resource_id=ri, actor=a,
                                 payload_hash=p, recorded_at=iso(r)) for s, e, t, rt, ri, a, p, r in rows])
    checkpoints = list(Checkpoint.objects.values_list("tree_size", "root_hash"))
    assert checkpoints
    for size, root in checkpoints:
        assert size <= len(sequences)
        assert tree.root(size).hex() == root


def test_a_sequencer_killed_mid_batch_loses_and_duplicates_nothing(faults):
    # The lock held here while four sequencers start (before the writers take the CPU) and the
    # writers leave a backlog, so that batches are full and take a while; each sequencer then
    # takes over from the one killed before it.
    with psycopg.connect(database_url(), autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", [SEQUENCER_LOCK])
        faults.start_sequencers(4)
        wait_for_sequencers(4)
        faults.start_writers(60)
        faults.sign_checkpoints()
        wait_for_pending(3000)
    killed_mid_batch = 0
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and killed_mid_batch < 3:
        holding = [sequencer for sequencer in faults.sequencers if sequencer.holds_the_lock()]
        if holding and backend(APPLICATION_NAME, in_batch=True):
            holding[0].kill()
            killed_mid_batch += 1
        else:
            time.sleep(0.001)
    faults.wait_for_a_checkpoint()
    faults.writers_done()
    wait_until_integrated()
    faults.stop_signing()
    faults.stop()
    checkpoint_create()
    assert killed_mid_batch == 3
    assert_one_chain_of_the_committed_changes()


def test_terminated_backends_under_eight_writers_lose_and_duplicate_nothing(faults):
    faults.start_sequencers(1)
    wait_for_sequencers(1)  # started before the writers take the CPU
    faults.start_writers(60)

    faults.sign_checkpoints()
    terminated = collections.Counter()
    deadline = time.monotonic() + 60
    while LedgerEvent.objects.count() < 500:  # the writers and the sequencer are at work
        assert time.monotonic() < deadline
        time.sleep(0.1)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (terminated[WRITER_APP] < 4 or terminated[APPLICATION_NAME] < 2):
        name = WRITER_APP if terminated[WRITER_APP] < 2 * (terminated[APPLICATION_NAME] + 1) else APPLICATION_NAME
        pid = backend(name, in_batch=True) or backend(name)
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
            done = bool(pid) and cursor.fetchone()[0]
        terminated[name] += done
        time.sleep(0.5 if done else 0.02)
    faults.wait_for_a_checkpoint()
    faults.writers_done()

    wait_until_integrated()  # the sequencer process connected again by itself
    faults.stop_signing()
    faults.stop()
    checkpoint_create()
    assert terminated[WRITER_APP] >= 3 and terminated[APPLICATION_NAME] >= 1
    assert_one_chain_of_the_committed_changes()
