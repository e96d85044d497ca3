"""``python -m bench`` (or ``bench/run``): the reproducible benchmark of the governance hot paths.

1. Recreates the PostgreSQL database ``agp_bench`` (``--database-url``) and empties Redis
   db 8 (``--redis-url``, broker and cache), migrates and bootstraps (a client with every
   scope; ``AGP_AUTH_SECRET`` is set, so every scenario is authenticated).
2. Seeds through the services (``bench/seed.py``): thousands of tasks, a delegation tree
   of depth 6, 20 policy sets with real Rego, a world in which an envelope passes all
   ten checks; then ``VACUUM (ANALYZE)`` and ``CHECKPOINT``, so no statistics are missing
   and no autovacuum or checkpoint is left over from the seeding.
3. Starts the service as production runs it: gunicorn (gthread, ``--web-workers`` x
   ``--web-threads``) and one Celery worker (``--worker-concurrency`` processes, one per core
   by default, as Celery itself defaults) with beat, on loopback.
4. Drives each scenario from a separate load-generator process (``bench/load.py``),
   bounded in requests and seconds, after a warm-up, and prints one table; the figures
   also go to ``--out`` as JSON.

Scenarios: (a) GET /agp/tasks/{id} (baseline), saturated and with one client, and the
floors under it: gunicorn alone serving ``bench/floor_app.py`` with one client, and
PostgreSQL's round trip and durable commit from Python; (b) validate-only POST
/agp/action-envelopes passing all checks, saturated, then at half its saturation rate
((a) and (b) saturated alternate in ``--rounds`` rounds, since (b)'s budget is a ratio to (a));
(c) the same failing a check; (d) respond-async submission and end-to-end completion with
the noop connector and one worker: submitted while the worker executes, then a backlog
submitted with the worker stopped and drained by it (its own rate); (e) POST /agp/policy-evaluations (and the engine
alone); (f) POST /agp/delegations at depth 6; (g) verify_ledger over 1,000,000 events.
"""

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

from bench import floor_app
from bench.load import percentiles

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
SECRET = "bench-auth-secret-0123456789abcdef0123456789abcdef"


def log(message: str) -> None:
    print(f"==> {message}", file=sys.stderr, flush=True)


