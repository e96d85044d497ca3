"""The OPA server backend against a local server that speaks OPA's Data API.

OPA itself is not on this machine, so a small HTTP server imitates its Data API: it
evaluates the loaded package with regorus and answers as OPA does (``{"result": doc}``,
``{}`` for an undefined document, 500 with ``{"code", "message"}`` on an evaluation error).
"""

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest
import regorus

from core import engine
from core.models import LedgerEvent
from decision.models import PolicyEvaluation
from tests.decision.factories import PAYMENTS, make_policy_set, make_task, ruleset_hash

LIMITS = {"auto_approve_max": 100, "hard_max": 1000}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def handle_error(self, request, client_address):
        """A client that gave up (the timeout test) leaves a broken pipe: expected, not news."""


class FakeOPA:
    """An imitation of OPA's ``POST /v1/data/{path}``; records every request it serves."""

    def __init__(self):
        self.packages: dict[str, str] = {}
        self.requests: list[dict] = []
        self.mode = "normal"
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                """Keep the test output quiet."""

            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length))
                url = urlsplit(self.path)
                fake.requests.append({"path": url.path, "query": parse_qs(url.query), "body": body})
                status, answer = fake.answer(url.path, body)
                data = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02},
                                       daemon=True)
        self.thread.start()

    def load(self, ruleset: str):
        probe = regorus.Engine()
        package = probe.add_policy("policy.rego", ruleset)
        self.packages["/v1/data/" + package[len("data."):].replace(".", "/")] = ruleset

    def answer(self, path, body):
        if self.mode == "slow":
            time.sleep(1.0)
            return 200, {}
        if self.mode == "garbage":
            return 200, b"<html>not json</html>"
        if path not in self.packages:
            return 200, {}
        opa = regorus.Engine()
        package = opa.add_policy("policy.rego", self.packages[path])
        opa.set_input(body["input"])
        try:
            document = json.loads(opa.eval_query_as_json(package))["result"][0]["expressions"][0]["value"]
        except RuntimeError as exc:
            return 500, {"code": "internal_error", "message": str(exc).split("Stack backtrace")[0].strip()}
        return 200, {"result": document}

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def opa(settings):
    fake = FakeOPA()
    settings.AGP_OPA_URL = fake.url
    settings.AGP_OPA_TIMEOUT_SECONDS = 10
    engine.cache_clear()
    yield fake
    fake.close()


def evaluate(ruleset, input):
    return engine.evaluate(ruleset=ruleset, ruleset_hash=ruleset_hash(ruleset), input=input)


def local(ruleset, input, settings):
    opa_url, settings.AGP_OPA_URL = settings.AGP_OPA_URL, None
    try:
        return evaluate(ruleset, input)
    finally:
        settings.AGP_OPA_URL = opa_url


@pytest.mark.parametrize("input", [
    {"action_class": "read", "amount": 10, "limits": LIMITS, "merchant": "shop"},
    {"action_class": "transact", "amount": 500, "limits": LIMITS, "merchant": "shop"},
    {"action_class": "transact", "amount": 5000, "limits": LIMITS, "merchant": "evil-corp"},
])
def test_it_asks_opa_and_reads_the_package_document_like_the_embedded_engine(opa, settings, input):
    opa.load(PAYMENTS)

    result = evaluate(PAYMENTS, input)

    assert result.engine == "opa"
    assert result.as_result() == local(PAYMENTS, input, settings).as_result()
    assert opa.requests == [{"path": "/v1/data/agp/payments", "query": {"strict-builtin-errors": ["true"]},
                             "body": {"input": input}}]


def test_it_refuses_when_opa_does_not_have_the_package(opa):
    result = evaluate(PAYMENTS, {"action_class": "read", "amount": 1, "limits": LIMITS})

    assert result.as_result() == {"allow": False, "require_approval": False, "approvals_required": 0, "reasons": []}
    assert len(opa.requests) == 1


def test_it_refuses_with_opas_error_when_evaluation_fails_there(opa):
    ruleset = "package agp.ratio\nimport rego.v1\nallow if input.total / input.count > 1\n"
    opa.load(ruleset)

    result = evaluate(ruleset, {"total": 1, "count": 0})

    assert result.allow is False
    assert result.reasons[0].startswith("OPA evaluation error: HTTP 500 internal_error:")
    assert "divide by zero" in result.reasons[0]


def test_it_refuses_when_opa_answers_something_that_is_not_json(opa):
    opa.load(PAYMENTS)
    opa.mode = "garbage"

    result = evaluate(PAYMENTS, {})

    assert result.as_result() == {"allow": False, "require_approval": False, "approvals_required": 0,
                                  "reasons": ["OPA evaluation error: the response is not a JSON object"]}


def test_it_refuses_when_opa_is_too_slow(opa, settings):
    opa.load(PAYMENTS)
    opa.mode = "slow"
    settings.AGP_OPA_TIMEOUT_SECONDS = 0.2

    result = evaluate(PAYMENTS, {})

    assert result.allow is False
    assert result.reasons[0].startswith("OPA unreachable:")


def test_it_refuses_when_opa_is_unreachable(settings):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    settings.AGP_OPA_URL = f"http://127.0.0.1:{port}"

    result = evaluate(PAYMENTS, {})

    assert result.allow is False
    assert result.reasons[0].startswith("OPA unreachable:")


def test_it_refuses_a_ruleset_that_does_not_compile_without_asking_opa(opa):
    result = evaluate("package agp.broken\nallow if {\n", {})

    assert result.allow is False
    assert result.reasons[0].startswith("policy compile error:")
    assert opa.requests == []


def test_a_ruleset_that_runs_away_while_compiling_is_stopped_without_asking_opa(opa, settings):
    # Compiling ends with a warm-up evaluation: it runs in the engine process, under the limit.
    settings.AGP_POLICY_TIMEOUT_MS = 300
    spinning = ("package agp.spin\nimport rego.v1\nallow if {\n some i in numbers.range(1, 20000)\n"
                " some j in numbers.range(1, 20000)\n i * j == -1\n}\n")

    started = time.monotonic()
    result = evaluate(spinning, {})

    assert result.reasons == ("policy evaluation stopped: it exceeded the time limit of 300 ms "
                              "(AGP_POLICY_TIMEOUT_MS)",)
    assert time.monotonic() - started < 2
    assert opa.requests == []


@pytest.mark.django_db
def test_it_records_an_api_evaluation_made_by_opa(opa, api):
    opa.load(PAYMENTS)
    task = make_task()
    policy_set = make_policy_set(ruleset=PAYMENTS)
    body = {"policy_set_id": policy_set.policy_set_id, "task_id": task.task_id, "agent_id": "agent-1",
            "input": {"action_class": "transact", "amount": 5000, "limits": LIMITS, "merchant": "shop"}}

    response = api.post("/agp/policy-evaluations", body, format="json")

    assert response.status_code == 201
    assert response.json()["result"] == {"allow": False, "require_approval": True, "approvals_required": 1,
                                         "reasons": ["amount 5000 exceeds hard maximum 1000"]}
    evaluation = PolicyEvaluation.objects.get(evaluation_id=response.json()["evaluation_id"])
    assert evaluation.allowed is False
    event = LedgerEvent.objects.get(resource_id=evaluation.evaluation_id)
    assert event.payload["engine"] == "opa"
    assert len(opa.requests) == 1
