"""Fixtures of the platform tests: real gunicorn servers, envelope checks."""

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import pytest
import requests
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def clean_env(**overrides: str) -> dict[str, str]:
    """The environment of a child process: this one's, less every AGP_* and Django setting."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGP_") and k != "DJANGO_SETTINGS_MODULE"}
    env.update(overrides)
    return env


def test_database_url() -> str:
    """A URL for the database this test runs on (pytest-django's test database)."""
    s = connection.settings_dict
    user = quote(s["USER"] or "", safe="")
    password = f":{quote(s['PASSWORD'], safe='')}" if s["PASSWORD"] else ""
    return f"postgres://{user}{password}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


test_database_url.__test__ = False  # not a test, despite its name


def assert_envelope(response, status: int, code: str, *, retryable: bool | None = None) -> dict:
    """The body (docs/reference/api.md): exactly ``{"error": {"code", "message", "retryable", "details"}}``, JSON."""
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert set(error) == {"code", "message", "retryable", "details"}
    assert error["code"] == code
    assert isinstance(error["message"], str) and error["message"]
    assert isinstance(error["details"], dict)
    assert isinstance(error["retryable"], bool)
    if retryable is not None:
        assert error["retryable"] is retryable
    return error


class Server:
    def __init__(self, process: subprocess.Popen, url: str, log: Path):
        self.process = process
        self.url = url
        self.log = log

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)  # gunicorn's quick shutdown
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, 9)
                self.process.wait(timeout=10)


@pytest.fixture
def run_server(tmp_path):
    """Start a real gunicorn server of this checkout with the given AGP_* settings.

    Returns its base URL once ``/healthz`` answers; every server is stopped at teardown
    (before pytest-django drops the test database its connections may hold).
    """
    servers: list[Server] = []

    def _run(settings: dict[str, str], *, workers: int = 1, threads: int = 4, bootstrap: bool = False) -> Server:
        port = free_port()
        var_dir = tmp_path / f"var-{port}"
        log = tmp_path / f"gunicorn-{port}.log"
        env = clean_env(PYTHONPATH=str(ROOT), DJANGO_SETTINGS_MODULE="agp_project.settings.base",
                        AGP_VAR_DIR=str(var_dir), **settings)
        if bootstrap:  # migrate the server's own database first, as scripts/serve does
            subprocess.run([sys.executable, "manage.py", "bootstrap"], cwd=ROOT, env=env, check=True,
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=120)
        with open(log, "wb") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "gunicorn", "agp_project.wsgi:application", "--bind", f"127.0.0.1:{port}",
                 "--workers", str(workers), "--worker-class", "gthread", "--threads", str(threads),
                 "--timeout", "60", "--no-control-socket"],
                cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True)
        server = Server(process, f"http://127.0.0.1:{port}", log)
        servers.append(server)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert process.poll() is None, f"gunicorn exited: {log.read_text()}"
            with contextlib.suppress(requests.RequestException):
                if requests.get(f"{server.url}/healthz", timeout=5).status_code == 200:
                    return server
            time.sleep(0.1)
        raise AssertionError(f"gunicorn did not answer within 30 s: {log.read_text()}")

    yield _run
    for server in servers:
        server.stop()
