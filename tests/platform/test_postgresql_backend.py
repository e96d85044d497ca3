"""The PostgreSQL backend (agp_project/postgresql): prepared statements and the health check."""

import time

import psycopg
import pytest
from django.db import connection

from tests.concurrency import pg_connect

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def backend_last_query(pid: int) -> str:
    with pg_connect() as admin:
        return admin.execute("SELECT query FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone()[0]


def test_the_health_check_of_an_idle_healthy_connection_sends_nothing():
    with connection.cursor() as cursor:
        cursor.execute("SELECT 'agp-health-marker'")
    pid = connection.connection.info.backend_pid

    assert connection.is_usable() is True
    # Django's own check would have run SELECT 1 on the backend.
    assert backend_last_query(pid) == "SELECT 'agp-health-marker'"


def test_the_health_check_finds_a_terminated_backend_unusable():
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    pid = connection.connection.info.backend_pid
    with pg_connect() as admin:
        admin.autocommit = True
        admin.execute("SELECT pg_terminate_backend(%s)", [pid])
        # pg_terminate_backend only signals the backend: wait until it has gone, having
        # sent its error and closed the socket (under load that takes a moment).
        deadline = time.monotonic() + 10
        while admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone():
            assert time.monotonic() < deadline, "the backend did not exit"
            time.sleep(0.01)

    try:
        assert connection.is_usable() is False
    finally:
        connection.close()  # never leave the dead connection to the next test
    with connection.cursor() as cursor:  # and a new connection works
        cursor.execute("SELECT 2")
        assert cursor.fetchone() == (2,)


def test_the_health_check_asks_the_server_inside_a_transaction():
    connection.ensure_connection()
    connection.connection.execute("BEGIN")
    connection.connection.execute("SELECT 'in-transaction'")
    pid = connection.connection.info.backend_pid
    try:
        assert connection.is_usable() is True
        assert backend_last_query(pid) == "SELECT 1"
    finally:
        connection.connection.rollback()


def test_a_closed_connection_is_unusable_without_asking():
    connection.ensure_connection()
    raw = connection.connection
    raw.close()
    try:
        assert connection.is_usable() is False
        with pytest.raises(psycopg.OperationalError):
            raw.execute("SELECT 1")
    finally:
        connection.close()


def test_a_prepared_statement_longer_than_psycopgs_cache_limit_is_converted_once():
    from psycopg._queries import MAX_CACHED_STATEMENT_LENGTH, _query2pg

    from agp_project.db import prepared_cursor

    padding = " ".join(f"%s::int AS c{n}," for n in range(40))
    sql = f"SELECT {padding} %s::text AS tail -- {'x' * MAX_CACHED_STATEMENT_LENGTH}"
    assert len(sql) > MAX_CACHED_STATEMENT_LENGTH
    rows = []
    with prepared_cursor() as cursor:
        cursor.execute(sql, [*range(40), "first"])
        rows.append(cursor.fetchone())
        hits = _query2pg.cache_info().hits
        cursor.execute(sql, [*range(1, 41), "second"])
        rows.append(cursor.fetchone())

    assert _query2pg.cache_info().hits == hits + 1
    assert rows == [(*range(40), "first"), (*range(1, 41), "second")]
