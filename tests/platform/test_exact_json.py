"""Exact numbers and strict JSON (agp_project/exactjson.py, canonical.py, currencies.py, the parser)."""

import hashlib
import json
import math
from decimal import Decimal

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from agp_client import numbers as client_numbers
from agp_project.canonical import canonical_json
from agp_project.currencies import decimals_of, minor_units
from agp_project.exactjson import JSONInputError, bad_text, decimal_text, dumps, loads
from core.models import LedgerEvent
from tests.platform.conftest import assert_envelope

EXACT = "1234567890123.4567"  # 17 significant digits: as a double it is ...4568


# --- reading ---------------------------------------------------------------------------------------------

def test_it_reads_fractions_and_exponents_as_exact_decimals():
    assert loads('{"a": ' + EXACT + ', "b": 1e-2, "c": 3, "d": 25.50}') == {
        "a": Decimal(EXACT), "b": Decimal("0.01"), "c": 3, "d": Decimal("25.5")}
    assert type(loads("3")) is int


@pytest.mark.parametrize(("text", "message"), [
    ('{"a": 1, "a": 2}', "The key 'a' appears more than once in one object."),
    ('{"a": NaN}', "NaN is not a JSON number."),
    ('{"a": Infinity}', "Infinity is not a JSON number."),
    ('{"a": -Infinity}', "-Infinity is not a JSON number."),
    ("[1e999999999]", "The number 1e999999999 has more than 40 digits written out."),
    ("[0.00000000000000000000000000000000000000001]", "has more than 40 digits written out"),
    ("[" + "9" * 41 + "]", "has more than 40 digits written out"),
    ("[-" + "9" * 5000 + "]", "has more than 40 digits written out"),  # past what int() reads at all
])
def test_it_refuses_what_json_does_not_allow_or_the_service_cannot_keep(text, message):
    with pytest.raises(JSONInputError) as raised:
        loads(text)
    assert message in raised.value.message


def test_it_names_the_duplicated_key():
    with pytest.raises(JSONInputError) as raised:
        loads('{"outer": {"amount": 1, "amount": "1"}}')
    assert raised.value.field == "amount"


@pytest.mark.parametrize("text", ["[1_000]", "[01]", "[.5]", "[1.]", "[+1]", "[0x10]"])
def test_it_refuses_numbers_json_does_not_have(text):
    with pytest.raises(ValueError):
        loads(text)


def test_it_finds_nul_and_lone_surrogates_with_their_path():
    assert bad_text({"a": [1, {"b": "x\x00"}]}) == ("a.1.b", "NUL characters (\\u0000) are not accepted.")
    assert bad_text({"k\ud800": 1})[0] == "k\\ud800"
    assert "surrogates" in bad_text(["\udfff"])[1]
    assert bad_text({"fine": ["\U0001f600", "\u2028"]}) is None


# --- writing and hashing ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("value", "text"), [
    (Decimal("25.5000"), "25.5"), (Decimal("1E+2"), "100"), (Decimal("-0.0"), "0"), (Decimal(EXACT), EXACT),
    (Decimal("1E-7"), "0.0000001"), (Decimal("0.000"), "0")])
def test_it_writes_a_decimal_as_its_plain_exact_number(value, text):
    assert decimal_text(value) == text
    assert dumps({"v": value}) == '{"v":' + text + "}"


def test_it_writes_exactly_what_it_read():
    document = loads('{"a": [' + EXACT + ', "é", true, null], "b": {"c": 0.1}}')
    assert loads(dumps(document)) == document
    assert dumps(document) == '{"a":[' + EXACT + ',"é",true,null],"b":{"c":0.1}}'


@settings(max_examples=500, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_a_decimal_a_double_holds_is_hashed_exactly_as_rfc8785_hashes_the_double(number):
    # The shortest decimal of the double, as a client's JSON would carry it.
    assert canonical_json({"n": Decimal(repr(number))}) == rfc8785.dumps({"n": number})


def test_a_decimal_no_double_holds_is_hashed_as_its_exact_text():
    assert canonical_json({"amount": Decimal(EXACT)}) == b'{"amount":' + EXACT.encode() + b"}"
    assert float(EXACT) != Decimal(EXACT)  # what a binary float would have hashed instead


exact_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | st.text()
    | st.decimals(allow_nan=False, allow_infinity=False, places=4, min_value=-10**13, max_value=10**13),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=15)


