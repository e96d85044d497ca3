"""Three attacks that worked while identity came from request bodies; each now fails closed.

1. An agent's client records an evaluation and a decision as another agent and spends its budget.
2. One client plays every part of a critical action: author, impact assessor, approver.
3. A client of another organisation reads, freezes and revokes a tenant's records and gives itself
   a root delegation of that tenant.
"""

from datetime import timedelta

import pytest
from django.utils import timezone

from decision.models import Approval, ImpactAssessment, PolicyEvaluation
from execution.models import ActionEnvelope, Operation
from registry.models import Delegation, Freeze, Revocation
from tests.execution.factories import make_full_world
from tests.identity import agent_api, client_api, person_api

pytestmark = pytest.mark.django_db


def later() -> str:
    return (timezone.now() + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_an_agent_cannot_act_or_spend_as_another_agent(auth_settings):
    victim = make_full_world()
    attacker = agent_api("attacker-agent", victim.root_principal)

    as_victim = {"agent_id": victim.agent_id}
    evaluation = attacker.post("/agp/policy-evaluations", {
        "policy_set_id": victim.policy_set.policy_set_id, "task_id": victim.task.task_id, "input": {}, **as_victim},
        format="json")
    decision = attacker.post("/agp/decisions", {"task_id": victim.task.task_id, "outcome": "approve", **as_victim},
                             format="json")
    payment = attacker.post("/agp/action-envelopes", victim.envelope_request(), format="json",
                            HTTP_PREFER="respond-async")

    for response in (evaluation, decision, payment):
        assert response.status_code == 403, response.content
        assert response.json()["error"]["details"]["field"] == "agent_id"
    # Leaving the agent out makes it the attacker's own: the victim's records are not its to cite.
    own = attacker.post("/agp/action-envelopes", victim.envelope_request(agent_id=None), format="json",
                        HTTP_PREFER="respond-async")
    assert own.status_code == 422, own.content
    failed = {item["check"] for item in own.json()["error"]["details"]["failed_checks"]}
    assert {"task", "delegation", "capability", "decision", "policy_evaluation"} <= failed

    assert PolicyEvaluation.objects.filter(agent_id=victim.agent_id).count() == 1
    assert not ActionEnvelope.objects.exists() and not Operation.objects.exists()


def test_one_client_cannot_be_the_author_the_assessor_and_the_approver_of_a_critical_action(auth_settings):
    world = make_full_world(approval=False, impact_assessment=False)
    agent = agent_api(world.agent_id, world.root_principal)
    decision = agent.post("/agp/decisions", {"task_id": world.task.task_id, "outcome": "approve",
                                             "policy_evaluation_ref": world.evaluation.evaluation_id},
                          format="json").json()

    assessment = {"task_id": world.task.task_id, "decision_ref": decision["decision_id"], "recommendation": "proceed",
                  "time_horizons": [{"horizon": "immediate", "consequences": ["drop"], "severity": "severe",
                                     "reversible": False}]}
    as_assessor = agent.post("/agp/impact-assessments", {**assessment, "agent_id": "impact-assessor"}, format="json")
    own_assessment = agent.post("/agp/impact-assessments", assessment, format="json")
    finalised = agent.patch(f"/agp/decisions/{decision['decision_id']}", {"status": "finalised"}, format="json")
    approval = {"decision_ref": decision["decision_id"], "verdict": "approved", "expires_at": later()}
    as_approver = agent.post("/agp/approvals", {**approval, "approver": "Chief Risk Officer"}, format="json")
    # A person whose subject is the agent's id, upper-cased, is still the agent.
    disguised = person_api(world.agent_id.upper(), [world.root_principal]).post("/agp/approvals", approval,
                                                                                 format="json")

    assert (as_assessor.status_code, as_assessor.json()["error"]["details"]["field"]) == (403, "agent_id")
    assert own_assessment.status_code == 201  # recorded, but an agent does not assess itself (rule 5)
    assert finalised.json()["error"]["code"] == "AGP_IMPACT_ASSESSMENT_REQUIRED"
    assert as_approver.json()["error"]["code"] == "AGP_INSUFFICIENT_SCOPE"
    assert disguised.json()["error"]["details"]["failed_checks"][0]["check"] == "approver_independent"
    assert list(ImpactAssessment.objects.values_list("agent_id", flat=True)) == [world.agent_id]
    assert not Approval.objects.exists()


def test_a_client_of_another_organisation_reaches_nothing_of_a_tenant(auth_settings):
    world = make_full_world()
    outsider, _ = client_api("human", ["other-org"], subject="mallory@other.example",
                             scopes=["agp.registry.read", "agp.registry.write", "agp.decision.read",
                                     "agp.execution.read", "agp.revocation.write"])

    reads = [outsider.get(f"/agp/tasks/{world.task.task_id}"), outsider.get(f"/agp/decisions/{world.decision.decision_id}")]
    listed = outsider.get("/agp/tasks").json()["items"] + outsider.get("/agp/ledger-events").json()["items"]
    freeze = outsider.post("/agp/freezes", {"target_type": "root_principal", "target_id": world.root_principal,
                                            "reason": "mine now"}, format="json")
    revoke = outsider.post("/agp/revocations", {"target_type": "agent", "target_id": world.agent_id}, format="json")
    root = outsider.post("/agp/delegations", {
        "root_principal": world.root_principal, "delegator_agent": world.root_principal, "delegate_agent": "mallory",
        "authority_scope": ["*"], "expires_at": later(),
        "constraints": {"spend_limit": {"currency": "USD", "amount": 1000000}}}, format="json")

    assert [r.status_code for r in reads] == [404, 404] and listed == []
    assert (freeze.status_code, freeze.json()["error"]["details"]["field"]) == (403, "target_id")
    assert (revoke.status_code, list(revoke.json()["error"]["details"]["fields"])) == (400, ["target_id"])
    assert (root.status_code, root.json()["error"]["details"]["field"]) == (403, "root_principal")
    assert not Freeze.objects.exists() and not Revocation.objects.exists()
    assert not Delegation.objects.filter(delegate_agent="mallory").exists()
