"""In-process profile of one hot path on PostgreSQL (docs/performance.md), without HTTP.

    .venv/bin/python -m bench.inprocess validate            # ms wall / CPU per request, statements
    .venv/bin/python -m bench.inprocess worker -n 300 --cprofile
    .venv/bin/python -m bench.inprocess eval --gc           # garbage-collector pauses too
    AGP_PROFILE_SORT=tottime .venv/bin/python -m bench.inprocess eval --cprofile   # by own time
    .venv/bin/python -m bench.inprocess get --drop-middleware agp_project.http.middleware.MetricsMiddleware
    .venv/bin/python -m bench.inprocess inline --cprofile   # the MCP gateway's database work per call

Paths: ``get`` (``GET /agp/tasks/{id}``), ``validate`` (validate-only envelope), ``submit``
(``Prefer: respond-async``), ``worker`` (``operation_execute`` on what ``submit`` queued) and
``eval`` (``POST /agp/policy-evaluations``), each through Django's test client with a bearer
token, and ``inline``: the MCP gateway's database work for one tool call, without the MCP
transport and the upstream server (``action_govern`` in mode ``INLINE`` on a task governed by
its policy set, then ``operation_finish`` with the tool's result), in a world from
``tests/execution/factories.py`` (``--action-class``, ``--risk``). The
database (``--database-url``, default ``agp_inprocess``) is recreated; the broker is the
embedded one in a temporary directory, so nothing is executed by a worker.
"""

import argparse
import cProfile
import gc
import io
import json
import os
import pstats
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", choices=["get", "validate", "submit", "worker", "eval", "inline"])
    parser.add_argument("-n", type=int, default=500, help="measured calls (after 30 warm-up calls)")
    parser.add_argument("--database-url", default="postgres://postgres@127.0.0.1:5432/agp_inprocess")
    parser.add_argument("--action-class", default="write")
    parser.add_argument("--risk", default="medium")
    parser.add_argument("--no-keys", dest="keys", action="store_false",
                        help="send writes without an Idempotency-Key (agp_client always sends one)")
    parser.add_argument("--cprofile", action="store_true", help="print the top of a cProfile of the calls")
    parser.add_argument("--gc", action="store_true", help="print garbage-collector pauses during the calls")
    parser.add_argument("--drop-middleware", action="append", default=[], metavar="DOTTED_PATH",
                        help="run without this middleware (repeatable), to measure what it costs")
    args = parser.parse_args()

    _recreate(args.database_url)
    os.environ.update(DJANGO_SETTINGS_MODULE="agp_project.settings.base", AGP_DATABASE_URL=args.database_url,
                      AGP_AUTH_SECRET="profile-" + "x" * 32, AGP_VAR_DIR=tempfile.mkdtemp(prefix="agp-inprocess-"),
                      AGP_LOG_LEVEL="WARNING", AGP_ALLOWED_HOSTS="testserver")  # Django's test client
    os.environ.pop("AGP_BROKER_URL", None)
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    unknown = set(args.drop_middleware) - set(settings.MIDDLEWARE)
    if unknown:
        parser.error(f"not in MIDDLEWARE: {', '.join(sorted(unknown))}")
    # Before the test client's first request, which is when Django loads the middleware.
    settings.MIDDLEWARE = [name for name in settings.MIDDLEWARE if name not in args.drop_middleware]

    call_command("migrate", verbosity=0)
    call = _path(args)
    # As the web and worker processes do after start-up (agp_project/wsgi.py, execution/tasks.py).
    gc.collect()
    gc.freeze()
    for _ in range(30):
        call()
    _statements(call)
    _time(call, args.n)
    if args.cprofile:
        _cprofile(call, args.n)
    if args.gc:
        _gc_pauses(call, args.n)


