"""Client keys, private_key_jwt (RFC 7523) and DPoP-bound tokens (RFC 9449), in process, with real tokens."""

import json
import time
import uuid

import jwt
import pytest

from agp_client.keys import ClientKey
from auth_tokens.models import Client, UsedJti
from auth_tokens.possession import access_token_hash
from auth_tokens.services import client_create

from .helpers import token_request

pytestmark = pytest.mark.django_db

TOKEN_URL = "http://testserver/oauth/token"
LIST_URL = "http://testserver/agp/ledger-events"


@pytest.fixture
def key():
    return ClientKey.generate(kid="k1")


@pytest.fixture
def keyed(auth_settings, key):
    client, _ = client_create(client_id="svc:keyed", kind="operator", actor="test", jwks=key.public_jwks())
    return client


def assertion_form(assertion: str, **extra) -> dict:
    return {"grant_type": "client_credentials", "client_assertion_type":
            "urn:ietf:params:oauth:client-assertion-type:jwt-bearer", "client_assertion": assertion, **extra}


def hand_assertion(key: ClientKey, **claims) -> str:
    now = int(time.time())
    body = {"iss": "svc:keyed", "sub": "svc:keyed", "aud": TOKEN_URL, "exp": now + 60, "jti": uuid.uuid4().hex,
            **claims}
    return key.sign({"kid": key.kid}, json.dumps(body).encode())


def assert_invalid_client(response, words: str):
    assert response.status_code == 401, response.content
    assert response.json()["error"] == "invalid_client"
    assert words in response.json()["error_description"]


def dpop_token(api, key: ClientKey, proof_key: ClientKey | None = None) -> str:
    proof = (proof_key or key).dpop_proof(method="POST", url=TOKEN_URL)
    response = token_request(api, assertion_form(key.client_assertion(client_id="svc:keyed", token_url=TOKEN_URL)),
                              HTTP_DPOP=proof)
    assert response.status_code == 200, response.content
    assert response.json()["token_type"] == "DPoP"
    return response.json()["access_token"]


def call(api, token: str, proof: str | None, *, scheme="DPoP", path="/agp/ledger-events"):
    extra = {"HTTP_AUTHORIZATION": f"{scheme} {token}"}
    if proof is not None:
        extra["HTTP_DPOP"] = proof
    return api.get(path, **extra)


def assert_dpop_refused(response, error="invalid_dpop_proof", words=""):
    assert response.status_code == 401, response.content
    assert response.json()["error"]["code"] == "AGP_UNAUTHENTICATED"
    assert response["WWW-Authenticate"].startswith(f'DPoP error="{error}"')
    assert words in response.json()["error"]["message"]


