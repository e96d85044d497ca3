"""Token requests, hand-made JWTs and the assertions (docs/reference/api.md) of the authentication tests."""

import base64
import time
import uuid
from urllib.parse import quote_plus, urlencode

import jwt

from auth_tokens.scopes import ALL_SCOPES
from tests.conftest import AUTH_SECRET


def token_request(api, form: dict | None = None, *, basic: tuple[str, str] | None = None, **extra):
    """POST /oauth/token with a form body, optionally with RFC 6749 2.3.1 HTTP Basic credentials."""
    if basic is not None:
        raw = f"{quote_plus(basic[0])}:{quote_plus(basic[1])}".encode()
        extra["HTTP_AUTHORIZATION"] = "Basic " + base64.b64encode(raw).decode()
    return api.post("/oauth/token", data=urlencode(form or {}), content_type="application/x-www-form-urlencoded",
                    **extra)


def claims(**overrides) -> dict:
    """Claims of a token the server would accept for ``test-client``, before signing."""
    now = int(time.time())
    base = {"token_type": "access", "iss": "agp", "aud": "agp", "sub": "test-client", "iat": now, "exp": now + 600,
            "jti": uuid.uuid4().hex, "scope": " ".join(ALL_SCOPES), "gen": 0,
            "kind": "operator", "agent_id": "", "subject": "", "tenants": []}

    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}


def sign(payload: dict, *, key: str = AUTH_SECRET, algorithm: str = "HS256") -> str:
    return jwt.encode(payload, key, algorithm=algorithm)


def assert_unauthenticated(response) -> None:
    assert response.status_code == 401, response.content
    body = response.json()
    assert set(body) == {"error"}
    assert body["error"]["code"] == "AGP_UNAUTHENTICATED"
    assert body["error"]["retryable"] is False
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    assert body["error"]["details"] == {}
    assert response["WWW-Authenticate"] == 'Bearer error="invalid_token"'


def assert_insufficient_scope(response, required: set[str]) -> None:
    assert response.status_code == 403, response.content
    error = response.json()["error"]
    assert error["code"] == "AGP_INSUFFICIENT_SCOPE"
    assert error["retryable"] is False
    assert set(error["details"]["required_scopes"]) == required
    assert len(error["details"]["required_scopes"]) == len(required)
    assert response["WWW-Authenticate"].startswith('Bearer error="insufficient_scope"')
    for scope in required:
        assert scope in error["message"]
        assert scope in response["WWW-Authenticate"]
