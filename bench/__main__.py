"""``python -m bench`` (or ``bench/run``): the reproducible benchmark of the governance hot paths.

1. Recreates the PostgreSQL database ``agp_bench`` (``--database-url``) and empties Redis
   db 8 (``--redis-url``, broker and cache), migrates and bootstraps (a client with every
   scope; ``AGP_AUTH_SECRET`` is set, so every scenario is authenticated).
2. Seeds through the services (``bench/seed.py``): thousands of tasks, a delegation tree
   of depth 6, 20 policy sets with real Rego, a world in which an envelope passes all
   the checks; then ``VACUUM (ANALYZE)`` and ``CHECKPOINT``.
3. Starts the service as production runs it: gunicorn (gthread, ``--web-workers`` x
   ``--web-threads``) and one Celery worker (``--worker-concurrency`` processes) with beat.
4. Drives each scenario from a separate load-generator process (``bench/load.py``). Every
   write carries an ``Idempotency-Key``, as ``agp_client`` sends it. Prints one table and
   the budgets, each a ratio to a figure of the same run (``bench/report.py``); the figures
   also go to ``--out`` as JSON.

Scenarios: (a) GET /agp/tasks/{id} (the baseline), saturated and with one client, and the
floors under it (gunicorn alone, PostgreSQL from Python); (b) validate-only POST
/agp/action-envelopes passing every check, saturated ((a) and (b) alternate in ``--rounds``
rounds), the same without Idempotency-Key, and at half its saturation rate; (c) the same
failing a check; (d) respond-async submissions executed by one worker (as they arrive, then a
backlog drained); (e) POST /agp/policy-evaluations with one client (and the engine alone);
(f) POST /agp/delegations at depth 6; (g) verify_ledger over 1,000,000 events beside one
process SHA-256-hashing the same bytes (and the chain walked in Python); (h) eight writers
appending to the ledger beside eight writers of PostgreSQL's own durable one-row INSERT (and
one writer, ten events a transaction, the append through the ORM); (i) one call per
governed action: a tool call through the MCP gateway against the same call made directly to
the same upstream MCP server (``examples/mcp/crm_server.py``) with the same SDK client, one
client (``bench/gateway.py``), and the REST one call (validate only), saturated.
"""


import argparse
import json
import os
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

from bench import floor_app
from bench.load import percentiles
from bench.seed import AGENT_CLIENT, AGENT_SECRET
from bench.report import table
from bench.stack import (
    PYTHON,
    ROOT,
    Stack,
    ensure_port_free,
    flush_redis,
    free_port,
    gunicorn,
    log,
    machine,
    recreate_database,
    run_json,
    settle_database,
    terminate,
    wait_answering,
    wait_listening,
)

SECRET = "bench-auth-secret-0123456789abcdef0123456789abcdef"
# Scenarios driven with the seeded agent's own client (the others with the bootstrap operator).
AS_AGENT = ("a", "b", "c", "i")


def http_floor(env: dict, args, var_dir: Path) -> dict:
    """One client against ``bench/floor_app.py`` under the service's gunicorn command (no Django)."""
    port = free_port()
    web = gunicorn("bench.floor_app:application", env, port, args.web_workers, args.web_threads,
                   var_dir / "gunicorn-floor.log")
    try:
        base = f"http://127.0.0.1:{port}"
        wait_answering(web, base + "/floor")
        with urllib.request.urlopen(base + "/floor", timeout=5) as response:
            if response.read() != floor_app.BODY:  # another server took the port first
                raise SystemExit(f"port {port} is answered by something other than bench/floor_app.py")
        return drive(env, base, None, {}, "floor", (200,), concurrency=1, requests=min(args.requests, 2000),
                     duration=args.duration)
    finally:
        terminate(web)


