"""Single use holds across web nodes: two gunicorn servers behind one public URL share the jti store.

A client assertion or a DPoP proof spent at one server is refused by the other, as it would be
by any node behind a load balancer (both run with the same ``AGP_BASE_URL``, which is the URL
clients sign).
"""

import pytest
import requests
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agp_client.keys import ClientKey
from tests.agp_client.conftest import AUTH_SECRET, CLIENT_ID, CLIENT_SECRET, live_db, pem_of  # noqa: F401
from tests.agp_client.server import LiveServer, database_url

pytestmark = [pytest.mark.system, pytest.mark.usefixtures("live_db")]

PUBLIC = "http://agp.example"
CLIENT = "svc:two"


@pytest.fixture(scope="module")
def two_servers(django_db_setup, django_db_blocker, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("agp-two")
    with django_db_blocker.unblock():
        db_url = database_url(workdir)
    env = {"AGP_AUTH_SECRET": AUTH_SECRET, "AGP_CLIENT_ID": CLIENT_ID, "AGP_CLIENT_SECRET": CLIENT_SECRET,
           "AGP_SIGNING_KEY": pem_of(Ed25519PrivateKey.generate()), "AGP_BASE_URL": PUBLIC}
    servers = []
    try:
        for name in ("a", "b"):
            servers.append(LiveServer.start(workdir / name, env=env, db_url=db_url, workers=1))
        yield servers
    finally:
        for server in servers:
            server.stop()


@pytest.fixture
def keyed_client(two_servers):
    """An operator client with a key, made over the first server's API."""
    first = two_servers[0]
    token = requests.post(f"{first.url}/oauth/token", data={"grant_type": "client_credentials",
                                                           "client_id": CLIENT_ID, "client_secret": CLIENT_SECRET},
                          timeout=10).json()["access_token"]
    key = ClientKey.generate()
    response = requests.post(f"{first.url}/agp/clients", json={"client_id": CLIENT, "kind": "operator",
                                                               "jwks": key.public_jwks()},
                             headers={"Authorization": f"Bearer {token}"}, timeout=10)
    assert response.status_code in (201, 409), response.text  # 409: made by the module's other test (SQLite file)
    response = requests.patch(f"{first.url}/agp/clients/{CLIENT}", json={"jwks": key.public_jwks()},
                              headers={"Authorization": f"Bearer {token}"}, timeout=10)
    assert response.status_code == 200, response.text
    return key


def token_post(server, assertion: str, proof: str | None = None):
    return requests.post(f"{server.url}/oauth/token", data={
        "grant_type": "client_credentials", "client_assertion": assertion,
        "client_assertion_type": "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"},
        headers={"DPoP": proof} if proof else {}, timeout=10)


def test_it_refuses_an_assertion_replayed_to_the_other_server(two_servers, keyed_client):
    first, second = two_servers
    assertion = keyed_client.client_assertion(client_id=CLIENT, token_url=f"{PUBLIC}/oauth/token")
    assert token_post(first, assertion).status_code == 200
    replayed = token_post(second, assertion)
    assert replayed.status_code == 401, replayed.text
    assert replayed.json()["error"] == "invalid_client" and "used before" in replayed.json()["error_description"]


def test_it_refuses_a_dpop_proof_replayed_to_the_other_server(two_servers, keyed_client):
    first, second = two_servers
    key = keyed_client
    answer = token_post(first, key.client_assertion(client_id=CLIENT, token_url=f"{PUBLIC}/oauth/token"),
                        key.dpop_proof(method="POST", url=f"{PUBLIC}/oauth/token"))
    assert answer.status_code == 200, answer.text
    token = answer.json()["access_token"]
    proof = key.dpop_proof(method="GET", url=f"{PUBLIC}/agp/ledger-events", access_token=token)
    headers = {"Authorization": f"DPoP {token}", "DPoP": proof}
    assert requests.get(f"{first.url}/agp/ledger-events", headers=headers, timeout=10).status_code == 200
    replayed = requests.get(f"{second.url}/agp/ledger-events", headers=headers, timeout=10)
    assert replayed.status_code == 401, replayed.text
    assert replayed.headers["WWW-Authenticate"].startswith('DPoP error="invalid_dpop_proof"')
    assert "used before" in replayed.json()["error"]["message"]
    fresh = key.dpop_proof(method="GET", url=f"{PUBLIC}/agp/ledger-events", access_token=token)
    assert requests.get(f"{second.url}/agp/ledger-events", headers={**headers, "DPoP": fresh},
                        timeout=10).status_code == 200
