"""Bearer tokens on /agp/: every rejected token is a 401 with the body (docs/reference/api.md) (docs/reference/api.md)."""

import base64
import json
import time

import pytest
from rest_framework.test import APIClient

from auth_tokens.models import Client
from auth_tokens.scopes import ALL_SCOPES
from auth_tokens.services import client_create, client_rotate_secret, client_set_active, client_update, token_issue
from core.models import LedgerEvent

from .helpers import assert_insufficient_scope, assert_unauthenticated, claims, sign, token_request

pytestmark = pytest.mark.django_db

EVENT = {"event_type": "client.audit", "resource_type": "Thing", "resource_id": "thing-1"}


@pytest.fixture
def client_row(auth_settings):
    return Client.objects.create(client_id="test-client", kind="operator", scopes=list(ALL_SCOPES))


def _b64(data: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def _tampered(token: str) -> str:
    header, payload, signature = token.split(".")
    claims_ = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims_["sub"] = "someone-else"
    return ".".join([header, _b64(claims_), signature])


def _flip_signature(token: str) -> str:
    head, _, signature = token.rpartition(".")
    raw = bytearray(base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4)))
    raw[0] ^= 0x01
    return f"{head}.{base64.urlsafe_b64encode(bytes(raw)).rstrip(b'=').decode()}"


def _alg_none() -> str:
    return ".".join([_b64({"alg": "none", "typ": "JWT"}), _b64(claims()), ""])


def _valid() -> str:
    return token_issue(client=Client.objects.get(client_id="test-client"), scopes=list(ALL_SCOPES))["access_token"]


REJECTED = {
    "alg-none": lambda: "Bearer " + _alg_none(),
    "alg-none-with-signature-of-hs256": lambda: "Bearer " + ".".join(
        [_b64({"alg": "none", "typ": "JWT"})] + _valid().split(".")[1:]),
    "other-secret": lambda: "Bearer " + sign(claims(), key="another-secret-0123456789abcdef0123456789abcdef"),
    "hs512-with-the-right-secret": lambda: "Bearer " + sign(claims(), algorithm="HS512"),
    "expired": lambda: "Bearer " + sign(claims(iat=int(time.time()) - 7200, exp=int(time.time()) - 3600)),
    "tampered-payload": lambda: "Bearer " + _tampered(_valid()),
    "tampered-signature": lambda: "Bearer " + _flip_signature(_valid()),
    "wrong-issuer": lambda: "Bearer " + sign(claims(iss="someone")),
    "no-issuer": lambda: "Bearer " + sign(claims(iss=None)),
    # Signed with the right secret for another service, or for none: the audience decides.
    "wrong-audience": lambda: "Bearer " + sign(claims(aud="billing")),
    "no-audience": lambda: "Bearer " + sign(claims(aud=None)),
    "no-expiry": lambda: "Bearer " + sign(claims(exp=None)),
    # Signed with the right secret, so only the expiry's value can fail: past Python's
    # datetime (year 33658), past any integer type, not a number.
    "expiry-beyond-datetime": lambda: "Bearer " + sign(claims(exp=10**12)),
    "expiry-beyond-64-bits": lambda: "Bearer " + sign(claims(exp=2**70)),
    "expiry-not-a-number": lambda: "Bearer " + sign(claims(exp="tomorrow")),
    "no-subject": lambda: "Bearer " + sign(claims(sub=None)),
    "unknown-subject": lambda: "Bearer " + sign(claims(sub="nobody")),
    "refresh-token-type": lambda: "Bearer " + sign(claims(token_type="refresh")),
    "garbage": lambda: "Bearer not-a-jwt",
    "garbage-three-parts": lambda: "Bearer a.b.c",
    "empty-bearer": lambda: "Bearer ",
    "wrong-scheme-token": lambda: "Token " + _valid(),
    "wrong-scheme-basic": lambda: "Basic " + base64.b64encode(b"test-client:secret").decode(),
    "bare-token": lambda: _valid(),
}


