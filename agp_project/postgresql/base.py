"""Django's PostgreSQL backend, plus prepared statements for the service's fixed hot statements.

Django binds parameters on the client and never prepares, so PostgreSQL parses and plans
every statement on every execution. For ordinary ORM queries that is cheap; for the fixed
statements every request or task runs (the checks' combined lookup, a ledger append, the
client lookup of authentication) planning was most of their cost: the checks' main
statement took 1.6-1.9 ms through Django's cursor against 0.2 ms prepared, on the same
warm connection.

``DatabaseWrapper.prepared_cursor`` returns a Django cursor (so query logging,
``CaptureQueriesContext`` and the tests' query-count pins still see every statement)
around a psycopg server-side cursor that prepares what it executes, once per connection:
psycopg keys its per-connection cache (``prepared_max``, 100) by statement text, so only
fixed statement texts may go through it, never SQL that embeds values. Everything else
runs exactly as in Django's backend. ``agp_project.db.prepared_cursor`` is the entry point
that also works on SQLite.
"""

import select

import psycopg
from django.db.backends.postgresql import base, operations
from psycopg import pq
from psycopg._queries import PostgresQuery, _query2pg


class _FixedTextQuery(PostgresQuery):
    """psycopg's conversion of ``%s`` placeholders, cached whatever the statement's length.

    psycopg caches the conversion (a regular-expression pass over the text) only for
    statements up to 4 KB, since ORM-generated text rarely repeats. What a prepared cursor
    runs is fixed text by contract, and the checks' statement is 8.7 KB: converting it on
    every call cost about 0.1 ms. Cached (psycopg's own LRU of 128) it costs nothing.
    """

    __slots__ = ()

    def convert(self, query, vars):
        if vars is None or not isinstance(query, (str, bytes)):
            return super().convert(query, vars)
        query = self._ensure_bytes(query)
        self.query, self._want_formats, self._order, self._parts = _query2pg(query, self._tx.encoding)
        self.dump(vars)


class PreparedCursor(psycopg.Cursor):
    """A server-side-binding cursor that prepares every statement it executes."""

    _query_cls = _FixedTextQuery

    def execute(self, query, params=None, *, prepare=None, binary=None):
        return super().execute(query, params, prepare=True, binary=binary)


class DatabaseOperations(operations.DatabaseOperations):
    def last_executed_query(self, cursor, sql, params):
        if isinstance(cursor, PreparedCursor):
            # psycopg keeps no composed text for a prepared execution; compose it for the log.
            return self.compose_sql(sql, params)
        return super().last_executed_query(cursor, sql, params)


class DatabaseWrapper(base.DatabaseWrapper):
    ops_class = DatabaseOperations

    def get_new_connection(self, conn_params):
        connection = super().get_new_connection(conn_params)
        if connection.prepare_threshold is None:
            # Django turns automatic preparation off, which also makes psycopg ignore
            # prepare=True. A threshold no statement reaches restores explicit preparation
            # only: Django's own client-side cursors never prepare, whatever it is.
            connection.prepare_threshold = 2**31
        return connection

    def is_usable(self):
        """Whether the connection can still be used, without a round trip when that is clear.

        ``CONN_HEALTH_CHECKS`` asks this before the first query of every request, and
        Django's answer is a ``SELECT 1``: a round trip on every request. An idle healthy
        connection has nothing to read, while a backend that was terminated or went away
        has sent its error or closed the socket, which makes it readable. So: nothing to
        read on an idle connection means usable; anything else (data waiting, a
        transaction open, a broken or closed connection) gets Django's own check.
        """
        conn = self.connection
        if conn is None or conn.closed or conn.broken:
            return False
        if conn.info.transaction_status == pq.TransactionStatus.IDLE:
            poller = select.poll()  # not select(): descriptors above 1023 are fine
            try:
                poller.register(conn.fileno(), select.POLLIN)
                pending = poller.poll(0)
            except (OSError, ValueError, psycopg.Error):
                return False
            if not pending:
                return True
        return super().is_usable()

    def prepared_cursor(self):
        """A cursor like ``cursor()`` (health check, reconnect, error wrapping), but prepared."""
        self.close_if_health_check_failed()
        self.ensure_connection()
        with self.wrap_database_errors:
            return self._prepare_cursor(PreparedCursor(self.connection))

