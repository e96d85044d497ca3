"""POST/GET /agp/impact-assessments: every spec field, defaults, a server signature, refusals."""

from datetime import timedelta

import pytest
from django.utils import timezone

from agp_project.signing import get_signer, verify_resource
from core.models import LedgerEvent
from decision.models import ImpactAssessment
from tests.decision.factories import make_decision, make_evaluation, make_task

pytestmark = pytest.mark.django_db

RESPONSE_FIELDS = ["type", "assessment_id", "task_id", "decision_ref", "agent_id", "time_horizons",
                   "stakeholders_affected", "pareto_assessment", "ethical_framework_applied", "recommendation",
                   "recommendation_rationale", "assessed_at", "signature", "created_by"]


def jwks():
    return {"keys": [get_signer().jwk()]}


def minimal(task, decision, **overrides):
    data = {"type": "ImpactAssessment", "task_id": task.task_id, "decision_ref": decision.decision_id,
            "agent_id": "assessor-1", "recommendation": "proceed",
            "time_horizons": [{"horizon": "immediate", "consequences": ["payment sent"], "severity": "minor",
                               "reversible": True}]}
    data.update(overrides)
    return data


def test_it_fills_defaults_and_signs_a_minimal_assessment(api):
    task = make_task(risk_level="high", action_class="transact")
    decision = make_decision(task=task)

    response = api.post("/agp/impact-assessments", minimal(task, decision, assessment_id="ia-1"), format="json")

    assert response.status_code == 201
    data = response.json()
    assert list(data) == RESPONSE_FIELDS
    assert data["stakeholders_affected"] == []
    assert data["pareto_assessment"] == {"improves_without_harm": False, "harmed_parties": [],
                                         "mitigation_available": False, "mitigation_notes": ""}
    assert data["ethical_framework_applied"] == {"primary": "veil_of_ignorance", "secondary": [],
                                                 "prohibitions": [], "policy_ref": ""}
    assert data["recommendation_rationale"] == ""
    assert data["assessed_at"].endswith("Z")
    assert data["signature"]["alg"] == "EdDSA"
    assert verify_resource(data, jwks())
    row = ImpactAssessment.objects.get(assessment_id="ia-1")
    assert (row.decision_id, row.task_id, row.recommendation) == (decision.decision_id, task.task_id, "proceed")
    assert row.signature == data["signature"]
    event = LedgerEvent.objects.get(resource_id="ia-1")
    assert event.event_type == "impact_assessment.created"
    assert event.payload["payload_hash"] == data["signature"]["payload_hash"]


def test_it_keeps_every_detail_sent_and_the_signature_verifies_on_read(api):
    task = make_task(risk_level="critical", action_class="delete")
    decision = make_decision(task=task)
    request = minimal(
        task, decision, assessment_id="ia-2", recommendation="proceed_with_conditions",
        recommendation_rationale="reversible within a day",
        assessed_at="2026-01-02T03:04:05.000006Z",
        time_horizons=[
            {"horizon": "immediate", "consequences": ["rows deleted"], "severity": "major", "reversible": True},
            {"horizon": "long_term", "consequences": [], "severity": "negligible", "reversible": True}],
        stakeholders_affected=[
            {"stakeholder_class": "customers", "impact_direction": "negative", "magnitude": "moderate",
             "notes": "lose history"},
            {"stakeholder_class": "operators", "impact_direction": "mixed", "magnitude": "minor"}],
        pareto_assessment={"improves_without_harm": False, "harmed_parties": ["customers"],
                           "mitigation_available": True},
        ethical_framework_applied={"primary": "care_ethics", "secondary": ["rights_based", "utilitarian"],
                                   "prohibitions": ["no deletion of legal holds"], "policy_ref": "ps-x"})

    created = api.post("/agp/impact-assessments", request, format="json")
    read = api.get("/agp/impact-assessments/ia-2")

    assert created.status_code == 201 and read.status_code == 200
    data = read.json()
    assert data == created.json()
    assert data["time_horizons"] == request["time_horizons"]
    assert data["stakeholders_affected"][1] == {"stakeholder_class": "operators", "impact_direction": "mixed",
                                                "magnitude": "minor", "notes": ""}
    assert data["pareto_assessment"] == {"improves_without_harm": False, "harmed_parties": ["customers"],
                                         "mitigation_available": True, "mitigation_notes": ""}
    assert data["ethical_framework_applied"] == request["ethical_framework_applied"]
    assert data["assessed_at"] == "2026-01-02T03:04:05.000006Z"
    assert verify_resource(data, jwks())
    tampered = {**data, "recommendation": "proceed"}
    assert not verify_resource(tampered, jwks())


