"""A governed action built through the API, so every record carries the service's real signature.

``make_executed_action(api)`` creates, with POSTs and PATCHes as a client would, a critical
``transact`` world: a delegation chain of two links, a task, a capability, a noop skill, a
liability binding, a policy set with a real Rego ruleset, an evaluation requiring approval,
an approve decision with an impact assessment, finalised, an approval and a commerce
session; submits an envelope with ``Prefer: respond-async`` and executes its operation in
process (``operation_execute``, what the worker runs). It returns the ids.

(``tests.execution.factories`` builds worlds with the ORM, faster but unsigned.)
"""

from datetime import timedelta
from decimal import Decimal

from django.utils import timezone

from agp_client.keys import ClientKey
from agp_project.ids import new_id
from auth_tokens.services import auth_enabled
from execution.runner import operation_execute
from tests.execution.factories import RULESET
from tests.identity import client_api, person_api


def _created(response) -> dict:
    assert response.status_code in (200, 201), response.content
    return response.json()


def make_executed_action(api, *, execute: bool = True, parameters: dict | None = None,
                         amount_max: Decimal | int = 100, signers: dict | None = None) -> dict:
    """``parameters``: the refund's (default ``{"amount": 50, "currency": "USD"}``), evaluated and
    submitted. ``amount_max``: the capability's bound on the amount. ``signers`` (authentication
    on): an empty dict to fill with ``ClientKey`` s: the orchestrator's client signs the second
    link (``"delegator"``) and the person's client the approval (``"approver"``)."""
    parameters = {"amount": 50, "currency": "USD"} if parameters is None else parameters
    suffix = new_id("w")[2:].lower()
    root, orchestrator, agent = f"principal-{suffix}", f"orchestrator-{suffix}", f"agent-{suffix}"
    later = (timezone.now() + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    def post(path, body):
        return _created(api.post(path, body, format="json"))

    post("/agp/delegations", {"root_principal": root, "delegator_agent": root, "delegate_agent": orchestrator,
                              "authority_scope": ["payments:*"], "expires_at": later,
                              "constraints": {"spend_limit": {"currency": "USD", "amount": 1000},
                                              "max_hops_remaining": 3}})
    link = {"root_principal": root, "delegator_agent": orchestrator, "delegate_agent": agent,
            "authority_scope": ["payments:refund"], "constraints": {"spend_limit": {"currency": "USD", "amount": 500}}}
    if signers is not None:
        key = signers["delegator"] = ClientKey.generate()
        orchestrator_api, signers["delegator_client"] = client_api("agent", [root], agent_id=orchestrator,
                                                                   jwks=key.public_jwks())
        child = _created(orchestrator_api.post("/agp/delegations", {**link, "delegator_signature":
                                                                    key.sign_statement(link)}, format="json"))
    else:
        child = post("/agp/delegations", link)
    task = post("/agp/tasks", {"root_principal": root, "agent_id": agent, "title": "Refund order 42",
                               "risk_level": "critical", "action_class": "transact"})
    capability = post("/agp/capabilities", {
        "agent_id": agent, "delegation_id": child["delegation_id"], "tool_id": "payments", "operations": ["refund"],
        "allowed_parameter_ranges": {"amount": {"min": 0, "max": amount_max}, "currency": {"enum": ["USD"]}},
        "expires_at": later})
    skill = post("/agp/skills", {"agent_id": agent, "name": "payments", "tool_id": "payments", "version": "1",
                                 "connector": "noop", "root_principal": root})
    binding = post("/agp/liability-bindings", {"root_principal": root, "agent_id": agent, "liable_party": root,
                                     "coverage": {"currency": "USD", "amount": 10000}, "expires_at": later})
    policy_set = post("/agp/policy-sets", {"name": "refunds", "version": "1.0.0", "ruleset": RULESET,
                                           "root_principal": root})
    evaluation = post("/agp/policy-evaluations", {
        "policy_set_id": policy_set["policy_set_id"], "task_id": task["task_id"], "agent_id": agent,
        "input": {"action_class": "transact", "require_approval": True, "amount": 50},
        "action": {"tool_id": "payments", "operation": "refund", "parameters": parameters}})
    decision = post("/agp/decisions", {"task_id": task["task_id"], "agent_id": agent, "outcome": "approve",
                                       "rationale": "within policy",
                                       "policy_evaluation_ref": evaluation["evaluation_id"]})
    assessment = post("/agp/impact-assessments", {
        "task_id": task["task_id"], "decision_ref": decision["decision_id"], "agent_id": f"assessor-{suffix}",
        "time_horizons": [{"horizon": "immediate", "consequences": ["funds move"], "severity": "minor",
                           "reversible": True}],
        "recommendation": "proceed"})
    _created(api.patch(f"/agp/decisions/{decision['decision_id']}", {"status": "finalised"}, format="json"))
    approval = {"decision_ref": decision["decision_id"], "verdict": "approved", "conditions": ["log every call"],
                "expires_at": later}
    if signers is not None:
        key = signers["approver"] = ClientKey.generate("P-256")
        person, signers["approver_client"] = client_api("human", [root], subject=f"human-{suffix}",
                                                        jwks=key.public_jwks())
        approval["approver_signature"] = key.sign_statement({
            "decision_id": decision["decision_id"], "action_hash": evaluation["action_hash"], "verdict": "approved"})
        approval = _created(person.post("/agp/approvals", approval, format="json"))
    elif auth_enabled():
        # With authentication on, only a person's approval counts: approve with a human client's token.
        approval = _created(person_api(f"human-{suffix}", [root]).post("/agp/approvals", approval,
                                                                                  format="json"))
    else:
        approval = post("/agp/approvals", {**approval, "approver": f"human-{suffix}"})

    session = post("/agp/commerce-sessions", {"task_id": task["task_id"], "agent_id": agent,
                                    "delegation_id": child["delegation_id"], "merchant": "acme", "currency": "USD",
                                    "amount_limit": 200, "expires_at": later})
    action_id = new_id("act")
    accepted = api.post("/agp/action-envelopes", {
        "type": "ActionEnvelope", "action_id": action_id, "task_id": task["task_id"], "agent_id": agent,
        "tool_id": "payments", "operation": "refund", "capability_token_ref": capability["capability_id"],
        "decision_ref": decision["decision_id"], "policy_decision_ref": evaluation["evaluation_id"],
        "parameters": parameters}, format="json", HTTP_PREFER="respond-async")
    assert accepted.status_code == 202, accepted.content
    operation_id = accepted.json()["operation_id"]
    if execute:
        assert operation_execute(operation_id=operation_id, executor="test-worker") == "succeeded"
    return {"action_id": action_id, "operation_id": operation_id, "task_id": task["task_id"],
            "decision_id": decision["decision_id"], "delegation_id": child["delegation_id"], "root_principal": root,
            "agent_id": agent, "capability_id": capability["capability_id"], "skill_id": skill["skill_id"],
            "binding_id": binding["binding_id"], "policy_set_id": policy_set["policy_set_id"],
            "evaluation_id": evaluation["evaluation_id"], "assessment_id": assessment["assessment_id"],
            "approval_id": approval["approval_id"], "session_id": session["session_id"]}
