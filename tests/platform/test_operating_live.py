"""Operating AGP as deployed (docs/operations.md): a real gunicorn (two gthread workers) and a real Celery
worker sharing one ``PROMETHEUS_MULTIPROC_DIR``, both logging JSON.

- ``/metrics`` on gunicorn adds up what its two workers and the Celery worker's pool counted:
  a validated, a refused and an executed envelope move the right counters, the execution's
  only in the worker process; the scrape needs the metrics token.
- The worker also serves its own figures (``AGP_WORKER_METRICS_BIND``, for a worker on another
  machine): the execution's counters, no database gauges, the same token.
- One ``X-Request-ID`` is echoed by the server and found on gunicorn's access line and on the
  worker's log lines of the execution and of both callback deliveries (the first refused).
- The log stays one JSON object a line while the policy engine crashes on a ruleset (its own
  stderr becomes log records); a token sent in the query string is refused and never written.
"""

import json
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
from cryptography.hazmat.primitives import serialization
from django.conf import settings

from agp_project.signing import get_signer
from execution.models import CallbackAttempt
from tests.agp_client.server import free_port
from tests.core.test_sandbox import HOARDING
from tests.execution.factories import make_policy_set, make_world
from tests.execution.receiver import receiver  # noqa: F401
from tests.execution.worker import (  # noqa: F401
    FAST_ENV,
    READY_TIMEOUT,
    REPO,
    WorkerFactory,
    WorkerProcess,
    database_url,
    test_broker,
    wait_for,
    worker_db,
)

from .metrics_text import samples, value

pytestmark = [pytest.mark.system, pytest.mark.postgres]

METRICS_TOKEN = "scrape-token-for-the-live-test"


@dataclass
class Web:
    url: str
    process: subprocess.Popen
    log_path: Path

    def log_lines(self) -> list[dict]:
        return json_lines(self.log_path)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


@dataclass
class Stack:
    web: Web
    worker: WorkerProcess
    metrics_dir: Path
    worker_metrics_url: str


def json_lines(path: Path) -> list[dict]:
    """The log's JSON objects (Celery's start-up banner is the only other text it holds)."""
    lines = []
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            lines.append(json.loads(line))
    return lines


def start_web(*, workdir: Path, broker, env: dict[str, str]) -> Web:
    """gunicorn as scripts/serve starts it (its gunicorn.conf.py, gthread workers, access log on stdout)."""
    signer = get_signer()
    pem = signer.private_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()).decode()
    port = free_port()
    base = {k: v for k, v in os.environ.items() if not k.startswith("AGP_") and k != "DJANGO_SETTINGS_MODULE"}
    full_env = {**base, "DJANGO_SETTINGS_MODULE": "agp_project.settings.test", "AGP_DATABASE_URL": database_url(),
                "AGP_BROKER_URL": broker.url, "AGP_CELERY_QUEUE": broker.queue, "AGP_SIGNING_KEY": pem,
                "AGP_ISSUER": signer.issuer, "AGP_CALLBACK_SECRET": settings.AGP_CALLBACK_SECRET,
                "AGP_VAR_DIR": str(workdir / "web-var"), "AGP_LOG_LEVEL": "INFO", "AGP_ALLOW_PRIVATE_URLS": "1",
                "PYTHONUNBUFFERED": "1", **env}
    log_path = workdir / "gunicorn.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "agp_project.wsgi:application", "--config", "gunicorn.conf.py",
             "--bind", f"127.0.0.1:{port}", "--workers", "2", "--worker-class", "gthread", "--threads", "2",
             "--no-control-socket", "--access-logfile", "-", "--error-logfile", "-"],
            cwd=REPO, env=full_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    web = Web(url=f"http://127.0.0.1:{port}", process=process, log_path=log_path)
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"gunicorn exited with {process.returncode}:\n{log_path.read_text()[-4000:]}")
        try:
            if requests.get(f"{web.url}/healthz", timeout=1).status_code == 200:
                return web
        except requests.RequestException:
            pass
        time.sleep(0.1)
    web.stop()
    pytest.fail(f"gunicorn did not answer:\n{log_path.read_text()[-4000:]}")


