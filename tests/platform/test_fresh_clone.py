"""The README's run command, from a fresh clone of this repository, with nothing configured."""

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from tests.platform.conftest import ROOT, clean_env, free_port

pytestmark = [pytest.mark.system, pytest.mark.embedded]


def session_processes(sid: int) -> dict[int, str]:
    """Every live process in session ``sid``: pid to command line."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.getsid(int(entry.name)) != sid:
                continue
            found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (ProcessLookupError, FileNotFoundError, PermissionError):
            continue
    return found


@pytest.fixture
def fresh_clone(tmp_path):
    target = tmp_path / "agp"
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(ROOT), str(target)], check=True,
                   capture_output=True, timeout=120)
    assert not (target / "var").exists() and not (target / ".venv").exists()
    return target


def test_the_run_command_serves_a_fresh_clone_within_60_seconds_and_stops_cleanly(fresh_clone, tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = tmp_path / "serve.log"
    # Nothing configured but the venv to reuse (so nothing is downloaded) and a free port.
    env = clean_env(AGP_VENV=sys.prefix, AGP_BIND=f"127.0.0.1:{port}")
    env.pop("PYTHONPATH", None)
    started = time.monotonic()
    with open(log_path, "wb") as log:
        serve = subprocess.Popen(["bash", "scripts/serve"], cwd=fresh_clone, env=env, stdin=subprocess.DEVNULL,
                                 stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        healthy_after = None
        while time.monotonic() - started < 60:
            assert serve.poll() is None, log_path.read_text()
            with contextlib.suppress(requests.RequestException):
                if requests.get(f"{url}/healthz", timeout=2).status_code == 200:
                    healthy_after = time.monotonic() - started
                    break
            time.sleep(0.25)
        assert healthy_after is not None, f"/healthz did not answer within 60 s:\n{log_path.read_text()}"

        # The Celery worker connected to its broker and consumes; serve printed its banner.
        markers = ("ready.", "beat: Starting", f"AGP is running at {url}")
        while time.monotonic() - started < 90 and not all(m in log_path.read_text() for m in markers):
            time.sleep(0.25)
        output = log_path.read_text()
        assert all(m in output for m in markers), output
        workers = [cmd for cmd in session_processes(serve.pid).values() if "celery" in cmd and " worker" in cmd]
        assert workers, session_processes(serve.pid)
        assert "authentication is off" in output

        # The embedded defaults live in the clone: a SQLite database and a SQLite broker file under var/.
        assert (fresh_clone / "var" / "agp.sqlite3").exists()
        assert (fresh_clone / "var" / "broker.sqlite3").exists()
        assert requests.get(f"{url}/readyz", timeout=10).json() == {
            "status": "ready", "checks": {"database": True, "broker": True}}

        body = json.dumps({"event_type": "client.smoke", "resource_type": "task", "resource_id": "t1"})
        headers = {"Content-Type": "application/json", "Idempotency-Key": "smoke-1"}
        first = requests.post(f"{url}/agp/ledger-events", data=body, headers=headers, timeout=10)
        again = requests.post(f"{url}/agp/ledger-events", data=body, headers=headers, timeout=10)
        assert first.status_code == 201, first.text
        assert (again.status_code, again.content, again.headers["Idempotent-Replayed"]) == (201, first.content,
                                                                                          "true")
        assert requests.get(f"{url}/agp/ledger-events/verify", timeout=10).json()["verified"] is True

        # A freeze's enforcement goes through the control queue, which the worker consumes
        # on the embedded broker too.
        freeze = requests.post(f"{url}/agp/freezes", json={"target_type": "agent", "target_id": "agent-smoke",
                                                            "reason": "smoke"}, timeout=10)
        assert freeze.status_code == 201, freeze.text
        enforced = re.compile(r"agp\.enforce_freeze\[[^\]]+\] succeeded")
        while time.monotonic() - started < 150 and not enforced.search(log_path.read_text()):
            time.sleep(0.25)
        assert enforced.search(log_path.read_text()), log_path.read_text()
    finally:
        serve.send_signal(signal.SIGTERM)
        try:
            code = serve.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(serve.pid, signal.SIGKILL)
            raise
    assert code == 0, log_path.read_text()
    deadline = time.monotonic() + 30
    while session_processes(serve.pid) and time.monotonic() < deadline:
        time.sleep(0.25)
    assert session_processes(serve.pid) == {}, "gunicorn or celery outlived scripts/serve"
    print(f"fresh clone answered /healthz after {healthy_after:.1f} s")
