"""HTTP with retries, and the OAuth 2.0 client-credentials token cache.

Retries: GETs, and POST/PATCH requests (which always carry an ``Idempotency-Key``, the same
one on every attempt, so the server executes them at most once), are retried on connection
errors and timeouts, on 429, 502, 503 and 504, and on any error whose body says
``retryable: true`` (409 ``AGP_IDEMPOTENCY_IN_PROGRESS``, 500). The wait is the server's
``Retry-After`` when it sends one, else exponential backoff with jitter.
"""

from __future__ import annotations

import email.utils
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote_plus

import requests

from . import numbers
from .errors import AGPError, AuthenticationError, TransportError, error_from_body

logger = logging.getLogger("agp_client")

RETRY_STATUSES = frozenset({429, 502, 503, 504})
CONNECTION_ERRORS = (requests.ConnectionError, requests.Timeout, requests.exceptions.ChunkedEncodingError)


def parse_retry_after(value: str | None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP-date); None if absent or bad."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


@dataclass
class RetryPolicy:
    max_retries: int = 4
    backoff: float = 0.5
    max_backoff: float = 30.0
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)

    def delay(self, attempt: int) -> float:
        """Exponential backoff with "equal jitter": between half and all of base * 2^attempt."""
        ceiling = min(self.max_backoff, self.backoff * (2 ** attempt))
        return ceiling / 2 + random.uniform(0, ceiling / 2)


@dataclass
class Response:
    """A decoded 2xx answer."""

    status: int
    headers: dict[str, str]
    data: Any


def decode_body(response: requests.Response) -> Any:
    if not response.content:
        return None
    try:
        # Exact numbers: an amount is the Decimal the service wrote, and signatures verify.
        return numbers.loads(response.content)
    except ValueError:
        return response.text


class Transport:
    """Sends requests with per-thread sessions (a ``requests.Session`` is not thread-safe)."""

    def __init__(self, *, timeout: float, retry: RetryPolicy, user_agent: str):
        self.timeout = timeout
        self.retry = retry
        self.user_agent = user_agent
        self._local = threading.local()
        self._sessions: list[requests.Session] = []
        self._sessions_lock = threading.Lock()

    def session(self) -> requests.Session:
        session = getattr(self._local, "session", None)
        if session is None:
            session = requests.Session()
            session.headers["User-Agent"] = self.user_agent
            self._local.session = session
            with self._sessions_lock:
                self._sessions.append(session)
        return session

    def close(self) -> None:
        with self._sessions_lock:
            sessions, self._sessions = self._sessions, []
        for session in sessions:
            session.close()
        self._local = threading.local()

    def send(self, method: str, url: str, *, retry: bool, build: Callable[[], dict[str, Any]],
             on_unauthorized: Callable[[dict[str, Any]], bool] | None = None) -> Response:
        """Send until an answer is final. ``build`` gives the keyword arguments of each attempt
        (so a refreshed token goes into the next one); ``on_unauthorized`` may ask for one more
        attempt after a 401 (at most once per call)."""
        attempt = 0
        reauthenticated = False
        while True:
            kwargs = build()
            try:
                response = self.session().request(method, url, timeout=self.timeout, **kwargs)
            except CONNECTION_ERRORS as exc:
                if retry and attempt < self.retry.max_retries:
                    wait = self.retry.delay(attempt)
                    logger.info("agp_client: %s %s failed (%s); retry %d in %.2fs", method, url,
                                type(exc).__name__, attempt + 1, wait)
                    self.retry.sleep(wait)
                    attempt += 1
                    continue
                raise TransportError(f"{method} {url}: {exc}", retryable=True) from exc
            body = decode_body(response)
            headers = dict(response.headers)
            if response.status_code < 400:
                return Response(response.status_code, headers, body)
            if response.status_code == 401 and on_unauthorized is not None and not reauthenticated:
                reauthenticated = True
                if on_unauthorized(kwargs):
                    continue
            error = error_from_body(response.status_code, body, headers)
            if retry and attempt < self.retry.max_retries and self._retryable(response.status_code, error):
                wait = parse_retry_after(headers.get("Retry-After"))
                if wait is not None and wait > self.retry.max_backoff:
                    raise error  # the server asks for a longer pause than we are willing to block for
                wait = self.retry.delay(attempt) if wait is None else wait
                logger.info("agp_client: %s %s answered %s; retry %d in %.2fs", method, url,
                            response.status_code, attempt + 1, wait)
                self.retry.sleep(wait)
                attempt += 1
                continue
            raise error

    @staticmethod
    def _retryable(status: int, error: AGPError) -> bool:
        return status in RETRY_STATUSES or error.retryable