def test_it_names_the_decisions_policy_set_when_policy_ref_is_omitted(api):
    task = make_task()
    evaluation = make_evaluation(task=task)
    decision = make_decision(task=task, evaluation=evaluation)

    response = api.post("/agp/impact-assessments", minimal(task, decision), format="json")

    assert response.status_code == 201
    assert response.json()["ethical_framework_applied"]["policy_ref"] == evaluation.policy_set_id


def test_it_refuses_an_assessment_of_a_finalised_decision(api):
    task = make_task(risk_level="high", action_class="admin")
    decision = make_decision(task=task, status="finalised")

    response = api.post("/agp/impact-assessments", minimal(task, decision), format="json")

    assert response.status_code == 400
    assert response.json()["error"]["details"]["fields"]["decision_ref"][0].endswith(
        "is already finalised; an assessment must precede finalisation.")
    assert not ImpactAssessment.objects.exists()
    assert not LedgerEvent.objects.exists()


def test_it_refuses_an_unknown_task_and_an_unknown_decision(api):
    response = api.post("/agp/impact-assessments", {
        "task_id": "no-task", "decision_ref": "no-decision", "agent_id": "a", "recommendation": "defer",
        "time_horizons": [{"horizon": "short_term", "severity": "minor"}]}, format="json")

    assert response.status_code == 400
    assert response.json()["error"]["details"]["fields"] == {
        "task_id": ["No task with id 'no-task'."], "decision_ref": ["No decision with id 'no-decision'."]}
    assert not ImpactAssessment.objects.exists()


def test_it_refuses_a_decision_of_another_task(api):
    task, other = make_task(), make_task()
    decision = make_decision(task=other)

    response = api.post("/agp/impact-assessments", minimal(task, decision), format="json")

    assert response.status_code == 400
    assert "decision_ref" in response.json()["error"]["details"]["fields"]
    assert not ImpactAssessment.objects.exists()


@pytest.mark.parametrize(("overrides", "path"), [
    ({"recommendation": "go_ahead"}, ["recommendation"]),
    ({"time_horizons": [{"horizon": "forever", "severity": "minor"}]}, ["time_horizons", 0, "horizon"]),
    ({"time_horizons": [{"horizon": "immediate", "severity": "catastrophic"}]}, ["time_horizons", 0, "severity"]),
    ({"time_horizons": [{"horizon": "immediate", "severity": "minor", "likelihood": 1}]},
     ["time_horizons", 0, "likelihood"]),
    ({"time_horizons": []}, ["time_horizons"]),
    ({"stakeholders_affected": [{"stakeholder_class": "x", "impact_direction": "sideways", "magnitude": "minor"}]},
     ["stakeholders_affected", 0, "impact_direction"]),
    ({"stakeholders_affected": [{"stakeholder_class": "x", "impact_direction": "positive", "magnitude": "huge"}]},
     ["stakeholders_affected", 0, "magnitude"]),
    ({"ethical_framework_applied": {"primary": "egoism"}}, ["ethical_framework_applied", "primary"]),
    ({"ethical_framework_applied": {"secondary": ["deontological", "nihilism"]}},
     ["ethical_framework_applied", "secondary"]),
    ({"pareto_assessment": {"improves_without_harm": "maybe"}}, ["pareto_assessment", "improves_without_harm"]),
    ({"signature": {"alg": "none"}}, ["signature"]),
    ({"created_at": "2026-01-01T00:00:00Z"}, ["created_at"]),
])
def test_it_refuses_values_outside_the_contract(api, overrides, path):
    task = make_task()
    decision = make_decision(task=task)

    response = api.post("/agp/impact-assessments", minimal(task, decision, **overrides), format="json")

    assert response.status_code == 400
    node = response.json()["error"]["details"]["fields"]
    for key in path:
        node = node[str(key)] if isinstance(node, dict) else node[key]
    assert node
    assert not ImpactAssessment.objects.exists()


