"""A real Celery worker for tests: ``celery -A agp_project worker`` in a subprocess, not eager mode.

The worker runs against the test database (its name from
``connection.settings_dict["NAME"]``, passed as ``AGP_DATABASE_URL``) and a Redis broker in
the tests' own Redis database (the ``redis_url`` fixture, tests/redis_server.py). Each test
session gets a queue of its own (``AGP_CELERY_QUEUE``) and deletes its keys when it ends. The test process publishes to
the same broker and queue: ``test_broker`` points the Celery app at them for the session.

Fixtures (import them into a test module):

- ``test_broker`` (session): the broker URL and queue, the app reconfigured;
  ``publishing_fails()`` makes the test process's publishes fail for a while.
- ``worker_factory`` (function): ``start(concurrency=2, **env)`` starts a worker and waits
  until it is ready; ``kill()`` sends SIGKILL to its whole process group (main process and pool
  children, as a crash would); every worker is stopped at the end of the test.
- ``module_worker`` (module): one worker shared by a module's tests (startup costs seconds).
- ``worker_db`` (function): ``transactional_db`` (the worker only sees committed rows) plus
  the ledger head row that a previous test's flush removed.

These tests need PostgreSQL: a worker in another process cannot share SQLite's in-memory
test database. Mark them ``postgres``.
"""

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest
import redis
from cryptography.hazmat.primitives import serialization
from django.conf import settings
from django.db import connection

from agp_project.signing import get_signer

REPO = Path(__file__).resolve().parents[2]
READY_TIMEOUT = 60
BASE_URL = "http://testserver"

# Short periods so a test sees recovery and retries in seconds rather than minutes.
FAST_ENV = {
    "AGP_OPERATION_LEASE_SECONDS": "2",
    "AGP_RECOVER_OPERATIONS_SECONDS": "1",
    "AGP_OUTBOX_SWEEP_SECONDS": "1",
    "AGP_RECOVER_PENDING_AFTER_SECONDS": "30",
    "AGP_CALLBACK_RETRY_BASE_SECONDS": "1",
    "AGP_CALLBACK_TIMEOUT_SECONDS": "2",
    "AGP_CONNECTOR_TIMEOUT_SECONDS": "3",
    "AGP_CONNECTOR_RETRY_BASE_SECONDS": "0",
    "AGP_ALLOW_PRIVATE_URLS": "1",
}


@dataclass(frozen=True)
class TestBroker:
    url: str
    queue: str


def database_url() -> str:
    """The test database as a URL for the worker's ``AGP_DATABASE_URL``."""
    if connection.vendor != "postgresql":
        pytest.fail("a real worker needs PostgreSQL: set AGP_DATABASE_URL (mark the test postgres)")
    db = connection.settings_dict
    auth = quote(db.get("USER") or "postgres", safe="")
    if db.get("PASSWORD"):
        auth += ":" + quote(db["PASSWORD"], safe="")
    return f"postgres://{auth}@{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}/{db['NAME']}"


def point_app_at(*, url: str, queue: str) -> None:
    """Make this process's Celery app publish to ``url``/``queue``.

    Deleting the cached ``app.amqp`` makes the next publish build its producer pool (kombu's,
    keyed on the new URL), queues and routes from the new settings. The app's own connection
    pool is left as it is: publishing does not use it (only its size limit), and closing it
    would close kombu's process-wide pool of the old URL for its next user.
    """
    from agp_project.broker import transport_for
    from agp_project.celery import app

    app.conf.broker_url = url
    app.conf.broker_transport = transport_for(url)
    app.conf.broker_transport_options = {"visibility_timeout": 3600}
    app.conf.task_default_queue = queue
    del app.amqp


_SESSION_BROKER: TestBroker | None = None


def session_broker(url: str) -> TestBroker:
    """The one broker and queue of this test session (created on first use).

    A fixture imported into several test modules is a separate fixture in each, so the
    session-wide state lives here, not in the fixture.
    """
    global _SESSION_BROKER
    if _SESSION_BROKER is None:
        redis.Redis.from_url(url).ping()
        broker = TestBroker(url=url, queue=f"agp-test-{uuid.uuid4().hex[:12]}")
        point_app_at(url=broker.url, queue=broker.queue)
        _SESSION_BROKER = broker
    return _SESSION_BROKER


@contextlib.contextmanager
def publishing_fails():
    """Inside, the test process's publishes fail after the broker's reachability check passed:
    its Celery app is set to a serializer that does not exist. The outbox message of a
    commit then stays pending, as when the web process dies between its commit and the
    publish."""
    from agp_project.celery import app

    serializer = app.conf.task_serializer
    app.conf.task_serializer = "agp-test-no-such-serializer"
    del app.amqp  # the task sender reads the serializer when it is built
    try:
        yield
    finally:
        app.conf.task_serializer = serializer
        del app.amqp


@pytest.fixture(scope="session")
def test_broker(redis_url):
    broker = session_broker(redis_url)
    yield broker
    # Idempotent: whichever copy of the fixture ends first removes the session's queue and
    # its bindings (the keys kombu names after it).
    with redis.Redis.from_url(broker.url) as client:
        for key in client.scan_iter(match=f"*{broker.queue}*"):
            client.delete(key)


