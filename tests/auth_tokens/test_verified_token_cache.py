"""The per-process cache of verified tokens: it saves the JWT decode, never a refusal.

A token's signature and claims are checked once and then kept by its exact text; expiry is
checked again on every use, and the client row (disabled, rotated, scopes) is read on every
request. Decoder calls are counted by wrapping simplejwt's ``TokenBackend.decode``.
"""

import time
from datetime import UTC, datetime

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework_simplejwt.backends import TokenBackend

from auth_tokens import services
from auth_tokens.models import Client
from auth_tokens.scopes import ALL_SCOPES
from auth_tokens.services import client_rotate_secret, client_set_active, client_update
from agp_project.lru import LRUMap
from auth_tokens.token_cache import VerifiedClaims
from tests.concurrency import run_together

from .helpers import assert_unauthenticated, claims, sign

pytestmark = pytest.mark.django_db

EXPIRED = "Invalid token: Token is expired"
WHEN = datetime(2030, 1, 1, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _empty_cache():
    services._verified_tokens.clear()
    yield
    services._verified_tokens.clear()


@pytest.fixture
def decodes(monkeypatch):
    """The number of JWT decodes so far (a list, to read after the calls)."""
    calls = []
    original = TokenBackend.decode

    def counting(self, token, verify=True):
        calls.append(token)
        return original(self, token, verify=verify)

    monkeypatch.setattr(TokenBackend, "decode", counting)
    return calls


@pytest.fixture
def client_row(auth_settings):
    return Client.objects.create(client_id="test-client", scopes=list(ALL_SCOPES))


def _get(api, token: str):
    return api.get("/agp/ledger-events", HTTP_AUTHORIZATION=f"Bearer {token}")


def _message(response) -> str:
    return response.json()["error"]["message"]


def _one_char_changed(token: str, part: int) -> str:
    """The token with one character in the middle of a part (1: payload, 2: signature) changed."""
    parts = token.split(".")
    middle = len(parts[part]) // 2
    char = parts[part][middle]
    parts[part] = parts[part][:middle] + ("A" if char != "A" else "B") + parts[part][middle + 1:]
    return ".".join(parts)


def test_it_decodes_a_token_once_and_reads_the_client_on_every_request(api, make_token, decodes):
    token = make_token()
    assert _get(api, token).status_code == 200
    with CaptureQueriesContext(connection) as queries:
        assert _get(api, token).status_code == 200
    assert len([q for q in queries if 'FROM "auth_tokens_client"' in q["sql"]]) == 1
    assert _get(api, token).status_code == 200
    assert decodes == [token]
    other = make_token(scopes=["agp.execution.read"])
    assert _get(api, other).status_code == 200
    assert decodes == [token, other]


def test_it_refuses_a_cached_token_once_it_expires_as_it_refuses_an_uncached_expired_one(api, client_row, decodes):
    now = time.time()
    expires_at = int(now) + (1 if int(now) + 1 - now > 0.5 else 2)
    token = sign(claims(exp=expires_at))
    assert _get(api, token).status_code == 200
    assert token in services._verified_tokens
    while time.time() < expires_at + 0.05:
        time.sleep(0.05)
    response = _get(api, token)
    assert_unauthenticated(response)
    never_cached = _get(api, sign(claims(iat=int(time.time()) - 7200, exp=int(time.time()) - 3600)))
    assert_unauthenticated(never_cached)
    assert _message(response) == _message(never_cached) == EXPIRED
    assert len(decodes) == 3  # the expired token was decoded again, in full
    assert token not in services._verified_tokens
    assert_unauthenticated(_get(api, token))
    assert len(services._verified_tokens) == 0


@pytest.mark.parametrize("part", [1, 2], ids=["payload", "signature"])
def test_it_refuses_a_tampered_token_after_the_genuine_one_is_cached(api, make_token, decodes, part):
    genuine = make_token()
    assert _get(api, genuine).status_code == 200
    tampered = _one_char_changed(genuine, part)
    assert tampered != genuine
    response = _get(api, tampered)
    assert_unauthenticated(response)
    assert _message(response).startswith("Invalid token: ")
    assert decodes == [genuine, tampered]
    assert tampered not in services._verified_tokens
    assert _get(api, genuine).status_code == 200


def test_it_refuses_a_cached_token_of_a_disabled_client_on_the_next_request(api, make_token, decodes):
    token = make_token()
    assert _get(api, token).status_code == 200
    client_set_active(client_id="test-client", active=False, actor="test")
    response = _get(api, token)
    assert_unauthenticated(response)
    assert _message(response) == "The token's client is unknown or disabled."
    assert decodes == [token]


def test_it_refuses_a_cached_token_after_a_secret_rotation_on_the_next_request(api, make_token, decodes):
    token = make_token()
    assert _get(api, token).status_code == 200
    client_rotate_secret(client_id="test-client", actor="test")
    response = _get(api, token)
    assert_unauthenticated(response)
    assert _message(response) == ("The token was issued before the client's secret was rotated or "
                                  "the client was disabled.")
    assert decodes == [token]


def test_it_applies_a_removed_scope_to_a_cached_token_on_the_next_request(api, make_token, decodes):
    token = make_token()
    assert _get(api, token).status_code == 200
    client_update(client_id="test-client", actor="test", scopes=["agp.decision.read"])
    assert _get(api, token).status_code == 403
    assert decodes == [token]


def test_it_refuses_a_cached_token_once_the_signing_secret_changes(api, make_token, auth_settings, decodes):
    token = make_token()
    assert _get(api, token).status_code == 200
    auth_settings.AGP_AUTH_SECRET = "another-secret-0123456789abcdef0123456789abcdef"
    response = _get(api, token)
    assert_unauthenticated(response)
    assert _message(response) == "Invalid token: Token is invalid"
    assert token not in services._verified_tokens


def test_it_never_caches_a_refused_token(api, client_row, decodes):
    bad = sign(claims(sub=None))
    for _ in range(2):
        assert_unauthenticated(_get(api, bad))
    assert decodes == [bad, bad]
    assert len(services._verified_tokens) == 0


def test_it_keeps_at_most_its_size_and_drops_the_least_recently_used(api, make_token, decodes, monkeypatch):
    assert services._verified_tokens.maxsize == 4096
    monkeypatch.setattr(services, "_verified_tokens", LRUMap(maxsize=3))
    tokens = [make_token() for _ in range(4)]
    for token in tokens[:3]:
        assert _get(api, token).status_code == 200
    assert _get(api, tokens[0]).status_code == 200  # now the most recently used
    assert _get(api, tokens[3]).status_code == 200  # drops tokens[1]
    assert len(services._verified_tokens) == 3
    assert [t in services._verified_tokens for t in tokens] == [True, False, True, True]
    assert decodes == tokens
    assert _get(api, tokens[1]).status_code == 200
    assert decodes == [*tokens, tokens[1]]
    assert len(services._verified_tokens) == 3


def test_it_stays_bounded_and_consistent_under_threads():
    cache = LRUMap(maxsize=50)
    entries = {f"token-{n}": VerifiedClaims(client_id=f"c{n}", scope="", generation=n, expires=WHEN,
                                            verified_with=("s", "agp")) for n in range(400)}

    def churn(offset):
        def run():
            seen = 0
            for n in range(offset, offset + 400):
                raw = f"token-{n % 400}"
                cache.put(raw, entries[raw])
                got = cache.get(raw)
                seen += got is None or got is entries[raw]
            return seen
        return run

    results = run_together([churn(offset) for offset in range(0, 400, 50)])
    assert results == [400] * 8
    assert len(cache) == 50
