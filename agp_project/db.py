"""Database helpers shared by the apps."""

from django.db import connection as default_connection


def prepared_cursor(connection=default_connection):
    """A cursor whose statements PostgreSQL prepares once per connection (agp_project/postgresql).

    For fixed statement texts on hot paths only. Other backends get their ordinary cursor.
    """
    prepared = getattr(connection, "prepared_cursor", None)
    return prepared() if prepared is not None else connection.cursor()
