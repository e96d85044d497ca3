"""POST /oauth/token: the client-credentials grant and its RFC 6749 5.2 errors (docs/reference/api.md)."""

import jwt
import pytest

from auth_tokens.models import Client
from auth_tokens.scopes import ALL_SCOPES
from auth_tokens.services import client_create, client_set_active
from core.models import LedgerEvent
from tests.conftest import AUTH_SECRET

from .helpers import token_request

pytestmark = pytest.mark.django_db

READERS = ["agp.registry.read", "agp.execution.read"]


@pytest.fixture
def reader(auth_settings):
    """A client holding two read scopes, with its secret."""
    client, secret = client_create(client_id="svc:reader", kind="operator", scopes=READERS, actor="test")
    return client, secret


def assert_token_response(response, *, scopes: list[str], ttl: int = 3600) -> dict:
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "application/json"
    assert response["Cache-Control"] == "no-store"
    assert response["Pragma"] == "no-cache"
    body = response.json()
    assert set(body) == {"access_token", "token_type", "expires_in", "scope"}
    assert body["token_type"] == "bearer"
    assert body["expires_in"] == ttl
    assert body["scope"].split() == scopes
    return body


def test_it_issues_a_token_for_form_credentials(api, reader):
    client, secret = reader
    response = token_request(api, {"grant_type": "client_credentials", "client_id": client.client_id,
                                   "client_secret": secret})
    body = assert_token_response(response, scopes=READERS)
    listed = api.get("/agp/ledger-events", HTTP_AUTHORIZATION=f"Bearer {body['access_token']}")
    assert listed.status_code == 200
    # The only event so far is the ledger's record of the client's creation (no secret in it).
    assert [(e["event_type"], e["resource_id"], e["actor"]) for e in listed.json()["items"]] == [
        ("api_client.created", "svc:reader", "test")]
    assert LedgerEvent.objects.get().payload == {"kind": "operator", "agent_id": "", "subject": "", "tenants": [],
                                                 "scopes": READERS, "description": ""}


def test_it_issues_a_token_for_http_basic_credentials(api, reader):
    # The client id contains ':' which RFC 6749 2.3.1 form-encodes before joining with ':'.
    client, secret = reader
    response = token_request(api, {"grant_type": "client_credentials"}, basic=(client.client_id, secret))
    body = assert_token_response(response, scopes=READERS)
    assert api.get("/agp/ledger-events", HTTP_AUTHORIZATION=f"Bearer {body['access_token']}").status_code == 200


def test_it_signs_tokens_hs256_with_the_contract_claims(api, reader):
    client, secret = reader
    body = token_request(api, {"grant_type": "client_credentials"}, basic=(client.client_id, secret)).json()
    token = body["access_token"]
    assert jwt.get_unverified_header(token)["alg"] == "HS256"
    payload = jwt.decode(token, AUTH_SECRET, algorithms=["HS256"], issuer="agp", audience="agp")
    assert {"iss", "aud", "sub", "iat", "exp", "jti", "scope"} <= set(payload)
    assert payload["aud"] == "agp"
    assert payload["sub"] == "svc:reader"
    assert payload["scope"] == " ".join(READERS)
    assert payload["exp"] - payload["iat"] == 3600
    again = token_request(api, {"grant_type": "client_credentials"}, basic=(client.client_id, secret)).json()
    assert jwt.decode(again["access_token"], AUTH_SECRET, algorithms=["HS256"], issuer="agp",
                      audience="agp")["jti"] != payload["jti"]


def test_it_honours_the_token_lifetime_setting(api, reader, settings):
    settings.AGP_TOKEN_TTL_SECONDS = 120
    client, secret = reader
    body = assert_token_response(token_request(api, {"grant_type": "client_credentials", "client_id": client.client_id,
                                                     "client_secret": secret}), scopes=READERS, ttl=120)
    payload = jwt.decode(body["access_token"], AUTH_SECRET, algorithms=["HS256"], issuer="agp", audience="agp")
    assert payload["exp"] - payload["iat"] == 120


def test_it_narrows_the_grant_to_the_requested_scopes(api, reader):
    client, secret = reader
    response = token_request(api, {"grant_type": "client_credentials", "scope": "agp.execution.read"},
                             basic=(client.client_id, secret))
    body = assert_token_response(response, scopes=["agp.execution.read"])
    auth = {"HTTP_AUTHORIZATION": f"Bearer {body['access_token']}"}
    assert api.get("/agp/ledger-events", **auth).status_code == 200
    refused = api.post("/agp/ledger-events", {"event_type": "client.x", "resource_type": "T", "resource_id": "t1"},
                       format="json", **auth)
    assert refused.status_code == 403
    assert not LedgerEvent.objects.filter(event_type="client.x").exists()


@pytest.mark.parametrize("scope", ["agp.registry.write", "agp.execution.read agp.policy.write", "agp.admin"])
def test_it_refuses_scopes_outside_the_clients_set_with_invalid_scope(api, reader, scope):
    client, secret = reader
    response = token_request(api, {"grant_type": "client_credentials", "scope": scope},
                             basic=(client.client_id, secret))
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_scope"
    assert response["Cache-Control"] == "no-store"