class TokenManager:
    """Fetches, caches and refreshes the client-credentials token; safe to share between threads.

    The token is refreshed ``refresh_skew`` seconds before it expires (at most a quarter of
    its lifetime early, so short-lived tokens are still reused); a 401 invalidates it, and
    the request is sent once more with a new token.
    ``fetches`` counts the tokens obtained.
    """

    def __init__(self, transport: Transport, token_url: str, client_id: str, client_secret: str | None = None, *,
                 scope: str | None = None, refresh_skew: float = 30.0, key: Any = None, dpop: bool | None = None):
        self._transport = transport
        self._token_url = token_url
        self._client_id = client_id
        # RFC 6749 2.3.1: each part is form-urlencoded before the HTTP Basic encoding. Without a
        # secret the client authenticates with ``key`` (an ``agp_client.keys.ClientKey``): RFC 7523.
        self._basic = (quote_plus(client_id), quote_plus(client_secret)) if client_secret is not None else None
        self._key = key
        # DPoP (RFC 9449): True binds every token to ``key``; None does once the server asks
        # (a client created with require_dpop gets no other token); False never does.
        self._dpop = dpop
        self.token_type = "bearer"
        self._scope = scope
        self._refresh_skew = refresh_skew
        self._lock = threading.Lock()
        self._token: str | None = None
        self._refresh_at = 0.0
        self.fetches = 0
        self.granted_scope: str | None = None

    def token(self) -> str:
        # One lock around check and fetch: concurrent callers wait for the one fetch in
        # progress instead of each fetching their own token.
        with self._lock:
            if self._token is None or time.monotonic() >= self._refresh_at:
                self._fetch()
            return self._token

    def headers(self, method: str, url: str) -> dict[str, str]:
        """The headers that authenticate one request: ``Authorization: Bearer``, or for a token
        bound to the key, ``Authorization: DPoP`` and a fresh proof for ``method`` and ``url``."""
        with self._lock:
            if self._token is None or time.monotonic() >= self._refresh_at:
                self._fetch()
            token, token_type = self._token, self.token_type
        if token_type.lower() == "dpop":
            return {"Authorization": f"DPoP {token}",
                    "DPoP": self._key.dpop_proof(method=method, url=url, access_token=token)}
        return {"Authorization": f"Bearer {token}"}

    def invalidate(self, token: str) -> None:
        """Forget ``token`` if it is still the cached one (another thread may have replaced it)."""
        with self._lock:
            if self._token == token:
                self._token = None

    def _fetch(self) -> None:
        try:
            self._fetch_once(bound=bool(self._dpop))
        except AGPError as exc:
            if exc.code != "invalid_dpop_proof" or self._dpop is not None or self._key is None:
                raise
            self._dpop = True  # the client requires DPoP: every token from now on is bound
            self._fetch_once(bound=True)

    def _attempt(self, data: dict[str, str], bound: bool) -> dict[str, Any]:
        """One token request's arguments: a fresh assertion and proof each time (each is single-use)."""
        form, headers = dict(data), {"Accept": "application/json"}
        kwargs: dict[str, Any] = {"data": form, "headers": headers}
        if self._basic is not None:
            kwargs["auth"] = self._basic
        else:
            form["client_assertion_type"] = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
            form["client_assertion"] = self._key.client_assertion(client_id=self._client_id, token_url=self._token_url)
        if bound:
            headers["DPoP"] = self._key.dpop_proof(method="POST", url=self._token_url)
        return kwargs

    def _fetch_once(self, *, bound: bool) -> None:
        data = {"grant_type": "client_credentials"}
        if self._scope:
            data["scope"] = self._scope
        started = time.monotonic()
        response = self._transport.send("POST", self._token_url, retry=True, build=lambda: self._attempt(data, bound))
        body = response.data
        if not isinstance(body, dict) or not isinstance(body.get("access_token"), str):
            raise AuthenticationError("The token endpoint answered without an access_token.", status=response.status,
                                      body=body, headers=response.headers)
        expires_in = float(body.get("expires_in") or 3600)
        # A JWT's exp has whole-second resolution (the server truncates the issue time), so
        # the token may die up to a second before expires_in says.
        lifetime = expires_in - 1 if expires_in > 2 else expires_in / 2
        skew = min(self._refresh_skew, lifetime / 4)
        self._token = body["access_token"]
        self.token_type = str(body.get("token_type") or "bearer")
        self._refresh_at = started + lifetime - skew
        self.granted_scope = body.get("scope")
        self.fetches += 1
