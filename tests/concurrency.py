"""Running test calls at the same instant, each in its own thread (races on PostgreSQL or over HTTP),
and a second PostgreSQL session beside Django's."""

import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
from django.db import connection


def run_together(calls: list[Callable[[], Any]], *, timeout: float = 120) -> list[Any]:
    """Run the calls in threads released together; their results in order.

    A call that raises gives its exception in its place, for the test's assertions to
    report. Each thread closes the database connection Django opened for it.
    """
    barrier = threading.Barrier(len(calls))
    results: list[Any] = [None] * len(calls)

    def run(index, call):
        try:
            barrier.wait()
            results[index] = call()
        except Exception as exc:  # noqa: BLE001 - reported by the caller's assertions
            results[index] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i, call)) for i, call in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout)
    return results


def pg_connect(**kwargs) -> psycopg.Connection:
    """A PostgreSQL session of its own on the test database (not Django's connection)."""
    db = connection.settings_dict
    return psycopg.connect(host=db.get("HOST") or "127.0.0.1", port=db.get("PORT") or 5432,
                           user=db.get("USER") or "postgres", password=db.get("PASSWORD") or None,
                           dbname=db["NAME"], **kwargs)


def waits_behind(lock_sql: str, params: list, call: Callable[[], Any], *, timeout: float = 30,
                 release: Callable[[psycopg.Connection], None] = psycopg.Connection.rollback) -> tuple[bool, Any]:
    """Run ``call`` in a thread while another session holds the row lock ``lock_sql`` takes.

    Returns whether PostgreSQL saw the call wait for that session, and the call's result (or
    the exception it raised), once the lock was released: by ``release(session)``, a rollback
    unless the test writes and commits. The call's data must be committed (a
    ``transaction=True`` test) for the thread's connection to see it.
    """
    done = threading.Event()
    outcome: list[Any] = []

    def run():
        try:
            outcome.append(call())
        except Exception as exc:  # noqa: BLE001 - returned to the caller's assertions
            outcome.append(exc)
        finally:
            connection.close()
            done.set()

    waited = False
    with pg_connect() as holder, pg_connect(autocommit=True) as observer:
        holder.execute(lock_sql, params)
        thread = threading.Thread(target=run)
        thread.start()
        deadline = time.monotonic() + timeout
        while not done.is_set() and time.monotonic() < deadline:
            blocked = observer.execute("SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
                                       [holder.info.backend_pid]).fetchone()[0]
            if blocked:
                waited = True
                break
            time.sleep(0.02)
        release(holder)
    thread.join(timeout)
    return waited, outcome[0] if outcome else TimeoutError("the call did not end")