def run_json(args: list[str], env: dict, stdin: str | None = None, timeout: float = 1800) -> dict:
    done = subprocess.run(args, env=env, cwd=ROOT, input=stdin, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def recreate_database(url: str) -> None:
    import psycopg

    parts = urllib.parse.urlsplit(url)
    name = parts.path.lstrip("/")
    admin = parts._replace(path="/postgres").geturl()
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def settle_database(url: str) -> None:
    """After seeding, before any measurement: ``VACUUM (ANALYZE)``, so the statements are
    planned on the seeded tables' statistics and no autovacuum is left over from the
    seeding; then ``CHECKPOINT``, so the seeding's dirty pages are written now rather than
    by a checkpoint during a scenario (the scenarios' own writes may still start both).
    ``CHECKPOINT`` needs a superuser or ``pg_checkpoint``: without, it is skipped and said."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE)")
        try:
            conn.execute("CHECKPOINT")
        except psycopg.errors.InsufficientPrivilege:
            log("CHECKPOINT skipped: the database user may not run it")


def flush_redis(url: str) -> None:
    """Empty the benchmark's Redis database; exit if another client uses it: a Celery worker
    left from another run would take the scenarios' messages from the stack's worker."""
    import redis

    client = redis.Redis.from_url(url)
    database, own = client.connection_pool.connection_kwargs.get("db", 0), client.client_id()
    others = [c for c in client.client_list() if int(c.get("db", -1)) == database and int(c["id"]) != own]
    if others:
        raise SystemExit(f"{len(others)} other client(s) use {url} ({others[0].get('addr')}, "
                         f"{others[0].get('cmd')}): stop them first, or pass --redis-url")
    client.flushdb()


def children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


def memory(pid: int) -> tuple[float, float]:
    """(current, peak) resident set size of one process, in MB (``VmRSS``, ``VmHWM``)."""
    values = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(("VmRSS:", "VmHWM:")):
                key, amount, _unit = line.split()
                values[key] = int(amount) / 1024
    except OSError:
        return 0.0, 0.0
    return values.get("VmRSS:", 0.0), values.get("VmHWM:", 0.0)


def gunicorn(app: str, env: dict, port: int, workers: int, threads: int, log_file: Path) -> subprocess.Popen:
    """gunicorn serving ``app`` on loopback as scripts/serve runs it (gthread)."""
    return subprocess.Popen(
        [str(Path(PYTHON).parent / "gunicorn"), app, "--bind", f"127.0.0.1:{port}",
         "--workers", str(workers), "--worker-class", "gthread", "--threads", str(threads),
         "--timeout", "120", "--graceful-timeout", "30", "--no-control-socket", "--error-logfile",
         str(log_file)], env=env, cwd=ROOT)


def terminate(*processes: subprocess.Popen) -> None:
    """SIGTERM (a graceful stop) to each process still running, then SIGKILL to any not gone in 30 s."""
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def ensure_port_free(port: int) -> None:
    """Exit unless nothing listens on ``port``: a server left from another run would answer
    in the stack's place while its gunicorn retries the bind, and be measured instead."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gunicorn binds: TIME_WAIT is no obstacle
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            raise SystemExit(f"port {port} is in use ({exc.strerror}): stop what listens there, "
                             "or pass --port") from None


def wait_answering(process: subprocess.Popen, url: str) -> None:
    for _ in range(300):
        try:
            urllib.request.urlopen(url, timeout=1)
            return
        except OSError:
            if process.poll() is not None:
                raise SystemExit("gunicorn exited before answering") from None
            time.sleep(0.2)
    raise SystemExit(f"gunicorn did not answer {url} within 60 s")


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


class Stack:
    """gunicorn + one Celery worker, started like scripts/serve starts them."""

    def __init__(self, env: dict, port: int, web_workers: int, web_threads: int, var_dir: Path,
                 worker_concurrency: int = 1):
        self.env, self.port, self.var_dir = env, port, var_dir
        self.worker_concurrency = worker_concurrency
        self.web = gunicorn("agp_project.wsgi:application", env, port, web_workers, web_threads,
                            var_dir / "gunicorn.log")
        self.worker = None
        self.worker_start()
        self.base = f"http://127.0.0.1:{port}"
        wait_answering(self.web, self.base + "/healthz")
        self.peak = {"web": 0.0, "worker": 0.0}

    def worker_start(self) -> None:
        self.worker = subprocess.Popen(
            [str(Path(PYTHON).parent / "celery"), "-A", "agp_project", "worker", "-B",
             "--concurrency", str(self.worker_concurrency),
             "--schedule", str(self.var_dir / "celerybeat-schedule"), "--loglevel", "WARNING",
             "--logfile", str(self.var_dir / "worker.log")], env=self.env, cwd=ROOT)

    def worker_stop(self) -> None:
        """Warm shutdown: the messages it has not taken stay in the broker."""
        self.worker.send_signal(signal.SIGTERM)
        self.worker.wait(timeout=60)

    def processes(self) -> dict[str, list[int]]:
        return {"web": children(self.web.pid), "worker": [self.worker.pid, *children(self.worker.pid)]}

    def memory(self) -> dict[str, dict[str, float]]:
        """Per role: the largest current and peak RSS over its processes (MB)."""
        out = {}
        for role, pids in self.processes().items():
            figures = [memory(pid) for pid in pids]
            out[role] = {"rss": max((f[0] for f in figures), default=0.0),
                         "peak": max((f[1] for f in figures), default=0.0)}
        return out

    def token(self) -> str:
        data = urllib.parse.urlencode({"grant_type": "client_credentials", "client_id": "bench",
                                       "client_secret": "bench-secret"}).encode()
        with urllib.request.urlopen(self.base + "/oauth/token", data=data, timeout=10) as response:
            return json.load(response)["access_token"]

    def stop(self) -> None:
        terminate(self.web, self.worker)


def load(env: dict, spec: dict) -> dict:
    result = run_json([PYTHON, "-m", "bench.load"], env, stdin=json.dumps(spec))
    bad = {k: v for k, v in result["statuses"].items() if not k.isdigit() or int(k) not in spec["expect"]}
    if bad:
        raise SystemExit(f"scenario {spec['scenario']}: unexpected answers {bad}: {result['unexpected']}")
    return result


def drive(env: dict, base: str, token: str | None, seed: dict, name: str, expect: tuple[int, ...], *,
          concurrency: int, requests: int, duration: float, mode: str = "closed", rate: float | None = None,
          warmup: int = 200, latencies: bool = False) -> dict:
    """Scenario ``name`` against ``base`` from the load generator: ``warmup`` requests in a
    closed loop first (their figures dropped), then the measured run (with every latency
    when ``latencies``)."""
    spec = {"base": base, "token": token, "seed": seed, "scenario": name, "expect": list(expect), "mode": mode,
            "rate": rate, "concurrency": concurrency, "requests": requests, "duration": duration,
            "latencies": latencies}
    if warmup:
        load(env, dict(spec, mode="closed", requests=warmup, duration=30))
    return load(env, spec)


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
    parser.add_argument("--scenarios", default="abcdefg")
    parser.add_argument("--out", default=str(ROOT / "var" / "bench-results.json"))
    args = parser.parse_args()

    var_dir = ROOT / "var" / "bench"
    var_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="agp_project.settings.base", PYTHONPATH=str(ROOT),
               AGP_DATABASE_URL=args.database_url, AGP_BROKER_URL=args.redis_url, AGP_CACHE_URL=args.redis_url,
               AGP_CELERY_QUEUE="agp-bench", AGP_AUTH_SECRET=SECRET, AGP_CLIENT_ID="bench",
               AGP_CLIENT_SECRET="bench-secret", AGP_VAR_DIR=str(var_dir), AGP_LOG_LEVEL="WARNING",
               AGP_DEBUG="false")
    env.pop("AGP_OPA_URL", None)

    ensure_port_free(args.port)
    log(f"recreating {args.database_url} and flushing {args.redis_url}")
    recreate_database(args.database_url)
    flush_redis(args.redis_url)
    subprocess.run([PYTHON, "manage.py", "bootstrap", "-v", "0"], env=env, cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL)
    log(f"seeding through the services ({args.tasks} tasks, delegation tree of depth 6, 20 policy sets)")
    seed = run_json([PYTHON, "-m", "bench.seed", str(args.tasks)], env)
    log(f"seeded in {seed['seconds']} s; VACUUM (ANALYZE) and CHECKPOINT")
    settle_database(args.database_url)

    results: dict[str, dict] = {}
    ensure_port_free(args.port)  # again: seeding took a while
    stack = Stack(env, args.port, args.web_workers, args.web_threads, var_dir, args.worker_concurrency)
    try:
        token = stack.token()

        def scenario(name: str, expect: tuple[int, ...], *, mode="closed", rate=None, requests=None,
                     duration=None, concurrency=None, warmup=200, latencies=False) -> dict:
            return drive(env, stack.base, token, seed, name, expect, mode=mode, rate=rate,
                         concurrency=concurrency or args.concurrency, requests=requests or args.requests,
                         duration=duration or args.duration, warmup=warmup, latencies=latencies)

        # (b)'s budget is a ratio to (a): both saturated runs alternate, round by round, so a
        # machine whose speed drifts (a VM's neighbours) slows both alike.
        saturated = [key for key in "ab" if key in args.scenarios]
        rounds = {key: [] for key in saturated}
        for number in range(args.rounds):
            for key in saturated:
                log(f"(a) GET /agp/tasks/{{id}}, round {number + 1}" if key == "a" else
                    f"(b) validate-only POST /agp/action-envelopes, saturated, round {number + 1}")
                rounds[key].append(scenario(key, (200,), requests=max(1, args.requests // args.rounds),
                                            warmup=200 if number == 0 else 0, latencies=True))
        results.update({key: combined(runs) for key, runs in rounds.items()})
        if "a" in args.scenarios:
            log("(a) the same, one client (the latency floor of an authenticated request)")
            results["a1"] = scenario("a", (200,), concurrency=1, requests=min(args.requests, 2000), warmup=0)
            log("(a) the HTTP floor: gunicorn alone (no Django), one client")
            results["floor"] = http_floor(env, args, var_dir)
            log("(a) PostgreSQL from Python: SELECT 1 and a durable one-row INSERT")
            results["database_floor"] = database_floor(args.database_url)
        if "b" in args.scenarios:
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
        results["memory"] = stack.memory()
        if "g" in args.scenarios:
            log(f"(g) extending the ledger to {args.ledger_events} events (COPY, real chain)")
            results["g_seed"] = run_json([PYTHON, "-m", "bench.ledger", "seed", str(args.ledger_events)], env)
            log(f"(g) seeded {results['g_seed']['added']} events in {results['g_seed']['seconds']} s; verifying")
            results["g"] = run_json([PYTHON, "-m", "bench.ledger", "verify"], env)
            if not results["g"]["verified"]:
                raise SystemExit(f"(g): the ledger did not verify: {results['g']}")
    finally:
        results["memory_end"] = stack.memory()
        stack.stop()

    results["machine"] = machine()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    print(table(results))


def machine() -> dict:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), "?")
    mem_kb = int(next(line.split()[1] for line in Path("/proc/meminfo").read_text().splitlines()
                      if line.startswith("MemTotal")))
    from bench.policy_eval import calibration_us

    calibration = calibration_us()
    return {"nproc": os.cpu_count(), "cpu": model, "memory_gb": round(mem_kb / 1024 / 1024, 1),
            "python": sys.version.split()[0], "load_average": os.getloadavg()[0],
            "calibration_us": round(calibration, 1)}


