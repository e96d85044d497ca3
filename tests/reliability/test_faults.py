"""Fault injection against a live gunicorn server (real PostgreSQL, real Redis, no mocks).

- Redis, the server's broker, is a redis-server this test starts on a spare port and kills
  (never the machine's shared Redis): a ``respond-async`` submission then answers 503
  ``AGP_UNAVAILABLE`` and stores nothing; with Redis back, the same submission is accepted.
- PostgreSQL terminates the server's connection while a request is in flight (blocked on
  the ledger head lock that this test holds): the request answers a clean 503 and nothing of
  it is stored; the retry, with the same Idempotency-Key, succeeds. Connections killed
  between requests cost nothing: the next request reconnects.

A worker killed mid-execution: tests/execution/test_worker_recovery.py. A callback receiver
that is down: tests/execution/test_callbacks.py and test_dead_receiver.py here.
Needs PostgreSQL (the server and this test share the test database).
"""

import threading
import time
import uuid

import pytest
import requests
from django.db import connection

from core.models import LedgerEvent, OutboxMessage
from execution.models import ActionEnvelope, Operation
from registry.models import Task
from tests.agp_client.server import LiveServer, database_url
from tests.concurrency import pg_connect
from tests.conftest import AUTH_SECRET
from tests.execution.factories import make_world
from tests.redis_server import RedisServer

pytestmark = pytest.mark.postgres


def wait_for(predicate, *, timeout=15.0, message="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {message}")


@pytest.fixture
def own_redis(tmp_path):
    server = RedisServer(tmp_path / "redis").start()
    yield server
    server.kill()


@pytest.fixture
def live(transactional_db, make_token, tmp_path, request):
    """Start a live server (``env`` extra settings) on the test database; a session for it."""
    from core.models import LedgerHead

    LedgerHead.objects.get_or_create(pk=1)
    started = []
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {make_token(client_id='fault-client')}"

    def _start(**env):
        server = LiveServer.start(tmp_path / f"server-{len(started)}", db_url=database_url(tmp_path),
                                  env={"AGP_AUTH_SECRET": AUTH_SECRET, **env})
        started.append(server)
        return server

    yield _start, session
    for server in started:
        server.stop()


def nothing_stored_for(action_id: str) -> None:
    assert not ActionEnvelope.objects.filter(action_id=action_id).exists()
    assert not Operation.objects.filter(envelope_id=action_id).exists()
    assert not LedgerEvent.objects.filter(resource_id=action_id).exists()


# --- Redis ------------------------------------------------------------------------------------------
def test_it_answers_503_and_stores_nothing_when_its_redis_broker_dies(live, own_redis):
    start, session = live
    server = start(AGP_BROKER_URL=own_redis.url(0), AGP_CELERY_QUEUE=f"fault-{uuid.uuid4().hex[:8]}")
    world = make_world()
    accepted = session.post(f"{server.url}/agp/action-envelopes", json=world.envelope_request(),
                            headers={"Prefer": "respond-async"}, timeout=30)
    assert accepted.status_code == 202, accepted.text
    operations_before, outbox_before = Operation.objects.count(), OutboxMessage.objects.count()

    own_redis.kill()
    body = world.envelope_request()
    refused = session.post(f"{server.url}/agp/action-envelopes", json=body,
                           headers={"Prefer": "respond-async", "Idempotency-Key": "redis-down-1"}, timeout=30)

    assert refused.status_code == 503, refused.text
    assert refused.json()["error"]["code"] == "AGP_UNAVAILABLE"
    assert refused.json()["error"]["retryable"] is True
    assert refused.headers["Content-Type"] == "application/json"
    nothing_stored_for(body["action_id"])
    assert (Operation.objects.count(), OutboxMessage.objects.count()) == (operations_before, outbox_before)

    own_redis.start()  # the same port: the broker is back
    retried = session.post(f"{server.url}/agp/action-envelopes", json=body,
                           headers={"Prefer": "respond-async", "Idempotency-Key": "redis-down-1"}, timeout=30)
    assert retried.status_code == 202, retried.text
    assert Operation.objects.get(operation_id=retried.json()["operation_id"]).envelope_id == body["action_id"]


# --- PostgreSQL -------------------------------------------------------------------------------------
def _server_backends(admin, *, waiting_on_lock: bool) -> list[int]:
    """The server's connections: not this test's own (Django's, the admin's, the lock holder's)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        own = cursor.fetchone()[0]
    query = ("SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() "
             f"AND pid <> {int(own)} AND application_name <> 'fault-lock-holder'")
    if waiting_on_lock:
        query += " AND wait_event_type = 'Lock'"
    return [row[0] for row in admin.execute(query).fetchall()]


def test_it_answers_a_clean_503_when_postgres_kills_its_connection_mid_request(live):
    start, session = live
    server = start()
    task = {"task_id": f"task-fault-{uuid.uuid4().hex[:8]}", "root_principal": "org:acme", "agent_id": "agent-1",
            "title": "fault", "risk_level": "low", "action_class": "read"}
    headers = {"Idempotency-Key": "pg-kill-1"}

    with pg_connect() as holder, pg_connect() as admin:
        admin.autocommit = True
        holder.execute("SET application_name = 'fault-lock-holder'")
        holder.execute("SELECT 1 FROM core_ledgerhead WHERE id = 1 FOR UPDATE")  # ledger appends now queue
        answers = []
        request = threading.Thread(target=lambda: answers.append(
            session.post(f"{server.url}/agp/tasks", json=task, headers=headers, timeout=30)))
        request.start()
        blocked = wait_for(lambda: _server_backends(admin, waiting_on_lock=True),
                           message="the server's request to wait on the ledger lock")
        for pid in blocked:
            admin.execute("SELECT pg_terminate_backend(%s)", [pid])
        request.join(timeout=30)
        holder.rollback()

    (response,) = answers
    assert response.status_code == 503, response.text
    assert response.json()["error"] == {"code": "AGP_UNAVAILABLE", "retryable": True, "details": {},
                                        "message": response.json()["error"]["message"]}
    assert "psycopg" not in response.text and "terminat" not in response.text.lower()
    assert not Task.objects.filter(task_id=task["task_id"]).exists()
    assert not LedgerEvent.objects.filter(resource_id=task["task_id"]).exists()

    retried = session.post(f"{server.url}/agp/tasks", json=task, headers=headers, timeout=30)
    assert retried.status_code == 201, retried.text
    assert Task.objects.filter(task_id=task["task_id"]).count() == 1
    assert LedgerEvent.objects.filter(resource_id=task["task_id"]).count() == 1


def test_it_reconnects_after_postgres_kills_its_idle_connections(live):
    start, session = live
    server = start()
    for _ in range(4):  # both workers hold a connection
        assert session.get(f"{server.url}/agp/tasks", timeout=30).status_code == 200

    with pg_connect() as admin:
        admin.autocommit = True
        killed = _server_backends(admin, waiting_on_lock=False)
        assert killed
        for pid in killed:
            admin.execute("SELECT pg_terminate_backend(%s)", [pid])
        # pg_terminate_backend only signals: until a backend has gone, its connection still
        # looks alive, and a request racing its exit is the mid-request case above (503).
        wait_for(lambda: not set(killed) & set(_server_backends(admin, waiting_on_lock=False)),
                 message="the terminated backends to exit")

    answers = [session.get(f"{server.url}/agp/tasks", timeout=30).status_code for _ in range(6)]
    assert answers == [200] * 6
