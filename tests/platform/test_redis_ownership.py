"""A test run uses only the Redis database it owns (AGP_REDIS_TEST_URL) and leaves every
database, its own included, as it found it (tests/redis_server.py)."""

import os
import re
import signal
import subprocess
import sys
from urllib.parse import urlsplit

import pytest
import redis
from django.conf import settings

from tests.platform.conftest import ROOT
from tests.redis_server import RedisServer

pytestmark = pytest.mark.system

OWNED = 3
# Left out of the sub-run: they use Redis only as the broker of the servers and workers they
# start, the way tests/execution/test_worker.py and test_worker_recovery.py (a killed worker's
# unacknowledged messages included) do in it, and would add minutes to every run. On SQLite
# the sub-run's publishers are the test process itself (tests/reliability/test_unsafe_consumption.py).
BROKER_ONLY_HEAVY = (
    "tests/reliability/test_schema_fuzz.py", "tests/reliability/test_hostile_fuzz.py",
    "tests/reliability/test_hostile_clients.py", "tests/reliability/test_hostile_requests.py",
    "tests/reliability/test_races.py",
    "tests/reliability/test_dead_receiver.py", "tests/execution/test_freeze_worker.py",
    "tests/execution/test_mcp_worker.py", "tests/decision/test_backtest_worker.py",
    "tests/platform/test_checkpoints.py", "tests/platform/test_operating_live.py",
    "tests/agp_client/test_client_execution_live.py",
    "tests/execution/test_callbacks.py", "tests/execution/test_mcp_example.py", "tests/execution/test_runner.py",
    "tests/agp_client/test_governed_worker.py", "tests/decision/test_approval_notifications.py",
    "tests/decision/test_shadow_worker.py", "tests/execution/test_worker_sequencer.py",
    "tests/gateway/test_examples.py", "tests/reliability/test_faults.py",
)

# Left out of the sub-run too: tests whose use of Redis another test of the sub-run repeats.
# The second worker-recovery test kills a worker holding messages unacknowledged, as the
# first does; the second worker test runs tasks through the module's worker, as the first
# does; the hostile answers of the unsafe-consumption test differ in what the tool answers,
# not in what reaches Redis (one publish each), so one of them stands for all.
SAME_USE_AS_ANOTHER = (
    "tests/execution/test_worker_recovery.py::test_a_killed_workers_operations_finish_on_another_worker",
    "tests/execution/test_worker.py::"
    "test_it_keeps_its_database_connection_between_tasks_and_recovers_when_it_is_cut",
    *(f"tests/reliability/test_unsafe_consumption.py::"
      f"test_it_ends_the_operation_with_a_verifiable_receipt_whatever_the_tool_answers[{kind}]"
      for kind in ("deep", "deep-but-parsable", "huge-float", "huge-int", "nan", "nul", "oversized")),
)

WRITES = ("set", "setex", "incr", "incrby", "lpush", "rpush", "sadd", "zadd", "hset")


def someone_elses_data(client: redis.Redis, tag: str) -> None:
    client.set(f"{tag}:string", "value")
    client.set(f"{tag}:expiring", "value", ex=3600)
    client.hset(f"{tag}:hash", mapping={"a": "1", "b": "2"})
    client.rpush(f"{tag}:list", "x", "y", "z")
    client.sadd(f"{tag}:set", "m", "n")
    client.zadd(f"{tag}:zset", {"p": 1.0, "q": 2.0})


def snapshot(server: RedisServer) -> dict[int, dict[bytes, tuple]]:
    """Every key of every database: its type, its serialised value, whether it expires."""
    with redis.Redis.from_url(server.url(0)) as client:
        databases = int(client.config_get("databases")["databases"])
    found = {}
    for db in range(databases):
        with redis.Redis.from_url(server.url(db)) as client:
            keys = {key: (client.type(key), client.dump(key), client.ttl(key) > 0) for key in client.scan_iter()}
        if keys:
            found[db] = keys
    return found


def writes(server: RedisServer) -> int:
    with redis.Redis.from_url(server.url(0)) as client:
        stats = client.info("commandstats")
    return sum(stats.get(f"cmdstat_{command}", {}).get("calls", 0) for command in WRITES)


def sub_run_database_url() -> str | None:
    """A database of the sub-run's own on PostgreSQL (pytest-django creates ``test_<name>``)."""
    url = os.environ.get("AGP_DATABASE_URL", "")
    if settings.DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3" or not url:
        return None
    return re.sub(r"/([^/?]+)(\?|$)", lambda m: f"/{m.group(1)}_redis_sub_run{m.group(2)}", url, count=1)


def test_a_test_run_leaves_every_redis_database_as_it_found_it(tmp_path):
    database_url = sub_run_database_url()
    server = RedisServer(tmp_path / "redis").start()
    try:
        for db, tag in ((0, "someone"), (9, "someone-else"), (OWNED, "already-there")):
            with redis.Redis.from_url(server.url(db)) as client:
                someone_elses_data(client, tag)
        before, writes_before = snapshot(server), writes(server)

        env = {key: value for key, value in os.environ.items() if key not in ("AGP_DATABASE_URL", "PYTEST_ADDOPTS")}
        env["AGP_REDIS_TEST_URL"] = server.url(OWNED)
        if database_url:
            env["AGP_DATABASE_URL"] = database_url
        # The tests that use Redis (they are marked redis), in a run of their own: in two
        # processes, as scripts/test runs them (both share the owned database), in a session
        # of its own, so that a run past its time is stopped with every server it started.
        run = subprocess.Popen(
            [sys.executable, "-m", "pytest", "-n", "2", "-m", "redis", "-q", "-p", "no:cacheprovider",
             f"--basetemp={tmp_path / 'sub-run'}", *(f"--ignore={path}" for path in BROKER_ONLY_HEAVY),
             *(f"--deselect={test}" for test in SAME_USE_AS_ANOTHER)],
            cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            start_new_session=True)
        try:
            stdout, stderr = run.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            os.killpg(run.pid, signal.SIGKILL)
            stdout, stderr = run.communicate()
            pytest.fail("the sub-run took more than 600 s:\n" + stdout[-6000:] + stderr[-3000:])
        summary = stdout.strip().splitlines()[-1] if stdout.strip() else stderr
        assert run.returncode == 0, stdout[-6000:] + stderr[-3000:]
        assert int(re.search(r"(\d+) passed", summary).group(1)) >= 4, summary

        assert writes(server) - writes_before > 0, "the run wrote nothing to Redis: it proves nothing"
        assert snapshot(server) == before
    finally:
        server.stop()
        if database_url:
            drop_test_database(database_url)


def drop_test_database(url: str) -> None:
    """pytest-django's databases of the sub-run (``test_<name>``, and ``test_<name>_gw<n>`` for
    each xdist process), in case the run was stopped before it could drop them."""
    import psycopg
    from psycopg import sql

    parts = urlsplit(url)
    name = "test_" + parts.path.lstrip("/")
    with psycopg.connect(parts._replace(path="/postgres").geturl(), autocommit=True) as conn:
        names = [row[0] for row in conn.execute(
            "SELECT datname FROM pg_database WHERE datname = %s OR datname LIKE %s", (name, name + r"\_gw%"))]
        for found in names:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(found)))