@pytest.mark.parametrize("form_secret,basic_secret", [("wrong-secret", None), (None, "wrong-secret")])
def test_it_answers_a_wrong_secret_with_invalid_client_401(api, reader, form_secret, basic_secret):
    client, _ = reader
    if form_secret:
        response = token_request(api, {"grant_type": "client_credentials", "client_id": client.client_id,
                                       "client_secret": form_secret})
    else:
        response = token_request(api, {"grant_type": "client_credentials"}, basic=(client.client_id, basic_secret))
    assert response.status_code == 401
    body = response.json()
    assert body["error"] == "invalid_client"
    assert set(body) == {"error", "error_description"}
    assert response["Cache-Control"] == "no-store"
    if basic_secret:  # RFC 6749 5.2: a Basic attempt is answered with a Basic challenge
        assert response["WWW-Authenticate"] == 'Basic realm="agp"'
    assert "access_token" not in response.content.decode()


def test_it_answers_an_unknown_client_like_a_wrong_secret(api, auth_settings):
    response = token_request(api, {"grant_type": "client_credentials", "client_id": "nobody",
                                   "client_secret": "whatever"})
    assert response.status_code == 401
    assert response.json()["error"] == "invalid_client"


def test_it_refuses_a_disabled_client(api, reader):
    client, secret = reader
    client_set_active(client_id=client.client_id, active=False, actor="test")
    response = token_request(api, {"grant_type": "client_credentials"}, basic=(client.client_id, secret))
    assert response.status_code == 401
    assert response.json()["error"] == "invalid_client"


@pytest.mark.parametrize("grant_type", ["password", "authorization_code", "refresh_token", "CLIENT_CREDENTIALS"])
def test_it_answers_an_unknown_grant_type_with_unsupported_grant_type(api, reader, grant_type):
    client, secret = reader
    response = token_request(api, {"grant_type": grant_type, "client_id": client.client_id, "client_secret": secret})
    assert response.status_code == 400
    assert response.json()["error"] == "unsupported_grant_type"


@pytest.mark.parametrize("form", [
    {},
    {"client_id": "svc:reader", "client_secret": "x"},
    {"grant_type": "client_credentials"},
    {"grant_type": "client_credentials", "client_id": "svc:reader"},
    {"grant_type": "client_credentials", "client_secret": "x"},
], ids=["empty", "no-grant-type", "no-credentials", "no-secret", "no-client-id"])
def test_it_answers_missing_fields_with_invalid_request(api, reader, form):
    response = token_request(api, form)
    assert response.status_code == 400
    body = response.json()
    assert body["error"] == "invalid_request"
    assert body["error_description"]


def test_it_refuses_credentials_in_both_the_form_and_http_basic(api, reader):
    client, secret = reader
    response = token_request(api, {"grant_type": "client_credentials", "client_secret": secret},
                             basic=(client.client_id, secret))
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_request"


def test_it_refuses_a_form_client_id_that_differs_from_the_basic_one(api, reader):
    client, secret = reader
    response = token_request(api, {"grant_type": "client_credentials", "client_id": "someone-else"},
                             basic=(client.client_id, secret))
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_request"


def test_it_refuses_malformed_basic_credentials_with_invalid_client(api, reader):
    response = api.post("/oauth/token", data="grant_type=client_credentials",
                        content_type="application/x-www-form-urlencoded", HTTP_AUTHORIZATION="Basic !!!notbase64")
    assert response.status_code == 401
    assert response.json()["error"] == "invalid_client"


def test_it_refuses_a_json_body(api, reader):
    client, secret = reader
    response = api.post("/oauth/token", {"grant_type": "client_credentials", "client_id": client.client_id,
                                         "client_secret": secret}, format="json")
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_request"


def test_it_answers_other_methods_with_405_in_the_oauth_shape(api, auth_settings):
    response = api.get("/oauth/token")
    assert response.status_code == 405
    assert response["Allow"] == "POST"
    assert response.json()["error"] == "invalid_request"


def test_it_issues_no_token_when_authentication_is_off(api, settings):
    settings.AGP_AUTH_SECRET = None
    client, secret = client_create(client_id="svc", kind="operator", scopes=list(ALL_SCOPES), actor="test")
    response = token_request(api, {"grant_type": "client_credentials"}, basic=(client.client_id, secret))
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_request"
    assert "AGP_AUTH_SECRET" in response.json()["error_description"]


def test_it_stores_only_a_password_hash_of_the_secret(reader):
    client, secret = reader
    stored = Client.objects.get(client_id=client.client_id)
    assert secret not in stored.secret_hash
    assert stored.secret_hash.startswith(("pbkdf2_sha256$", "md5$", "argon2", "bcrypt", "scrypt"))
    assert stored.check_secret(secret)
    assert not stored.check_secret(secret + "x")
