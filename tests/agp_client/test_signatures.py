"""What the service signs verifies with ``agp_client`` alone (docs/reference/ledger.md, docs/reference/governance.md).

The records are made through the API and their response bodies, as sent, are checked in a
separate Python process that imports ``agp_client`` and nothing of the server (the process
reports which server packages it loaded: none), against the JWKS the service publishes:
a receipt with its why-record, a delegation link (by the link rule, over its parent's
signature chain), an envelope and its attestation, an impact assessment, an approval, a
policy set, a freeze, a page of links. Each one changed after signing fails, naming why.
"""

import json
import re
import subprocess
import sys
from datetime import timedelta

import pytest
from django.utils import timezone

from agp_client import numbers
from execution.runner import operation_execute
from tests.agp_client.server import REPO
from tests.execution.factories import make_full_world
from tests.execution.signed_world import make_executed_action
from tests.execution.worker import submit_async

pytestmark = pytest.mark.django_db

SERVER_PACKAGES = ("django", "rest_framework", "agp_project", "core", "auth_tokens", "registry", "decision",
                   "execution", "auditing")

# Runs in its own interpreter: reads {"jwks": text, "records": {label: text}} on stdin, prints each
# record's signature_problem and signature_problems, its governance, and the server packages loaded.
VERIFY_ALONE = r"""
import json, sys
import agp_client
from agp_client import numbers
request = json.loads(sys.stdin.read())
jwks = numbers.loads(request["jwks"])
results = {}
for label, text in request["records"].items():
    record = numbers.loads(text)
    results[label] = {"problem": agp_client.signature_problem(record, jwks),
                      "problems": agp_client.signature_problems(record, jwks),
                      "verified": agp_client.verify_signature(record, jwks),
                      "governance": record.get("governance") if isinstance(record, dict) else None}
loaded = sorted({name.split(".")[0] for name in sys.modules} & set(request["server_packages"]))
print(numbers.dumps({"results": results, "server_packages_loaded": loaded}))
"""


def verify_alone(jwks_text: str, records: dict[str, str]) -> dict[str, dict]:
    """Each record's verification by agp_client in a process of its own; asserts it loaded no server code."""
    environment = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", VERIFY_ALONE], input=json.dumps(
        {"jwks": jwks_text, "records": records, "server_packages": SERVER_PACKAGES}), capture_output=True,
        text=True, cwd=REPO, env=environment, timeout=60)
    assert done.returncode == 0, done.stderr
    answer = numbers.loads(done.stdout)
    assert answer["server_packages_loaded"] == []
    return answer["results"]


def changed(text: str, **members) -> str:
    """The response body with ``members`` replaced, as an attacker in the middle would send it."""
    return numbers.dumps({**numbers.loads(text), **members})


