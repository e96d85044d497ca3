"""Database helpers shared by the apps."""

from dataclasses import dataclass

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


_MARK = "\x1e"  # a control character: no real identifier is spelt with it


def text_placeholder(name: str) -> str:
    """A text argument's stand-in while a queryset is compiled, found again among the
    compiled parameters."""
    return f"{_MARK}{name}{_MARK}"


def bind_slots(params: tuple, slots, values: dict) -> list:
    """A compiled statement's parameters with each argument's value in its slots
    (``slots``: ``(position, name)`` pairs; ``values``: by name)."""
    bound = list(params)
    for index, name in slots:
        bound[index] = values[name]
    return bound


def holds_placeholder(value) -> bool:
    """Whether compiled SQL or a parameter still carries a placeholder, or a piece of one
    (the ORM inlined or transformed it)."""
    return isinstance(value, str) and _MARK in value


class CompiledQuery:
    """A single-model queryset compiled to SQL once per database, then run as a prepared statement.

    Building and compiling a queryset costs several times what PostgreSQL spends answering
    a lookup by a unique key. ``build`` returns the queryset for text arguments (ids); it is
    compiled once per database alias with placeholders in their place, and ``first`` binds
    each call's values and loads the row as the ORM would: its converters, ``from_db``
    (deferred fields stay deferred) and the annotations as attributes.
    """

    def __init__(self, build, *arguments: str):
        self._build, self._arguments = build, arguments
        self._compiled: dict[str, _Compiled] = {}

    def _compile(self, connection) -> "_Compiled":
        queryset = self._build(**{name: text_placeholder(name) for name in self._arguments})[:1]
        compiler = queryset.query.get_compiler(connection=connection)
        sql, params = compiler.as_sql()
        if holds_placeholder(sql) or compiler.klass_info is None or compiler.klass_info.get("related_klass_infos"):
            raise TypeError("CompiledQuery takes one model's queryset with its arguments as parameters")
        slots = [(index, name) for index, param in enumerate(params) for name in self._arguments
                 if param == text_placeholder(name)]
        if len(slots) != len([p for p in params if holds_placeholder(p)]):
            raise TypeError("a CompiledQuery argument was transformed while compiling")
        fields = compiler.klass_info["select_fields"]
        compiled = self._compiled[connection.alias] = _Compiled(
            sql=sql, params=tuple(params), slots=slots, model=queryset.model, start=fields[0],
            attnames=[compiler.select[i][0].target.attname for i in fields],
            converters=compiler.get_converters([column for column, _, _ in compiler.select[:compiler.col_count]]),
            annotations=dict(compiler.annotation_col_map))
        return compiled

    def first(self, connection=default_connection, **values):
        """The row for ``values`` (one per argument) as a model instance, or None."""
        compiled = self._compiled.get(connection.alias) or self._compile(connection)
        with prepared_cursor(connection) as cursor:
            cursor.execute(compiled.sql, bind_slots(compiled.params, compiled.slots, values))
            row = cursor.fetchone()
        if row is None:
            return None
        row = convert_row(list(row), compiled.converters, connection)
        end = compiled.start + len(compiled.attnames)
        instance = compiled.model.from_db(connection.alias, compiled.attnames, row[compiled.start:end])
        for name, position in compiled.annotations.items():
            setattr(instance, name, row[position])
        return instance


@dataclass(frozen=True)
class _Compiled:
    """A ``CompiledQuery`` on one database: the SQL, its parameters with the arguments' slots
    (position, name), and how to load the row (the model's columns from ``start``, Django's
    converters by position, annotations by position)."""

    sql: str
    params: tuple
    slots: list
    model: type
    start: int
    attnames: list
    converters: dict
    annotations: dict
