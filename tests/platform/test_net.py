"""The SSRF guard on outbound URLs (agp_project/net.py)."""

import datetime
import ipaddress
import socket
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from agp_project.net import GuardedURL, UnsafeURL, address_refusal, guarded_session, http_post, url_guard
from tests.execution.receiver import receiver  # noqa: F401

pytestmark = pytest.mark.unit


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


def dns_answers(monkeypatch, answers: dict[str, list[str]]) -> list[str]:
    """Make ``answers`` the DNS of this test (other names resolve as usual); returns the names asked."""
    asked = []
    real = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):
        asked.append(host)
        if host not in answers:
            return real(host, port, *args, **kwargs)
        return [(socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port))
                for a in answers[host]]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return asked


def test_it_refuses_a_host_when_any_of_its_addresses_is_private(private_urls_refused, monkeypatch):
    dns_answers(monkeypatch, {"tool.example": ["93.184.216.34", "10.0.0.7"]})
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


def test_it_connects_to_the_vetted_address_and_never_asks_dns_about_the_name_again(receiver, monkeypatch):
    # DNS rebinding: the name may resolve anywhere by the time of the connect; the request
    # still goes to the address the guard vetted (here the receiver's), with the name as Host.
    asked = dns_answers(monkeypatch, {"rebound.example": ["10.9.9.9"]})
    port = receiver.server.server_address[1]
    guarded = GuardedURL(url=f"http://rebound.example:{port}/hook", host="rebound.example", port=port,
                         addresses=(ipaddress.ip_address("127.0.0.1"),))
    with guarded_session(guarded) as session:
        response = session.post(guarded.url, data=b'{"a":1}', timeout=2, allow_redirects=False)
    assert response.status_code == 200
    [request] = receiver.requests
    assert request.headers["Host"] == f"rebound.example:{port}"
    assert request.body == b'{"a":1}'
    assert "rebound.example" not in asked


def test_an_address_that_refuses_the_connection_gives_way_to_the_next_vetted_one(receiver):
    # The name had two vetted addresses and nothing listens on the first (an IPv6 address on
    # a host without an IPv6 route fails the same way): the request goes to the second, once.
    port = receiver.server.server_address[1]
    guarded = GuardedURL(url=f"http://tool.example:{port}/hook", host="tool.example", port=port,
                         addresses=(ipaddress.ip_address("127.0.0.2"), ipaddress.ip_address("127.0.0.1")))
    with guarded_session(guarded) as session:
        response = session.post(guarded.url, data=b'{"a":1}', timeout=2, allow_redirects=False)
    assert response.status_code == 200
    [request] = receiver.requests
    assert request.headers["Host"] == f"tool.example:{port}" and request.body == b'{"a":1}'


def test_a_request_that_reached_an_address_is_never_sent_to_another():
    # The first address accepts and never answers; the second would answer. The call times out:
    # the tool may have acted on what the first one received.
    silent = socket.create_server(("127.0.0.1", 0))
    port = silent.getsockname()[1]
    other = socket.create_server(("127.0.0.3", port))
    other.settimeout(0.5)
    guarded = GuardedURL(url=f"http://tool.example:{port}/hook", host="tool.example", port=port,
                         addresses=(ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("127.0.0.3")))
    try:
        with guarded_session(guarded) as session, pytest.raises(requests.ReadTimeout):
            session.post(guarded.url, data=b"{}", timeout=(2, 0.5))
        with pytest.raises(TimeoutError):
            other.accept()
    finally:
        silent.close()
        other.close()


def test_a_guarded_session_calls_no_other_host(receiver):
    port = receiver.server.server_address[1]
    guarded = GuardedURL(url=f"http://tool.example:{port}/hook", host="tool.example", port=port,
                         addresses=(ipaddress.ip_address("127.0.0.1"),))
    with guarded_session(guarded) as session, pytest.raises(UnsafeURL) as caught:
        session.post(receiver.url(), data=b"{}", timeout=2)
    assert "left the guarded host 'tool.example'" in caught.value.reason
    assert receiver.requests == []


def certificate_for(name: str, directory) -> tuple[str, str]:
    """A CA and a server certificate for ``name`` signed by it: (CA file, server cert+key file)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "agp test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(hours=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    ca_file, server_file = directory / "ca.pem", directory / "server.pem"
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    server_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM) + key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return str(ca_file), str(server_file)


@pytest.fixture
def tls_server(tmp_path):
    """An https server on 127.0.0.1 with a certificate for ``tool.example``; records the TLS server names."""
    ca_file, server_file = certificate_for("tool.example", tmp_path)
    server_names = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's naming
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(204)
            self.send_header("X-Host", self.headers["Host"])
            self.end_headers()

        def log_message(self, *args):
            """Keep the test output quiet."""

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(server_file)
    context.sni_callback = lambda sock, name, ctx: server_names.append(name)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1], ca_file, server_names
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("name, verified", [("tool.example", True), ("other.example", False)])
def test_https_to_the_vetted_address_keeps_the_name_for_sni_and_the_certificate(tls_server, name, verified):
    port, ca_file, server_names = tls_server
    guarded = GuardedURL(url=f"https://{name}:{port}/hook", host=name, port=port,
                         addresses=(ipaddress.ip_address("127.0.0.1"),))
    with guarded_session(guarded) as session:
        session.verify = ca_file
        if verified:
            response = session.post(guarded.url, data=b"{}", timeout=5)
            assert response.status_code == 204
            assert response.headers["X-Host"] == f"{name}:{port}"
        else:  # the certificate is for tool.example: checked against the name, not the address
            with pytest.raises(requests.exceptions.SSLError):
                session.post(guarded.url, data=b"{}", timeout=5)
    assert server_names == [name]


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