@pytest.mark.filterwarnings("ignore::jwt.warnings.InsecureKeyLengthWarning")  # the HS512 case
@pytest.mark.parametrize("case", REJECTED)
def test_it_rejects_a_bad_token_with_401_and_the_c2_body(api, client_row, case):
    header = REJECTED[case]()
    before = LedgerEvent.objects.count()
    assert_unauthenticated(api.get("/agp/ledger-events", HTTP_AUTHORIZATION=header))
    assert_unauthenticated(api.post("/agp/ledger-events", EVENT, format="json", HTTP_AUTHORIZATION=header,
                                    HTTP_IDEMPOTENCY_KEY="k-1"))
    assert LedgerEvent.objects.count() == before


@pytest.mark.parametrize("query", ["access_token={token}", "limit=1&access%5Ftoken={token}"])
def test_it_refuses_a_token_in_the_query_string_even_a_valid_one(api, client_row, query):
    query = query.format(token=_valid())
    read = api.get(f"/agp/ledger-events?{query}")
    write = api.post(f"/agp/ledger-events?{query}", EVENT, format="json", HTTP_AUTHORIZATION=f"Bearer {_valid()}")

    for response in (read, write):
        assert response.status_code == 400, response.content
        assert response["WWW-Authenticate"] == 'Bearer error="invalid_request"'
        error = response.json()["error"]
        assert (error["code"], error["details"]) == (
            "AGP_INVALID_REQUEST", {"fields": {"access_token": ["Not accepted in the query string."]}})
    assert not LedgerEvent.objects.exists()


def test_it_rejects_a_missing_token_with_401(api, client_row):
    assert_unauthenticated(api.get("/agp/ledger-events"))
    assert_unauthenticated(api.post("/agp/ledger-events", EVENT, format="json"))
    assert not LedgerEvent.objects.exists()


def test_it_accepts_a_valid_token(api, client_row):
    response = api.post("/agp/ledger-events", EVENT, format="json", HTTP_AUTHORIZATION="Bearer " + _valid())
    assert response.status_code == 201, response.content
    assert response.json()["actor"] == "test-client"
    assert LedgerEvent.objects.get(event_type="client.audit").actor == "test-client"


def test_it_rejects_the_live_tokens_of_a_disabled_client(api, client_row):
    token = _valid()
    assert api.get("/agp/ledger-events", HTTP_AUTHORIZATION=f"Bearer {token}").status_code == 200
    client_set_active(client_id="test-client", active=False, actor="test")
    assert_unauthenticated(api.get("/agp/ledger-events", HTTP_AUTHORIZATION=f"Bearer {token}"))
    assert_unauthenticated(api.post("/agp/ledger-events", EVENT, format="json", HTTP_AUTHORIZATION=f"Bearer {token}"))
    assert not LedgerEvent.objects.filter(event_type="client.audit").exists()


def test_it_does_not_revive_old_tokens_when_a_client_is_enabled_again(api, client_row):
    old = sign(claims(iat=int(time.time()) - 5))
    client_set_active(client_id="test-client", active=False, actor="test")
    client_set_active(client_id="test-client", active=True, actor="test")
    assert_unauthenticated(api.get("/agp/ledger-events", HTTP_AUTHORIZATION=f"Bearer {old}"))
    assert api.get("/agp/ledger-events", HTTP_AUTHORIZATION=f"Bearer {_valid()}").status_code == 200
    assert list(LedgerEvent.objects.order_by("sequence").values_list("event_type", flat=True)) == [
        "api_client.disabled", "api_client.enabled"]


def test_it_rejects_tokens_issued_before_a_secret_rotation(api, auth_settings):
    client, secret = client_create(client_id="rotating", kind="operator", scopes=list(ALL_SCOPES), actor="test")
    old = sign(claims(sub="rotating", iat=int(time.time()) - 5))
    assert api.get("/agp/ledger-events", HTTP_AUTHORIZATION=f"Bearer {old}").status_code == 200
    new_secret = client_rotate_secret(client_id="rotating", actor="test")
    assert_unauthenticated(api.get("/agp/ledger-events", HTTP_AUTHORIZATION=f"Bearer {old}"))
    refused = token_request(api, {"grant_type": "client_credentials"}, basic=("rotating", secret))
    assert refused.status_code == 401
    fresh = token_request(api, {"grant_type": "client_credentials"}, basic=("rotating", new_secret)).json()
    assert api.get("/agp/ledger-events", HTTP_AUTHORIZATION=f"Bearer {fresh['access_token']}").status_code == 200


