"""Backtests (docs/reference/governance.md): their rate, and that a worker's memory does not grow with the window.

    python -m bench.backtest                  # N = 20,000 and 10N = 200,000 recorded evaluations
    python -m bench.backtest --n 50000        # another N
    python -m bench.backtest --database-url postgres://postgres@127.0.0.1:5432/agp_bench_backtest \\
                             --redis-url redis://127.0.0.1:6379/9

For each size, on a PostgreSQL database recreated for it: migrate; create a task, a
recorded (baseline) policy set and a candidate through the services; write the N recorded
evaluations with ``COPY`` (the inputs, actions and results the baseline's Rego gives, as
``policy_evaluation_create`` would have stored them); ``VACUUM (ANALYZE)``. Then start a
real Celery worker (one pool process, as ``scripts/serve`` runs it on SQLite), ask
for the backtest through ``decision.backtests.backtest_create`` (the service behind
``POST /agp/backtests``, so the task goes through the outbox and the broker), wait for it
to end, and report: the rate (evaluations / (``completed_at`` - ``started_at``), the
run's own time), and the peak RSS (``VmHWM``) of the pool process that ran it and of the
engine processes it evaluates in (``core/engine/sandbox.py``: its children), before and
after the run. The worker is a new one for each size, so each peak is that run's own.

Prints one JSON object with both sizes (the last line) and a table on stderr. Needs
PostgreSQL and Redis; refuses a Redis database another client uses (a stray worker would
take the message). Not part of ``python -m bench``: run it on its own.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.stack import (
    PYTHON,
    ROOT,
    children,
    flush_redis,
    log,
    memory,
    recreate_database,
    run_json,
    settle_database,
    terminate,
)

BASELINE = """package agp.bench.baseline

import rego.v1

default allow := false

default require_approval := false

allow if input.action_class in {"read", "write", "communicate", "transact"}

require_approval if input.amount > 500

deny contains "amount over 1000" if input.amount > 1000
"""

CANDIDATE = """package agp.bench.candidate

import rego.v1

default allow := false

default require_approval := false

allow if input.action_class in {"read", "write", "transact"}

require_approval if input.amount > 250

deny contains "amount over 800" if input.amount > 800

deny contains sprintf("merchant %s is blocked", [input.merchant]) if input.merchant in {"m-13", "m-17"}

deny contains "refund to a closed account" if input.action.parameters.account == "closed"
"""

CLASSES = ("read", "write", "communicate", "transact")


def recorded_input(i: int) -> dict:
    """What an agent's evaluation request looks like: a handful of fields, a few hundred bytes."""
    return {"action_class": CLASSES[i % 4], "amount": (i * 37) % 1500, "currency": "EUR",
            "merchant": f"m-{i % 23}", "tool_id": "payments", "operation": "refund",
            "task_id": f"tsk_bench_{i % 5000:06d}", "agent_id": f"agent-{i % 50:02d}",
            "channel": "api", "risk_level": "low", "customer": {"id": f"c-{i % 9973}", "tier": "gold"}}


def recorded_action(i: int) -> dict:
    """The action (docs/reference/governance.md) the evaluation was made for, as ``policy_evaluation_create`` stores it."""
    return {"tool_id": "payments", "operation": "refund",
            "parameters": {"amount": (i * 37) % 1500, "currency": "EUR", "account": "closed" if i % 97 == 0 else "open"}}


def seed(n: int) -> dict:
    """The task, both policy sets (through the services) and ``n`` recorded evaluations (``COPY``)."""
    from django.db import connection, transaction

    from agp_project.canonical import canonical_json, content_hash
    from core import engine
    from decision.models import PolicyEvaluation
    from decision.services import policy_evaluation_input
    from registry.services import policy_set_create, task_create

    started = time.perf_counter()
    task = task_create(actor="bench", root_principal="org:bench", agent_id="agent-00", risk_level="low",
                       action_class="transact")
    baseline = policy_set_create(actor="bench", name="baseline", version="1", ruleset=BASELINE)
    candidate = policy_set_create(actor="bench", name="candidate", version="2", ruleset=CANDIDATE)
    columns = ("evaluation_id", "policy_set_id", "task_id", "agent_id", "input", "input_hash", "action", "action_hash",
               "ruleset_hash", "result", "allowed", "require_approval", "warnings", "shadow_results", "evaluated_at",
               "created_at", "created_by")
    first = datetime.now(UTC) - timedelta(days=1)
    with transaction.atomic(), connection.connection.cursor() as cursor, cursor.copy(
            f"COPY {PolicyEvaluation._meta.db_table} ({', '.join(columns)}) FROM STDIN") as copy:
        for i in range(n):
            policy_input, action = recorded_input(i), recorded_action(i)
            outcome = engine.evaluate(ruleset=baseline.ruleset, ruleset_hash=baseline.ruleset_hash,
                                      input=policy_evaluation_input(input=policy_input, action=action))
            at = first + timedelta(microseconds=i)
            copy.write_row((f"pe_bench_{i:09d}", baseline.policy_set_id, task.task_id, policy_input["agent_id"],
                            canonical_json(policy_input).decode(), content_hash(policy_input),
                            canonical_json(action).decode(), content_hash(action), baseline.ruleset_hash,
                            json.dumps(outcome.as_result()), outcome.allow, outcome.require_approval, "[]", "{}",
                            at, at, "bench"))
    return {"evaluations": n, "baseline": baseline.policy_set_id, "candidate": candidate.policy_set_id,
            "seconds": round(time.perf_counter() - started, 1)}


