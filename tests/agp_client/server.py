"""A real gunicorn server for the client-library tests, and a fault-injecting TCP proxy.

The server runs ``agp_project.wsgi`` under gunicorn in a subprocess, with the test settings
(the production settings with a fast password hasher: the bootstrap client's secret check
must not cost a second of PBKDF2 when tokens live two seconds). On PostgreSQL it uses the
test database (``connection.settings_dict["NAME"]``), so the tests must commit
(``transactional_db``); on SQLite, whose test database lives in the test process's memory,
it uses a file copy of it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import requests
from django.db import connection

REPO = Path(__file__).resolve().parents[2]
READY_TIMEOUT = 60


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def database_url(workdir: Path) -> str:
    """The server's ``AGP_DATABASE_URL``: the test database on PostgreSQL; on SQLite a file
    copy of the (in-memory, migrated) test database, made with SQLite's backup API."""
    if connection.vendor == "postgresql":
        db = connection.settings_dict
        auth = quote(db.get("USER") or "postgres", safe="")
        if db.get("PASSWORD"):
            auth += ":" + quote(db["PASSWORD"], safe="")
        return f"postgres://{auth}@{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}/{db['NAME']}"
    path = workdir / "server.sqlite3"
    connection.ensure_connection()
    target = sqlite3.connect(path)
    try:
        connection.connection.backup(target)
    finally:
        target.close()
    return f"sqlite:///{path}"


def _server_env(workdir: Path, db_url: str, extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGP_") and k != "DJANGO_SETTINGS_MODULE"}
    env.update({"DJANGO_SETTINGS_MODULE": "agp_project.settings.test", "AGP_DATABASE_URL": db_url,
                "AGP_VAR_DIR": str(workdir), "AGP_LOG_LEVEL": "WARNING", **extra})
    return env


@dataclass
class LiveServer:
    url: str
    workdir: Path
    process: subprocess.Popen
    log_path: Path
    signing_key: object = None

    @classmethod
    def start(cls, workdir: Path, env: dict[str, str], db_url: str, *, workers: int = 2,
              threads: int = 1) -> LiveServer:
        """gunicorn with ``workers`` processes; ``threads`` > 1 runs them as scripts/serve does
        (gthread). The checkout's gunicorn.conf.py (request limits) applies either way."""
        workdir.mkdir(parents=True, exist_ok=True)
        port = free_port()
        log_path = workdir / "gunicorn.log"
        log = open(log_path, "wb")  # noqa: SIM115 - closed by the child's exit
        worker_class = ["--worker-class", "gthread", "--threads", str(threads)] if threads > 1 else [
            "--worker-class", "sync"]
        process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "agp_project.wsgi:application", "-c", str(REPO / "gunicorn.conf.py"),
             "--bind", f"127.0.0.1:{port}", "--workers", str(workers), *worker_class, "--timeout", "30",
             "--graceful-timeout", "2"],
            cwd=REPO, env=_server_env(workdir, db_url, env), stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)
        server = cls(url=f"http://127.0.0.1:{port}", workdir=workdir, process=process, log_path=log_path)
        server.wait_ready()
        return server

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"gunicorn exited with {self.process.returncode}:\n{self.log()}")
            with contextlib.suppress(requests.RequestException):
                if requests.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"gunicorn did not answer /healthz within {READY_TIMEOUT}s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-5000:]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)  # gunicorn's quick shutdown of arbiter and workers
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


@dataclass
class SeenRequest:
    method: str
    path: str
    headers: dict[str, str]
    upstream_status: int | None = None


@dataclass
class FaultProxy:
    """A TCP proxy in a thread between the client and the server.

    Every connection carries one HTTP request (gunicorn's sync workers close the connection
    after each response). For the first ``faults`` requests whose request line starts with
    ``match``, the proxy injects a fault instead of relaying:

    - ``drop_response``: forwards the request, lets the server answer (so the work is done),
      then closes the client's connection without the response;
    - ``status``: answers ``canned`` (raw HTTP bytes) without contacting the server.
    """

    upstream_port: int
    mode: str = "drop_response"
    match: bytes = b"POST /agp/"
    faults: int = 1
    canned: bytes = b""
    seen: list[SeenRequest] = field(default_factory=list)

    def __post_init__(self):
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(32)
        self.port = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept_loop, daemon=True).start()

    def close(self) -> None:
        self._closed = True
        self._listener.close()

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _take_fault(self, request: bytes) -> bool:
        with self._lock:
            if self.faults > 0 and request.startswith(self.match):
                self.faults -= 1
                return True
            return False

    def _handle(self, conn: socket.socket) -> None:
        conn.settimeout(15)
        try:
            request = _read_request(conn)
            if not request:
                return
            seen = _parse_request(request)
            with self._lock:
                self.seen.append(seen)
            fault = self._take_fault(request)
            if fault and self.mode == "status":
                conn.sendall(self.canned)
                return
            response = _exchange(self.upstream_port, request)
            seen.upstream_status = _status_of(response)
            if fault:  # drop_response: the server did the work; the client never hears of it
                return
            conn.sendall(response)
        finally:
            conn.close()


def _read_request(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


def _parse_request(request: bytes) -> SeenRequest:
    head = request.partition(b"\r\n\r\n")[0].decode("latin-1")
    lines = head.split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return SeenRequest(method=method, path=path, headers=headers)


def _exchange(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=15) as upstream:
        upstream.sendall(request)
        chunks = []
        while True:
            chunk = upstream.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks)


def _status_of(response: bytes) -> int | None:
    try:
        return int(response.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return None
