"""POST/GET/PATCH /agp/policy-sets (docs/reference/governance.md)."""

import hashlib
import json
import time

import pytest

from agp_project.signing import get_signer, verify_resource
from core.models import LedgerEvent
from registry import services
from registry.models import PolicySet
from tests.registry import factories as f

pytestmark = pytest.mark.django_db

STATES = ["active", "deprecated", "revoked"]
ALLOWED = {("active", "deprecated"), ("deprecated", "revoked")}


def ruleset_hash(text):
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def assert_error(response, status, code):
    assert response.status_code == status, response.json()
    assert response.json()["error"]["code"] == code
    return response.json()["error"]


def policy_set_in(state):
    policy_set = f.policy_set()
    for step in STATES[1:STATES.index(state) + 1]:
        services.policy_set_transition(actor=f.ACTOR, policy_set_id=policy_set.policy_set_id, status=step)
    return PolicySet.objects.get(pk=policy_set.pk)


def test_it_creates_an_active_signed_policy_set_with_its_ruleset_hash(api):
    body = {"type": "PolicySet", "policy_set_id": "ps-1", "name": "payments", "version": "2024.1",
            "publisher": "Compliance", "regulatory_frameworks": ["EU_AI_ACT_2024"], "jurisdictions": ["EU"],
            "ruleset": f.RULESET, "ruleset_hash": ruleset_hash(f.RULESET), "ruleset_engine": "opa",
            "ruleset_engine_version": "1.0", "ruleset_uri": "https://policies.example/ps-1.rego",
            "attestation_level": "unverified", "certifying_body": "",
            "effective_from": "2026-01-01T00:00:00Z"}
    response = api.post("/agp/policy-sets", body, format="json")

    assert response.status_code == 201, response.json()
    assert response["Location"] == "http://testserver/agp/policy-sets/ps-1"
    data = response.json()
    assert data["status"] == "active"
    assert data["ruleset_hash"] == ruleset_hash(f.RULESET)
    assert data["ruleset"] == f.RULESET
    assert data["supersedes"] is None
    assert verify_resource(data, {"keys": [get_signer().jwk()]})
    row = PolicySet.objects.get(policy_set_id="ps-1")
    assert (row.status, row.ruleset_hash, row.jurisdictions) == ("active", ruleset_hash(f.RULESET), ["EU"])
    assert LedgerEvent.objects.get(event_type="policy_set.created", resource_id="ps-1").payload["ruleset_hash"] \
        == ruleset_hash(f.RULESET)


MINIMAL = "package x\n\ndefault allow := false\n"


def test_it_computes_the_hash_when_the_client_omits_it(api):
    response = api.post("/agp/policy-sets", {"name": "n", "version": "1", "ruleset": MINIMAL}, format="json")
    assert response.status_code == 201
    assert response.json()["ruleset_hash"] == ruleset_hash(MINIMAL)
    assert response.json()["ruleset_engine"] == "opa"
    assert "tests" not in response.json() and "test_summary" not in response.json()  # a set without tests
    assert PolicySet.objects.get().ruleset_hash == ruleset_hash(MINIMAL)


@pytest.mark.parametrize(("change", "field"), [
    ({"ruleset_hash": ruleset_hash("something else")}, "ruleset_hash"),
    ({"ruleset_hash": "md5:abc"}, "ruleset_hash"),
    ({"ruleset": None}, "ruleset"),
    ({"ruleset_engine": "cedar"}, "ruleset_engine"),
    ({"status": "deprecated"}, "status"),
    ({"supersedes": "ps-missing"}, "supersedes"),
    ({"regulatory_frameworks": ["MADE_UP"]}, "regulatory_frameworks"),
    ({"attestation_level": "blessed"}, "attestation_level"),
    ({"signature": {}}, "signature"),
    ({"rules": "x"}, "rules"),
    ({"expires_at": "2001-01-01T00:00:00Z"}, "expires_at"),
])
def test_it_refuses_invalid_policy_sets_with_400(api, change, field):
    body = {"name": "n", "version": "1", "ruleset": f.RULESET, **change}
    if body["ruleset"] is None:
        del body["ruleset"]
    error = assert_error(api.post("/agp/policy-sets", body, format="json"), 400, "AGP_INVALID_REQUEST")
    assert field in error["details"]["fields"]
    assert not PolicySet.objects.exists()
    assert not LedgerEvent.objects.filter(event_type="policy_set.created").exists()