@settings(max_examples=300, deadline=None)
@given(exact_values)
def test_the_client_canonicalises_exactly_as_the_service(value):
    try:
        ours = canonical_json(value)
    except rfc8785.CanonicalizationError:
        return  # lone surrogates: neither side has a canonical form
    assert client_numbers.canonical_json(value) == ours
    assert client_numbers.loads(client_numbers.dumps(value)) == loads(dumps(value))


# --- currencies ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("currency", "units"), [("JPY", 0), ("USD", 2), ("EUR", 2), ("BHD", 3), ("CLF", 4),
                                                  ("XAU", None), ("XXX", None), ("usd", None), ("ABC", None)])
def test_it_knows_each_currencys_minor_units(currency, units):
    assert minor_units(currency) == units


@pytest.mark.parametrize(("amount", "decimals"), [("25.50", 1), ("1E-2", 2), ("100", 0), ("1E+2", 0),
                                                  ("0.000", 0), ("1.0000000000000000000000000000000001", 34)])
def test_it_counts_the_decimals_an_amount_needs_without_rounding(amount, decimals):
    assert decimals_of(Decimal(amount)) == decimals


# --- through the API (in process) ---------------------------------------------------------------------------

def post_raw(api, body: bytes):
    return api.generic("POST", "/agp/ledger-events", body, content_type="application/json")


@pytest.mark.django_db
@pytest.mark.parametrize(("body", "field"), [
    (b'{"event_type": "client.x", "event_type": "client.y", "resource_type": "X", "resource_id": "x"}',
     "event_type"),
    (b'{"event_type": "client.x", "resource_type": "X", "resource_id": "x", "payload": {"n": "\\ud83d"}}',
     "payload.n"),
    (b'{"event_type": "client.x", "resource_type": "X", "resource_id": "x", "payload": {"\\u0000": 1}}',
     "payload.\x00"),
])
def test_the_parser_answers_400_naming_the_field(api, body, field):
    error = assert_envelope(post_raw(api, body), 400, "AGP_INVALID_REQUEST")
    assert list(error["details"]["fields"]) == [field]
    assert not LedgerEvent.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("key", [None, "huge-integer"])
def test_an_integer_too_long_for_python_to_read_is_a_400_not_a_500(api, key):
    body = ('{"event_type": "client.x", "resource_type": "X", "resource_id": "x", "payload": {"n": '
            + "9" * 5000 + "}}").encode()
    headers = {"HTTP_IDEMPOTENCY_KEY": key} if key else {}

    response = api.generic("POST", "/agp/ledger-events", body, content_type="application/json", **headers)

    error = assert_envelope(response, 400, "AGP_INVALID_REQUEST")
    assert "has more than 40 digits written out" in error["message"]
    assert not LedgerEvent.objects.exists()


@pytest.mark.django_db
def test_a_payload_number_is_stored_hashed_and_shown_exactly(api):
    body = ('{"event_type": "client.x", "resource_type": "X", "resource_id": "x", "payload": {"amount": '
            + EXACT + "}}").encode()

    response = post_raw(api, body)

    assert response.status_code == 201, response.content
    assert b'"amount":' + EXACT.encode() in response.content
    event = LedgerEvent.objects.get()
    assert event.payload == {"amount": Decimal(EXACT)}
    assert event.payload_hash == "sha256:" + hashlib.sha256(b'{"amount":' + EXACT.encode() + b"}").hexdigest()


def test_client_numbers_match_json_for_plain_values():
    value = {"a": [1, 2.5, "x"], "b": None}
    assert json.loads(client_numbers.dumps(value)) == value
    assert math.isclose(float(client_numbers.loads("2.5")), 2.5)


@pytest.mark.django_db
def test_on_sqlite_an_amount_a_double_would_round_is_refused_not_stored_rounded(api, settings):
    # SQLite keeps decimals as binary doubles: 99999999999999.99 would come back as 10^14, past
    # what its column can be read as. PostgreSQL keeps it exactly.
    from django.db import connection

    body = {"root_principal": "org:big", "delegator_agent": "org:big", "delegate_agent": "agent-big",
            "authority_scope": ["crm:*"], "expires_at": "2099-01-01T00:00:00Z",
            "constraints": {"spend_limit": {"currency": "USD", "amount": None}}}
    text = json.dumps(body).replace("null", "99999999999999.99")

    response = api.generic("POST", "/agp/delegations", text.encode(), content_type="application/json")

    if connection.vendor == "sqlite":
        error = assert_envelope(response, 400, "AGP_INVALID_REQUEST")
        assert "stores amounts as binary doubles" in str(error["details"]["fields"])
    else:
        assert response.status_code == 201, response.content
        assert '"amount":99999999999999.99' in response.content.decode()