def later(**delta) -> str:
    return (timezone.now() + timedelta(**delta)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def created(api, path: str, body: dict) -> str:
    response = api.post(path, body, format="json")
    assert response.status_code == 201, response.json()
    return response.content.decode()


@pytest.mark.system
def test_a_receipt_verifies_with_agp_client_alone_and_its_why_record_names_what_governed_the_action(api):
    world = make_full_world()
    body = world.envelope_request()
    operation_id = submit_async(api, body)["operation_id"]
    assert operation_execute(operation_id=operation_id, executor="worker-test/pid-1") == "succeeded"
    [listed] = api.get("/agp/receipts", {"action_id": body["action_id"]}).json()["items"]
    receipt = api.get(f"/agp/receipts/{listed['receipt_id']}").content.decode()
    jwks = api.get("/.well-known/jwks.json").content.decode()
    governance = numbers.loads(receipt)["governance"]

    results = verify_alone(jwks, {
        "receipt": receipt,
        "receipt with an approval removed from its why-record": changed(
            receipt, governance={**governance, "approvals": []}),
        "receipt claiming success for another action": changed(receipt, action_id="act-other"),
    })

    assert results["receipt"] == {"problem": None, "problems": [], "verified": True, "governance": governance}
    assert governance == {
        "decision_id": world.decision.decision_id, "evaluation_id": world.evaluation.evaluation_id,
        "policy_set_id": world.policy_set.policy_set_id, "ruleset_hash": world.policy_set.ruleset_hash,
        "action_hash": world.evaluation.action_hash, "approvals": [world.approval.approval_id],
        "assessment_id": world.assessment.assessment_id,
        "delegation_path": [
            {"delegation_id": world.root_delegation.delegation_id, "delegator_agent": world.root_principal,
             "delegate_agent": world.orchestrator_id, "spend_limit": {"currency": "USD", "amount": 1000},
             "max_hops_remaining": 3},
            {"delegation_id": world.delegation.delegation_id, "delegator_agent": world.orchestrator_id,
             "delegate_agent": world.agent_id, "spend_limit": {"currency": "USD", "amount": 500},
             "max_hops_remaining": 2}],
        "commerce_session_id": world.session.session_id, "payment_id": governance["payment_id"]}
    assert governance["payment_id"].startswith("pay_")
    for label in ("receipt with an approval removed from its why-record", "receipt claiming success for another "
                                                                          "action"):
        assert results[label]["verified"] is False
        assert results[label]["problem"] == ("its content is not what was signed (a field was changed: "
                                             "payload_hash does not match)")
        assert results[label]["problems"] == [f"receipt {listed['receipt_id']}: {results[label]['problem']}"]


@pytest.mark.system
def test_links_envelopes_assessments_approvals_policy_sets_and_freezes_verify_the_same_way(api):
    principal, orchestrator, agent = "acme", "orchestrator-1", "agent-1"
    root = created(api, "/agp/delegations", {
        "root_principal": principal, "delegator_agent": principal, "delegate_agent": orchestrator,
        "authority_scope": ["payments:*"], "expires_at": later(days=1)})
    link = created(api, "/agp/delegations", {
        "root_principal": principal, "delegator_agent": orchestrator, "delegate_agent": agent,
        "authority_scope": ["payments:refund"]})
    task = numbers.loads(created(api, "/agp/tasks", {"root_principal": principal, "agent_id": agent,
                                                     "risk_level": "high", "action_class": "transact"}))
    decision = numbers.loads(created(api, "/agp/decisions", {"task_id": task["task_id"], "agent_id": agent,
                                                             "outcome": "approve", "rationale": "refund"}))
    assessment = created(api, "/agp/impact-assessments", {
        "task_id": task["task_id"], "decision_ref": decision["decision_id"], "agent_id": "assessor-1",
        "recommendation": "proceed", "time_horizons": [{"horizon": "immediate", "severity": "minor"}]})
    approval = created(api, "/agp/approvals", {"decision_ref": decision["decision_id"], "approver": "human:carol",
                                               "verdict": "approved", "conditions": ["once"],
                                               "expires_at": later(hours=1)})
    policy_set = created(api, "/agp/policy-sets", {"name": "refunds", "version": "1",
                                                   "ruleset": "package r\n\nimport rego.v1\n\nallow := true\n"})
    freeze = created(api, "/agp/freezes", {"target_type": "agent", "target_id": "agent-nobody",
                                           "reason": "drill", "frozen_by": "ops"})
    validated = api.post("/agp/action-envelopes", make_full_world().envelope_request(), format="json")
    assert validated.status_code == 200, validated.json()
    envelope = validated.content.decode()
    page = api.get("/agp/delegations", {"root_principal": principal}).content.decode()
    jwks = api.get("/.well-known/jwks.json").content.decode()
    link_body, envelope_body = numbers.loads(link), numbers.loads(envelope)
    assert len(link_body["signature_chain"]) == 2  # the root's signature, then its own
    attestation = envelope_body["governance_attestations"][0]

    genuine = {"root link": root, "link": link, "envelope": envelope, "assessment": assessment,
               "approval": approval, "policy set": policy_set, "freeze": freeze,
               # What a link's signature does not cover: its later status (revocation is ledgered).
               "link shown revoked": changed(link, status="revoked", revoked_at=later())}
    page_body = numbers.loads(page)
    assert [item["delegation_id"] for item in page_body["items"]] == [link_body["delegation_id"],
                                                                       numbers.loads(root)["delegation_id"]]
    pages = {"page of links": page, "page with a changed link": numbers.dumps(
        {**page_body, "items": [{**page_body["items"][0], "delegate_agent": "agent-2"}, page_body["items"][1]]})}
    tampered = {
        "link with a wider scope": changed(link, authority_scope=["payments:*"]),
        "link under another parent chain": changed(link, signature_chain=["x" * 86, link_body["signature"]["value"]]),
        "envelope for another amount": changed(envelope, parameters={**envelope_body["parameters"], "amount": 5000}),
        "assessment that now recommends proceeding with conditions": changed(
            assessment, recommendation="proceed_with_conditions"),
        "approval with its conditions dropped": changed(approval, conditions=[]),
        "policy set with another ruleset": changed(policy_set, ruleset="package r\n\nallow := false\n"),
    }
    results = verify_alone(jwks, {**genuine, **tampered, **pages, "envelope with a forged attestation": changed(
        envelope, governance_attestations=[{**attestation, "verdict": "rejected"}])})

    for label in genuine:
        assert (results[label]["problem"], results[label]["problems"]) == (None, []), (label, results[label])
    # A page is not signed itself; each of its items is.
    assert (results["page of links"]["problem"], results["page of links"]["problems"]) == (
        "it carries no signature", [])
    assert results["page with a changed link"]["problems"] == [
        f"delegation {link_body['delegation_id']}: its content is not what was signed (a field was changed: "
        f"payload_hash does not match)"]
    for label in tampered:
        assert results[label]["verified"] is False, label
        assert "its content is not what was signed" in results[label]["problem"], (label, results[label])
    forged = results["envelope with a forged attestation"]
    # The envelope's signature covers its attestations, and each attestation is signed on its own.
    assert forged["problems"] == [
        f"action envelope {envelope_body['action_id']}: {forged['problem']}",
        f"governance attestation 1 of the envelope: {forged['problem']}"]


@pytest.mark.system
def test_every_signed_record_of_an_evidence_bundle_is_found_and_verified(api):
    action_id = make_executed_action(api)["action_id"]
    response = api.get(f"/agp/action-envelopes/{action_id}/evidence")
    assert response.status_code == 200, response.content
    bundle = response.content.decode()
    body = numbers.loads(bundle)
    [approval] = body["records"]["approvals"]
    forged = {**body, "records": {**body["records"], "approvals": [{**approval, "verdict": "rejected"}]}}

    results = verify_alone(api.get("/.well-known/jwks.json").content.decode(),
                           {"bundle": bundle, "bundle with a forged approval": numbers.dumps(forged)})

    assert results["bundle"]["problems"] == [] and results["bundle"]["verified"] is True
    changed_content = "its content is not what was signed (a field was changed: payload_hash does not match)"
    # The approval's own signature, and the bundle's over everything.
    assert results["bundle with a forged approval"]["problems"] == [
        f"evidence bundle of action {action_id}: {changed_content}",
        f"approval {approval['approval_id']}: {changed_content}"]


def test_the_reference_code_of_docs_signatures_checks_what_the_api_returns(api):
    [code] = re.findall(r"```python\n(.*?)```", (REPO / "docs" / "signatures.md").read_text(), re.S)
    namespace = {}
    exec(compile(code, "docs/signatures.md", "exec"), namespace)  # the page's code, as a reader runs it
    verify = namespace["verify"]
    root = json.loads(created(api, "/agp/delegations", {
        "root_principal": "acme", "delegator_agent": "acme", "delegate_agent": "orchestrator-1",
        "authority_scope": ["crm:*"], "expires_at": later(days=1)}))
    link = json.loads(created(api, "/agp/delegations", {
        "root_principal": "acme", "delegator_agent": "orchestrator-1", "delegate_agent": "agent-1",
        "authority_scope": ["crm:update"]}))
    world = make_full_world()
    body = world.envelope_request()
    operation_id = submit_async(api, body)["operation_id"]
    assert operation_execute(operation_id=operation_id, executor="worker-test/pid-1") == "succeeded"
    [receipt] = api.get("/agp/receipts", {"action_id": body["action_id"]}).json()["items"]
    envelope = api.get(f"/agp/action-envelopes/{body['action_id']}").json()
    jwks = api.get("/.well-known/jwks.json").json()

    for record in (root, link, receipt, envelope, *envelope["governance_attestations"]):
        assert verify(record, jwks), record.get("type")
    assert verify({**link, "status": "revoked"}, jwks)  # not covered: revocation is ledgered
    value = link["signature"]["value"]
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    respelt = value[:-1] + alphabet[alphabet.index(value[-1]) ^ 1]
    for forged in ({**link, "authority_scope": ["crm:*"]}, {**link, "signature_chain": [value]},
                   {**link, "signature": {**link["signature"], "value": respelt}},
                   {**receipt, "governance": {**receipt["governance"], "approvals": []}},
                   {**envelope, "parameters": {**envelope["parameters"], "amount": 5000}},
                   {**receipt, "signature": {**receipt["signature"], "kid": "another-key"}}):
        assert not verify(forged, jwks)