def test_it_links_a_superseded_policy_set(api):
    old = f.policy_set(policy_set_id="ps-old")
    response = api.post("/agp/policy-sets", {"name": "n", "version": "2", "ruleset": f.RULESET,
                                             "supersedes": old.policy_set_id}, format="json")
    assert response.status_code == 201
    assert response.json()["supersedes"] == "ps-old"
    assert PolicySet.objects.get(policy_set_id=response.json()["policy_set_id"]).supersedes == "ps-old"
    listed = api.get("/agp/policy-sets", {"supersedes": "ps-old"}).json()["items"]
    assert [i["policy_set_id"] for i in listed] == [response.json()["policy_set_id"]]


def test_it_refuses_a_duplicate_policy_set_id(api):
    f.policy_set(policy_set_id="ps-dup")
    assert_error(api.post("/agp/policy-sets", {"policy_set_id": "ps-dup", "name": "n", "version": "1",
                                               "ruleset": f.RULESET}, format="json"), 409, "AGP_CONFLICT")
    assert PolicySet.objects.count() == 1


@pytest.mark.parametrize("source", STATES)
@pytest.mark.parametrize("target", STATES)
def test_it_answers_every_move_of_the_state_table(api, source, target):
    policy_set = policy_set_in(source)
    signature_before = policy_set.signature
    events_before = LedgerEvent.objects.count()
    response = api.patch(f"/agp/policy-sets/{policy_set.policy_set_id}", {"status": target}, format="json")

    row = PolicySet.objects.get(pk=policy_set.pk)
    events = LedgerEvent.objects.filter(resource_id=policy_set.policy_set_id, event_type=f"policy_set.{target}")
    if (source, target) in ALLOWED:
        assert response.status_code == 200, response.json()
        assert response.json()["status"] == target
        assert row.status == target
        assert row.signature != signature_before
        assert verify_resource(response.json(), {"keys": [get_signer().jwk()]})
        assert events.count() == 1
        assert events.get().payload == {"from": source, "to": target, "ruleset_hash": row.ruleset_hash}
    else:
        error = assert_error(response, 409, "AGP_INVALID_TRANSITION")
        allowed = [t for s, t in ALLOWED if s == source]
        assert error["details"] == {"from": source, "to": target, "allowed": allowed}
        assert row.status == source
        assert row.signature == signature_before
        assert LedgerEvent.objects.count() == events_before


@pytest.mark.parametrize("body", [
    {"status": "retired"},
    {"status": "deprecated", "name": "renamed"},
    {"name": "renamed"},
    {},
    {"status": None},
])
def test_it_refuses_a_patch_with_anything_but_a_known_status(api, body):
    policy_set = f.policy_set()
    assert_error(api.patch(f"/agp/policy-sets/{policy_set.policy_set_id}", body, format="json"),
                 400, "AGP_INVALID_REQUEST")
    row = PolicySet.objects.get(pk=policy_set.pk)
    assert (row.status, row.name) == ("active", "payments")


def test_it_answers_404_for_an_unknown_policy_set(api):
    assert_error(api.patch("/agp/policy-sets/ps-none", {"status": "deprecated"}, format="json"),
                 404, "AGP_NOT_FOUND")
    assert_error(api.get("/agp/policy-sets/ps-none"), 404, "AGP_NOT_FOUND")
    assert not LedgerEvent.objects.filter(resource_id="ps-none").exists()


def test_it_does_not_allow_put_or_delete(api):
    policy_set = f.policy_set()
    url = f"/agp/policy-sets/{policy_set.policy_set_id}"
    assert_error(api.put(url, {"status": "deprecated"}, format="json"), 405, "AGP_METHOD_NOT_ALLOWED")
    assert_error(api.delete(url), 405, "AGP_METHOD_NOT_ALLOWED")
    assert PolicySet.objects.get(pk=policy_set.pk).status == "active"


