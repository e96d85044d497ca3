"""Running test calls at the same instant, each in its own thread (races on PostgreSQL or over HTTP),
and a second PostgreSQL session beside Django's."""

import threading
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
