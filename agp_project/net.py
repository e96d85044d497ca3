"""Outbound HTTP with a guard against server-side request forgery (docs/reference/execution.md).

Every URL the service calls on someone's behalf (an ``http`` skill's endpoint, a
callback URL) goes through ``http_post``:

1. ``url_guard`` refuses anything but ``http``/``https`` with a host, resolves the host
   and refuses it when ANY of its addresses is not a public unicast address (private,
   loopback, link-local, multicast, reserved, unspecified, shared/CGNAT, IPv4-mapped
   forms of those...).
2. The connection goes to the address the check vetted, never to a second lookup of the
   name, so a DNS answer that changes between the check and the connect (DNS rebinding)
   is never used; TLS still verifies the certificate against the name.
3. Redirects are never followed and proxies from the environment are ignored (a proxy
   would hide the real target from the check).

``settings.AGP_ALLOW_PRIVATE_URLS`` turns the address checks off (local development, tests
with a receiver on 127.0.0.1); the scheme check stays.
"""

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

import requests
from django.conf import settings
from requests.adapters import HTTPAdapter
from urllib3.exceptions import MaxRetryError, NewConnectionError

from agp_project import errors

ALLOWED_SCHEMES = ("http", "https")
MAX_RESPONSE_BYTES = 1024 * 1024
USER_AGENT = "agp-executor/1"


class UnsafeURL(errors.InvalidRequest):
    """An outbound URL the service refuses to call; ``reason`` says why."""

    def __init__(self, reason: str, *, field: str = "url", unresolved: bool = False):
        super().__init__(f"Refused outbound URL: {reason}", details={"fields": {field: [reason]}})
        self.reason = reason
        # The host did not resolve (rather than resolving somewhere forbidden).
        self.unresolved = unresolved


IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def address_refusal(address: IPAddress) -> str | None:
    """Why ``address`` may not be called (None: it is a public unicast address)."""
    if isinstance(address, ipaddress.IPv6Address):
        # ::ffff:10.0.0.1 and friends reach the IPv4 address they embed.
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is not None:
            refusal = address_refusal(embedded)
            if refusal:
                return refusal
    for attribute, label in (("is_loopback", "loopback"), ("is_link_local", "link-local"),
                             ("is_multicast", "multicast"), ("is_unspecified", "unspecified"),
                             ("is_private", "private"), ("is_reserved", "reserved")):
        if getattr(address, attribute):
            return f"{address} is a {label} address"
    if not address.is_global:
        # Shared address space (100.64.0.0/10), documentation and benchmark ranges, ...
        return f"{address} is not a public address"
    return None


def _resolve(host: str, port: int) -> list[IPAddress]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise UnsafeURL(f"the host {host!r} does not resolve ({exc})", unresolved=True) from None
    return [ipaddress.ip_address(info[4][0].split("%", 1)[0]) for info in infos]


@dataclass(frozen=True)
class GuardedURL:
    url: str
    host: str
    port: int
    addresses: tuple[IPAddress, ...]