def _recreate(url: str) -> None:
    import psycopg

    name = urlsplit(url).path.lstrip("/")
    with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def _path(args):
    """The call to measure: one request (or one executed operation)."""
    from django.test import Client as TestClient

    from auth_tokens.models import Client
    from auth_tokens.scopes import ALL_SCOPES
    from auth_tokens.services import client_create, token_issue
    from tests.execution.factories import make_world

    world = make_world(action_class=args.action_class, risk_level=args.risk)
    client_create(client_id="profile", kind="operator", scopes=list(ALL_SCOPES), actor="profile")
    client = Client.objects.get(client_id="profile")
    token = token_issue(client=client, scopes=list(client.scopes))["access_token"]
    http = TestClient(HTTP_AUTHORIZATION=f"Bearer {token}")

    def keyed() -> dict:
        # As agp_client sends every write.
        return {"HTTP_IDEMPOTENCY_KEY": uuid.uuid4().hex} if args.keys else {}

    def envelope(**headers):
        body = dict(world.envelope_request(), action_id=f"act-{uuid.uuid4().hex}",
                    created_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"))
        response = http.post("/agp/action-envelopes", json.dumps(body), content_type="application/json",
                             **keyed(), **headers)
        assert response.status_code in (200, 202), response.content
        return response

    if args.path == "get":
        def get():
            assert http.get(f"/agp/tasks/{world.task.task_id}").status_code == 200
        return get
    if args.path == "validate":
        return envelope
    if args.path == "submit":
        return lambda: envelope(HTTP_PREFER="respond-async")
    if args.path == "inline":
        return _inline(world)
    if args.path == "eval":
        body = json.dumps({"policy_set_id": world.policy_set.policy_set_id, "task_id": world.task.task_id,
                           "agent_id": world.agent_id, "input": {"amount": 5}})

        def evaluate():
            response = http.post("/agp/policy-evaluations", body, content_type="application/json", **keyed())
            assert response.status_code == 201, response.content
        return evaluate
    # Enough queued operations for every call main() makes: warm-up, statements, each measurement.
    return _worker(lambda: envelope(HTTP_PREFER="respond-async"), 31 + args.n * (1 + args.cprofile + args.gc))


def _inline(world):
    from agp_project.ids import new_id
    from execution.one_call import INLINE, action_govern
    from execution.runner import operation_finish
    from tests.execution.factories import check_inputs, governed_by_policy

    governed_by_policy(world)
    result = {"content": [{"type": "text", "text": "ok"}], "isError": False}

    def call():
        inputs = check_inputs(world, decision_ref="", policy_decision_ref="", action_id=new_id("act"))
        claim = action_govern(inputs=inputs, actor="profile", mode=INLINE, executor="profile", minted=True).claim
        receipt = operation_finish(operation_id=claim.operation_id, fence=claim.fence, status="succeeded",
                                   result=result, executor="profile", governance=claim.governance)
        assert receipt is not None
    return call


def _worker(submit, count: int):
    from execution.runner import operation_execute

    queued = [submit().json()["operation_id"] for _ in range(count)]

    def execute():
        assert operation_execute(operation_id=queued.pop(), executor="profile") == "succeeded"
    return execute


def _statements(call) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        call()
    print(f"{len(queries.captured_queries)} statements:")
    for query in queries.captured_queries:
        print("  ", " ".join(query["sql"].split())[:140])


def _time(call, n: int) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = cursor.fetchone()[0]
    wall, cpu, db_cpu = time.perf_counter(), time.process_time(), _process_cpu(backend)
    for _ in range(n):
        call()
    db_cpu = _process_cpu(backend) - db_cpu
    print(f"{(time.perf_counter() - wall) / n * 1e3:.2f} ms wall, {(time.process_time() - cpu) / n * 1e3:.2f} ms "
          f"CPU per call, {db_cpu / n * 1e3:.2f} ms PostgreSQL backend CPU per call ({n} calls)")


def _process_cpu(pid: int) -> float:
    """User + system CPU seconds of a local process (the PostgreSQL backend serving us)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cprofile(call, n: int) -> None:
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(n):
        call()
    profile.disable()
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats(os.environ.get("AGP_PROFILE_SORT", "cumulative")).print_stats(50)
    print(out.getvalue())


def _gc_pauses(call, n: int) -> None:
    pauses, started = [], [0.0]

    def record(phase, info):
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            pauses.append((info["generation"], time.perf_counter() - started[0]))

    gc.callbacks.append(record)
    try:
        for _ in range(n):
            call()
    finally:
        gc.callbacks.remove(record)
    for generation in (0, 1, 2):
        times = sorted(t for g, t in pauses if g == generation)
        if times:
            print(f"gen{generation}: {len(times)} collections, longest {times[-1] * 1e3:.2f} ms, "
                  f"{sum(times) * 1e3:.1f} ms in all over {n} calls")


if __name__ == "__main__":
    main()