@pytest.fixture(scope="module")
def stack(test_broker, django_db_setup, tmp_path_factory):  # noqa: F811
    workdir = tmp_path_factory.mktemp("operating")
    metrics_dir = workdir / "metrics"
    metrics_dir.mkdir()
    shared = {"PROMETHEUS_MULTIPROC_DIR": str(metrics_dir), "AGP_LOG_FORMAT": "json"}
    factory = WorkerFactory(test_broker, workdir)
    web = None
    worker_metrics = f"127.0.0.1:{free_port()}"
    try:
        worker = factory.start(**shared, AGP_METRICS_TOKEN=METRICS_TOKEN, AGP_WORKER_METRICS_BIND=worker_metrics)
        web = start_web(workdir=workdir, broker=test_broker, env={**shared, "AGP_METRICS_TOKEN": METRICS_TOKEN})
        yield Stack(web=web, worker=worker, metrics_dir=metrics_dir,
                    worker_metrics_url=f"http://{worker_metrics}/metrics")
    finally:
        if web is not None:
            web.stop()
        factory.stop_all()


def scrape(web: Web) -> dict:
    response = requests.get(f"{web.url}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}, timeout=10)
    assert response.status_code == 200, response.text
    return samples(response.text)


def post_envelope(web: Web, body: dict, **headers) -> requests.Response:
    return requests.post(f"{web.url}/agp/action-envelopes", json=body, headers=headers, timeout=30)


def wait_until_ended(web: Web, operation_id: str, worker: WorkerProcess) -> dict:
    def ended():
        body = requests.get(f"{web.url}/agp/operations/{operation_id}", timeout=10).json()
        return body if body["status"] in ("succeeded", "failed", "cancelled") else None

    return wait_for(ended, message=f"operation {operation_id} to end", worker=worker)


def test_web_and_worker_processes_add_up_on_one_metrics_endpoint_behind_its_token(
        stack, worker_db, receiver):  # noqa: F811
    world = make_world()
    before = scrape(stack.web)

    validated = post_envelope(stack.web, world.envelope_request())
    refused = post_envelope(stack.web, world.envelope_request(policy_decision_ref="pev_missing"))
    accepted = post_envelope(stack.web, world.envelope_request(callback_url=receiver.url("/hook")),
                             Prefer="respond-async")
    assert (validated.status_code, refused.status_code, accepted.status_code) == (200, 422, 202), refused.text
    operation_id = accepted.json()["operation_id"]
    assert wait_until_ended(stack.web, operation_id, stack.worker)["status"] == "succeeded"
    wait_for(lambda: CallbackAttempt.objects.filter(operation_id=operation_id, status="delivered").exists(),
             message="the callback's delivery", worker=stack.worker)
    after = scrape(stack.web)

    def moved(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    # Counted by a gunicorn worker, at submission.
    assert moved("agp_envelopes_total", outcome="validated") == 1
    assert moved("agp_envelopes_total", outcome="rejected") == 1
    assert moved("agp_envelopes_total", outcome="accepted") == 1
    assert moved("agp_envelope_failed_checks_total", check="policy_evaluation", stage="submission") == 1
    for status in ("200", "422", "202"):
        assert moved("agp_http_requests_total", route="/agp/action-envelopes", method="POST", status=status) == 1
    assert moved("agp_http_request_duration_seconds_count", route="/agp/action-envelopes", method="POST") == 3
    # Counted by the Celery worker's pool process: gunicorn's /metrics shows them all the same.
    assert moved("agp_envelopes_total", outcome="executed") == 1
    assert moved("agp_operations_ended_total", status="succeeded") == 1
    assert moved("agp_connector_calls_total", connector="noop", outcome="succeeded") == 1
    assert moved("agp_callback_deliveries_total", outcome="delivered") == 1
    assert value(after, "agp_operations", status="pending") == 0
    # The figures live in the shared directory, one set of files per process that counted.
    writers = {path.stem.rsplit("_", 1)[1] for path in stack.metrics_dir.glob("*.db")}
    assert str(stack.worker.process.pid) not in writers  # the worker's main process executes nothing itself
    assert len(writers) >= 2

    for url in (f"{stack.web.url}/metrics", stack.worker_metrics_url):
        for headers in ({}, {"Authorization": "Bearer wrong-token"}):
            refused_scrape = requests.get(url, headers=headers, timeout=10)
            assert refused_scrape.status_code == 401
            assert "agp_envelopes" not in refused_scrape.text

    # The worker's own endpoint: the same files, without the gauges read from the database.
    own = requests.get(stack.worker_metrics_url, headers={"Authorization": f"Bearer {METRICS_TOKEN}"}, timeout=10)
    assert own.status_code == 200
    worker_side = samples(own.text)
    assert value(worker_side, "agp_envelopes_total", outcome="executed") == value(
        after, "agp_envelopes_total", outcome="executed")
    assert not any(name.startswith(("agp_ledger_", "agp_operations")) and not name.startswith("agp_operations_ended")
                   for name, _ in worker_side)


def test_one_request_id_is_echoed_and_followed_through_the_worker_log_lines(stack, worker_db, receiver):  # noqa: F811
    world = make_world()
    receiver.answer((500, {"busy": True}), (200, {"received": True}))
    request_id = f"trace-{uuid.uuid4().hex[:12]}"

    accepted = post_envelope(stack.web, world.envelope_request(callback_url=receiver.url("/hook")),
                             Prefer="respond-async", **{"X-Request-ID": request_id})

    assert accepted.status_code == 202
    assert accepted.headers["X-Request-ID"] == request_id
    operation_id = accepted.json()["operation_id"]
    wait_until_ended(stack.web, operation_id, stack.worker)
    wait_for(lambda: CallbackAttempt.objects.filter(operation_id=operation_id, status="delivered").exists(),
             timeout=30, message="the retried callback's delivery", worker=stack.worker)
    assert [r.headers["AGP-Delivery-Attempt"] for r in receiver.requests] == ["1", "2"]

    def traced():
        lines = [line for line in json_lines(stack.worker.log_path) if line.get("request_id") == request_id]
        return lines if any("delivered" in line["message"] for line in lines) else None

    lines = wait_for(traced, timeout=10, message="the worker's log lines of the request", worker=stack.worker)
    by_task = {}
    for line in lines:
        assert {"time", "level", "logger", "message", "process"} <= set(line)
        by_task.setdefault(line.get("task"), []).append(line["message"])
    assert set(by_task) == {"agp.execute_operation", "agp.deliver_callback"}, by_task
    assert any(f"operation {operation_id} of " in message and "succeeded" in message
               for message in by_task["agp.execute_operation"])
    deliveries = by_task["agp.deliver_callback"]
    assert any(f"callback for {operation_id} attempt 1/" in message for message in deliveries)
    assert any(f"callback for {operation_id} delivered (attempt 2" in message for message in deliveries)
    # Nothing else the worker did carries this id.
    assert all(line.get("task") for line in lines)

    access = [line for line in stack.web.log_lines()
              if line["logger"] == "gunicorn.access" and line.get("request_id") == request_id]
    assert len(access) == 1
    assert access[0]["http"]["request"].startswith("POST /agp/action-envelopes")
    assert access[0]["http"]["status"] == "202"

    made = requests.get(f"{stack.web.url}/healthz", headers={"X-Request-ID": "not a sane id"}, timeout=10)
    assert made.headers["X-Request-ID"] != "not a sane id" and len(made.headers["X-Request-ID"]) == 32


def test_the_web_log_stays_one_json_object_a_line_while_the_engine_crashes_a_ruleset(stack, worker_db):  # noqa: F811
    world = make_world()
    hoarding = make_policy_set(ruleset=HOARDING)  # stored as if registered before: it would not compile now

    response = requests.post(f"{stack.web.url}/agp/policy-evaluations", timeout=30, json={
        "policy_set_id": hoarding.policy_set_id, "task_id": world.task.task_id, "agent_id": world.agent_id,
        "input": {}})

    assert response.status_code == 201, response.text
    assert response.json()["result"]["allow"] is False
    lines = stack.web.log_path.read_text().splitlines()
    records = [json.loads(line) for line in lines]  # every line, not only those that look like JSON
    assert any(record["logger"] == "core.engine.sandbox" and "memory allocation of" in record["message"]
               for record in records), lines[-10:]


def test_a_token_in_the_query_string_is_refused_and_never_written_to_the_log(stack, worker_db):  # noqa: F811
    secret = f"eyJ-a-token-{uuid.uuid4().hex}"
    request_id = f"query-token-{uuid.uuid4().hex[:8]}"

    response = requests.get(f"{stack.web.url}/agp/tasks?limit=1&access_token={secret}", timeout=10,
                            headers={"X-Request-ID": request_id})

    assert response.status_code == 400
    assert response.json()["error"]["details"] == {"fields": {"access_token": ["Not accepted in the query string."]}}
    # gunicorn writes the access line once the response has been sent, so it may follow the answer.
    [access] = wait_for(lambda: [line for line in stack.web.log_lines()
                                 if line["logger"] == "gunicorn.access" and line.get("request_id") == request_id],
                        timeout=10, message="the request's access log line")
    assert secret not in stack.web.log_path.read_text()
    assert access["http"]["request"] == "GET /agp/tasks?limit=1&access_token=[redacted] HTTP/1.1"
