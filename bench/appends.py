"""Scenario (h): concurrent ledger appends against PostgreSQL's own durable INSERT rate.

    python -m bench.appends 8 10      # 8 writers for 10 s each measurement; prints JSON

Measurements one after the other, each writer a process on its own connection, each for
the same time:

- ``inserts``: ``writers`` processes each run a durable one-row ``INSERT`` in autocommit
  through psycopg into a table of its own making: what any committed write costs on this
  database, with group commit sharing the flushes among the writers;
- ``appends``: ``writers`` processes each call the service's append,
  ``core.ledger.ledger_record`` (one event in a transaction of its own, as a validation or
  a refusal records itself), in a loop. With the sequencer (the default on PostgreSQL) the
  event is written for it and integrated into the chain by the sequencer of the running
  service's worker: an append is counted when it is integrated, so the rate is the appends
  made over the time from the start to the integration of the last one (the writers'
  processes ending, after their last append, is no part of it); beside it, the rate at
  which the writers committed them (the appends over the window);
- ``appends_one_writer``: the same with one process;
- ``batched``: ``writers`` processes each append ``BATCH`` events per transaction
  (``core.ledger.ledger_batch``: one statement, one commit), counted likewise;
- ``in_transaction``: ``appends`` with ``AGP_LEDGER_SEQUENCER=0``: each event chained in its
  transaction under the head row's lock, as before the sequencer (and as on SQLite);
- ``orm``: ``writers`` processes each append one event per transaction the way other
  databases do it, through the ORM (lock the head, insert the event, move the head: three
  statements).

While the sequenced measurements run, the parent samples every 0.1 s how long the oldest
event still waiting for the sequencer has waited (from its ``recorded_at``, taken before its
transaction's insert): the integration lag under load (docs/scaling.md).
"""

import json
import multiprocessing
import os
import sys
import threading
import time
from typing import Any

PROBE_TABLE = "bench_append_probe"
BATCH = 10


def _appender(ready, window, counts, index: int) -> None:
    import django

    django.setup()
    from core.ledger import ledger_record

    ledger_record(event_type="bench.warmup", resource_type="Bench", resource_id=f"w{index}", actor="bench")
    start, stop = _wait_for_start(ready, window)
    done = 0
    while time.time() < stop:
        ledger_record(event_type="bench.append", resource_type="Bench", resource_id=f"w{index}-{done}",
                      actor="bench", payload={"writer": index, "n": done})
        done += 1
    counts[index] = done


def _batcher(ready, window, counts, index: int) -> None:
    import django

    django.setup()
    from django.db import transaction

    from core.ledger import ledger_append, ledger_batch, ledger_record

    ledger_record(event_type="bench.warmup", resource_type="Bench", resource_id=f"b{index}", actor="bench")
    start, stop = _wait_for_start(ready, window)
    done = 0
    while time.time() < stop:
        with transaction.atomic(), ledger_batch():
            for _ in range(BATCH):
                ledger_append(event_type="bench.append", resource_type="Bench", resource_id=f"b{index}-{done}",
                              actor="bench", payload={"writer": index, "n": done})
                done += 1
    counts[index] = done


def _orm_appender(ready, window, counts, index: int) -> None:
    """Appends as ``core.ledger`` does on SQLite, from public pieces, on PostgreSQL."""
    import django

    django.setup()
    from datetime import UTC, datetime

    from django.db import transaction

    from agp_project.canonical import bytes_hash, canonical_json
    from agp_project.ids import new_id
    from agp_project.timeutil import iso
    from core.ledger import canonical_event, chain_hash, ledger_record
    from core.models import LedgerEvent, LedgerHead

    try:
        from core.ledger import event_trail
    except ImportError:  # a ledger without the task and action columns
        def event_trail(**_):
            return {}

    def append(n: int) -> None:
        payload = {"writer": index, "n": n}
        fields = {"event_id": new_id("evt"), "event_type": "bench.append", "resource_type": "Bench",
                  "resource_id": f"o{index}-{n}", "actor": "bench", "payload_hash": bytes_hash(canonical_json(payload))}
        recorded = datetime.now(UTC)
        with transaction.atomic():
            head = LedgerHead.objects.select_for_update().get(pk=1)
            sequence = head.sequence + 1
            event_hash = chain_hash(head.hash, canonical_event(sequence=sequence, recorded_at=iso(recorded), **fields))
            LedgerEvent.objects.create(sequence=sequence, payload=payload, prev_hash=head.hash, hash=event_hash,
                                       recorded_at=recorded, **fields,
                                       **event_trail(resource_type="Bench", resource_id=fields["resource_id"],
                                                     payload=payload))
            LedgerHead.objects.filter(pk=1).update(sequence=sequence, hash=event_hash)

    ledger_record(event_type="bench.warmup", resource_type="Bench", resource_id=f"o{index}", actor="bench")
    start, stop = _wait_for_start(ready, window)
    done = 0
    while time.time() < stop:
        append(done)
        done += 1
    counts[index] = done


def _inserter(url: str, ready, window, counts, index: int) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"INSERT INTO {PROBE_TABLE} (writer) VALUES (%s)", [index], prepare=True)
        start, stop = _wait_for_start(ready, window)
        done = 0
        while time.time() < stop:
            conn.execute(f"INSERT INTO {PROBE_TABLE} (writer) VALUES (%s)", [index], prepare=True)
            done += 1
    counts[index] = done


def _wait_for_start(ready, window) -> tuple[float, float]:
    """Say this writer is set up, then wait for the window the parent opens once all are."""
    ready.release()
    while window[0] == 0.0:
        time.sleep(0.001)
    start, stop = window[0], window[1]
    while time.time() < start:
        time.sleep(0.001)
    return start, stop


