"""OWASP API10, unsafe consumption of APIs: what a tool endpoint answers is untrusted input.

The ``http`` connector calls the skill's endpoint (a raw local server here, reachable with
AGP_ALLOW_PRIVATE_URLS) and records its answer in the receipt. Hostile answers must end the
operation with a signed receipt whose hash verifies, never crash the runner or leave the
operation running: bodies that are not JSON, JSON PostgreSQL cannot store (NUL), numbers
with no canonical form (NaN, 2^64, 1e400), nesting past the parser's limit, and oversized bodies.
"""

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agp_project.canonical import content_hash
from execution.models import Operation, Receipt
from execution.runner import operation_execute
from tests.execution.factories import make_world
from tests.execution.worker import submit_async, test_broker  # noqa: F401

HOSTILE = {
    "not-json": b"<html>oops</html>",
    "nul": b'{"note": "a\\u0000b"}',
    "nan": b'{"value": NaN}',
    "huge-int": b'{"value": 18446744073709551616}',
    "huge-float": b'{"value": 1e400}',
    "deep-but-parsable": b'{"a":' * 900 + b"1" + b"}" * 900,
    "deep": b"[" * 100_000 + b"]" * 100_000,
    "oversized": b'{"pad": "' + b"x" * (3 * 1024 * 1024) + b'"}',
}


@pytest.fixture
def raw_tool():
    """A tool endpoint answering 200 with the raw body set on ``server.body``."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's naming
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = self.server.body
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            """Keep the test output quiet."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.body = b"{}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_it_ends_the_operation_with_a_verifiable_receipt_whatever_the_tool_answers(api, settings, raw_tool, kind,
                                                                                    test_broker):  # noqa: F811
    from core.models import LedgerHead

    LedgerHead.objects.get_or_create(pk=1)
    settings.AGP_ALLOW_PRIVATE_URLS = True
    settings.AGP_CONNECTOR_RETRY_BASE_SECONDS = 0
    raw_tool.body = HOSTILE[kind]
    world = make_world(connector="http", endpoint_url=f"http://127.0.0.1:{raw_tool.server_address[1]}/tool")
    operation_id = submit_async(api, world.envelope_request())["operation_id"]

    outcome = operation_execute(operation_id=operation_id, executor="unsafe-consumption")

    assert outcome in ("succeeded", "failed")
    operation = Operation.objects.get(operation_id=operation_id)
    assert operation.status == outcome
    receipt = Receipt.objects.get(operation_id=operation_id)
    assert receipt.result_hash == content_hash(receipt.result)
    assert "\x00" not in str(receipt.result)
    assert len(str(receipt.result)) < 2 * 1024 * 1024
