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

pytestmark = [pytest.mark.system, pytest.mark.embedded]

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


def run_example(text: str, served: Served, tmp_path: Path) -> list[str]:
    """The first Python block of ``text``, run as a script against ``served``; its output lines."""
    example = code_blocks(text, "python")[0]
    assert DOCUMENTED_URL in example
    script = tmp_path / "example.py"
    script.write_text(example.replace(DOCUMENTED_URL, served.url))
    result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stdout + result.stderr + served.output()[-4000:]
    return result.stdout.splitlines()


@pytest.fixture(scope="module")
def authenticated(tmp_path_factory):
    """The README's authentication line of the quick start (scripts/serve with a secret and the
    bootstrap client admin / change-me)."""
    [serve_line], _ = commands(code_blocks(section("Quick start"), "sh")[2])
    served = Served(tmp_path_factory.mktemp("authenticated"), serve_line)
    yield served
    served.stop()


def test_the_first_governed_action_is_six_records_and_one_call_against_the_authenticated_server(
        authenticated, tmp_path):
    lines = run_example(section("Your first governed action"), authenticated, tmp_path)

    assert lines[:2] == ["succeeded", "policy"]
    trail = [line.split()[1] for line in lines[2:-1]]  # the action's whole trail, newest first
    assert trail[0] == "receipt.issued" and trail[-1] == "envelope.accepted"
    assert {"operation.created", "operation.running", "envelope.executed", "operation.succeeded"} <= set(trail)
    assert lines[-1] == "succeeded"  # the call a person approved
    # Six records a user makes for the first action: the agent client, delegation, capability,
    # skill, policy set, task (the person's client and the second task are for the second).
    example = code_blocks(section("Your first governed action"), "python")[0]
    first = example.split("# When people must approve")[0].replace('operator.clients.create(kind="human"', "")
    assert len(re.findall(r"\.create\(", first)) == 6


def test_the_explicit_records_walkthrough_runs_against_the_quick_start_server(quick_start, tmp_path):
    lines = run_example((ROOT / "docs" / "explicit-records.md").read_text(), quick_start, tmp_path)

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


def test_the_authentication_lines_start_a_server_that_needs_the_token_they_get(authenticated):
    [serve_line], curls = commands(code_blocks(section("Quick start"), "sh")[2])
    assert serve_line.endswith("scripts/serve")
    token_line, read_line = curls
    token = json.loads(run(token_line, authenticated))
    assert token["token_type"] == "bearer" and token["access_token"]
    assert "<access_token>" in read_line
    events = json.loads(run(read_line.replace("<access_token>", token["access_token"]), authenticated))
    assert set(events) == {"items", "next_cursor"}
    refused = json.loads(run(read_line.replace("<access_token>", "not-a-token"), authenticated))
    assert refused["error"]["code"] == "AGP_UNAUTHENTICATED"


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
