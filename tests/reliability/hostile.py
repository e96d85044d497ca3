"""Helpers of the hostile-client tests (their running stack: tests/reliability/conftest.py)."""

import requests

# The engine's time limit on the hostile tests' server (AGP_POLICY_TIMEOUT_MS).
TIME_LIMIT_MS = 1000


def assert_envelope(response: requests.Response, status: int, code: str) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["Content-Type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "retryable", "details"}
    assert body["error"]["code"] == code
    return body["error"]
