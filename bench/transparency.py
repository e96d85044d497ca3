"""``python -m bench.transparency``: the transparency log (docs/reference/ledger.md) on a ledger of 1,000,000 events.

1. Recreates the PostgreSQL database (``--database-url``) and empties the Redis database
   (``--redis-url``), bootstraps and seeds a few hundred tasks through the services
   (``bench/seed.py``), extends the ledger to ``--events`` with ``COPY`` (``bench/ledger.py``,
   the real chain) and runs ``VACUUM (ANALYZE)``.
2. Signs the first checkpoint over the whole ledger (the tree built from nothing), then
   ``--rounds`` times appends 10,000 events and times the checkpoint that takes them in;
   then times the tree's verification (``core.selectors.tree_verify``) over all of it.
3. Appends before and after: ``--writers`` threads call ``ledger_record`` (the services'
   own append, one statement on PostgreSQL) for ``--append-seconds``: with nothing else
   running (the ledger as it was without the transparency log: the append path is
   unchanged), while another process signs a checkpoint every 10 seconds (the default
   ``AGP_CHECKPOINT_SECONDS``: the budget's "after") and while it signs one every second
   (ten times as often, for information); the three alternate, ``--append-rounds`` of each,
   and each figure is the median of its runs.
4. Starts the service as ``bench/run`` does (gunicorn, a Celery worker with beat) and, with
   one client, alternates rounds of the baseline ``GET /agp/tasks/{id}`` and
   ``GET /agp/ledger-events/{sequence}/proof`` for random events of the million (then
   consistency proofs), all authenticated; budget: proof p50 <= 3 x the baseline's.

Prints one table; the figures also go to ``--out`` as JSON.
"""

import argparse
import http.client
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

from bench.__main__ import (
    PYTHON,
    ROOT,
    SECRET,
    Stack,
    ensure_port_free,
    flush_redis,
    log,
    recreate_database,
    run_json,
    settle_database,
)
from bench.load import percentiles

NEW_EVENTS = 10_000


# --- roles run in subprocesses (Django set up against the bench database) -----------------------------

def _django() -> None:
    import django

    django.setup()


def checkpoint_role() -> dict:
    """Time one ``checkpoint_create`` (what the worker's task and ``manage.py checkpoint`` run)."""
    _django()
    from core.services import checkpoint_create

    started = time.perf_counter()
    made = checkpoint_create()
    return {"seconds": time.perf_counter() - started, "tree_size": made.tree_size if made else None}


def verify_tree_role() -> dict:
    _django()
    from core.selectors import tree_verify

    started = time.perf_counter()
    result = tree_verify()
    return {"seconds": time.perf_counter() - started, "verified": result.verified, "tree_size": result.tree_size}


def checkpoint_loop_role(every: float, seconds: float) -> dict:
    """Sign a checkpoint every ``every`` seconds for ``seconds``, as the worker's beat does."""
    _django()
    from core.services import checkpoint_create

    deadline, made, busy = time.monotonic() + seconds, 0, 0.0
    while time.monotonic() < deadline:
        started = time.perf_counter()
        made += checkpoint_create() is not None
        busy += time.perf_counter() - started
        time.sleep(max(0.0, every - (time.perf_counter() - started)))
    return {"checkpoints": made, "busy_seconds": busy}


def appends_role(writers: int, seconds: float) -> dict:
    """``writers`` threads appending through ``ledger_record`` for ``seconds``: appends/s and latency."""
    _django()
    from django.db import connection

    from core.ledger import ledger_record

    latencies: list[float] = []
    lock = threading.Lock()
    start = time.perf_counter() + 0.1
    deadline = start + seconds

    def writer(number: int) -> None:
        mine, i = [], 0
        while time.perf_counter() < start:
            time.sleep(0.001)
        while time.perf_counter() < deadline:
            began = time.perf_counter()
            ledger_record(event_type="bench.appended", resource_type="Task", resource_id=f"tsk_bench_{number}_{i}",
                          actor="bench", payload={"writer": number, "i": i, "status": "open", "risk_level": "low"})
            mine.append((time.perf_counter() - began) * 1000)
            i += 1
        connection.close()
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    latencies.sort()
    return {"appends": len(latencies), "seconds": seconds, "per_second": len(latencies) / seconds,
            **percentiles(latencies)}


# --- the orchestration ------------------------------------------------------------------------------------

def one_client(base: str, token: str, paths: list[str]) -> dict:
    """GET each path in turn on one keep-alive connection; latency percentiles in ms."""
    url = urlsplit(base)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
    latencies = []
    for path in paths:
        began = time.perf_counter()
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        body = response.read()
        latencies.append((time.perf_counter() - began) * 1000)
        if response.status != 200:
            raise SystemExit(f"GET {path}: {response.status} {body[:300]!r}")
    conn.close()
    latencies.sort()
    return {"requests": len(latencies), **percentiles(latencies), "latencies": latencies}