# --- keys on clients --------------------------------------------------------------------------------------
def test_it_registers_public_keys_over_the_api(api, make_token, key):
    token = make_token()
    response = api.post("/agp/clients", {"kind": "operator", "jwks": key.public_jwks(), "require_dpop": True},
                        format="json", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 201, response.content
    assert response.json()["jwks"] == key.public_jwks() and response.json()["require_dpop"] is True
    assert Client.objects.get(client_id=response.json()["client_id"]).jwks == key.public_jwks()


@pytest.mark.parametrize("jwks, words", [
    ({"keys": [{"kty": "oct", "k": "c2VjcmV0", "kid": "h"}]}, "OKP Ed25519 or EC P-256"),
    ("not a set", "JWK Set"),
    ({"keys": [{"kty": "OKP", "crv": "Ed25519", "x": "AAAA"}]}, "does not import"),
    ({"keys": [{"kty": "OKP", "crv": "Ed25519", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo", "kid": "a",
                "alg": "HS256"}]}, "alg must be"),
    ({"keys": [{"kty": "OKP", "crv": "Ed25519", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo", "kid": "a",
                "use": "enc"}]}, "use must be sig"),
])
def test_it_refuses_keys_it_cannot_use(api, make_token, key, jwks, words):
    response = api.post("/agp/clients", {"kind": "operator", "jwks": jwks}, format="json",
                        HTTP_AUTHORIZATION=f"Bearer {make_token()}")
    assert response.status_code == 400, response.content
    assert words in response.json()["error"]["details"]["fields"]["jwks"][0]


def test_it_refuses_a_private_key_or_a_key_without_kid(api, make_token, key):
    for jwks, words in (({"keys": [key.private_jwk()]}, "private"),
                        ({"keys": [{k: v for k, v in key.public_jwk().items() if k != "kid"}]}, "kid")):
        response = api.post("/agp/clients", {"kind": "operator", "jwks": jwks}, format="json",
                            HTTP_AUTHORIZATION=f"Bearer {make_token()}")
        assert response.status_code == 400, response.content
        assert words in response.json()["error"]["details"]["fields"]["jwks"][0]


# --- private_key_jwt --------------------------------------------------------------------------------------
def test_it_issues_a_token_for_a_client_assertion(api, keyed, key):
    response = token_request(api, assertion_form(key.client_assertion(client_id="svc:keyed", token_url=TOKEN_URL)))
    assert response.status_code == 200, response.content
    assert response.json()["token_type"] == "bearer"
    assert call(api, response.json()["access_token"], None, scheme="Bearer").status_code == 200


def test_it_refuses_a_replayed_assertion(api, keyed, key):
    assertion = key.client_assertion(client_id="svc:keyed", token_url=TOKEN_URL)
    assert token_request(api, assertion_form(assertion)).status_code == 200
    assert_invalid_client(token_request(api, assertion_form(assertion)), "used before")
    assert UsedJti.objects.count() == 1


def test_it_refuses_an_expired_assertion(api, keyed, key):
    assert_invalid_client(token_request(api, assertion_form(hand_assertion(key, exp=int(time.time()) - 30))),
                          "expired")


def test_it_refuses_an_assertion_living_past_five_minutes(api, keyed, key):
    assert_invalid_client(token_request(api, assertion_form(hand_assertion(key, exp=int(time.time()) + 900))),
                          "300 seconds")


def test_it_refuses_an_assertion_for_another_audience(api, keyed, key):
    assertion = key.client_assertion(client_id="svc:keyed", token_url="https://elsewhere.example/oauth/token")
    assert_invalid_client(token_request(api, assertion_form(assertion)), "aud")


def test_it_refuses_an_assertion_signed_by_another_key(api, keyed):
    other = ClientKey.generate(kid="k1")
    assertion = other.client_assertion(client_id="svc:keyed", token_url=TOKEN_URL)
    assert_invalid_client(token_request(api, assertion_form(assertion)), "does not verify")


def test_it_refuses_an_assertion_whose_sub_is_another_client(api, keyed, key):
    assert_invalid_client(token_request(api, assertion_form(hand_assertion(key, sub="svc:other"))), "iss and sub")


def test_it_refuses_an_hmac_assertion(api, keyed):
    forged = jwt.encode({"iss": "svc:keyed", "sub": "svc:keyed", "aud": TOKEN_URL, "exp": int(time.time()) + 60,
                         "jti": "x"}, "secret-of-thirty-two-bytes-or-more!", algorithm="HS256", headers={"kid": "k1"})
    assert_invalid_client(token_request(api, assertion_form(forged)), "not accepted")


def test_it_refuses_an_assertion_for_a_client_without_keys(api, auth_settings, key):
    client_create(client_id="svc:keyed", kind="operator", actor="test")
    assert_invalid_client(token_request(api, assertion_form(key.client_assertion(client_id="svc:keyed",
                                                                                 token_url=TOKEN_URL))), "no keys")


def test_it_refuses_an_assertion_with_a_secret_too(api, keyed, key):
    form = assertion_form(key.client_assertion(client_id="svc:keyed", token_url=TOKEN_URL), client_secret="x")
    response = token_request(api, form)
    assert response.status_code == 400 and response.json()["error"] == "invalid_request"


@pytest.mark.parametrize("assertion", ["", "garbage", "a.b.c", "é.b.c"])
def test_it_answers_garbage_assertions_with_oauth_errors(api, keyed, assertion):
    response = token_request(api, assertion_form(assertion))
    assert response.status_code in (400, 401), response.content
    assert response.json()["error"] in ("invalid_request", "invalid_client")


# --- DPoP -------------------------------------------------------------------------------------------------
def test_it_binds_a_token_to_the_proofs_key(api, keyed, key):
    token = dpop_token(api, key)
    claims = jwt.decode(token, options={"verify_signature": False})
    assert claims["cnf"] == {"jkt": key.thumbprint()}
    proof = key.dpop_proof(method="GET", url=LIST_URL, access_token=token)
    assert call(api, token, proof).status_code == 200


def test_it_refuses_a_bound_token_as_a_bearer_token(api, keyed, key):
    assert_dpop_refused(call(api, dpop_token(api, key), None, scheme="Bearer"), "invalid_token", "bound")


def test_it_refuses_a_bound_token_without_a_proof(api, keyed, key):
    assert_dpop_refused(call(api, dpop_token(api, key), None), words="needs a DPoP proof")


def test_it_refuses_a_proof_for_another_method(api, keyed, key):
    token = dpop_token(api, key)
    assert_dpop_refused(call(api, token, key.dpop_proof(method="POST", url=LIST_URL, access_token=token)),
                        words="htm")


def test_it_refuses_a_proof_for_another_url(api, keyed, key):
    token = dpop_token(api, key)
    proof = key.dpop_proof(method="GET", url="http://testserver/agp/decisions", access_token=token)
    assert_dpop_refused(call(api, token, proof), words="htu")


def test_it_refuses_a_replayed_proof(api, keyed, key):
    token = dpop_token(api, key)
    proof = key.dpop_proof(method="GET", url=LIST_URL, access_token=token)
    assert call(api, token, proof).status_code == 200
    assert_dpop_refused(call(api, token, proof), words="used before")


def test_it_refuses_a_proof_by_another_key(api, keyed, key):
    token = dpop_token(api, key)
    other = ClientKey.generate("P-256")
    assert_dpop_refused(call(api, token, other.dpop_proof(method="GET", url=LIST_URL, access_token=token)),
                        words="another key")


def test_it_refuses_a_proof_without_the_tokens_hash(api, keyed, key):
    token = dpop_token(api, key)
    assert_dpop_refused(call(api, token, key.dpop_proof(method="GET", url=LIST_URL)), words="ath")


def test_it_refuses_a_stale_proof(api, keyed, key):
    token = dpop_token(api, key)
    claims = {"htm": "GET", "htu": LIST_URL, "iat": int(time.time()) - 120, "jti": uuid.uuid4().hex,
              "ath": access_token_hash(token)}
    stale = key.sign({"typ": "dpop+jwt", "jwk": key.public_jwk()}, json.dumps(claims).encode())
    assert_dpop_refused(call(api, token, stale), words="iat")


def test_it_refuses_an_unbound_token_sent_as_dpop(api, keyed, key):
    response = token_request(api, assertion_form(key.client_assertion(client_id="svc:keyed", token_url=TOKEN_URL)))
    token = response.json()["access_token"]
    assert_dpop_refused(call(api, token, key.dpop_proof(method="GET", url=LIST_URL, access_token=token)),
                        "invalid_token", "not bound")


def test_it_answers_a_bad_proof_at_the_token_endpoint_with_invalid_dpop_proof(api, keyed, key):
    proof = key.dpop_proof(method="GET", url=TOKEN_URL)
    response = token_request(api, assertion_form(key.client_assertion(client_id="svc:keyed", token_url=TOKEN_URL)),
                             HTTP_DPOP=proof)
    assert response.status_code == 400 and response.json()["error"] == "invalid_dpop_proof"


def test_it_gives_a_require_dpop_client_no_plain_token(api, auth_settings, key):
    _, secret = client_create(client_id="svc:keyed", kind="operator", actor="test", jwks=key.public_jwks(),
                              require_dpop=True)
    for form in ({"grant_type": "client_credentials", "client_id": "svc:keyed", "client_secret": secret},
                 assertion_form(key.client_assertion(client_id="svc:keyed", token_url=TOKEN_URL))):
        response = token_request(api, form)
        assert response.status_code == 400 and response.json()["error"] == "invalid_dpop_proof"
    assert dpop_token(api, key)


def test_it_refuses_bearer_tokens_once_a_client_requires_dpop(api, keyed, key):
    response = token_request(api, assertion_form(key.client_assertion(client_id="svc:keyed", token_url=TOKEN_URL)))
    Client.objects.filter(client_id="svc:keyed").update(require_dpop=True)
    response = call(api, response.json()["access_token"], None, scheme="Bearer")
    assert response.status_code == 401 and "requires DPoP" in response.json()["error"]["message"]


def test_it_answers_an_assertion_nested_past_pythons_stack_with_401(api, keyed, key):
    deep = key.sign({"kid": key.kid}, b"[" * 5000 + b"]" * 5000)
    assert_invalid_client(token_request(api, assertion_form(deep)), "not JSON")


def test_it_replaces_and_removes_keys_and_requires_dpop_over_patch(api, make_token, keyed, key):
    new = ClientKey.generate("P-256", kid="k2")
    headers = {"HTTP_AUTHORIZATION": f"Bearer {make_token()}"}
    response = api.patch("/agp/clients/svc:keyed", {"jwks": new.public_jwks(), "require_dpop": True}, format="json",
                         **headers)
    assert response.status_code == 200, response.content
    assert (response.json()["jwks"], response.json()["require_dpop"]) == (new.public_jwks(), True)
    assert_invalid_client(token_request(api, assertion_form(key.client_assertion(client_id="svc:keyed",
                                                                                 token_url=TOKEN_URL))), "kid")
    assert api.patch("/agp/clients/svc:keyed", {"jwks": {"keys": []}}, format="json", **headers).status_code == 200
    assert Client.objects.get(client_id="svc:keyed").jwks == {}
    bad = api.patch("/agp/clients/svc:keyed", {"jwks": {"keys": [new.private_jwk()]}}, format="json", **headers)
    assert bad.status_code == 400 and "private" in bad.json()["error"]["details"]["fields"]["jwks"][0]
