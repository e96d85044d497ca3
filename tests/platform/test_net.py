"""The SSRF guard on outbound URLs (agp_project/net.py)."""

import ipaddress

import pytest

from agp_project import net
from agp_project.net import UnsafeURL, address_refusal, http_post, url_guard
from tests.execution.receiver import receiver  # noqa: F401


@pytest.fixture
def private_urls_refused(settings):
    settings.AGP_ALLOW_PRIVATE_URLS = False
    return settings


@pytest.mark.parametrize("address", [
    "127.0.0.1", "127.8.9.10", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "0.0.0.0",
    "100.64.0.1", "224.0.0.1", "239.255.255.250", "240.0.0.1", "255.255.255.255", "192.0.2.1", "198.18.0.1",
    "::1", "::", "fe80::1", "fc00::1", "fd12:3456::1", "ff02::1", "::ffff:127.0.0.1", "::ffff:10.0.0.1",
    "2002:7f00:1::1", "2001:db8::1",
])
def test_it_refuses_every_non_public_address(address):
    assert address_refusal(ipaddress.ip_address(address)) is not None


@pytest.mark.parametrize("address", ["93.184.216.34", "8.8.8.8", "1.1.1.1", "2606:4700:4700::1111"])
def test_it_allows_public_unicast_addresses(address):
    assert address_refusal(ipaddress.ip_address(address)) is None


@pytest.mark.parametrize("url, reason", [
    ("ftp://93.184.216.34/x", "only http and https"),
    ("file:///etc/passwd", "only http and https"),
    ("gopher://93.184.216.34:70/", "only http and https"),
    ("http:///nohost", "no host"),
    ("http://93.184.216.34:notaport/", "malformed"),
    ("http://127.0.0.1:8000/hook", "loopback"),
    ("http://localhost/hook", "loopback"),
    ("http://[::1]:8080/", "loopback"),
    ("http://169.254.169.254/latest/meta-data/", "link-local"),
    ("https://10.0.0.5/", "private"),
    ("http://[::ffff:192.168.0.1]/", "private"),
    ("http://0.0.0.0:5432/", "unspecified"),
    ("http://2130706433/", "loopback"),  # 127.0.0.1 written as one integer
])
def test_it_refuses_urls_that_reach_inside(private_urls_refused, url, reason):
    with pytest.raises(UnsafeURL) as caught:
        url_guard(url, field="callback_url")
    assert reason in caught.value.reason
    assert caught.value.status_code == 400
    assert caught.value.as_body()["error"]["details"]["fields"]["callback_url"] == [caught.value.reason]


def test_it_accepts_a_public_address(private_urls_refused):
    guarded = url_guard("https://93.184.216.34:8443/hook")
    assert (guarded.host, guarded.port) == ("93.184.216.34", 8443)
    assert [str(a) for a in guarded.addresses] == ["93.184.216.34"]


def test_it_refuses_a_host_when_any_of_its_addresses_is_private(private_urls_refused, monkeypatch):
    monkeypatch.setattr(net, "_resolve", lambda host, port: [ipaddress.ip_address("93.184.216.34"),
                                                            ipaddress.ip_address("10.0.0.7")])
    with pytest.raises(UnsafeURL) as caught:
        url_guard("https://tool.example/")
    assert "10.0.0.7 is a private address" in caught.value.reason


def test_it_allows_private_targets_only_when_the_setting_says_so(settings):
    settings.AGP_ALLOW_PRIVATE_URLS = True
    assert url_guard("http://127.0.0.1:9/hook").host == "127.0.0.1"
    with pytest.raises(UnsafeURL):  # the scheme rule stays
        url_guard("ftp://127.0.0.1/")


def test_it_sends_nothing_to_a_refused_target(private_urls_refused, receiver):
    with pytest.raises(UnsafeURL):
        http_post(url=receiver.url(), body=b"{}", headers={}, timeout=2)
    assert receiver.requests == []


def test_it_refuses_a_connection_that_lands_on_a_private_address_after_the_check(private_urls_refused,
                                                                                 receiver, monkeypatch):
    # DNS rebinding: the name resolves to a public address for the check, then to
    # 127.0.0.1 for the connection. The connection itself is checked, before any byte.
    monkeypatch.setattr(net, "_resolve", lambda host, port: [ipaddress.ip_address("93.184.216.34")])
    with pytest.raises(UnsafeURL) as caught:
        http_post(url=receiver.url(), body=b'{"secret": 1}', headers={}, timeout=2)
    assert "connected to 127.0.0.1 is a loopback address" in caught.value.reason
    assert receiver.requests == []


def test_it_does_not_follow_redirects(settings, receiver):
    settings.AGP_ALLOW_PRIVATE_URLS = True
    receiver.answer((302, {}, {"Location": receiver.url("/elsewhere")}))
    result = http_post(url=receiver.url("/start"), body=b"{}", headers={}, timeout=2)
    assert result.status_code == 302 and not result.ok
    assert [r.path for r in receiver.requests] == ["/start"]


def test_it_ignores_proxies_from_the_environment(settings, receiver, monkeypatch):
    settings.AGP_ALLOW_PRIVATE_URLS = True
    # A proxy would hide the real target from the guard; requests would honour these.
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    result = http_post(url=receiver.url(), body=b'{"a":1}', headers={"X-Test": "1"}, timeout=2)
    assert result.ok
    [request] = receiver.requests
    assert request.body == b'{"a":1}'
    assert request.headers["X-Test"] == "1"
    assert request.headers["Content-Type"] == "application/json"


def test_it_reads_at_most_the_response_limit(settings, receiver):
    settings.AGP_ALLOW_PRIVATE_URLS = True
    receiver.answer((200, {"blob": "x" * 5000}))
    result = http_post(url=receiver.url(), body=b"{}", headers={}, timeout=2, max_bytes=100)
    assert len(result.body) == 100
