"""Shared fixtures: an API client, tokens, the tests' Redis, and the PostgreSQL guard.

Tests marked ``postgres`` need PostgreSQL (row locks, concurrent transactions). On SQLite
they are skipped, except when ``AGP_REQUIRE_POSTGRES=1`` (set by ``.ci/run``): then a
missing PostgreSQL fails the run instead of silently skipping.

Tests that use Redis get it from ``redis_url`` (tests/redis_server.py) and nowhere else;
they are marked ``redis`` automatically.
"""

import os

import pytest
from django.db import connection
from rest_framework.test import APIClient

from auth_tokens.scopes import ALL_SCOPES
from tests.redis_server import session_redis

AUTH_SECRET = "test-auth-secret-0123456789abcdef0123456789abcdef"


def pytest_collection_modifyitems(config, items):
    from django.conf import settings

    shared_redis = bool(os.environ.get("AGP_REDIS_TEST_URL"))
    for item in items:
        if "redis_url" in item.fixturenames:
            item.add_marker(pytest.mark.redis)
            if shared_redis:
                # Several processes (scripts/test: pytest-xdist, --dist loadgroup) would share
                # the one database the run owns: one process runs every Redis test. Without
                # the setting each process starts a private server of its own.
                item.add_marker(pytest.mark.xdist_group("redis"))
    on_postgres = settings.DATABASES["default"]["ENGINE"].endswith("postgresql")
    required = os.environ.get("AGP_REQUIRE_POSTGRES") == "1"
    if on_postgres:
        return
    for item in items:
        if "postgres" in item.keywords:
            if required:
                item.add_marker(pytest.mark.usefixtures("_postgres_required"))
            else:
                item.add_marker(pytest.mark.skip(reason="needs PostgreSQL (set AGP_DATABASE_URL)"))


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
        client, _ = Client.objects.get_or_create(client_id=client_id, defaults={"scopes": list(ALL_SCOPES)})
        return token_issue(client=client, scopes=list(scopes))["access_token"]

    return _make


@pytest.fixture
def authed_api(make_token):
    """An API client with a token holding every scope, authentication on."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token()}")
    return client
