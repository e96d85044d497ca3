"""Fixtures of the reliability tests: the running stack of the hostile-client tests, gunicorn as
scripts/serve runs it (gthread, gunicorn.conf.py) on the test database, authentication on, the
test broker and signing key, and a requests session per client (test_hostile_clients.py,
test_hostile_requests.py)."""

import pytest
import requests
from cryptography.hazmat.primitives import serialization

from agp_project.signing import get_signer
from auth_tokens.scopes import ALL_SCOPES
from tests.agp_client.server import LiveServer, database_url
from tests.conftest import AUTH_SECRET
from tests.execution.worker import test_broker, worker_db  # noqa: F401
from tests.reliability.hostile import TIME_LIMIT_MS


@pytest.fixture(scope="module")
def stack(test_broker, django_db_setup, django_db_blocker, tmp_path_factory):  # noqa: F811
    """gunicorn: one worker process with four threads (so a stalled thread would stall its
    neighbours' process), authentication on, the test broker, the test signing key."""
    signer = get_signer()
    pem = signer.private_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()).decode()
    workdir = tmp_path_factory.mktemp("hostile")
    with django_db_blocker.unblock():
        db_url = database_url(workdir)
    server = LiveServer.start(workdir, db_url=db_url, workers=1, threads=4, env={
        "AGP_AUTH_SECRET": AUTH_SECRET, "AGP_BROKER_URL": test_broker.url, "AGP_CELERY_QUEUE": test_broker.queue,
        "AGP_SIGNING_KEY": pem, "AGP_ISSUER": signer.issuer, "AGP_POLICY_TIMEOUT_MS": str(TIME_LIMIT_MS),
        "AGP_POLICY_MEMORY_MB": "256", "AGP_ALLOW_PRIVATE_URLS": "1"})
    yield server
    server.stop()


@pytest.fixture
def as_client(worker_db, make_token, stack):  # noqa: F811
    """``as_client(client_id, scopes)``: a requests session with that client's token."""
    sessions = []

    def _make(client_id: str = "hostile-admin", scopes=ALL_SCOPES) -> requests.Session:
        session = requests.Session()
        session.headers["Authorization"] = f"Bearer {make_token(scopes=list(scopes), client_id=client_id)}"
        sessions.append(session)
        return session

    yield _make
    for session in sessions:
        session.close()