class WorkerProcess:
    """One ``celery worker`` subprocess (with embedded beat) in its own process group."""

    def __init__(self, *, broker: TestBroker, env: dict[str, str], workdir: Path, name: str, concurrency: int = 2):
        self.broker = broker
        self.concurrency = concurrency
        self.name = name
        self.workdir = workdir
        self.log_path = workdir / f"{name}.log"
        self.env = env
        self.process: subprocess.Popen | None = None

    def start(self) -> "WorkerProcess":
        signer = get_signer()
        pem = signer.private_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()).decode()
        env = {**os.environ, "DJANGO_SETTINGS_MODULE": "agp_project.settings.test",
               "AGP_DATABASE_URL": database_url(), "AGP_BROKER_URL": self.broker.url,
               "AGP_CELERY_QUEUE": self.broker.queue, "AGP_SIGNING_KEY": pem, "AGP_ISSUER": signer.issuer,
               "AGP_CALLBACK_SECRET": settings.AGP_CALLBACK_SECRET, "AGP_BASE_URL": BASE_URL,
               "AGP_VAR_DIR": str(self.workdir / "var"), "AGP_LOG_LEVEL": "INFO", "PYTHONUNBUFFERED": "1",
               **FAST_ENV, **self.env}
        env.pop("AGP_AUTH_SECRET", None)
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the subprocess for its lifetime
        self.process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "agp_project", "worker", "--beat",
             "--schedule", str(self.workdir / f"{self.name}-beat-schedule"), "--pool", "prefork",
             "--concurrency", str(self.concurrency), "--loglevel", "INFO", "--hostname", f"{self.name}@%h",
             "--without-gossip", "--without-mingle", "--without-heartbeat"],
            cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"worker {self.name} exited with {self.process.returncode}:\n{self.log()}")
            if b" ready." in self.log_path.read_bytes():
                return
            time.sleep(0.1)
        self.kill()
        pytest.fail(f"worker {self.name} not ready after {READY_TIMEOUT} s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:]

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL the main process and its pool children at once: a crash, no cleanup."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        """Warm shutdown (SIGTERM), then SIGKILL if it does not leave in time."""
        if not self.alive:
            self.kill()
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.kill()
        else:
            self.kill()  # reap pool children that outlived the main process, if any


class WorkerFactory:
    def __init__(self, broker: TestBroker, workdir: Path):
        self.broker = broker
        self.workdir = workdir
        self.workers: list[WorkerProcess] = []

    def start(self, *, concurrency: int = 2, **env: str) -> WorkerProcess:
        worker = WorkerProcess(broker=self.broker, env=env, workdir=self.workdir, concurrency=concurrency,
                               name=f"w{len(self.workers) + 1}-{uuid.uuid4().hex[:6]}")
        self.workers.append(worker)
        return worker.start()

    def stop_all(self) -> None:
        # SIGKILL: fast, and a test's leftovers stay in this session's queue, not another's.
        for worker in self.workers:
            worker.kill()


@pytest.fixture
def worker_factory(test_broker, django_db_setup):
    with tempfile.TemporaryDirectory(prefix="agp-worker-") as workdir:
        factory = WorkerFactory(test_broker, Path(workdir))
        yield factory
        factory.stop_all()


@pytest.fixture(scope="module")
def module_worker(test_broker, django_db_setup):
    with tempfile.TemporaryDirectory(prefix="agp-worker-") as workdir:
        factory = WorkerFactory(test_broker, Path(workdir))
        yield factory.start()
        factory.stop_all()


@pytest.fixture
def worker_db(transactional_db):
    from core.models import LedgerHead

    # transactional_db empties every table after each test, the head row that migration
    # 0001 created included; the ledger needs it back.
    LedgerHead.objects.get_or_create(pk=1)


def wait_for(predicate: Callable[[], object], *, timeout: float = 30, interval: float = 0.1,
             message: str = "condition", worker: WorkerProcess | None = None):
    """Poll ``predicate`` until it returns something truthy; fail with the worker's log if not."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    log = f"\nworker log:\n{worker.log()}" if worker is not None else ""
    pytest.fail(f"timed out after {timeout} s waiting for {message}{log}")


TERMINAL = ("succeeded", "failed", "cancelled")


def submit_async(api, body, **headers):
    """``POST /agp/action-envelopes`` with ``Prefer: respond-async``; the 202 body."""
    response = api.post("/agp/action-envelopes", body, format="json", HTTP_PREFER="respond-async", **headers)
    assert response.status_code == 202, response.content
    return response.json()


def poll_until_ended(api, operation_id, worker=None, timeout=30):
    """Poll ``GET /agp/operations/{id}`` as a client would, until the operation has ended."""
    def ended():
        body = api.get(f"/agp/operations/{operation_id}").json()
        return body if body["status"] in TERMINAL else None

    return wait_for(ended, timeout=timeout, message=f"operation {operation_id} to end", worker=worker)


def ledger_event_types(resource_id):
    from core.models import LedgerEvent

    return list(LedgerEvent.objects.filter(resource_id=resource_id).order_by("sequence")
                .values_list("event_type", flat=True))