def test_it_rejects_a_token_minted_in_the_same_second_as_the_rotation(api, auth_settings):
    client_create(client_id="rotating", kind="operator", scopes=list(ALL_SCOPES), actor="test")
    client_rotate_secret(client_id="rotating", actor="test")
    rotated_at = Client.objects.get(client_id="rotating").tokens_not_before
    # Minted with the pre-rotation generation within the rotation's second: iat equals
    # the rotation's whole second, so only the generation tells it apart.
    same_second = sign(claims(sub="rotating", iat=int(rotated_at.timestamp()), gen=0))
    current = sign(claims(sub="rotating", iat=int(rotated_at.timestamp()), gen=1))

    assert_unauthenticated(api.get("/agp/ledger-events", HTTP_AUTHORIZATION=f"Bearer {same_second}"))
    assert api.get("/agp/ledger-events", HTTP_AUTHORIZATION=f"Bearer {current}").status_code == 200
    assert Client.objects.get(client_id="rotating").token_generation == 1


def test_it_rejects_a_token_without_a_generation_claim(api, client_row):
    assert_unauthenticated(api.get("/agp/ledger-events",
                                   HTTP_AUTHORIZATION=f"Bearer {sign(claims(gen=None))}"))


def test_it_rejects_tokens_after_the_auth_secret_changes(api, client_row, settings):
    token = _valid()
    settings.AGP_AUTH_SECRET = "a-new-auth-secret-0123456789abcdef0123456789abcdef"
    assert_unauthenticated(api.get("/agp/ledger-events", HTTP_AUTHORIZATION=f"Bearer {token}"))


def test_it_drops_a_scope_removed_from_the_client_from_live_tokens(api, client_row):
    token = _valid()
    client_update(client_id="test-client", scopes=["agp.execution.read"], actor="test")
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    assert api.get("/agp/ledger-events", **auth).status_code == 200
    assert_insufficient_scope(api.post("/agp/ledger-events", EVENT, format="json", **auth), {"agp.execution.write"})
    assert not LedgerEvent.objects.filter(event_type="client.audit").exists()


def test_it_ignores_the_token_when_authentication_is_off(settings, db):
    settings.AGP_AUTH_SECRET = None
    api = APIClient()
    response = api.post("/agp/ledger-events", EVENT, format="json", HTTP_AUTHORIZATION="Bearer garbage")
    assert response.status_code == 201
    assert LedgerEvent.objects.get(event_type="client.audit").actor == "anonymous"


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/agp/openapi.json", "/.well-known/jwks.json"])
def test_it_leaves_health_readiness_openapi_and_jwks_open(api, auth_settings, path):
    response = api.get(path)
    assert response.status_code == 200, response.content
    assert response.json()


def test_it_describes_the_client_credentials_scheme_and_scopes_in_the_openapi_document(api, auth_settings):
    document = api.get("/agp/openapi.json").json()
    scheme = document["components"]["securitySchemes"]["oauth2"]
    assert scheme["type"] == "oauth2"
    assert scheme["flows"]["clientCredentials"]["tokenUrl"] == "/oauth/token"
    assert set(scheme["flows"]["clientCredentials"]["scopes"]) == set(ALL_SCOPES)
    ledger = document["paths"]["/agp/ledger-events"]
    assert ledger["post"]["security"] == [{"oauth2": ["agp.execution.write"]}]
    assert ledger["get"]["security"] == [{"oauth2": ["agp.execution.read"]}, {"oauth2": ["agp.execution.write"]}]


def test_it_uses_the_token_client_as_the_idempotency_scope(api, auth_settings):
    # Two clients may use the same key for different bodies without colliding (docs/reference/api.md).
    Client.objects.create(client_id="a", kind="operator", scopes=list(ALL_SCOPES))
    Client.objects.create(client_id="b", kind="operator", scopes=list(ALL_SCOPES))
    for name in ("a", "b"):
        token = token_issue(client=Client.objects.get(client_id=name), scopes=list(ALL_SCOPES))["access_token"]
        response = api.post("/agp/ledger-events", {**EVENT, "resource_id": f"thing-{name}"}, format="json",
                            HTTP_AUTHORIZATION=f"Bearer {token}", HTTP_IDEMPOTENCY_KEY="same-key")
        assert response.status_code == 201
    assert sorted(LedgerEvent.objects.filter(event_type="client.audit").values_list("actor", flat=True)) == ["a", "b"]

