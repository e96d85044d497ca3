"""Fault injection against a live gunicorn server (real PostgreSQL, real Redis, no mocks).

- Redis, the server's broker, is a redis-server this test starts on a spare port and kills
  (never the machine's shared Redis): a ``respond-async`` submission then answers 503
  ``AGP_UNAVAILABLE`` and stores nothing; with Redis back, the same submission is accepted.
- PostgreSQL terminates the server's connection while a request is in flight (blocked on
  the ledger head lock that this test holds): the request answers a clean 503 and nothing of
  it is stored; the retry, with the same Idempotency-Key, succeeds. Connections killed
  between requests cost nothing: the next request reconnects.
- PostgreSQL terminates the connection at a request's COMMIT (a deferred trigger that
  terminates its own backend): the 503 says the outcome is unknown, not that nothing was
  written. Right after a submission's commit (while the outbox row is marked published):
  the answer is the 202, its replay the same, and a real worker runs the operation once,
  also when the sweep sends the message again.

A worker killed mid-execution: tests/execution/test_worker_recovery.py. A callback receiver
that is down: tests/execution/test_callbacks.py and test_dead_receiver.py here.
Needs PostgreSQL (the server and this test share the test database).
"""

import contextlib
import threading
import time
import uuid
from datetime import timedelta

import pytest
import requests
from django.db import connection

from core.models import LedgerEvent, OutboxMessage
from core.outbox import outbox_sweep
from execution.models import ActionEnvelope, Operation, Receipt
from registry.models import Task
from tests.agp_client.server import LiveServer, database_url
from tests.concurrency import pg_connect
from tests.conftest import AUTH_SECRET
from tests.execution.factories import make_world
from tests.execution.worker import test_broker, worker_factory  # noqa: F401
from tests.redis_server import RedisServer

pytestmark = [pytest.mark.system, pytest.mark.postgres]


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


# --- PostgreSQL at and after the commit ---------------------------------------------------------------
@contextlib.contextmanager
def backend_dies(trigger: str):
    """A real fault inside PostgreSQL: ``trigger`` (``CREATE ... TRIGGER agp_fault ... EXECUTE FUNCTION
    agp_fault()``) runs a function that terminates its own backend, the first time only (a
    sequence counts, outside any transaction). ``again()`` arms it for one more time."""
    with pg_connect(autocommit=True) as admin:
        admin.execute("CREATE SEQUENCE agp_fault_count")
        admin.execute("CREATE FUNCTION agp_fault() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                      "IF nextval('agp_fault_count') = 1 THEN PERFORM pg_terminate_backend(pg_backend_pid()); "
                      "END IF; RETURN NEW; END $$")
        admin.execute(trigger)
        try:
            yield lambda: admin.execute("SELECT setval('agp_fault_count', 1, false)")
        finally:
            table = trigger.split(" ON ", 1)[1].split()[0]
            admin.execute(f"DROP TRIGGER agp_fault ON {table}")
            admin.execute("DROP FUNCTION agp_fault()")
            admin.execute("DROP SEQUENCE agp_fault_count")


def test_a_connection_lost_at_commit_is_answered_as_an_unknown_outcome(transactional_db, api):
    task = {"task_id": f"task-commit-{uuid.uuid4().hex[:8]}", "root_principal": "org:acme", "agent_id": "agent-1",
            "title": "fault", "risk_level": "low", "action_class": "read"}
    with backend_dies("CREATE CONSTRAINT TRIGGER agp_fault AFTER INSERT ON core_ledgerevent DEFERRABLE "
                      "INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION agp_fault()"):
        response = api.post("/agp/tasks", task, format="json")

    assert response.status_code == 503, response.content
    assert response["Retry-After"] == "5"
    error = response.json()["error"]
    assert (error["code"], error["retryable"], error["details"]) == ("AGP_UNAVAILABLE", True, {"outcome": "unknown"})
    assert "may or may not have been written" in error["message"]
    assert not Task.objects.filter(task_id=task["task_id"]).exists()  # here the server had not committed


def test_a_submission_whose_connection_dies_right_after_its_commit_is_answered_202_and_runs_once(
        live, test_broker, worker_factory):  # noqa: F811
    start, session = live
    server = start(AGP_BROKER_URL=test_broker.url, AGP_CELERY_QUEUE=test_broker.queue)
    worker = worker_factory.start()
    world = make_world()
    answers = []
    # The outbox row is marked published after the commit: that UPDATE kills the connection.
    with backend_dies("CREATE TRIGGER agp_fault BEFORE UPDATE ON core_outboxmessage FOR EACH ROW "
                      "EXECUTE FUNCTION agp_fault()") as again:
        for headers in ({}, {"Idempotency-Key": "after-commit-1"}):
            answers.append(session.post(f"{server.url}/agp/action-envelopes", json=world.envelope_request(),
                                        headers={"Prefer": "respond-async", **headers}, timeout=30))
            again()
    replay = session.post(f"{server.url}/agp/action-envelopes", data=answers[1].request.body, timeout=30,
                          headers={"Prefer": "respond-async", "Idempotency-Key": "after-commit-1",
                                   "Content-Type": "application/json"})

    assert [answer.status_code for answer in answers] == [202, 202], [answer.text for answer in answers]
    assert (replay.status_code, replay.headers["Idempotent-Replayed"]) == (202, "true")
    assert replay.json() == answers[1].json()
    operation_ids = [answer.json()["operation_id"] for answer in answers]
    # The marks died with their connections: the rows are still pending, and the sweep sends them again.
    assert OutboxMessage.objects.filter(args__in=[[op] for op in operation_ids], status="pending").count() == 2
    wait_for(lambda: Operation.objects.filter(operation_id__in=operation_ids, status="succeeded").count() == 2,
             timeout=30, message="both operations to succeed")
    assert outbox_sweep(older_than=timedelta(0)) >= 2
    wait_for(lambda: worker.log_path.read_text().count("'done'") >= 2, timeout=30, message="the worker to drop both repeats")
    assert Receipt.objects.filter(operation_id__in=operation_ids).count() == 2
    assert LedgerEvent.objects.filter(resource_id__in=operation_ids, event_type="operation.succeeded").count() == 2


def test_under_connections_killed_again_and_again_no_submission_answered_503_was_written(live):
    start, session = live
    server = start()
    world = make_world()
    answers: list[tuple[str, int]] = []
    stop = threading.Event()

    def submit():
        with requests.Session() as client:
            client.headers["Authorization"] = session.headers["Authorization"]
            while not stop.is_set():
                body = world.envelope_request()
                response = client.post(f"{server.url}/agp/action-envelopes", json=body, timeout=30,
                                       headers={"Prefer": "respond-async"})
                answers.append((body["action_id"], response.status_code))

    clients = [threading.Thread(target=submit) for _ in range(6)]
    with pg_connect(autocommit=True) as admin:
        for client in clients:
            client.start()
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            for pid in _server_backends(admin, waiting_on_lock=False):
                admin.execute("SELECT pg_terminate_backend(%s)", [pid])
            time.sleep(0.1)
        stop.set()
        for client in clients:
            client.join(timeout=60)

    statuses = {status for _, status in answers}
    assert statuses <= {202, 503} and 503 in statuses and 202 in statuses, statuses
    written = set(ActionEnvelope.objects.filter(action_id__in=[action_id for action_id, _ in answers])
                  .values_list("action_id", flat=True))
    assert written == {action_id for action_id, status in answers if status == 202}
    print(f"{len(answers)} submissions: {sum(status == 202 for _, status in answers)} accepted, "
          f"{sum(status == 503 for _, status in answers)} answered 503, none of those written")