def request(candidate: str, baseline: str) -> dict:
    """Ask for the backtest through the service, as the API does."""
    from decision.backtests import backtest_create

    backtest = backtest_create(actor="bench", policy_set_id=candidate, baseline_policy_set_id=baseline,
                               since=datetime.now(UTC) - timedelta(days=2))
    return {"backtest_id": backtest.backtest_id}


def outcome(backtest_id: str) -> dict:
    from decision.models import Backtest

    backtest = Backtest.objects.get(backtest_id=backtest_id)
    seconds = ((backtest.completed_at - backtest.started_at).total_seconds()
               if backtest.completed_at and backtest.started_at else None)
    return {"status": backtest.status, "evaluations": backtest.evaluations, "total": backtest.total,
            "newly_denied": backtest.newly_denied, "newly_allowed": backtest.newly_allowed,
            "approval_changed": backtest.approval_changed, "changes": len(backtest.changes), "seconds": seconds}


def pool_peak(worker: subprocess.Popen) -> tuple[float, float]:
    """The peak RSS (MB) of the worker's pool process, the one that runs the task (no beat here:
    the outbox publishes on commit, so the worker's only child is its pool process), and the
    largest of its engine processes' (its children; 0 before it evaluated anything)."""
    pool = children(worker.pid)
    if len(pool) != 1:
        raise SystemExit(f"expected one pool process under the worker, found {pool}")
    engines = [memory(pid)[1] for pid in children(pool[0])]
    return memory(pool[0])[1], max(engines, default=0.0)


def one_size(n: int, args, env: dict) -> dict:
    log(f"backtest over {n:,} recorded evaluations")
    recreate_database(args.database_url)
    flush_redis(args.redis_url)
    subprocess.run([PYTHON, "manage.py", "migrate", "--no-input", "-v", "0"], env=env, cwd=ROOT, check=True)
    seeded = run_json([PYTHON, "-m", "bench.backtest", "seed", str(n)], env)
    settle_database(args.database_url)
    with tempfile.TemporaryDirectory(prefix="agp-bench-backtest-") as var:
        worker = subprocess.Popen(
            [str(Path(PYTHON).parent / "celery"), "-A", "agp_project", "worker", "--concurrency", "1",
             "--loglevel", "WARNING", "--logfile", str(Path(var) / "w.log")], env=env, cwd=ROOT)
        try:
            time.sleep(args.settle)  # the worker and its pool process started, the start-up sweeps ran
            idle, engine_idle = pool_peak(worker)
            backtest_id = run_json([PYTHON, "-m", "bench.backtest", "request", seeded["candidate"],
                                    seeded["baseline"]], env)["backtest_id"]
            deadline = time.monotonic() + args.timeout
            while True:
                result = run_json([PYTHON, "-m", "bench.backtest", "outcome", backtest_id], env)
                if result["status"] in ("succeeded", "failed", "cancelled"):
                    break
                if time.monotonic() > deadline or worker.poll() is not None:
                    raise SystemExit(f"backtest {backtest_id} did not end: {result}")
                time.sleep(0.5)
            peak, engine_peak = pool_peak(worker)
        finally:
            terminate(worker)
    if result["status"] != "succeeded" or result["evaluations"] != n:
        raise SystemExit(f"backtest over {n} evaluations ended {result}")
    return {"n": n, **result, "per_second": round(n / result["seconds"]), "worker_peak_mb_idle": round(idle, 1),
            "worker_peak_mb": round(peak, 1), "engine_peak_mb_idle": round(engine_idle, 1),
            "engine_peak_mb": round(engine_peak, 1), "seed_seconds": seeded["seconds"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20_000, help="the smaller size; the larger is 10 times it")
    parser.add_argument("--database-url", default="postgres://postgres@127.0.0.1:5432/agp_bench_backtest",
                        help="recreated for each size")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/9", help="broker; flushed for each size")
    parser.add_argument("--settle", type=float, default=5.0, help="seconds the idle worker runs before measuring")
    parser.add_argument("--timeout", type=float, default=1800.0)
    args = parser.parse_args()
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "agp_project.settings.base", "AGP_DATABASE_URL": args.database_url,
           "AGP_BROKER_URL": args.redis_url, "AGP_CACHE_URL": args.redis_url, "AGP_LOG_LEVEL": "WARNING",
           "AGP_VAR_DIR": tempfile.mkdtemp(prefix="agp-bench-backtest-var-"),
           # The whole window, however large: the bounds of a backtest are not what is measured.
           "AGP_BACKTEST_MAX_EVALUATIONS": str(10 * args.n), "AGP_BACKTEST_MAX_SECONDS": str(int(args.timeout))}
    env.pop("AGP_AUTH_SECRET", None)
    runs = [one_size(n, args, env) for n in (args.n, 10 * args.n)]
    for run in runs:
        log(f"{run['n']:>9,} evaluations: {run['per_second']:,}/s over {run['seconds']:.1f} s; pool process peak RSS "
            f"{run['worker_peak_mb']} MB (idle {run['worker_peak_mb_idle']} MB), engine process peak RSS "
            f"{run['engine_peak_mb']} MB; {run['newly_denied']:,} newly denied, {run['changes']} changes kept")
    print(json.dumps({"runs": runs, "growth_mb": round(runs[1]["worker_peak_mb"] - runs[0]["worker_peak_mb"], 1),
                      "engine_growth_mb": round(runs[1]["engine_peak_mb"] - runs[0]["engine_peak_mb"], 1)}))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in ("seed", "request", "outcome"):
        import django

        django.setup()
        command, rest = sys.argv[1], sys.argv[2:]
        if command == "seed":
            print(json.dumps(seed(int(rest[0]))))
        elif command == "request":
            print(json.dumps(request(*rest)))
        else:
            print(json.dumps(outcome(rest[0])))
    else:
        main()