def database_floor(url: str, n: int = 2000) -> dict:
    """Median time of a prepared ``SELECT 1`` and of a durable one-row ``INSERT`` (autocommit)
    through psycopg, in ms: what any statement, and any durable write, costs from Python on
    this machine before the statement's own work. The table lives in the bench database,
    which every run recreates.
    """
    import statistics

    import psycopg

    def median_ms(conn, sql: str) -> float:
        times = []
        for _ in range(n):
            started = time.perf_counter()
            conn.execute(sql, prepare=True)
            times.append(time.perf_counter() - started)
        return statistics.median(times[n // 10:]) * 1e3  # the first tenth is the warm-up

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS bench_commit_probe (id bigserial PRIMARY KEY)")
        figures = {"round_trip_ms": median_ms(conn, "SELECT 1"),
                   "durable_insert_ms": median_ms(conn, "INSERT INTO bench_commit_probe DEFAULT VALUES")}
        conn.execute("DROP TABLE bench_commit_probe")
    return figures


def load(env: dict, spec: dict) -> dict:
    result = run_json([PYTHON, "-m", "bench.load"], env, stdin=json.dumps(spec))
    bad = {k: v for k, v in result["statuses"].items() if not k.isdigit() or int(k) not in spec["expect"]}
    if bad:
        raise SystemExit(f"scenario {spec['scenario']}: unexpected answers {bad}: {result['unexpected']}")
    return result


def drive(env: dict, base: str, token: str | None, seed: dict, name: str, expect: tuple[int, ...], *,
          concurrency: int, requests: int, duration: float, mode: str = "closed", rate: float | None = None,
          warmup: int = 200, latencies: bool = False, keys: bool = True, dpop: bool = False) -> dict:
    """Scenario ``name`` against ``base`` from the load generator: ``warmup`` requests in a
    closed loop first (their figures dropped), then the measured run (with every latency
    when ``latencies``)."""
    spec = {"base": base, "token": token, "seed": seed, "scenario": name, "expect": list(expect), "mode": mode,
            "rate": rate, "concurrency": concurrency, "requests": requests, "duration": duration,
            "latencies": latencies, "keys": keys, "dpop": dpop}
    if warmup:
        load(env, dict(spec, mode="closed", requests=warmup, duration=30))
    return load(env, spec)


def dpop_token(base: str, seed: dict) -> str:
    """A DPoP-bound token of the keyed agent client: private_key_jwt and a proof (docs/reference/identity.md)."""
    from agp_client.keys import ClientKey

    key, url = ClientKey.from_jwk(seed["keyed_agent"]["private_jwk"]), base + "/oauth/token"
    client_id = seed["keyed_agent"]["client_id"]
    data = urllib.parse.urlencode({"grant_type": "client_credentials", "client_assertion": key.client_assertion(
        client_id=client_id, token_url=url),
        "client_assertion_type": "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"}).encode()
    request = urllib.request.Request(url, data=data, headers={"DPoP": key.dpop_proof(method="POST", url=url)})
    with urllib.request.urlopen(request, timeout=10) as response:
        body = json.load(response)
    if body.get("token_type") != "DPoP":
        raise SystemExit(f"the keyed agent got a {body.get('token_type')} token, not a DPoP one")
    return body["access_token"]


def combined(runs: list[dict]) -> dict:
    """Several runs of one scenario (``latencies`` kept) as one: requests and time summed,
    percentiles over every latency."""
    latencies = [x for run in runs for x in run["latencies"]]
    statuses: dict[str, int] = {}
    for run in runs:
        for key, value in run["statuses"].items():
            statuses[key] = statuses.get(key, 0) + value
    elapsed = sum(run["elapsed"] for run in runs)
    return {"requests": len(latencies), "elapsed": elapsed, "throughput": len(latencies) / elapsed,
            **percentiles(latencies), "statuses": statuses,
            "unexpected": [u for run in runs for u in run["unexpected"]], "started_at": runs[0]["started_at"],
            "rounds": [{"requests": run["requests"], "throughput": run["throughput"]} for run in runs]}


def operations_window(database_url: str, since: float) -> tuple[int, int, float, float]:
    """Operations created since ``since`` (epoch s): (count, succeeded, first started_at, last completed_at)."""
    import psycopg

    with psycopg.connect(database_url) as conn:
        total, done, first, last = conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE status = 'succeeded'), extract(epoch FROM min(started_at)), "
            "extract(epoch FROM max(completed_at)) FROM execution_operation WHERE created_at >= to_timestamp(%s)",
            [since]).fetchone()
    return total, done, float(first or 0), float(last or 0)


