"""Store ledger payloads as their RFC 8785 text instead of jsonb (docs/decisions/platform.md).

The column is rebuilt: a text column is added, filled in keyset batches with the canonical
form of each stored payload, the jsonb column dropped and the new one renamed. Nothing
hashed changes: ``payload_hash`` already covers the canonical form.
"""

import json

from django.db import migrations, models

import core.fields
from agp_project.canonical import INT_LIMIT, canonical_json

BATCH = 2000


def load_json(text: str):
    """Canonical or jsonb text as this migration's columns held it: fractions as floats (the
    jsonb column of the reverse direction cannot take Decimals), integers beyond 2**53 as the
    floats they were written from."""
    def number(literal: str):
        value = int(literal)
        return value if -INT_LIMIT <= value <= INT_LIMIT else float(literal)

    return json.loads(text, parse_int=number)


def _batches(connection, column_sql: str):
    table = connection.ops.quote_name("core_ledgerevent")
    sql = f"SELECT sequence, {column_sql} FROM {table} WHERE sequence > %s ORDER BY sequence LIMIT {BATCH}"
    last = -(2**63)
    with connection.cursor() as cursor:
        while True:
            cursor.execute(sql, [last])
            rows = cursor.fetchall()
            if not rows:
                return
            yield rows
            last = rows[-1][0]


def to_canonical_text(apps, schema_editor):
    """Each payload as stored, parsed by ``load_json`` (jsonb prints a float such as 1e16 as
    an integer beyond 2**53, which the ledger never accepted as an integer), canonicalised."""
    connection = schema_editor.connection
    table = connection.ops.quote_name("core_ledgerevent")
    payload = "payload::text" if connection.vendor == "postgresql" else "payload"
    update = f"UPDATE {table} SET payload_text = %s WHERE sequence = %s"
    for rows in _batches(connection, payload):
        with connection.cursor() as cursor:
            cursor.executemany(update, [
                (canonical_json(load_json(text)).decode("utf-8"), sequence)
                for sequence, text in rows])


def to_json(apps, schema_editor):
    connection = schema_editor.connection
    events = apps.get_model("core", "LedgerEvent").objects.using(connection.alias)
    for rows in _batches(connection, "payload_text"):
        for sequence, text in rows:
            events.filter(sequence=sequence).update(payload=load_json(text))


class Migration(migrations.Migration):

    dependencies = [
        ("core", "0001_initial"),
    ]

    operations = [
        migrations.AddField(model_name="ledgerevent", name="payload_text", field=models.TextField(null=True)),
        migrations.RunPython(to_canonical_text, to_json),
        migrations.RemoveField(model_name="ledgerevent", name="payload"),
        migrations.RenameField(model_name="ledgerevent", old_name="payload_text", new_name="payload"),
        migrations.AlterField(model_name="ledgerevent", name="payload",
                              field=core.fields.CanonicalJSONField(default=dict)),
    ]
