"""A local HTTP endpoint for tests: records every request and answers from a script.

Used as a tool endpoint (``http`` connector) and as a callback receiver. It listens on
127.0.0.1, so calls to it pass the SSRF guard only with ``AGP_ALLOW_PRIVATE_URLS``.
"""

import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self):
        return json.loads(self.body)


class Receiver:
    """``answers``: (status, JSON body, headers) tuples used in order; the last one repeats."""

    def __init__(self):
        self.requests: list[Recorded] = []
        self.answers: list[tuple[int, object, dict[str, str]]] = [(200, {"received": True}, {})]
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's naming
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                with receiver._lock:
                    receiver.requests.append(Recorded("POST", self.path, dict(self.headers.items()), body))
                    index = min(len(receiver.requests), len(receiver.answers)) - 1
                    status, payload, headers = receiver.answers[index]
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                """Keep the test output quiet."""

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def answer(self, *answers: tuple) -> None:
        """Script the answers: each is (status,) or (status, body) or (status, body, headers)."""
        self.answers = [(a[0], a[1] if len(a) > 1 else {}, a[2] if len(a) > 2 else {}) for a in answers]


@pytest.fixture
def receiver():
    server = Receiver()
    server.thread.start()
    yield server
    server.server.shutdown()
    server.server.server_close()
