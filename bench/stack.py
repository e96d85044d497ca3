"""The benchmark's processes and servers: the stack under test, ports, databases, memory.

Used by ``python -m bench`` (bench/__main__.py) and the standalone scenario modules.
"""

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

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable


def log(message: str) -> None:
    print(f"==> {time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


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

    def token(self, client_id: str = "bench", secret: str = "bench-secret") -> str:
        """A token of the bootstrap operator, or of the client named."""
        data = urllib.parse.urlencode({"grant_type": "client_credentials", "client_id": client_id,
                                       "client_secret": secret}).encode()
        with urllib.request.urlopen(self.base + "/oauth/token", data=data, timeout=10) as response:
            return json.load(response)["access_token"]

    def stop(self) -> None:
        terminate(self.web, self.worker)


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
