"""Redis for the tests: private redis-server processes, and the one database the tests own.

Tests reach Redis only through the ``redis_url`` fixture (tests/conftest.py), chosen by
one setting, ``AGP_REDIS_TEST_URL``:

- unset (the README's ``scripts/test``): the session starts a redis-server of its own on a
  free loopback port, keeping nothing on disk, uses its database 0 and stops it at the end;
- set: the run owns exactly that database (the URL's ``/N``, 0 if absent) of that
  server, and touches no other. Before any test runs it remembers the keys there, and at
  the end it deletes every key that appeared during the run, so the database is left as
  the run found it (tests/conftest.py's session hooks; with pytest-xdist the controller
  does both, around all its processes, which share the database). One run at a time per
  database.

Tests that need a whole server (to kill it, or to see who else is connected) start a
``RedisServer`` of their own. ``redis-server`` comes from Debian's package, which
``scripts/test`` installs when it is missing (``scripts/install-redis``).
"""

import contextlib
import shutil
import socket
import subprocess
import time
from pathlib import Path
from urllib.parse import urlsplit

import redis

MISSING = ("redis-server is not installed: scripts/test installs it (scripts/install-redis), "
           "or set AGP_REDIS_TEST_URL to a Redis database the tests may own")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class RedisServer:
    """A redis-server process of the tests' own on a loopback port, in memory only."""

    def __init__(self, workdir: Path):
        self.workdir = Path(workdir)
        self.port: int | None = None
        self.process: subprocess.Popen | None = None

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def start(self) -> "RedisServer":
        """Start on a free port (again on the same port after ``kill``); wait until it answers."""
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError(MISSING)
        self.workdir.mkdir(parents=True, exist_ok=True)
        # A free port may be taken by another process before the server binds it: try another.
        fixed = self.port is not None
        for _ in range(1 if fixed else 5):
            if not fixed:
                self.port = _free_port()
            self.process = subprocess.Popen(
                [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                 "--dir", str(self.workdir), "--logfile", str(self.workdir / f"redis-{self.port}.log")],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if self._wait_until_it_answers():
                return self
            self.kill()
        raise RuntimeError(f"redis-server did not start on port {self.port}: see {self.workdir}")

    def _wait_until_it_answers(self, timeout: float = 15.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            try:
                with redis.Redis.from_url(self.url(), socket_timeout=0.5) as client:
                    # This server, not another one that holds the port.
                    return client.info("server")["process_id"] == self.process.pid
            except redis.RedisError:
                time.sleep(0.05)
        return False

    def kill(self) -> None:
        """SIGKILL: a crash, the data gone with it."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()


def database_of(url: str) -> int:
    path = urlsplit(url).path.strip("/")
    return int(path) if path else 0


class OwnedDatabase:
    """The Redis database the test session owns: remembers what was there, removes what it added."""

    def __init__(self, url: str):
        self.url = url
        self.db = database_of(url)
        with redis.Redis.from_url(url) as client:
            client.ping()
            self.found = set(client.scan_iter(count=1000))

    def leave_as_found(self) -> None:
        with redis.Redis.from_url(self.url) as client:
            added = [key for key in client.scan_iter(count=1000) if key not in self.found]
            for start in range(0, len(added), 500):
                client.delete(*added[start:start + 500])


@contextlib.contextmanager
def session_redis(workdir: Path, configured: str | None):
    """The session's Redis URL: ``configured`` (AGP_REDIS_TEST_URL, whose database the run's
    ``OwnedDatabase`` leaves as found) or a private server's."""
    if configured:
        yield configured
        return
    server = RedisServer(workdir).start()
    try:
        yield server.url(0)
    finally:
        server.stop()
