"""Fixtures of the client-library tests: a live gunicorn server with short-lived tokens."""

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from .server import LiveServer, database_url

CLIENT_ID = "live-client"
CLIENT_SECRET = "live-client-secret-0123456789abcdef0123456789"
AUTH_SECRET = "live-auth-secret-0123456789abcdef0123456789abcdef"
TOKEN_TTL_SECONDS = 2


def pem_of(private_key) -> str:
    return private_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                     serialization.NoEncryption()).decode()


def start_live_server(tmp_path_factory, django_db_blocker, *, signing_key, **env) -> LiveServer:
    """gunicorn with authentication on and the bootstrap client; ``env`` adds settings."""
    workdir = tmp_path_factory.mktemp("agp-live")
    with django_db_blocker.unblock():
        db_url = database_url(workdir)
    server = LiveServer.start(workdir, db_url=db_url, env={
        "AGP_AUTH_SECRET": AUTH_SECRET, "AGP_CLIENT_ID": CLIENT_ID, "AGP_CLIENT_SECRET": CLIENT_SECRET,
        "AGP_SIGNING_KEY": pem_of(signing_key), **env})
    server.signing_key = signing_key
    return server


@pytest.fixture(scope="module")
def live_agp(django_db_setup, django_db_blocker, tmp_path_factory):
    """The server with 2 s tokens. Module scope: it starts once per module and stops before
    the test database is dropped."""
    server = start_live_server(tmp_path_factory, django_db_blocker, signing_key=Ed25519PrivateKey.generate(),
                               AGP_TOKEN_TTL_SECONDS=str(TOKEN_TTL_SECONDS))
    yield server
    server.stop()


@pytest.fixture
def live_db(transactional_db):
    """Committed rows the server can see; the ledger head that an earlier test's flush removed."""
    from core.models import LedgerHead

    LedgerHead.objects.get_or_create(pk=1)
