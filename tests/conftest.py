"""Shared fixtures: an API client, tokens, the tests' Redis, and the PostgreSQL guard.

Tests marked ``postgres`` need PostgreSQL (row locks, concurrent transactions). On SQLite
they are deselected (the header says so), except when ``AGP_REQUIRE_POSTGRES=1`` (set by
``.ci/run``): then a missing PostgreSQL fails the run instead of silently leaving them out.

Tests that use Redis get it from ``redis_url`` (tests/redis_server.py) and nowhere else;
they are marked ``redis`` automatically.
"""

import os

import pytest
from django.db import connection
from rest_framework.test import APIClient
from xdist import is_xdist_worker

from auth_tokens.scopes import ALL_SCOPES
from tests.redis_server import OwnedDatabase, session_redis

AUTH_SECRET = "test-auth-secret-0123456789abcdef0123456789abcdef"


OWNED_REDIS = pytest.StashKey[OwnedDatabase]()



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
    from agp_project.celery import app

    saved = app.conf.broker_url, app.conf.broker_transport

    def _point(url):
        settings.CELERY_BROKER_URL = url
        app.conf.broker_url = url
        app.conf.broker_transport = None  # the URL's own (the embedded broker's is named in the settings)

    yield _point
    app.conf.broker_url, app.conf.broker_transport = saved
