"""The README's quick start, run as a newcomer runs it: scripts/serve, the curl lines, and
the "first governed action" walkthrough against the quick-start server. Also what that
server logs: no warning on a clean start, nothing from idle background work."""

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

from tests.platform.conftest import ROOT, clean_env, free_port

README = (ROOT / "README.md").read_text()
DOCUMENTED_URL = "http://127.0.0.1:8000"


def section(title: str) -> str:
    return README.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def code_blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


def commands(block: str) -> list[list[str]]:
    """The block's commands (continuation lines joined, comments dropped), in paragraphs."""
    paragraphs = []
    for paragraph in block.replace("\\\n", " ").strip().split("\n\n"):
        lines = [re.sub(r"\s+#.*$", "", line).strip() for line in paragraph.splitlines()]
        paragraphs.append([line for line in lines if line])
    return paragraphs


class Served:
    """``scripts/serve`` (or a README line running it) on a free port, its output in a file."""

    def __init__(self, tmp: Path, command: str, **env: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tmp / "serve.log"
        environment = clean_env(AGP_VENV=sys.prefix, AGP_BIND=f"127.0.0.1:{self.port}",
                                AGP_VAR_DIR=str(tmp / "var"), **env)
        environment.pop("PYTHONPATH", None)
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen(["bash", "-c", command], cwd=ROOT, env=environment,
                                            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                            start_new_session=True)
        deadline = time.monotonic() + 120
        while not all(marker in self.output() for marker in (f"AGP is running at {self.url}", " ready.")):
            assert self.process.poll() is None, self.output()
            assert time.monotonic() < deadline, f"not running after 120 s:\n{self.output()}"
            time.sleep(0.2)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)


def run(command: str, served: Served) -> str:
    result = subprocess.run(["bash", "-c", command.replace(DOCUMENTED_URL, served.url)], capture_output=True,
                            text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, (command, result.stdout, result.stderr)
    return result.stdout


@pytest.fixture(scope="module")
def quick_start(tmp_path_factory):
    """The README's ``scripts/serve``, on its defaults; beat's sweeps every second."""
    served = Served(tmp_path_factory.mktemp("quick-start"), "scripts/serve",
                    AGP_OUTBOX_SWEEP_SECONDS="1", AGP_RECOVER_OPERATIONS_SECONDS="1")
    yield served
    served.stop()


def test_the_first_governed_action_runs_against_the_quick_start_server(quick_start, tmp_path):
    [example] = code_blocks(section("Your first governed action"), "python")
    assert DOCUMENTED_URL in example
    script = tmp_path / "first_action.py"
    script.write_text(example.replace(DOCUMENTED_URL, quick_start.url))

    result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)

    assert result.returncode == 0, result.stdout + result.stderr + quick_start.output()[-4000:]
    lines = result.stdout.splitlines()
    assert lines[0] == "succeeded"
    trail = [line.split()[1] for line in lines[1:]]  # the action's whole trail, newest first
    assert trail[0] == "receipt.issued" and trail[-1] in ("envelope.accepted", "payment.reserved")
    assert {"envelope.accepted", "payment.reserved", "operation.created", "operation.running", "envelope.executed",
            "payment.committed", "operation.succeeded", "receipt.issued"} <= set(trail)


def test_the_quick_start_curl_line_answers_with_the_api_index(quick_start):
    [line] = commands(code_blocks(section("Quick start"), "sh")[1])[0]
    index = json.loads(run(line, quick_start))
    assert index["openapi"] == f"{quick_start.url}/agp/openapi.json"
    assert [group["name"] for group in index["groups"]] == ["registry", "decision", "execution", "admin"]


def test_the_authentication_lines_start_a_server_that_needs_the_token_they_get(tmp_path):
    [serve_line], curls = commands(code_blocks(section("Quick start"), "sh")[2])
    assert serve_line.endswith("scripts/serve")
    served = Served(tmp_path, serve_line)
    try:
        token_line, read_line = curls
        token = json.loads(run(token_line, served))
        assert token["token_type"] == "bearer" and token["access_token"]
        assert "<access_token>" in read_line
        events = json.loads(run(read_line.replace("<access_token>", token["access_token"]), served))
        assert set(events) == {"items", "next_cursor"}
        refused = json.loads(run(read_line.replace("<access_token>", "not-a-token"), served))
        assert refused["error"]["code"] == "AGP_UNAUTHENTICATED"
    finally:
        served.stop()


def test_a_clean_start_warns_of_nothing_not_even_on_the_first_openapi_document(quick_start):
    document = json.loads(run(f"curl -s {DOCUMENTED_URL}/agp/openapi.json", quick_start))
    assert document["openapi"].startswith("3.1")
    output = quick_start.output()
    assert "beat: Starting" in output
    assert [line for line in output.splitlines() if "warn" in line.lower()] == []


def test_idle_background_work_logs_nothing(quick_start):
    # Beat sends both sweeps every second; three seconds of an idle service add no line.
    time.sleep(1)
    before = quick_start.output()
    time.sleep(3)
    assert quick_start.process.poll() is None
    assert quick_start.output()[len(before):] == ""
