"""Shared fixtures: an API client, tokens, the tests' Redis, the PostgreSQL guard, and the tiers.

Three tiers (docs/decisions/tests.md): ``unit`` (no database), the default in-process tier
(Django's test client on a real database), and ``system`` (the test starts a process: a
server, a worker, Redis, Chromium, git, pytest). A test that starts a process without the
``system`` mark fails, and so does a ``unit`` test that asks for the database. Tests that use
a fixture starting a process (``PROCESS_FIXTURES``) are marked ``system`` automatically.

Tests marked ``postgres`` need PostgreSQL (row locks, concurrent transactions). On SQLite
they are deselected (the header says so), except when ``AGP_REQUIRE_POSTGRES=1`` (set by
``.ci/run``): then a missing PostgreSQL fails the run instead of silently leaving them out.

Tests that use Redis get it from ``redis_url`` (tests/redis_server.py) and nowhere else;
they are marked ``redis`` automatically.
"""

import contextlib
import os
import subprocess
import sys

import pytest
from django.db import connection
from rest_framework.test import APIClient
from xdist import is_xdist_worker

from auth_tokens.scopes import ALL_SCOPES
from core.engine.sandbox import CHILD as POLICY_ENGINE_CHILD
from tests.redis_server import OwnedDatabase, session_redis

AUTH_SECRET = "test-auth-secret-0123456789abcdef0123456789abcdef"


OWNED_REDIS = pytest.StashKey[OwnedDatabase]()
# Fixtures that start a process (or need one a session fixture started): their tests are `system`.
PROCESS_FIXTURES = {"redis_url", "mcp_servers", "live_agp", "live_log", "run_server", "stack", "agp_url", "browser"}
DATABASE_FIXTURES = {"db", "transactional_db", "live_server", "django_db_reset_sequences",
                     "django_db_serialized_rollback"}


def pytest_sessionstart(session):
    """With AGP_REDIS_TEST_URL, remember what its database holds before any test runs.

    Once per run: with pytest-xdist the controller does it, and its processes share the
    database (each test names its keys, queues and prefixes uniquely). Without the setting
    each session starts a private redis-server in ``redis_url``.
    """
    url = os.environ.get("AGP_REDIS_TEST_URL")
    if url and not is_xdist_worker(session):
        session.config.stash[OWNED_REDIS] = OwnedDatabase(url)


def pytest_sessionfinish(session):
    """Delete every key that appeared in the owned database during the run (after all the
    processes of a pytest-xdist run have ended)."""
    owned = session.config.stash.get(OWNED_REDIS, None)
    if owned is not None:
        owned.leave_as_found()


def pytest_collection_modifyitems(config, items):
    from django.conf import settings

    for item in items:
        if "redis_url" in item.fixturenames:
            item.add_marker(pytest.mark.redis)
        if PROCESS_FIXTURES & set(item.fixturenames):
            item.add_marker(pytest.mark.system)
    # The modules with a system test first, each module's tests together and in their order:
    # with one pytest process per core, the long tests that wait on the processes they start
    # begin early and the short in-process tests fill the end, rather than one process
    # finishing a schema fuzz while the other has nothing left to run.
    starts_processes = {item.path for item in items if "system" in item.keywords}
    items.sort(key=lambda item: item.path not in starts_processes)
    unit_with_database = [item.nodeid for item in items if "unit" in item.keywords
                          and ("django_db" in item.keywords or DATABASE_FIXTURES & set(item.fixturenames))]
    if unit_with_database:
        raise pytest.UsageError("unit tests use no database; these do (move them to the in-process tier):\n"
                                + "\n".join(unit_with_database))
    on_postgres = settings.DATABASES["default"]["ENGINE"].endswith("postgresql")
    required = os.environ.get("AGP_REQUIRE_POSTGRES") == "1"
    if on_postgres:
        return
    postgres_only = [item for item in items if "postgres" in item.keywords]
    if required:
        for item in postgres_only:
            item.add_marker(pytest.mark.usefixtures("_postgres_required"))
    elif postgres_only:
        # Not run, and said once in the header (pytest_report_header) and the "deselected" count,
        # rather than one SKIPPED line per test.
        config.hook.pytest_deselected(items=postgres_only)
        items[:] = [item for item in items if "postgres" not in item.keywords]


