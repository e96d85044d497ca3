"""The bootstrap client from the environment, and failed-credential throttling (docs/reference/api.md)."""

import time
import uuid

import pytest
import redis
from django.core.cache import caches

from auth_tokens.models import Client
from auth_tokens.scopes import ALL_SCOPES
from auth_tokens.services import client_create, client_set_active
from core.models import LedgerEvent

from .helpers import assert_unauthenticated, claims, sign, token_request

pytestmark = pytest.mark.django_db

BOOT_SECRET = "bootstrap-secret-0123456789abcdef0123456789"


@pytest.fixture
def bootstrap(auth_settings):
    auth_settings.AGP_CLIENT_ID = "agp-admin"
    auth_settings.AGP_CLIENT_SECRET = BOOT_SECRET
    return auth_settings


def test_it_issues_the_bootstrap_client_a_token_with_every_scope(api, bootstrap):
    assert not Client.objects.exists()
    response = token_request(api, {"grant_type": "client_credentials", "client_id": "agp-admin",
                                   "client_secret": BOOT_SECRET})
    assert response.status_code == 200
    assert response.json()["scope"].split() == list(ALL_SCOPES)
    row = Client.objects.get(client_id="agp-admin")
    assert row.scopes == list(ALL_SCOPES) and row.check_secret(BOOT_SECRET) and BOOT_SECRET not in row.secret_hash
    event = LedgerEvent.objects.get()
    assert (event.event_type, event.actor) == ("api_client.created", "bootstrap")
    token = response.json()["access_token"]
    created = api.post("/agp/ledger-events", {"event_type": "client.boot", "resource_type": "T", "resource_id": "t"},
                       format="json", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert created.status_code == 201 and created.json()["actor"] == "agp-admin"


def test_it_refuses_the_bootstrap_client_with_a_wrong_secret(api, bootstrap):
    response = token_request(api, {"grant_type": "client_credentials"}, basic=("agp-admin", BOOT_SECRET + "x"))
    assert response.status_code == 401
    assert response.json()["error"] == "invalid_client"
    assert not Client.objects.exists()


def test_it_follows_a_changed_bootstrap_secret_and_drops_earlier_tokens(api, bootstrap):
    assert token_request(api, {"grant_type": "client_credentials"}, basic=("agp-admin", BOOT_SECRET)).status_code == 200
    earlier = sign(claims(sub="agp-admin", iat=int(time.time()) - 5))
    assert api.get("/agp/ledger-events", HTTP_AUTHORIZATION=f"Bearer {earlier}").status_code == 200
    new_secret = "another-bootstrap-secret-0123456789abcdef"
    bootstrap.AGP_CLIENT_SECRET = new_secret
    assert token_request(api, {"grant_type": "client_credentials"}, basic=("agp-admin", BOOT_SECRET)).status_code == 401
    response = token_request(api, {"grant_type": "client_credentials"}, basic=("agp-admin", new_secret))
    assert response.status_code == 200
    assert Client.objects.get(client_id="agp-admin").check_secret(new_secret)
    assert_unauthenticated(api.get("/agp/ledger-events", HTTP_AUTHORIZATION=f"Bearer {earlier}"))
    fresh = response.json()["access_token"]
    assert api.get("/agp/ledger-events", HTTP_AUTHORIZATION=f"Bearer {fresh}").status_code == 200
    assert LedgerEvent.objects.filter(event_type="api_client.updated").get().payload == {"secret_rotated": True}


def test_it_takes_over_an_existing_client_row_with_the_bootstrap_id(api, bootstrap):
    client_create(client_id="agp-admin", kind="operator", scopes=["agp.registry.read"], actor="test", secret="old-secret")
    response = token_request(api, {"grant_type": "client_credentials"}, basic=("agp-admin", BOOT_SECRET))
    assert response.status_code == 200
    row = Client.objects.get(client_id="agp-admin")
    assert row.scopes == list(ALL_SCOPES) and row.check_secret(BOOT_SECRET) and not row.check_secret("old-secret")


def test_it_keeps_a_disabled_bootstrap_client_disabled(api, bootstrap):
    assert token_request(api, {"grant_type": "client_credentials"}, basic=("agp-admin", BOOT_SECRET)).status_code == 200
    client_set_active(client_id="agp-admin", active=False, actor="test")
    response = token_request(api, {"grant_type": "client_credentials"}, basic=("agp-admin", BOOT_SECRET))
    assert response.status_code == 401
    assert not Client.objects.get(client_id="agp-admin").is_active


def _fail(api, client_id="svc", address="10.0.0.1"):
    return token_request(api, {"grant_type": "client_credentials"}, basic=(client_id, "wrong"), REMOTE_ADDR=address)


@pytest.fixture(params=["locmem", "redis", "redis-down"])
def failure_cache(request, settings, redis_url):
    """The failure counters in the process-local cache, in Redis (AGP_CACHE_URL in production), and with
    Redis down (a port nothing listens on): each process still counts in its own memory."""
    if request.param == "locmem":
        yield request.param
        return
    local = settings.CACHES["local"]
    if request.param == "redis-down":
        settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                                       "LOCATION": "redis://127.0.0.1:1/0",
                                       "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1}},
                           "local": local}
        yield request.param
        return
    # Keys of this test alone (the cache's clear() would empty the whole database).
    prefix = f"agp-test-{uuid.uuid4().hex[:12]}"
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                                   "LOCATION": redis_url, "KEY_PREFIX": prefix}, "local": local}
    assert type(caches["default"]).__name__ == "RedisCache"
    yield request.param
    with redis.Redis.from_url(redis_url) as client:
        for key in client.scan_iter(match=f"{prefix}:*"):
            client.delete(key)