def test_it_lists_policy_sets_by_status(api):
    active = f.policy_set()
    deprecated = policy_set_in("deprecated")
    response = api.get("/agp/policy-sets", {"status": "deprecated"})
    assert response.status_code == 200
    assert [i["policy_set_id"] for i in response.json()["items"]] == [deprecated.policy_set_id]
    assert api.get(f"/agp/policy-sets/{active.policy_set_id}").json()["status"] == "active"


def test_it_replays_a_patch_with_the_same_idempotency_key(api):
    policy_set = f.policy_set()
    url = f"/agp/policy-sets/{policy_set.policy_set_id}"
    first = api.patch(url, {"status": "deprecated"}, format="json", HTTP_IDEMPOTENCY_KEY="p-1")
    second = api.patch(url, {"status": "deprecated"}, format="json", HTTP_IDEMPOTENCY_KEY="p-1")
    assert (first.status_code, second.status_code) == (200, 200)
    assert second["Idempotent-Replayed"] == "true"
    assert LedgerEvent.objects.filter(event_type="policy_set.deprecated").count() == 1


def test_it_needs_the_registry_write_scope_to_patch(api, make_token):
    policy_set = f.policy_set()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(['agp.registry.read'])}")
    assert_error(api.patch(f"/agp/policy-sets/{policy_set.policy_set_id}", {"status": "deprecated"},
                           format="json"), 403, "AGP_INSUFFICIENT_SCOPE")
    assert PolicySet.objects.get(pk=policy_set.pk).status == "active"


# --- rulesets are checked when they are registered (docs/reference/governance.md) ---------------------------------------
@pytest.mark.parametrize(("ruleset", "position", "says"), [
    ("package x\n\nallow if { input.a == 1\n", "policy.rego:4:", "expecting `}`"),
    ("package x\n\nallow { input.a == 1 }\n", "policy.rego:3:7", "`if` keyword is required"),
    ("package x\n\ndeny[msg] { msg := \"no\" }\n", "policy.rego:3:", "`if` keyword is required"),
], ids=["syntax error", "OPA 0.x rule", "OPA 0.x partial set"])
def test_a_ruleset_that_does_not_compile_is_a_400_with_line_and_column(api, ruleset, position, says):
    response = api.post("/agp/policy-sets", {"name": "n", "version": "1", "ruleset": ruleset}, format="json")
    error = assert_error(response, 400, "AGP_INVALID_REQUEST")
    message = error["details"]["ruleset"]
    assert position in message and says in message, message
    assert error["details"]["fields"]["ruleset"] == [message]
    assert not PolicySet.objects.exists() and not LedgerEvent.objects.exists()


@pytest.mark.parametrize(("ruleset", "message"), [
    ('package x\n\ndeny contains "never" if true\n', "policy.rego:1:1: package x defines no allow rule"),
    ('# Mail rules.\n\n  package mail.rules\n\nrequire_approval := true\n',
     "policy.rego:3:3: package mail.rules defines no allow rule"),
])
def test_a_ruleset_without_an_allow_rule_is_a_400_naming_its_package_s_line_and_column(api, ruleset, message):
    response = api.post("/agp/policy-sets", {"name": "n", "version": "1", "ruleset": ruleset}, format="json")
    error = assert_error(response, 400, "AGP_INVALID_REQUEST")
    assert error["details"]["ruleset"] == f"policy compile error: {message}"
    assert error["details"]["fields"]["ruleset"] == [error["details"]["ruleset"]]
    assert not PolicySet.objects.exists() and not LedgerEvent.objects.exists()


EMAIL = """package mail

default allow := false

allow if {
    input.action.operation == "send"
    endswith(input.action.parameters.to, "@umbrella.example")
}

deny contains "external recipient" if not endswith(input.action.parameters.to, "@umbrella.example")
"""


def mail_test(name, to, allow, deny=None):
    expect = {"allow": allow} | ({"deny": deny} if deny is not None else {})
    return {"name": name, "input": {"action": {"tool_id": "mail", "operation": "send", "parameters": {"to": to}}},
            "expect": expect}