def pytest_report_header(config):
    from django.conf import settings

    if not settings.DATABASES["default"]["ENGINE"].endswith("postgresql"):
        return "database: SQLite; the PostgreSQL-only tests are deselected (set AGP_DATABASE_URL to run them)"
    return "database: PostgreSQL"


def pytest_addoption(parser):
    parser.addoption("--update-query-counts", action="store_true",
                     help="record the query counts this run measures in tests/query_counts.json")


@pytest.fixture
def ledger_head(db):
    """The ledger's head row, as the migrations leave it. A transactional test earlier in the
    same process truncates every table, this row included, and the first append after it
    creates the row again: five more queries in whatever request a query-counting test measures."""
    from core.models import LedgerHead

    return LedgerHead.objects.get_or_create(pk=1)[0]


@pytest.fixture
def query_counts(request, ledger_head):
    """Query counts pinned to tests/query_counts.json (tests/query_counts.py), measured with the
    ledger's head row in place."""
    from tests.query_counts import QueryCounts

    return QueryCounts(update=request.config.getoption("--update-query-counts"))


@contextlib.contextmanager
def processes_refused(item):

    """Within a test that is not ``system``, starting a process fails the test (the policy engine's
    own sandbox processes excepted: they are part of the service under test)."""
    if "system" in item.keywords:
        yield
        return
    popen_init = subprocess.Popen.__init__

    def refuse(what):
        pytest.fail(f"{item.nodeid} starts a process ({what}): mark it `system` (tests/conftest.py)",
                    pytrace=False)

    def guarded_popen(self, args, *rest, **kwargs):
        command = [str(part) for part in args] if isinstance(args, list | tuple) else [str(args)]
        if command[:2] != [sys.executable, str(POLICY_ENGINE_CHILD)]:
            refuse(" ".join(command)[:200])
        popen_init(self, args, *rest, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(subprocess.Popen, "__init__", guarded_popen)
        patch.setattr(os, "fork", lambda: refuse("os.fork"))
        yield


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    with processes_refused(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    with processes_refused(item):
        return (yield)


@pytest.fixture
def _postgres_required():

    pytest.fail("AGP_REQUIRE_POSTGRES=1 but the database is not PostgreSQL: set AGP_DATABASE_URL")


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory):
    """The one Redis database the tests own: ``AGP_REDIS_TEST_URL``, else a private server's."""
    with session_redis(tmp_path_factory.mktemp("redis"), os.environ.get("AGP_REDIS_TEST_URL")) as url:
        yield url


@pytest.fixture
def on_postgres():
    return connection.vendor == "postgresql"


@pytest.fixture
def api():
    """An API client with no credentials (authentication is off unless a test turns it on)."""
    return APIClient()


@pytest.fixture
def auth_settings(settings):
    """Authentication on, with a known secret."""
    settings.AGP_AUTH_SECRET = AUTH_SECRET
    return settings


@pytest.fixture
def make_token(db, auth_settings):
    """Mint a bearer token for a client holding ``scopes`` (all scopes by default)."""
    from auth_tokens.models import Client
    from auth_tokens.services import token_issue

    def _make(scopes=ALL_SCOPES, client_id="test-client"):
        client, _ = Client.objects.get_or_create(client_id=client_id, defaults={"scopes": list(ALL_SCOPES), "kind": "operator"})
        return token_issue(client=client, scopes=list(scopes))["access_token"]

    return _make


@pytest.fixture
def authed_api(make_token):
    """An API client with a token holding every scope, authentication on."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token()}")
    return client


@pytest.fixture
def broker_at(settings):
    """Point the settings and this process's Celery app at the broker ``url`` for one test."""
    from agp_project.broker import transport_for
    from agp_project.celery import app

    saved = app.conf.broker_url, app.conf.broker_transport

    def _point(url):
        settings.CELERY_BROKER_URL = url
        app.conf.broker_url = url
        app.conf.broker_transport = transport_for(url)

    yield _point
    app.conf.broker_url, app.conf.broker_transport = saved