def test_it_accepts_every_known_enum_value(api):
    task = make_task()
    decision = make_decision(task=task)
    horizons = [{"horizon": h, "severity": s} for h, s in zip(
        ["immediate", "short_term", "medium_term", "long_term", "immediate"],
        ["negligible", "minor", "moderate", "major", "severe"], strict=True)]
    stakeholders = [{"stakeholder_class": "c", "impact_direction": d, "magnitude": "minor"}
                    for d in ["positive", "negative", "neutral", "mixed"]]
    for recommendation in ["proceed", "proceed_with_conditions", "defer", "do_not_proceed"]:
        response = api.post("/agp/impact-assessments", minimal(
            task, decision, recommendation=recommendation, time_horizons=horizons,
            stakeholders_affected=stakeholders, ethical_framework_applied={
                "primary": "veil_of_ignorance",
                "secondary": ["utilitarian", "deontological", "virtue_ethics", "care_ethics", "rights_based"]}),
            format="json")
        assert response.status_code == 201, response.json()
    assert ImpactAssessment.objects.count() == 4


def test_it_refuses_an_assessment_dated_in_the_future(api):
    task = make_task()
    decision = make_decision(task=task)
    future = (timezone.now() + timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")

    response = api.post("/agp/impact-assessments", minimal(task, decision, assessed_at=future), format="json")

    assert response.status_code == 400
    assert "assessed_at" in response.json()["error"]["details"]["fields"]
    assert not ImpactAssessment.objects.exists()


def test_it_refuses_a_duplicate_assessment_id(api):
    task = make_task()
    decision = make_decision(task=task)
    assert api.post("/agp/impact-assessments", minimal(task, decision, assessment_id="ia-d"),
                    format="json").status_code == 201

    response = api.post("/agp/impact-assessments", minimal(task, decision, assessment_id="ia-d"), format="json")

    assert response.status_code == 409
    assert ImpactAssessment.objects.count() == 1


def test_it_lists_assessments_of_a_decision(api):
    task = make_task()
    decision, other = make_decision(task=task), make_decision(task=task)
    for target in (decision, decision, other):
        assert api.post("/agp/impact-assessments", minimal(task, target), format="json").status_code == 201

    response = api.get(f"/agp/impact-assessments?decision_ref={decision.decision_id}")

    assert response.status_code == 200
    assert len(response.json()["items"]) == 2
    assert {item["decision_ref"] for item in response.json()["items"]} == {decision.decision_id}
    assert all(verify_resource(item, jwks()) for item in response.json()["items"])


def test_an_assessment_by_the_decisions_own_agent_does_not_satisfy_rule_5_but_its_veto_stands(api):
    task = make_task(risk_level="high", action_class="transact")
    decision = make_decision(task=task, agent_id="agent-1")
    assert api.post("/agp/impact-assessments", minimal(task, decision, agent_id="agent-1"),
                    format="json").status_code == 201

    response = api.patch(f"/agp/decisions/{decision.decision_id}", {"status": "finalised"}, format="json")

    assert response.status_code == 422
    assert response.json()["error"]["code"] == "AGP_IMPACT_ASSESSMENT_REQUIRED"
    veto = make_decision(task=task, agent_id="agent-2")
    api.post("/agp/impact-assessments", minimal(task, veto, agent_id="agent-2", recommendation="do_not_proceed"),
             format="json")
    api.post("/agp/impact-assessments", minimal(task, veto, agent_id="assessor-1"), format="json")
    refused = api.patch(f"/agp/decisions/{veto.decision_id}", {"status": "finalised"}, format="json")
    assert refused.json()["error"]["details"]["failed_checks"][0]["check"] == "impact_assessment_recommendation"