def test_it_throttles_after_n_failed_authentications_with_retry_after(api, auth_settings, failure_cache):
    auth_settings.AGP_TOKEN_FAILURES_PER_MINUTE = 3
    _, secret = client_create(client_id="svc", kind="operator", scopes=list(ALL_SCOPES), actor="test")
    assert [_fail(api).status_code for _ in range(3)] == [401, 401, 401]
    throttled = _fail(api)
    assert throttled.status_code == 429
    assert throttled.json()["error"] == "slow_down"
    assert 1 <= int(throttled["Retry-After"]) <= 60
    # While throttled, even the right secret is refused: a guess that happens to be right
    # must not be told apart from a wrong one.
    right = token_request(api, {"grant_type": "client_credentials"}, basic=("svc", secret), REMOTE_ADDR="10.0.0.1")
    assert right.status_code == 429
    assert "access_token" not in right.content.decode()


def test_it_throttles_per_client_across_addresses_and_per_address_across_clients(api, auth_settings):
    auth_settings.AGP_TOKEN_FAILURES_PER_MINUTE = 2
    _, secret = client_create(client_id="other", kind="operator", scopes=list(ALL_SCOPES), actor="test")
    _fail(api, "svc", "10.0.0.1"), _fail(api, "svc", "10.0.0.2")
    assert _fail(api, "svc", "10.0.0.3").status_code == 429  # the client's count is reached
    _fail(api, "x1", "10.0.0.9"), _fail(api, "x2", "10.0.0.9")
    assert _fail(api, "x3", "10.0.0.9").status_code == 429  # the address's count is reached
    ok = token_request(api, {"grant_type": "client_credentials"}, basic=("other", secret), REMOTE_ADDR="10.0.0.4")
    assert ok.status_code == 200


def test_it_does_not_count_successful_authentications(api, auth_settings):
    auth_settings.AGP_TOKEN_FAILURES_PER_MINUTE = 2
    _, secret = client_create(client_id="svc", kind="operator", scopes=list(ALL_SCOPES), actor="test")
    statuses = [token_request(api, {"grant_type": "client_credentials"}, basic=("svc", secret)).status_code
                for _ in range(5)]
    assert statuses == [200] * 5