def operations_wait(database_url: str, since: float, expected: int, timeout: float = 600) -> tuple[float, float]:
    """Wait until the ``expected`` operations created since ``since`` all succeeded; (first start, last end)."""
    deadline = time.time() + timeout
    while True:
        total, done, first, last = operations_window(database_url, since)
        if total >= expected and done == total:
            return first, last
        if time.time() > deadline:
            raise SystemExit(f"(d): only {done} of {total} operations succeeded within {timeout:.0f} s")
        time.sleep(0.25)


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database-url", default="postgres://postgres@127.0.0.1:5432/agp_bench")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/8")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--web-workers", type=int, default=2)
    parser.add_argument("--web-threads", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=8, help="client connections for saturation runs")
    parser.add_argument("--worker-concurrency", type=int, default=os.cpu_count() or 1,
                        help="processes of the one Celery worker: one per core, Celery's own default "
                             "(scripts/serve: AGP_WORKER_CONCURRENCY)")
    parser.add_argument("--requests", type=int, default=4000, help="requests per scenario (at most)")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per scenario (at most)")
    parser.add_argument("--rounds", type=positive, default=2,
                        help="(a) and (b) saturated run in this many alternating rounds (a, b, a, b, ...), "
                             "so drift in the machine's speed reaches both: --requests is split between "
                             "the rounds, and each round may take up to --duration")
    parser.add_argument("--envelopes", type=int, default=2000, help="envelopes submitted in scenario (d)")
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--ledger-events", type=int, default=1_000_000)
    parser.add_argument("--writers", type=int, default=8, help="writers of scenario (h)")
    parser.add_argument("--scenarios", default="abcdefghi")
    parser.add_argument("--out", default=str(ROOT / "var" / "bench-results.json"))
    args = parser.parse_args()

    var_dir = ROOT / "var" / "bench"
    var_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="agp_project.settings.base", PYTHONPATH=str(ROOT),
               AGP_DATABASE_URL=args.database_url, AGP_BROKER_URL=args.redis_url, AGP_CACHE_URL=args.redis_url,
               AGP_CELERY_QUEUE="agp-bench", AGP_AUTH_SECRET=SECRET, AGP_CLIENT_ID="bench",
               AGP_CLIENT_SECRET="bench-secret", AGP_VAR_DIR=str(var_dir), AGP_LOG_LEVEL="WARNING",
               AGP_DEBUG="false", AGP_ALLOW_PRIVATE_URLS="1")  # (i)'s upstream MCP server is on loopback
    env.pop("AGP_OPA_URL", None)

    ensure_port_free(args.port)
    log(f"recreating {args.database_url} and flushing {args.redis_url}")
    recreate_database(args.database_url)
    flush_redis(args.redis_url)
    subprocess.run([PYTHON, "manage.py", "bootstrap", "-v", "0"], env=env, cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL)
    upstream = None
    seed_args = [str(args.tasks)]
    if "i" in args.scenarios:
        upstream_port = free_port()
        upstream = subprocess.Popen([PYTHON, str(ROOT / "examples" / "mcp" / "crm_server.py"), "--port",
                                     str(upstream_port)], cwd=ROOT, stdout=subprocess.DEVNULL,
                                    stderr=open(var_dir / "upstream-mcp.log", "wb"))  # noqa: SIM115
        wait_listening(upstream, upstream_port)
        seed_args += ["--mcp", f"http://127.0.0.1:{upstream_port}/mcp"]
    log(f"seeding through the services ({args.tasks} tasks, delegation tree of depth 6, 20 policy sets)")
    seed = run_json([PYTHON, "-m", "bench.seed", *seed_args], env)
    log(f"seeded in {seed['seconds']} s; VACUUM (ANALYZE) and CHECKPOINT")
    settle_database(args.database_url)

    results: dict[str, dict] = {}
    ensure_port_free(args.port)  # again: seeding took a while
    stack = Stack(env, args.port, args.web_workers, args.web_threads, var_dir, args.worker_concurrency)
    try:
        operator = stack.token()
        # What an agent platform sends: its agent client's token, bound to the agent and its tenant.
        agent = stack.token(AGENT_CLIENT, AGENT_SECRET)
        # The same agent with a key and a DPoP-bound token: (a) with DPoP, a fresh proof per request.
        bound = dpop_token(stack.base, seed)

        def scenario(name: str, expect: tuple[int, ...], *, mode="closed", rate=None, requests=None,
                     duration=None, concurrency=None, warmup=200, latencies=False, keys=True, dpop=False) -> dict:
            token = None if name.startswith("t") else bound if dpop else agent if name in AS_AGENT else operator
            return drive(env, stack.base, token, seed, name, expect, mode=mode, rate=rate,
                         concurrency=concurrency or args.concurrency, requests=requests or args.requests,
                         duration=duration or args.duration, warmup=warmup, latencies=latencies, keys=keys,
                         dpop=dpop)

        # (b)'s budget is a ratio to (a), and (a) with DPoP is compared with (a): the saturated
        # runs alternate, round by round, so a machine whose speed drifts (a VM's neighbours)
        # slows them alike.
        saturated = [key for key in ("a", "a_dpop", "b") if key[0] in args.scenarios]
        rounds = {key: [] for key in saturated}
        labels = {"a": "(a) GET /agp/tasks/{id}", "a_dpop": "(a) the same with a DPoP-bound token",
                  "b": "(b) validate-only POST /agp/action-envelopes, saturated"}
        for number in range(args.rounds):
            for key in saturated:
                log(f"{labels[key]}, round {number + 1}")
                rounds[key].append(scenario(key[0], (200,), requests=max(1, args.requests // args.rounds),
                                            warmup=200 if number == 0 else 0, latencies=True,
                                            dpop=key == "a_dpop"))
        results.update({key: combined(runs) for key, runs in rounds.items()})
        if "a" in args.scenarios:
            log("(a) the same, one client (the latency floor of an authenticated request)")
            results["a1"] = scenario("a", (200,), concurrency=1, requests=min(args.requests, 2000), warmup=0)
            log("(a) the same with DPoP, one client")
            results["a1_dpop"] = scenario("a", (200,), concurrency=1, requests=min(args.requests, 2000), warmup=0,
                                          dpop=True)
            log("POST /oauth/token: the bootstrap secret; then private_key_jwt with a DPoP proof")
            results["t"] = scenario("t", (200,), requests=min(args.requests, 2000))
            results["t_key"] = scenario("t_key", (200,), requests=min(args.requests, 2000))
            log("(a) the HTTP floor: gunicorn alone (no Django), one client")
            results["floor"] = http_floor(env, args, var_dir)
            log("(a) PostgreSQL from Python: SELECT 1 and a durable one-row INSERT")
            results["database_floor"] = database_floor(args.database_url)
        if "b" in args.scenarios:
            log("(b) the same without Idempotency-Key")
            results["b_nokey"] = scenario("b", (200,), requests=max(1, args.requests // args.rounds), keys=False)
            rate = results["b"]["throughput"] / 2
            log(f"(b) at half its saturation rate ({rate:.0f}/s)")
            results["b_half"] = scenario("b", (200,), mode="open", rate=rate,
                                         requests=int(rate * min(args.duration, 15)), warmup=0)
        if "c" in args.scenarios:
            log("(c) validate-only POST /agp/action-envelopes failing a check")
            results["c"] = scenario("c", (422,))
        if "d" in args.scenarios:
            # 1. Submitting while the worker executes: what a client sees end to end.
            log(f"(d) {args.envelopes} envelopes with Prefer: respond-async, executed as they arrive by one worker")
            since = time.time()
            overlapped = scenario("d", (202,), requests=args.envelopes, duration=300, concurrency=4, warmup=0)
            _, last = operations_wait(args.database_url, since, overlapped["requests"])
            overlapped["end_to_end_seconds"] = last - overlapped["started_at"]
            overlapped["executed_per_second"] = overlapped["requests"] / overlapped["end_to_end_seconds"]
            results["d_overlapped"] = overlapped
            # 2. The worker's own rate: a backlog submitted while it is stopped, then drained
            # by the one worker (first claim to last completion), with the web tier idle.
            log(f"(d) {args.envelopes} envelopes queued with the worker stopped, then drained by one worker")
            stack.worker_stop()
            since = time.time()
            submitted = scenario("d", (202,), requests=args.envelopes, duration=300, concurrency=4, warmup=0)
            stack.worker_start()
            first, last = operations_wait(args.database_url, since, submitted["requests"])
            submitted["drain_seconds"] = last - first
            submitted["executed_per_second"] = submitted["requests"] / submitted["drain_seconds"]
            results["d"] = submitted
        if "e" in args.scenarios:
            # The budget is the latency of one evaluation, so one client at a time (no queueing).
            log("(e) POST /agp/policy-evaluations, one client")
            results["e"] = scenario("e", (201,), concurrency=1, requests=min(args.requests, 2000))
            log("(e) engine alone")
            results["e_engine"] = run_json([PYTHON, "-m", "bench.engine", "20000"], env)
        if "f" in args.scenarios:
            log("(f) POST /agp/delegations at depth 6")
            results["f"] = scenario("f", (201,), requests=min(args.requests, 2000))
        if "i" in args.scenarios:
            log("(i) a tool call through the MCP gateway and directly to the upstream server, one client")
            results["i"] = run_json([PYTHON, "-m", "bench.gateway"], env, stdin=json.dumps({
                "base": stack.base, "gateway": seed["gateway"], "requests": min(args.requests, 1000),
                "rounds": args.rounds}))
            log("(i) the REST one call: POST /agp/action-envelopes without a decision, saturated")
            results["i_rest"] = scenario("i", (200,), requests=max(1, args.requests // args.rounds))
        results["memory"] = stack.memory()
        if "g" in args.scenarios:
            log(f"(g) extending the ledger to {args.ledger_events} events (COPY, real chain)")
            results["g_seed"] = run_json([PYTHON, "-m", "bench.ledger", "seed", str(args.ledger_events)], env)
            log(f"(g) seeded {results['g_seed']['added']} events in {results['g_seed']['seconds']} s; verifying")
            results["g"] = run_json([PYTHON, "-m", "bench.ledger", "verify"], env)
            if not results["g"]["verified"]:
                raise SystemExit(f"(g): the ledger did not verify: {results['g']}")
            log("(g) the same chain walked in Python (verify_in_python)")
            results["g_python"] = run_json([PYTHON, "-m", "bench.ledger", "verify-python"], env)
            log("(g) one process SHA-256-hashing the same events' bytes")
            results["g_hash"] = run_json([PYTHON, "-m", "bench.ledger", "hash"], env)
        if "h" in args.scenarios:
            log(f"(h) {args.writers} writers: durable one-row INSERTs, then ledger appends")
            results["h"] = run_json([PYTHON, "-m", "bench.appends", str(args.writers),
                                     str(min(args.duration, 10.0))], env)
    finally:
        results["memory_end"] = stack.memory()
        stack.stop()
        if upstream is not None:
            terminate(upstream)

    results["machine"] = machine()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    print(table(results))


if __name__ == "__main__":
    main()
