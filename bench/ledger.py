"""Scenario (g): grow the ledger to N events fast, then time ``ledger_verify`` over all of it.

    python -m bench.ledger seed 1000000   # extend the real chain from the current head
    python -m bench.ledger verify         # time core.ledger_verification.ledger_verify, print JSON
    python -m bench.ledger verify-python  # the same chain walked in Python (verify_in_python)
    python -m bench.ledger hash           # the floor: one process SHA-256-hashing the same bytes

Seeding does not go through the API (a million appends would take an hour): it computes
the real chain - the same ``canonical_event`` / ``chain_hash`` / ``canonical_json`` as
``ledger_append`` - continuing from the stored head, writes the rows with PostgreSQL
``COPY`` (the payload as its canonical JSON text, as ``LedgerEvent.payload`` stores it) and
moves the head row, in one transaction. The payloads look like the ones the services write.
"""

import json
import sys
import time
from datetime import UTC, datetime, timedelta

RESOURCES = (("task", "task.created"), ("delegation", "delegation.created"), ("ActionEnvelope", "envelope.accepted"),
             ("Operation", "operation.succeeded"), ("policy_evaluation", "policy_evaluation.created"))


def _payload(i: int) -> dict:
    kind = i % 5
    if kind == 0:
        return {"root_principal": "org:bench", "agent_id": f"agent-{i % 50:02d}", "risk_level": "low",
                "action_class": "read", "status": "open"}
    if kind == 1:
        return {"parent_delegation_id": f"dlg_{i - 1:012d}", "root_principal": "org:bench",
                "delegator_agent": f"agent-{i % 50:02d}", "delegate_agent": f"agent-{(i + 1) % 50:02d}",
                "authority_scope": ["crm:*", "payments:refund"], "signature_value": f"{i:x}" * 4}
    if kind == 2:
        return {"action_id": f"act_{i:012d}", "task_id": f"tsk_{i % 5000:08d}", "tool_id": "crm",
                "operation": "update", "parameters_hash": "sha256:" + f"{i:064x}", "checks": 10, "mode": "execute"}
    if kind == 3:
        return {"operation_id": f"op_{i:012d}", "attempts": 1, "connector": "noop", "result": {"ok": True}}
    return {"policy_set_id": "ps_bench", "allowed": True, "require_approval": i % 7 == 0,
            "reasons": [] if i % 3 else ["amount 1250 exceeds hard maximum 1000"]}


def seed(target: int) -> dict:
    from django.db import connection, transaction

    from agp_project.canonical import bytes_hash, canonical_json
    from agp_project.timeutil import TIME_FORMAT
    from core.ledger import canonical_event, chain_hash
    from core.models import LedgerEvent, LedgerHead

    started = time.perf_counter()
    table = LedgerEvent._meta.db_table
    columns = ("sequence", "event_id", "event_type", "resource_type", "resource_id", "actor", "payload",
               "payload_hash", "prev_hash", "hash", "recorded_at")
    with transaction.atomic():
        head = LedgerHead.objects.select_for_update().get(pk=1)
        sequence, prev = head.sequence, head.hash
        if sequence >= target:
            return {"added": 0, "events": sequence, "seconds": 0.0}
        recorded = datetime.now(UTC) - timedelta(seconds=target - sequence)
        added = 0
        with connection.connection.cursor() as cursor, cursor.copy(
                f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
            while sequence < target:
                sequence += 1
                added += 1
                resource_type, event_type = RESOURCES[sequence % 5]
                payload = canonical_json(_payload(sequence))
                payload_hash = bytes_hash(payload)
                event_id = f"evt_bench_{sequence:010d}"
                resource_id = f"{resource_type[:3].lower()}_{sequence % 100000:08d}"
                recorded += timedelta(microseconds=997)
                stamp = recorded.strftime(TIME_FORMAT)
                event_hash = chain_hash(prev, canonical_event(
                    sequence=sequence, event_id=event_id, event_type=event_type, resource_type=resource_type,
                    resource_id=resource_id, actor="bench-seed", payload_hash=payload_hash, recorded_at=stamp))
                copy.write_row((sequence, event_id, event_type, resource_type, resource_id, "bench-seed",
                                payload.decode("utf-8"), payload_hash, prev, event_hash, recorded))
                prev = event_hash
        LedgerHead.objects.filter(pk=1).update(sequence=sequence, hash=prev)
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {table}")
    return {"added": added, "events": sequence, "seconds": round(time.perf_counter() - started, 1)}


def verify(in_python: bool = False) -> dict:
    """``ledger_verify`` (in SQL on PostgreSQL) or, with ``in_python``, the chain walked in
    Python (``verify_in_python``, what other databases run): what verifying in the database buys."""
    from core.ledger_verification import ledger_verify, verify_in_python

    started = time.perf_counter()
    result = verify_in_python() if in_python else ledger_verify()
    seconds = time.perf_counter() - started
    return {"verified": result.verified, "events": result.events, "seconds": seconds,
            "events_per_second": result.events / seconds}


def hash_rate() -> dict:
    """The rate at which one process SHA-256-hashes what verification hashes, per event: the
    previous hash and the canonical event (the chain hash), and the stored payload text (the
    payload hash). The bytes are read and built first; only the hashing is timed."""
    import hashlib

    from django.db.models import TextField
    from django.db.models.functions import Cast

    from agp_project.timeutil import iso
    from core.ledger import canonical_event
    from core.models import LedgerEvent

    rows = LedgerEvent.objects.order_by("sequence").values_list(
        "sequence", "event_id", "event_type", "resource_type", "resource_id", "actor", "payload_hash", "prev_hash",
        "recorded_at", Cast("payload", TextField()))
    chained, payloads = [], []
    for (sequence, event_id, event_type, resource_type, resource_id, actor, payload_hash, prev_hash, recorded_at,
         payload) in rows.iterator(chunk_size=10000):
        chained.append(prev_hash.encode("ascii") + canonical_event(
            sequence=sequence, event_id=event_id, event_type=event_type, resource_type=resource_type,
            resource_id=resource_id, actor=actor, payload_hash=payload_hash, recorded_at=iso(recorded_at)))
        payloads.append(payload.encode("utf-8"))
    sha256 = hashlib.sha256
    started = time.perf_counter()
    for event, payload in zip(chained, payloads, strict=True):
        sha256(event).hexdigest()
        sha256(payload).hexdigest()
    seconds = time.perf_counter() - started
    return {"events": len(chained), "seconds": seconds, "events_per_second": len(chained) / seconds}


if __name__ == "__main__":
    import django

    django.setup()
    if sys.argv[1] == "seed":
        print(json.dumps(seed(int(sys.argv[2]))))
    elif sys.argv[1] == "hash":
        print(json.dumps(hash_rate()))
    else:
        print(json.dumps(verify(in_python=sys.argv[1] == "verify-python")))