def _run(target, args: tuple, writers: int, seconds: float) -> int:
    return _run_timed(target, args, writers, seconds)[0]


def _run_timed(target, args: tuple, writers: int, seconds: float, finished=None) -> tuple[int, float, Any]:
    """The writers' total count, the epoch second their window opened, and what
    ``finished()`` returned when called once every writer had made its last append.

    A writer's count is -1 until it has finished; ``finished`` runs then, before the
    processes are joined: a spawned Django process takes about 0.6 s of CPU to tear its
    interpreter down, time that belongs to neither the appends nor their integration.
    """
    context = multiprocessing.get_context("spawn")
    counts = context.Array("q", [-1] * writers)
    ready = context.Semaphore(0)
    window = context.Array("d", 2)  # (start, stop), epoch seconds; 0 until every writer is ready
    processes = [context.Process(target=target, args=(*args, ready, window, counts, i)) for i in range(writers)]
    for process in processes:
        process.start()
    # The clock starts once every process is set up and connected, however long that took.
    for _ in processes:
        if not ready.acquire(timeout=300):
            for process in processes:
                process.kill()
            raise SystemExit("a writer was not ready within 300 s")
    start = time.time() + 0.1
    window[1] = start + seconds
    window[0] = start
    while min(counts) < 0:
        if any(process.exitcode not in (None, 0) for process in processes):
            break  # reported below
        time.sleep(0.005)
    result = finished() if finished is not None and min(counts) >= 0 else None
    for process in processes:
        process.join()
        if process.exitcode != 0:
            raise SystemExit(f"a writer exited with {process.exitcode}")
    return sum(counts), start, result


class _Lag(threading.Thread):
    """Samples, every 0.1 s, how long the oldest event waiting for the sequencer has waited."""

    def __init__(self, url: str):
        super().__init__(daemon=True)
        self.url, self.samples, self.stop = url, [], threading.Event()

    def run(self) -> None:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            while not self.stop.wait(0.1):
                row = conn.execute("SELECT extract(epoch FROM clock_timestamp() - min(recorded_at)) "
                                   "FROM core_ledgerpendingevent").fetchone()
                self.samples.append(float(row[0] or 0.0))


def _integrated(url: str, target, args: tuple, writers: int, seconds: float) -> dict:
    """Run the writers, then wait for the sequencer to integrate everything they appended:
    the count, the rate counted at integration, and the lag sampled meanwhile."""
    import psycopg

    def integrated() -> float:
        """When the pending table is empty: every append made has been integrated."""
        with psycopg.connect(url, autocommit=True) as conn:
            deadline = time.time() + 120
            while conn.execute("SELECT EXISTS (SELECT 1 FROM core_ledgerpendingevent)").fetchone()[0]:
                if time.time() > deadline:
                    raise SystemExit("(h): the sequencer did not integrate the appends within 120 s")
                time.sleep(0.005)
        return time.time()

    lag = _Lag(url)
    lag.start()
    count, start, done = _run_timed(target, args, writers, seconds, finished=integrated)
    lag.stop.set()
    lag.join()
    samples = sorted(lag.samples) or [0.0]
    return {"count": count, "per_second": count / max(done - start, seconds),
            "integrated_after_window": max(0.0, done - start - seconds),
            "lag_max": samples[-1], "lag_p99": samples[min(len(samples) - 1, int(len(samples) * 0.99))]}


def measure(writers: int, seconds: float) -> dict:
    import psycopg

    url = os.environ["AGP_DATABASE_URL"]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE IF NOT EXISTS {PROBE_TABLE} (id bigserial PRIMARY KEY, writer int NOT NULL)")
        # The earlier scenarios' events passed through the waiting table. Autovacuum, which
        # production keeps on (the table is set to be vacuumed as a queue), would have removed
        # their dead rows; a server with it off (CI's, this benchmark's) has not.
        conn.execute("VACUUM core_ledgerpendingevent")

    try:
        inserts = _run(_inserter, (url,), writers, seconds)
        appends = _integrated(url, _appender, (), writers, seconds)
        alone = _integrated(url, _appender, (), 1, seconds)
        batched = _integrated(url, _batcher, (), writers, seconds)
        before = os.environ.get("AGP_LEDGER_SEQUENCER")
        os.environ["AGP_LEDGER_SEQUENCER"] = "0"  # the spawned writers chain in their transaction
        try:
            in_transaction = _run(_appender, (), writers, seconds)
        finally:
            if before is None:
                os.environ.pop("AGP_LEDGER_SEQUENCER")
            else:
                os.environ["AGP_LEDGER_SEQUENCER"] = before
        orm = _run(_orm_appender, (), writers, seconds)
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP TABLE IF EXISTS {PROBE_TABLE}")
    return {"writers": writers, "seconds": seconds, "inserts": inserts, "inserts_per_second": inserts / seconds,
            "appends": appends["count"], "appends_per_second": appends["per_second"],
            "appends_lag_max": appends["lag_max"], "appends_lag_p99": appends["lag_p99"],
            "appends_integrated_after_window": appends["integrated_after_window"],
            "appends_committed_per_second": appends["count"] / seconds,
            "appends_one_writer": alone["count"], "appends_one_writer_per_second": alone["per_second"],
            "batch": BATCH, "batched": batched["count"], "batched_per_second": batched["per_second"],
            "batched_lag_max": batched["lag_max"],
            "in_transaction": in_transaction, "in_transaction_per_second": in_transaction / seconds,
            "orm": orm, "orm_per_second": orm / seconds}


if __name__ == "__main__":
    print(json.dumps(measure(int(sys.argv[1]), float(sys.argv[2]))))
