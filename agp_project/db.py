"""Database helpers shared by the apps."""

from django.db import connection as default_connection


def prepared_cursor(connection=default_connection):
    """A cursor whose statements PostgreSQL prepares once per connection (agp_project/postgresql).

    For fixed statement texts on hot paths only. Other backends get their ordinary cursor.
    """
    prepared = getattr(connection, "prepared_cursor", None)
    return prepared() if prepared is not None else connection.cursor()


def field_converters(fields, connection=default_connection) -> dict:
    """Django's from-database converters for columns of ``fields``, by position.

    The shape ``SQLCompiler.get_converters`` returns (``{position: (converters, column)}``,
    positions without converters left out), for statements run outside the ORM.
    """
    converters = {}
    for position, field in enumerate(fields):
        column = field.get_col(field.model._meta.db_table)
        found = connection.ops.get_db_converters(column) + column.get_db_converters(connection)
        if found:
            converters[position] = (found, column)
    return converters


def convert_row(values: list, converters: dict, connection=default_connection) -> list:
    """Apply ``converters`` (``field_converters`` or ``SQLCompiler.get_converters``) to a raw row, in place."""
    for position, (functions, expression) in converters.items():
        value = values[position]
        for function in functions:
            value = function(value, expression, connection)
        values[position] = value
    return values