def merged(runs: list[dict]) -> dict:
    latencies = sorted(x for run in runs for x in run["latencies"])
    return {"requests": len(latencies), **percentiles(latencies), "rounds": [run["p50"] for run in runs]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("role", nargs="?", default="run",
                        choices=["run", "checkpoint", "verify-tree", "checkpoint-loop", "appends"])
    parser.add_argument("--database-url", default="postgres://postgres@127.0.0.1:5432/agp_bench_transparency")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/8")
    parser.add_argument("--port", type=int, default=8766)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--requests", type=int, default=1000, help="requests per round and scenario")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--writers", type=int, default=4, help="threads appending in the append measurement")
    parser.add_argument("--append-seconds", type=float, default=10.0)
    parser.add_argument("--append-rounds", type=int, default=6,
                        help="rounds of the three append runs (medians are reported: the machine's speed drifts)")
    parser.add_argument("--web-workers", type=int, default=2)
    parser.add_argument("--web-threads", type=int, default=4)
    parser.add_argument("--every", type=float, default=1.0, help="checkpoint-loop: seconds between checkpoints")
    parser.add_argument("--seconds", type=float, default=10.0, help="checkpoint-loop and appends: how long")
    parser.add_argument("--out", default=str(ROOT / "var" / "bench-transparency.json"))
    args = parser.parse_args()

    if args.role == "checkpoint":
        print(json.dumps(checkpoint_role()))
        return
    if args.role == "verify-tree":
        print(json.dumps(verify_tree_role()))
        return
    if args.role == "checkpoint-loop":
        print(json.dumps(checkpoint_loop_role(args.every, args.seconds)))
        return
    if args.role == "appends":
        print(json.dumps(appends_role(args.writers, args.seconds)))
        return

    var_dir = ROOT / "var" / "bench-transparency"
    var_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="agp_project.settings.base", PYTHONPATH=str(ROOT),
               AGP_DATABASE_URL=args.database_url, AGP_BROKER_URL=args.redis_url, AGP_CACHE_URL=args.redis_url,
               AGP_CELERY_QUEUE="agp-bench-transparency", AGP_AUTH_SECRET=SECRET, AGP_CLIENT_ID="bench",
               AGP_CLIENT_SECRET="bench-secret", AGP_VAR_DIR=str(var_dir), AGP_LOG_LEVEL="WARNING",
               AGP_DEBUG="false")
    env.pop("AGP_OPA_URL", None)
    me = [PYTHON, "-m", "bench.transparency", "--database-url", args.database_url]
    results: dict = {"events": args.events}

    ensure_port_free(args.port)
    log(f"recreating {args.database_url} and flushing {args.redis_url}")
    recreate_database(args.database_url)
    flush_redis(args.redis_url)
    subprocess.run([PYTHON, "manage.py", "bootstrap", "-v", "0"], env=env, cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL)
    seed = run_json([PYTHON, "-m", "bench.seed", str(args.tasks)], env)
    log(f"extending the ledger to {args.events} events (COPY, the real chain)")
    results["seed"] = run_json([PYTHON, "-m", "bench.ledger", "seed", str(args.events)], env)
    settle_database(args.database_url)

    log("the first checkpoint: the tree of the whole ledger, built from nothing")
    results["first_checkpoint"] = run_json([*me, "checkpoint"], env)
    checkpoints = []
    for number in range(args.rounds):
        size = results["first_checkpoint"]["tree_size"] + (number + 1) * NEW_EVENTS
        run_json([PYTHON, "-m", "bench.ledger", "seed", str(size)], env)
        checkpoints.append(run_json([*me, "checkpoint"], env))
        log(f"checkpoint after {NEW_EVENTS} new events, round {number + 1}: {checkpoints[-1]['seconds']:.3f} s")
    results["checkpoint_10k"] = {"runs": checkpoints,
                                 "median_seconds": statistics.median(run["seconds"] for run in checkpoints)}
    log("verifying the tree against the newest checkpoint")
    results["verify_tree"] = run_json([*me, "verify-tree"], env)

    log(f"appends: {args.writers} writers, {args.append_seconds:.0f} s each, with checkpoints never, every 10 s "
        "and every second")
    appends = [*me, "appends", "--writers", str(args.writers), "--seconds", str(args.append_seconds)]
    runs: dict[str, list] = {"before": [], "after": [], "every_second": []}
    loops: dict[str, list] = {"after": [], "every_second": []}
    for _ in range(args.append_rounds):
        runs["before"].append(run_json(appends, env))
        for mode, every in (("after", 10), ("every_second", 1)):
            loop = subprocess.Popen([*me, "checkpoint-loop", "--every", str(every),
                                     "--seconds", str(args.append_seconds)], env=env, cwd=ROOT,
                                    stdout=subprocess.PIPE, text=True)
            runs[mode].append(run_json(appends, env))
            loops[mode].append(json.loads(loop.communicate(timeout=600)[0].strip().splitlines()[-1]))
    results["appends"] = {mode: {"per_second": statistics.median(r["per_second"] for r in mode_runs),
                                 "p50": statistics.median(r["p50"] for r in mode_runs), "runs": mode_runs,
                                 "checkpoint_loops": loops.get(mode, []),
                                 "checkpoint_busy_share": sum(loop["busy_seconds"] for loop in loops.get(mode, []))
                                 / (args.append_seconds * len(mode_runs))}
                          for mode, mode_runs in runs.items()}

    ensure_port_free(args.port)
    stack = Stack(env, args.port, args.web_workers, args.web_threads, var_dir, worker_concurrency=1)
    try:
        token = stack.token()
        size = checkpoints[-1]["tree_size"]
        rng = random.Random(9162)
        tasks = seed["task_ids"]
        baseline, proofs, consistency = [], [], []
        warm = [f"/agp/tasks/{tasks[0]}", "/agp/ledger-events/1/proof", "/agp/ledger-events/consistency?first=1"]
        one_client(stack.base, token, warm * 100)
        for number in range(args.rounds):
            log(f"one client, round {number + 1}: GET /agp/tasks/{{id}}, then proofs of random events")
            baseline.append(one_client(stack.base, token, [f"/agp/tasks/{rng.choice(tasks)}"
                                                           for _ in range(args.requests)]))
            proofs.append(one_client(stack.base, token, [
                f"/agp/ledger-events/{rng.randint(1, size)}/proof?tree_size={size}" for _ in range(args.requests)]))
            consistency.append(one_client(stack.base, token, [
                f"/agp/ledger-events/consistency?first={rng.randint(1, size)}&second={size}"
                for _ in range(args.requests // 2)]))
        results["baseline"], results["proof"], results["consistency"] = (
            merged(baseline), merged(proofs), merged(consistency))
    finally:
        stack.stop()

    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    print(table(results))


def table(results: dict) -> str:
    base, proof, consistency = results["baseline"], results["proof"], results["consistency"]
    before, after, stressed = (results["appends"][mode] for mode in ("before", "after", "every_second"))
    ratio, kept = proof["p50"] / base["p50"], after["per_second"] / before["per_second"]
    rows = [
        ("GET /agp/tasks/{id} (baseline), 1 client", f"{base['p50']:.2f} ms", f"{base['p95']:.2f} ms", ""),
        ("GET /agp/ledger-events/{sequence}/proof, 1 client", f"{proof['p50']:.2f} ms", f"{proof['p95']:.2f} ms",
         f"p50 <= 3x baseline: {ratio:.2f}x {'met' if ratio <= 3 else 'MISSED'}"),
        ("GET /agp/ledger-events/consistency, 1 client", f"{consistency['p50']:.2f} ms",
         f"{consistency['p95']:.2f} ms", ""),
        (f"first checkpoint ({results['first_checkpoint']['tree_size']:,} events)",
         f"{results['first_checkpoint']['seconds']:.2f} s", "", ""),
        (f"checkpoint after {NEW_EVENTS:,} new events (median)", f"{results['checkpoint_10k']['median_seconds']:.3f} s",
         "", ""),
        (f"tree verification ({results['verify_tree']['tree_size']:,} events)",
         f"{results['verify_tree']['seconds']:.2f} s", "", ""),
        ("appends, no checkpoints (before)", f"{before['per_second']:.0f}/s", f"p50 {before['p50']:.2f} ms", ""),
        ("appends, a checkpoint every 10 s (after)", f"{after['per_second']:.0f}/s", f"p50 {after['p50']:.2f} ms",
         f">= 90% of before: {kept:.0%} {'met' if kept >= 0.9 else 'MISSED'}; checkpoints busy "
         f"{after['checkpoint_busy_share']:.1%} of the time"),
        ("appends, a checkpoint every second", f"{stressed['per_second']:.0f}/s", f"p50 {stressed['p50']:.2f} ms",
         f"{stressed['per_second'] / before['per_second']:.0%} of before; checkpoints busy "
         f"{stressed['checkpoint_busy_share']:.1%} of the time"),
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return "\n".join(" | ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)) for row in rows)


if __name__ == "__main__":
    sys.exit(main())