def table(results: dict) -> str:
    rows = []

    def http_row(key, label, budget=""):
        r = results.get(key)
        if r:
            rows.append((label, f"{r['requests']}", f"{r['throughput']:.0f}/s", f"{r['p50']:.1f}", f"{r['p95']:.1f}",
                         f"{r['p99']:.1f}", budget))

    base = results.get("a", {}).get("throughput")
    http_row("a", "(a) GET /agp/tasks/{id} (baseline)")
    http_row("a1", "(a) the same, 1 client")
    http_row("floor", "(a) gunicorn alone (no Django), 1 client")
    if "b" in results and base:
        http_row("b", "(b) validate envelope, passes",
                 f">=40% of (a): {results['b']['throughput'] / base:.0%}")
    if "b_half" in results:
        http_row("b_half", "(b) at half its saturation rate", f"p99 < 25 ms: {results['b_half']['p99']:.1f}")
    http_row("c", "(c) validate envelope, fails")
    if "d" in results:
        d = results["d"]
        http_row("d", "(d) submit respond-async (202)")
        rows.append(("(d) executed by 1 worker", f"{d['requests']}", f"{d['executed_per_second']:.0f}/s", "", "", "",
                     f">=150/s: drained in {d['drain_seconds']:.1f} s"))
    if "d_overlapped" in results:
        d = results["d_overlapped"]
        rows.append(("(d) submitted and executed together", f"{d['requests']}", f"{d['executed_per_second']:.0f}/s",
                     "", "", "", f"last completion {d['end_to_end_seconds']:.1f} s after the first submission"))
    if "e" in results:
        http_row("e", "(e) POST /agp/policy-evaluations, 1 client", f"p50 < 2 ms: {results['e']['p50']:.2f}")
    if "e_engine" in results:
        w = results["e_engine"]["wall"]
        rows.append(("(e) engine alone (us)", f"{w['n']}", f"{1e6 / w['mean']:.0f}/s", f"{w['p50']:.0f}us",
                     f"{w['p95']:.0f}us", f"{w['p99']:.0f}us", f"p50 < 100 us: {w['p50']:.0f}"))
    http_row("f", "(f) POST /agp/delegations, depth 6")
    if "g" in results:
        g = results["g"]
        rows.append(("(g) verify_ledger", f"{g['events']}", f"{g['events_per_second']:.0f} ev/s", "", "", "",
                     f">=200,000/s in {g['seconds']:.1f} s"))
    header = ("scenario", "n", "throughput", "p50 ms", "p95 ms", "p99 ms", "budget: measured")
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    lines = [" | ".join(str(c).ljust(w) for c, w in zip(header, widths, strict=True)),
             "-+-".join("-" * w for w in widths)]
    lines += [" | ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    mem = results.get("memory_end") or {}
    m = results.get("machine", {})
    lines.append("")
    lines.append(f"peak RSS: web worker {mem.get('web', {}).get('peak', 0):.0f} MB (now "
                 f"{mem.get('web', {}).get('rss', 0):.0f} MB; budget < 200 MB), Celery worker "
                 f"{mem.get('worker', {}).get('peak', 0):.0f} MB (now {mem.get('worker', {}).get('rss', 0):.0f} MB)")
    db = results.get("database_floor")
    if db:
        lines.append(f"PostgreSQL from Python: SELECT 1 {db['round_trip_ms']:.3f} ms, a durable one-row INSERT "
                     f"{db['durable_insert_ms']:.3f} ms (medians)")
    lines.append(f"machine: {m.get('nproc')} CPUs, {m.get('cpu')}, {m.get('memory_gb')} GB, Python {m.get('python')}, "
                 f"load average {m.get('load_average', 0):.2f}, calibration sum(range(1000)) = "
                 f"{m.get('calibration_us')} us (compare within one interpreter only)")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