def test_a_set_whose_tests_pass_is_stored_with_them_and_their_summary_under_its_signature(api):
    tests = [mail_test("internal", "alice@umbrella.example", True, []),
             mail_test("external", "leak@evil.example", False, ["external recipient"])]
    response = api.post("/agp/policy-sets", {"name": "mail", "version": "1", "ruleset": EMAIL, "tests": tests},
                        format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["test_summary"] == {"passed": 2, "failed": 0}
    assert body["tests"] == tests
    assert verify_resource(body, {"keys": [get_signer().jwk()]})
    assert not verify_resource({**body, "test_summary": {"passed": 3, "failed": 0}}, {"keys": [get_signer().jwk()]})
    assert PolicySet.objects.get().tests == tests


def test_a_set_whose_tests_fail_is_a_422_naming_every_failure_and_nothing_is_stored(api):
    tests = [mail_test("internal", "alice@umbrella.example", True),
             mail_test("external allowed by mistake", "leak@evil.example", True),
             mail_test("wrong reason", "bob@evil.example", False, ["another reason"])]
    response = api.post("/agp/policy-sets", {"name": "mail", "version": "1", "ruleset": EMAIL, "tests": tests},
                        format="json")
    error = assert_error(response, 422, "AGP_POLICY_TEST_FAILED")
    assert error["details"]["failures"] == [
        {"name": "external allowed by mistake", "expected": {"allow": True},
         "actual": {"allow": False, "require_approval": False, "deny": ["external recipient"]}},
        {"name": "wrong reason", "expected": {"allow": False, "deny": ["another reason"]},
         "actual": {"allow": False, "require_approval": False, "deny": ["external recipient"]}},
    ]
    assert not PolicySet.objects.exists() and not LedgerEvent.objects.exists()


@pytest.mark.parametrize(("tests", "field"), [
    ([], "tests"),
    ([{"name": "t", "input": {}, "expect": {"allow": True}}] * 2, "tests"),
    ([{"name": "t", "input": {}, "expect": {"allow": True, "colour": "red"}}], "tests"),
    ([{"name": "t", "input": {}}], "tests"),
])
def test_malformed_tests_are_a_400(api, tests, field):
    response = api.post("/agp/policy-sets", {"name": "n", "version": "1", "ruleset": MINIMAL, "tests": tests},
                        format="json")
    error = assert_error(response, 400, "AGP_INVALID_REQUEST")
    assert field in error["details"]["fields"]


# --- the engine's limits at registration -------------------------------------------------------

# Runs away only for an input asking it to: compiling (whose warm-up input is empty) is quick.
SPINS_ON_DEMAND = """package agp.spin
import rego.v1
default allow := false
allow if not input.spin
allow if {
    input.spin
    some i in numbers.range(1, 20000)
    some j in numbers.range(1, 20000)
    i * j == -1
}
"""


def test_a_ruleset_that_runs_away_while_compiling_is_a_400_within_the_limit(api, settings):
    settings.AGP_POLICY_TIMEOUT_MS = 300
    spinning = SPINS_ON_DEMAND.replace("input.spin", "true")
    started = time.monotonic()

    response = api.post("/agp/policy-sets", {"name": "n", "version": "1", "ruleset": spinning}, format="json")

    error = assert_error(response, 400, "AGP_INVALID_REQUEST")
    assert "time limit of 300 ms" in json.dumps(error["details"])
    assert time.monotonic() - started < 3
    assert not PolicySet.objects.exists()


def test_the_tests_of_a_set_stop_at_the_first_that_reaches_the_engines_limit(api, settings):
    settings.AGP_POLICY_TIMEOUT_MS = 300
    tests = [{"name": f"spin {n}", "input": {"spin": True}, "expect": {"allow": False}} for n in range(20)]
    started = time.monotonic()

    response = api.post("/agp/policy-sets", {"name": "n", "version": "1", "ruleset": SPINS_ON_DEMAND,
                                             "tests": tests}, format="json")

    error = assert_error(response, 422, "AGP_POLICY_TEST_FAILED")
    [failure] = error["details"]["failures"]
    assert failure["name"] == "spin 0"
    assert failure["actual"]["errors"] == [
        "policy evaluation stopped: it exceeded the time limit of 300 ms (AGP_POLICY_TIMEOUT_MS)"]
    assert time.monotonic() - started < 5  # not twenty times the limit
    assert not PolicySet.objects.exists()
