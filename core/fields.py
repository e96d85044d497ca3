"""A JSON column stored as its RFC 8785 text: the stored bytes are the bytes that were hashed."""

import json
from decimal import Decimal
from typing import Any

from django import forms
from django.db import models

from agp_project.canonical import INT_LIMIT, canonical_json
from agp_project.exactjson import ExactJSONDecoder, ExactJSONEncoder


def _number(text: str) -> int | float:
    """A JSON integer literal; one beyond 2**53 is read as the float it was written from.

    RFC 8785 refuses such integers and writes a float like 1e16 as ``10000000000000000``
    (so does jsonb), so parsing it as a Python int would make the value impossible to
    canonicalise again; as a float it round-trips to the same text.
    """
    value = int(text)
    return value if -INT_LIMIT <= value <= INT_LIMIT else float(text)


def load_json(text: str) -> Any:
    """Parse canonical (or jsonb) JSON text into the value ``canonical_json`` writes back as the same text.

    Fractions as Decimals: ``canonical_json`` writes a Decimal that is a double's shortest
    form as RFC 8785 writes the double, and any other as its exact text, so both kinds of
    stored number come back as they were.
    """
    return json.loads(text, parse_int=_number, parse_float=Decimal)


class CanonicalJSONField(models.TextField):
    """A JSON value in a text column, written as its canonical (RFC 8785) serialisation.

    In Python the value is the parsed JSON (a dict for ledger payloads), as with
    ``JSONField``; in the database it is exactly ``canonical_json(value)``. So a hash over the
    stored text equals ``content_hash(value)``, and the database can recompute it by itself
    (``sha256(convert_to(payload, 'UTF8'))``) without parsing anything. jsonb could not serve:
    it reorders keys by length and writes its own spacing and number forms.
    """

    description = "JSON stored as RFC 8785 canonical text"

    def from_db_value(self, value: str | None, expression, connection) -> Any:
        if value is None:
            return None
        try:
            return load_json(value)
        except ValueError:
            # Text that is no longer JSON (edited in the database): shown as stored, not a
            # crash; verification names the event, since it no longer hashes as recorded.
            return value

    def to_python(self, value: Any) -> Any:
        return value  # already the Python value; TextField's would turn a dict into its repr

    def get_prep_value(self, value: Any) -> str | None:
        if value is None:
            return None
        return canonical_json(value).decode("utf-8")

    def value_to_string(self, obj) -> Any:
        return self.value_from_object(obj)  # serialisers (dumpdata) write the JSON value itself

    def formfield(self, **kwargs):
        return super().formfield(**{"form_class": forms.JSONField, **kwargs})


class ExactJSONField(models.JSONField):
    """A ``JSONField`` whose numbers stay exact: fractions are written and read as Decimals.

    Django's own would write a Decimal with ``json.dumps`` (a TypeError) and read every
    fraction back as a binary float (``1234567890123.4567`` -> ``...4568``). jsonb keeps
    numbers as ``numeric``, exactly, so the text written is the text read back.
    """

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("encoder", ExactJSONEncoder)
        kwargs.setdefault("decoder", ExactJSONDecoder)
        super().__init__(*args, **kwargs)

    def deconstruct(self):
        name, path, args, kwargs = super().deconstruct()
        for option, value in (("encoder", ExactJSONEncoder), ("decoder", ExactJSONDecoder)):
            if kwargs.get(option) is value:
                del kwargs[option]
        return name, path, args, kwargs


class TransactionIdField(models.Field):
    """The id of the transaction that wrote the row: PostgreSQL's 64-bit ``xid8``.

    Set by the database (``pg_current_xact_id()``) in the statement that inserts the row, so
    it is the writer's own transaction; compared only in SQL, against the oldest transaction
    still running (docs/reference/ledger.md, "When an event joins the chain"). Other
    databases never write it and see a plain integer column.
    """

    description = "A PostgreSQL transaction id (xid8)"

    def db_type(self, connection) -> str:
        return "xid8" if connection.vendor == "postgresql" else "bigint"
