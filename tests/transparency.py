"""Helpers of the transparency-log tests (docs/reference/ledger.md): ledgers of any size, and the RFC's view of them.

- ``append(n)``: ``n`` events through ``ledger_record`` (the services' own append);
- ``seed(upto)``: extend the chain to ``upto`` events at once (bulk inserts of rows whose
  hashes are computed as the ledger computes them), for trees of tens of thousands;
- ``rfc_tree()``: the stored events as an ``rfc9162.Tree`` over their canonical bytes,
  computed here from the rows with the rfc8785 library (not the service's serialiser).
"""

import hashlib
from datetime import UTC, datetime, timedelta

import rfc8785

from core.ledger import ledger_record
from core.models import LedgerEvent, LedgerHead
from tests import rfc9162

TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"
CHAINED = ("actor", "event_id", "event_type", "payload_hash", "recorded_at", "resource_id", "resource_type",
           "sequence")


def append(n: int, *, resource_id: str = "res") -> None:
    for i in range(n):
        ledger_record(event_type="test.appended", resource_type="Thing", resource_id=f"{resource_id}-{i}",
                      actor="tester", payload={"i": i})


def canonical(fields: dict) -> bytes:
    """The canonical event (docs/reference/ledger.md): RFC 8785 JSON of the chained fields."""
    return rfc8785.dumps({name: fields[name] for name in CHAINED})


def seed(upto: int) -> None:
    """Extend the ledger to ``upto`` events, chained from the current tip, in bulk."""
    head = LedgerEvent.objects.order_by("-sequence").values_list("sequence", "hash").first() or (0, "0" * 64)
    sequence, prev = head
    recorded = datetime.now(UTC) - timedelta(seconds=upto)
    rows = []
    while sequence < upto:
        sequence += 1
        recorded += timedelta(microseconds=1013)
        payload = {"n": sequence}
        # The RFC 8785 form of {"n": <an integer below 2**53>}, written out: one dumps less per row.
        fields = {"sequence": sequence, "event_id": f"evt_seed_{sequence}", "event_type": "test.seeded",
                  "resource_type": "Thing", "resource_id": f"thing-{sequence % 97}", "actor": "seeder",
                  "payload_hash": "sha256:" + hashlib.sha256(b'{"n":%d}' % sequence).hexdigest(),
                  "recorded_at": recorded.strftime(TIME_FORMAT)}
        event_hash = hashlib.sha256(prev.encode("ascii") + canonical(fields)).hexdigest()
        rows.append(LedgerEvent(payload=payload, prev_hash=prev, hash=event_hash,
                                **{**fields, "recorded_at": recorded}))
        prev = event_hash
        if len(rows) == 5000:
            LedgerEvent.objects.bulk_create(rows)
            rows = []
    LedgerEvent.objects.bulk_create(rows)
    LedgerHead.objects.update_or_create(pk=1, defaults={"sequence": sequence, "hash": prev})


def rfc_tree() -> rfc9162.Tree:
    """Every stored event, in sequence order, as RFC 9162 leaf inputs."""
    rows = LedgerEvent.objects.order_by("sequence").values(*CHAINED)
    return rfc9162.Tree([canonical({**row, "recorded_at": row["recorded_at"].strftime(TIME_FORMAT)})
                         for row in rows])
