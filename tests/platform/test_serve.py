"""scripts/serve on an address that is taken: it refuses, and never mistakes another server for its own."""

import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.platform.conftest import ROOT, clean_env, free_port
from tests.platform.test_fresh_clone import session_processes

pytestmark = [pytest.mark.system, pytest.mark.embedded]


class Impostor(BaseHTTPRequestHandler):
    """Another service that happens to answer /healthz like AGP does."""

    def do_GET(self):  # noqa: N802 - http.server's name
        body = json.dumps({"status": "ok"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def impostor():
    """``start(port)`` runs another HTTP server on 127.0.0.1:port until the test ends."""
    servers = []

    def start(port: int) -> ThreadingHTTPServer:
        server = ThreadingHTTPServer(("127.0.0.1", port), Impostor)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def serve(tmp_path, port: int) -> subprocess.Popen:
    env = clean_env(AGP_VENV=sys.prefix, AGP_BIND=f"127.0.0.1:{port}", AGP_VAR_DIR=str(tmp_path / "var"))
    env.pop("PYTHONPATH", None)
    return subprocess.Popen(["bash", "scripts/serve"], cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def assert_nothing_left(process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 30
    while session_processes(process.pid) and time.monotonic() < deadline:
        time.sleep(0.25)
    assert session_processes(process.pid) == {}, "gunicorn or celery outlived scripts/serve"


def test_it_refuses_a_taken_port_before_doing_anything(tmp_path, impostor):
    port = free_port()
    impostor(port)

    process = serve(tmp_path, port)
    output, _ = process.communicate(timeout=60)

    assert process.returncode == 1, output
    assert (f"scripts/serve: 127.0.0.1:{port} is already in use by another program: stop it, or choose "
            f"another address, e.g. AGP_BIND=127.0.0.1:{port + 1}") in output
    assert "AGP is running" not in output
    assert "migrating" not in output and not (tmp_path / "var" / "agp.sqlite3").exists()
    assert_nothing_left(process)


def test_it_stops_when_the_server_answering_its_health_check_is_not_its_own(tmp_path, impostor):
    port = free_port()
    process = serve(tmp_path, port)
    lines = []
    for line in process.stdout:  # the address was free when it checked; now it migrates
        lines.append(line)
        if line.startswith("==> migrating"):
            break
    impostor(port)  # another server takes the port before gunicorn binds it

    rest, _ = process.communicate(timeout=120)
    output = "".join(lines) + rest

    assert process.returncode == 1, output
    assert (f"scripts/serve: another server answers at http://127.0.0.1:{port}, not this AGP: 127.0.0.1:{port} "
            "is taken. Stop it, or choose another address with AGP_BIND.") in output
    assert "AGP is running" not in output
    assert_nothing_left(process)
