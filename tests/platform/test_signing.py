"""Ed25519 signatures (docs/reference/ledger.md) verified with the key the JWKS endpoint publishes."""

import base64
import hashlib
import json
import stat

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agp_project.canonical import content_hash
from agp_project.signing import get_signer, sign_resource, verify_resource

pytestmark = pytest.mark.unit

RESOURCE = {"type": "Receipt", "receipt_id": "rct_1", "status": "succeeded", "amount": 12.5,
            "items": [{"name": "caf\u00e9", "n": 1}], "completed_at": "2026-11-21T19:31:24.000000Z"}


@pytest.fixture(autouse=True)
def own_key_file(settings, tmp_path):
    settings.AGP_SIGNING_KEY = None
    settings.AGP_SIGNING_KEY_FILE = tmp_path / "keys" / "signing-key.pem"
    return settings.AGP_SIGNING_KEY_FILE


def signed(resource=RESOURCE):
    return {**resource, "signature": sign_resource(resource)}


def jwks(api):
    response = api.get("/.well-known/jwks.json")
    assert response.status_code == 200
    return response.json()


def new_pem() -> str:
    return Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()


def test_a_signed_resource_verifies_with_the_published_key(api):
    resource = signed()
    assert verify_resource(resource, jwks(api)) is True


@pytest.mark.parametrize("change", [
    lambda r: r.update(status="failed"),
    lambda r: r.update(amount=12.51),
    lambda r: r["items"][0].update(name="cafe"),
    lambda r: r.update(extra=None),
    lambda r: r.pop("completed_at"),
])
def test_a_changed_field_fails_verification(api, change):
    resource = json.loads(json.dumps(signed()))
    change(resource)
    assert verify_resource(resource, jwks(api)) is False


@pytest.mark.parametrize("change", [
    lambda s: s.update(value=s["value"][:-2] + ("AA" if s["value"][-2:] != "AA" else "AB")),
    lambda s: s.update(payload_hash="sha256:" + "0" * 64),
    lambda s: s.update(kid="another-key"),
    lambda s: s.update(alg="none"),
    lambda s: s.update(value="***"),
    lambda s: s.pop("value"),
])
def test_a_tampered_signature_fails_verification(api, change):
    resource = signed()
    change(resource["signature"])
    assert verify_resource(resource, jwks(api)) is False


def test_a_signature_spelt_differently_for_the_same_bytes_fails_verification(api):
    # 64 bytes take 86 base64url characters; the last one carries 2 data bits and 4 unused
    # bits. Changing only the unused bits decodes to the same bytes with a lenient decoder.
    resource = signed()
    value = resource["signature"]["value"]
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    last = alphabet.index(value[-1])
    resource["signature"]["value"] = value[:-1] + alphabet[last ^ 1]
    assert base64.urlsafe_b64decode(resource["signature"]["value"] + "==") == \
        base64.urlsafe_b64decode(value + "==")
    assert verify_resource(resource, jwks(api)) is False


def test_a_missing_or_malformed_signature_fails_verification(api):
    assert verify_resource(dict(RESOURCE), jwks(api)) is False
    assert verify_resource({**RESOURCE, "signature": "abc"}, jwks(api)) is False
    broken_jwks = {"keys": [{**jwks(api)["keys"][0], "x": "not-a-key"}]}
    assert verify_resource(signed(), broken_jwks) is False


def test_the_signature_object_has_the_c9_shape(settings):
    signature = sign_resource(RESOURCE)
    assert set(signature) == {"alg", "kid", "issuer", "issued_at", "payload_hash", "value"}
    assert signature["alg"] == "EdDSA"
    assert signature["issuer"] == settings.AGP_ISSUER
    assert signature["issued_at"].endswith("Z")
    assert signature["payload_hash"] == content_hash(RESOURCE)
    raw = base64.urlsafe_b64decode(signature["value"] + "==")
    assert len(raw) == 64 and "=" not in signature["value"]


def test_the_signature_ignores_an_existing_signature_member():
    first = sign_resource(RESOURCE)
    assert sign_resource({**RESOURCE, "signature": first})["payload_hash"] == first["payload_hash"]


def test_the_jwks_publishes_an_ed25519_key_under_its_rfc7638_thumbprint(api):
    (key,) = jwks(api)["keys"]
    assert {k: key[k] for k in ("kty", "crv", "alg", "use")} == {"kty": "OKP", "crv": "Ed25519", "alg": "EdDSA",
                                                                "use": "sig"}
    thumbprint_input = json.dumps({"crv": "Ed25519", "kty": "OKP", "x": key["x"]}, separators=(",", ":"))
    expected = base64.urlsafe_b64encode(hashlib.sha256(thumbprint_input.encode()).digest()).rstrip(b"=").decode()
    assert key["kid"] == expected == get_signer().kid
    assert set(key) == {"kty", "crv", "x", "kid", "alg", "use"}  # no private part


def test_the_generated_key_is_kept_private_and_reused(own_key_file, api, settings):
    kid = get_signer().kid
    assert stat.S_IMODE(own_key_file.stat().st_mode) == 0o600
    assert b"PRIVATE KEY" in own_key_file.read_bytes()
    settings.AGP_ISSUER = "https://another-issuer.example"  # a new signer, loaded from the key file again
    assert get_signer().kid == kid
    assert jwks(api)["keys"][0]["kid"] == kid


def test_agp_signing_key_is_honoured(settings, api):
    file_kid = get_signer().kid
    old_jwks = jwks(api)
    settings.AGP_SIGNING_KEY = new_pem()
    new_jwks = jwks(api)
    assert new_jwks["keys"][0]["kid"] != file_kid
    resource = signed()
    assert resource["signature"]["kid"] == new_jwks["keys"][0]["kid"]
    assert verify_resource(resource, new_jwks) is True
    assert verify_resource(resource, old_jwks) is False


def test_a_signing_key_that_is_not_ed25519_is_refused(settings):
    from cryptography.hazmat.primitives.asymmetric import ec
    from django.core.exceptions import ImproperlyConfigured

    settings.AGP_SIGNING_KEY = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()
    with pytest.raises(ImproperlyConfigured, match="Ed25519"):
        get_signer()
