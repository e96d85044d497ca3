"""Prometheus metrics (docs/operations.md): the families every process counts, and ``GET /metrics``.

Counters and the latency histogram live in the process that sees the event: a web process
counts requests and submissions, a worker process counts executions, connector calls and
callback deliveries. With ``PROMETHEUS_MULTIPROC_DIR`` set (``scripts/serve`` sets it), every
process of a machine, gunicorn's workers and Celery's pool alike, writes its figures to files
in that directory, and ``/metrics`` adds them up (prometheus-client's multiprocess mode,
docs/operations.md). Without it the process's own registry is exposed, which is right for a
single process (``runserver``, tests).

Gauges of the state in the database (operations waiting or running, the ledger head, the
newest checkpoint) are read when ``/metrics`` is scraped, each with one small query: apps
register them with ``scrape_source`` (core: the ledger; execution: operations and outbox).

Counts tied to a database change are made with ``count_on_commit``: a transaction that is
rolled back counts nothing.
"""

import hmac
import os
import threading
from collections.abc import Callable, Iterable
from wsgiref.simple_server import WSGIRequestHandler, make_server

from django.conf import settings
from django.db import transaction
from django.http import HttpResponse, HttpResponseNotAllowed
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector

MULTIPROCESS_DIR_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"

# --- Families ---------------------------------------------------------------------------

HTTP_REQUESTS = Counter(
    "agp_http_requests", "HTTP requests answered, by route template, method and status code.",
    ["route", "method", "status"])
HTTP_LATENCY = Histogram(
    "agp_http_request_duration_seconds", "Time from the request entering Django to its response, by route and method.",
    ["route", "method"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0))
ENVELOPES = Counter(
    "agp_envelopes",
    "Action envelopes by outcome: validated, rejected or accepted when submitted; executed or failed when "
    "their operation ended.",
    ["outcome"])
ENVELOPE_FAILED_CHECKS = Counter(
    "agp_envelope_failed_checks",
    "Governance checks that refused an envelope, by check and stage (submission, or execution when the "
    "worker re-checked it).",
    ["check", "stage"])
OPERATIONS_ENDED = Counter(
    "agp_operations_ended", "Operations that reached an end state, by status (succeeded, failed, cancelled).",
    ["status"])
CONNECTOR_CALLS = Counter(
    "agp_connector_calls", "Tool calls made by the worker, by connector and outcome (succeeded, failed).",
    ["connector", "outcome"])
CALLBACK_DELIVERIES = Counter(
    "agp_callback_deliveries",
    "Callback delivery attempts by outcome: delivered; failed (another attempt follows); abandoned (the last "
    "attempt failed, or the URL was refused).",
    ["outcome"])


def count_on_commit(counter, amount: float = 1) -> None:
    """Increment ``counter`` (a labelled child) once the current transaction commits; at once outside one.

    Robust: a failure here, after the commit, must not turn a committed request into an error."""
    transaction.on_commit(lambda: counter.inc(amount), robust=True)


# --- Gauges read at scrape time ----------------------------------------------------------

ScrapeSource = Callable[[], Iterable[Metric]]
_SOURCES: list[ScrapeSource] = []


def scrape_source(source: ScrapeSource) -> ScrapeSource:
    """Register a function that yields metric families read from the database at each scrape."""
    if source not in _SOURCES:
        _SOURCES.append(source)
    return source


class _ScrapeTimeCollector:
    def collect(self) -> Iterable[Metric]:
        for source in _SOURCES:
            yield from source()


def multiprocess_dir() -> str | None:
    return os.environ.get(MULTIPROCESS_DIR_VARIABLE) or None


def exposition(*, database: bool = True) -> bytes:
    """Every family in Prometheus' text format: the processes' counters and, with ``database``, the
    scrape-time gauges."""
    registry = CollectorRegistry()
    if multiprocess_dir():
        MultiProcessCollector(registry)
    else:
        registry.register(REGISTRY)
    if database:
        registry.register(_ScrapeTimeCollector())
    return generate_latest(registry)


# --- GET /metrics ------------------------------------------------------------------------

UNAUTHORISED = "A bearer token is required: Authorization: Bearer <AGP_METRICS_TOKEN>.\n"


def _authorised(authorization: str) -> bool:
    token = settings.AGP_METRICS_TOKEN
    if not token:
        return True
    scheme, _, presented = authorization.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(presented.strip().encode(), token.encode())


def metrics_view(request):
    """``GET /metrics``: open unless ``AGP_METRICS_TOKEN`` is set, then that bearer token only."""
    if request.method not in ("GET", "HEAD"):
        return HttpResponseNotAllowed(["GET", "HEAD"])
    if not _authorised(request.META.get("HTTP_AUTHORIZATION", "")):
        response = HttpResponse(UNAUTHORISED, status=401, content_type="text/plain; charset=utf-8")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    # The text format every Prometheus version reads (names are plain ASCII, nothing to escape).
    response = HttpResponse(exposition(), content_type=CONTENT_TYPE_PLAIN_0_0_4)
    response["Cache-Control"] = "no-store"
    return response


# --- The worker's own endpoint, where it runs on another machine than the web tier ----------


def worker_metrics_app(environ, start_response):
    """A WSGI app answering ``GET /metrics`` with this machine's multiprocess figures, without the
    database gauges (the web tier's ``/metrics`` has those), under the same token."""
    if environ.get("PATH_INFO") != "/metrics" or environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
        start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
        return [b"Only GET /metrics here.\n"]
    if not _authorised(environ.get("HTTP_AUTHORIZATION", "")):
        start_response("401 Unauthorized", [("Content-Type", "text/plain; charset=utf-8"),
                                            ("WWW-Authenticate", 'Bearer realm="metrics"')])
        return [UNAUTHORISED.encode()]
    body = exposition(database=False)
    start_response("200 OK", [("Content-Type", CONTENT_TYPE_PLAIN_0_0_4), ("Content-Length", str(len(body)))])
    return [body] if environ["REQUEST_METHOD"] == "GET" else []


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the base class's signature
        """Scrapes every few seconds are not worth a log line each."""


def worker_metrics_serve(bind: str) -> threading.Thread:
    """Serve ``worker_metrics_app`` on ``host:port`` from a daemon thread of this process."""
    host, _, port = bind.rpartition(":")
    address = host.strip("[]") or "0.0.0.0"  # noqa: S104 - all interfaces when the operator names none
    server = make_server(address, int(port), worker_metrics_app, handler_class=_QuietHandler)
    thread = threading.Thread(target=server.serve_forever, name="worker-metrics", daemon=True)
    thread.start()
    return thread