def url_guard(url: str, *, field: str = "url") -> GuardedURL:
    """Check ``url`` for an outbound call; raise ``UnsafeURL`` (a 400 in a view) when refused."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise UnsafeURL(f"malformed URL ({exc})", field=field) from None
    if parts.scheme not in ALLOWED_SCHEMES:
        raise UnsafeURL("only http and https URLs may be called", field=field)
    host = parts.hostname
    if not host:
        raise UnsafeURL("the URL has no host", field=field)
    port = port or (443 if parts.scheme == "https" else 80)
    if settings.AGP_ALLOW_PRIVATE_URLS:
        return GuardedURL(url, host, port, ())
    try:
        addresses = _resolve(host, port)
    except UnsafeURL as exc:
        raise UnsafeURL(exc.reason, field=field, unresolved=exc.unresolved) from None
    for address in addresses:
        refusal = address_refusal(address)
        if refusal:
            raise UnsafeURL(f"{host} resolves to {refusal}", field=field)
    return GuardedURL(url, host, port, tuple(addresses))


def url_guard_registration(url: str, *, field: str = "url") -> None:
    """``url_guard`` for a URL stored now and called later (a Skill's ``endpoint_url``).

    A URL that is or resolves to a private, loopback, link-local, ... address is refused
    at once (400), so ``http://169.254.169.254/`` never gets registered. A host that does
    not resolve yet is accepted: DNS may differ by execution time, where ``url_guard``
    runs again on every call and the connection's peer is checked too.
    """
    try:
        url_guard(url, field=field)
    except UnsafeURL as exc:
        if not exc.unresolved:
            raise


class PinnedAdapter(HTTPAdapter):
    """Sends each request to the address the SSRF guard vetted, and only for the guarded host.

    Through requests' documented subclassing hooks: the connection pool is keyed on the
    vetted address instead of the name, so the name is never resolved again after the
    check and a DNS answer that changes in between (DNS rebinding) is never used. The
    ``Host`` header carries the name, and for https the TLS server name (SNI) and the
    certificate check stay on the name (``server_hostname``). Where the name had several
    addresses (all vetted), they are tried in the resolver's order, the next only when no
    connection could be made to the one before (nothing was sent: a tool never receives a
    request twice); an IPv6 address first on a host without an IPv6 route no longer fails
    the call. With ``AGP_ALLOW_PRIVATE_URLS`` the guard vets no address: requests then
    resolve as usual.
    """

    def __init__(self, guarded: GuardedURL):
        super().__init__(max_retries=0)
        self.guarded = guarded
        self.address = guarded.addresses[0] if guarded.addresses else None

    def send(self, request, timeout=None, **kwargs):
        addresses = self.guarded.addresses
        connect, read = timeout if isinstance(timeout, tuple) else (timeout, timeout)
        for address in addresses[:-1]:
            self.address = address
            try:
                # Each address but the last gets its share of the connect time.
                return super().send(request, timeout=(connect and connect / len(addresses), read), **kwargs)
            except requests.ConnectionError as exc:
                if not not_connected(exc):
                    raise
        if addresses:
            self.address = addresses[-1]
        return super().send(request, timeout=timeout, **kwargs)

    def build_connection_pool_key_attributes(self, request, verify, cert=None):
        host_params, pool_kwargs = super().build_connection_pool_key_attributes(request, verify, cert)
        scheme, host = host_params["scheme"], host_params["host"]
        port = host_params["port"] or (443 if scheme == "https" else 80)
        if (host, port) != (self.guarded.host, self.guarded.port):
            raise UnsafeURL(f"a request to {host!r} left the guarded host {self.guarded.host!r}")
        if self.address is not None:
            host_params["host"] = str(self.address)
            if scheme == "https":
                pool_kwargs["server_hostname"] = self.guarded.host
        return host_params, pool_kwargs

    def add_headers(self, request, **kwargs):
        if self.guarded.addresses:
            request.headers["Host"] = urlsplit(request.url).netloc.rpartition("@")[2]


def not_connected(exc: requests.ConnectionError) -> bool:
    """Whether ``exc`` says no connection was made (refused, unreachable, connect timeout): the
    request was not sent, so another address may be tried."""
    if isinstance(exc, requests.ConnectTimeout):
        return True
    cause = exc.args[0] if exc.args else None
    return isinstance(cause, MaxRetryError) and isinstance(cause.reason, NewConnectionError)


def guarded_session(guarded: GuardedURL) -> requests.Session:
    """A session that calls only ``guarded``'s host, at the address the guard vetted."""
    session = requests.Session()
    session.trust_env = False  # no proxies from the environment: the guard must see the real target
    adapter = PinnedAdapter(guarded)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


@dataclass(frozen=True)
class HTTPResult:
    status_code: int
    headers: dict[str, str]
    body: bytes

    @property
    def ok(self) -> bool:
        return 200 <= self.status_code < 300


def http_post(*, url: str, body: bytes, headers: dict[str, str], timeout: float,
              max_bytes: int = MAX_RESPONSE_BYTES, field: str = "url") -> HTTPResult:
    """POST ``body`` to a guarded ``url``; no redirects, at most ``max_bytes`` of response read.

    Raises ``UnsafeURL`` when refused and ``requests.RequestException`` (or ``OSError``) when
    the target cannot be reached or times out.
    """
    guarded = url_guard(url, field=field)
    all_headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT, **headers}
    with guarded_session(guarded) as session:
        response = session.post(url, data=body, headers=all_headers, timeout=timeout, allow_redirects=False,
                                stream=True)
        try:
            content = response.raw.read(max_bytes + 1, decode_content=True) or b""
        finally:
            response.close()
    if len(content) > max_bytes:
        content = content[:max_bytes]
    return HTTPResult(response.status_code, dict(response.headers), content)
