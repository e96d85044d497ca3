"""POST/PATCH/GET /agp/decisions: drafts, the finalise move, rule 5, revoked policy sets."""

import itertools
import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from core.models import LedgerEvent
from decision.models import Decision
from registry.choices import ActionClass, RiskLevel
from tests.decision.factories import (
    make_assessment,
    make_decision,
    make_evaluation,
    make_policy_set,
    make_task,
)

pytestmark = pytest.mark.django_db

RULE5 = {(risk, action) for risk in ("high", "critical") for action in ("transact", "delete", "admin")}
GRID = list(itertools.product(RiskLevel.values, ActionClass.values))


def finalise(api, decision_id):
    return api.patch(f"/agp/decisions/{decision_id}", {"status": "finalised"}, format="json")


def assess(api, task, decision_id, recommendation="proceed"):
    return api.post("/agp/impact-assessments", {
        "task_id": task.task_id, "decision_ref": decision_id, "agent_id": "assessor-1",
        "time_horizons": [{"horizon": "immediate", "consequences": ["funds move"], "severity": "moderate",
                           "reversible": False}],
        "recommendation": recommendation}, format="json")


# --- create ---------------------------------------------------------------------------------
def test_it_creates_a_draft_decision_citing_records_of_its_task(api):
    task = make_task()
    context = api.post("/agp/contexts", {"task_id": task.task_id, "data": {"k": "v"}}, format="json").json()
    bundle = api.post("/agp/evidence-bundles", {"task_id": task.task_id, "items": [
        {"uri": "https://e.example/1", "sha256": "a" * 64, "kind": "log"}]}, format="json").json()
    evaluation = make_evaluation(task=task)

    response = api.post("/agp/decisions", {
        "decision_id": "dec-1", "task_id": task.task_id, "agent_id": "agent-1", "outcome": "approve",
        "rationale": "within limits", "context_ref": context["context_id"], "evidence_refs": [bundle["bundle_id"]],
        "policy_evaluation_ref": evaluation.evaluation_id}, format="json")

    assert response.status_code == 201
    assert response["Location"].endswith("/agp/decisions/dec-1")
    assert response.json() == {
        "type": "Decision", "decision_id": "dec-1", "task_id": task.task_id, "agent_id": "agent-1",
        "outcome": "approve", "rationale": "within limits", "context_ref": context["context_id"],
        "evidence_refs": [bundle["bundle_id"]], "policy_evaluation_ref": evaluation.evaluation_id,
        "status": "draft", "finalised_at": None, "created_at": response.json()["created_at"],
        "created_by": "anonymous"}
    decision = Decision.objects.get(decision_id="dec-1")
    assert (decision.status, decision.context_id, decision.policy_evaluation_id) == (
        "draft", context["context_id"], evaluation.evaluation_id)
    assert LedgerEvent.objects.get(resource_id="dec-1").event_type == "decision.created"


def test_it_creates_decisions_as_draft_only(api):
    task = make_task()

    response = api.post("/agp/decisions", {"task_id": task.task_id, "agent_id": "a", "outcome": "approve",
                                           "status": "finalised"}, format="json")

    assert response.status_code == 400
    assert response.json()["error"]["details"]["fields"]["status"] == [
        "Decisions are created as 'draft'; finalise with PATCH."]
    assert not Decision.objects.exists()


def test_it_refuses_references_that_do_not_exist_or_belong_to_another_task(api):
    task, other = make_task(), make_task()
    foreign_context = api.post("/agp/contexts", {"task_id": other.task_id, "data": {}}, format="json").json()
    foreign_bundle = api.post("/agp/evidence-bundles", {"task_id": other.task_id, "items": [
        {"uri": "https://e.example/1", "sha256": "b" * 64, "kind": "log"}]}, format="json").json()
    foreign_evaluation = make_evaluation(task=other)

    response = api.post("/agp/decisions", {
        "task_id": task.task_id, "agent_id": "a", "outcome": "deny", "context_ref": foreign_context["context_id"],
        "evidence_refs": [foreign_bundle["bundle_id"], "missing-bundle"],
        "policy_evaluation_ref": foreign_evaluation.evaluation_id}, format="json")

    assert response.status_code == 400
    fields = response.json()["error"]["details"]["fields"]
    assert fields["context_ref"] == [f"Context {foreign_context['context_id']!r} belongs to another task."]
    assert fields["evidence_refs"] == ["No evidence bundle with id 'missing-bundle'.",
                                       f"Evidence bundle {foreign_bundle['bundle_id']!r} belongs to another task."]
    assert fields["policy_evaluation_ref"] == [
        f"Policy evaluation {foreign_evaluation.evaluation_id!r} is for another task."]
    assert not Decision.objects.exists()


@pytest.mark.parametrize(("extra", "field"), [
    ({"task_id": "no-such-task"}, "task_id"),
    ({"context_ref": "no-such-context"}, "context_ref"),
    ({"policy_evaluation_ref": "no-such-evaluation"}, "policy_evaluation_ref"),
    ({"outcome": "maybe"}, "outcome"),
    ({"finalised_at": "2030-01-01T00:00:00Z"}, "finalised_at"),
    ({"evidence_refs": ["x", "x"]}, "evidence_refs"),
])
def test_it_refuses_bad_fields(api, extra, field):
    task = make_task()

    response = api.post("/agp/decisions", {"task_id": task.task_id, "agent_id": "a", "outcome": "approve", **extra},
                        format="json")

    assert response.status_code == 400
    assert field in response.json()["error"]["details"]["fields"]
    assert not Decision.objects.exists()


# --- finalise -------------------------------------------------------------------------------
def test_it_finalises_a_draft(api):
    decision = make_decision(task=make_task())

    response = finalise(api, decision.decision_id)

    assert response.status_code == 200
    assert response.json()["status"] == "finalised"
    assert response.json()["finalised_at"].endswith("Z")
    decision.refresh_from_db()
    assert decision.status == "finalised" and decision.finalised_at is not None
    event = LedgerEvent.objects.get(resource_id=decision.decision_id, event_type="decision.finalised")
    assert event.payload == {"task_id": decision.task_id, "outcome": "approve"}


@pytest.mark.parametrize("target", ["finalised", "draft"])
def test_it_refuses_every_move_of_a_finalised_decision(api, target):
    decision = make_decision(task=make_task(), status="finalised")

    response = api.patch(f"/agp/decisions/{decision.decision_id}", {"status": target}, format="json")

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "AGP_INVALID_TRANSITION"
    assert response.json()["error"]["details"] == {"from": "finalised", "to": target, "allowed": []}
    assert not LedgerEvent.objects.filter(resource_id=decision.decision_id).exists()


def test_it_refuses_to_move_a_draft_to_draft(api):
    decision = make_decision(task=make_task())

    response = api.patch(f"/agp/decisions/{decision.decision_id}", {"status": "draft"}, format="json")

    assert response.status_code == 409
    assert response.json()["error"]["details"] == {"from": "draft", "to": "draft", "allowed": ["finalised"]}
    decision.refresh_from_db()
    assert decision.status == "draft"


@pytest.mark.parametrize(("patch", "field"), [
    ({"status": "approved"}, "status"),
    ({"status": "finalised", "outcome": "deny"}, "outcome"),
    ({}, "status"),
])
def test_it_accepts_only_a_status_in_the_patch(api, patch, field):
    decision = make_decision(task=make_task())

    response = api.patch(f"/agp/decisions/{decision.decision_id}", patch, format="json")

    assert response.status_code == 400
    assert field in response.json()["error"]["details"]["fields"]
    decision.refresh_from_db()
    assert (decision.status, decision.outcome) == ("draft", "approve")


def test_it_answers_404_for_an_unknown_decision(api):
    response = finalise(api, "no-such-decision")

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "AGP_NOT_FOUND"


def test_it_does_not_allow_put_or_delete(api):
    decision = make_decision(task=make_task())

    assert api.put(f"/agp/decisions/{decision.decision_id}", {"status": "finalised"}, format="json").status_code == 405
    assert api.delete(f"/agp/decisions/{decision.decision_id}").status_code == 405
    assert Decision.objects.get().status == "draft"


# --- rule 5 -----------------------------------------------------------------------------------
@pytest.mark.parametrize(("risk_level", "action_class"), GRID)
def test_rule5_refuses_finalising_exactly_where_the_spec_says(api, risk_level, action_class):
    task = make_task(risk_level=risk_level, action_class=action_class)
    decision = make_decision(task=task)

    response = finalise(api, decision.decision_id)

    decision.refresh_from_db()
    if (risk_level, action_class) in RULE5:
        assert response.status_code == 422
        assert response.json()["error"]["code"] == "AGP_IMPACT_ASSESSMENT_REQUIRED"
        assert response.json()["error"]["details"]["failed_checks"][0]["check"] == "impact_assessment_present"
        assert decision.status == "draft"
        assert not LedgerEvent.objects.filter(event_type="decision.finalised").exists()

        assert assess(api, task, decision.decision_id).status_code == 201
        response = finalise(api, decision.decision_id)
        decision.refresh_from_db()

    assert response.status_code == 200
    assert decision.status == "finalised"
    assert LedgerEvent.objects.filter(event_type="decision.finalised", resource_id=decision.decision_id).count() == 1


def test_rule5_needs_an_assessment_of_this_decision_not_of_another(api):
    task = make_task(risk_level="critical", action_class="delete")
    decision, other = make_decision(task=task), make_decision(task=task)
    make_assessment(decision=other)

    response = finalise(api, decision.decision_id)

    assert response.status_code == 422
    assert response.json()["error"]["code"] == "AGP_IMPACT_ASSESSMENT_REQUIRED"
    assert Decision.objects.get(pk=decision.pk).status == "draft"


@pytest.mark.parametrize("risk_level", ["low", "high"])
def test_it_refuses_an_approve_over_a_newest_do_not_proceed_assessment(api, risk_level):
    task = make_task(risk_level=risk_level, action_class="transact")
    decision = make_decision(task=task, outcome="approve")
    now = timezone.now()
    make_assessment(decision=decision, recommendation="proceed", assessed_at=now - timedelta(minutes=5))
    veto = make_assessment(decision=decision, recommendation="do_not_proceed", assessed_at=now)

    response = finalise(api, decision.decision_id)

    assert response.status_code == 422
    assert response.json()["error"]["code"] == "AGP_PREREQUISITE_FAILED"
    assert response.json()["error"]["details"]["failed_checks"] == [{
        "check": "impact_assessment_recommendation",
        "reason": f"impact assessment {veto.assessment_id!r} recommends do_not_proceed (a later assessment does "
                  f"not lift it)"}]
    assert Decision.objects.get(pk=decision.pk).status == "draft"


@pytest.mark.parametrize("later_assessed_at", [timedelta(minutes=5), timedelta(minutes=-5)],
                         ids=["dated-later", "back-dated"])
def test_a_later_proceed_does_not_lift_a_do_not_proceed_assessment(api, later_assessed_at):
    task = make_task(risk_level="high", action_class="admin")
    decision = make_decision(task=task, outcome="approve")
    now = timezone.now() - timedelta(minutes=10)
    veto = make_assessment(decision=decision, recommendation="do_not_proceed", assessed_at=now)
    make_assessment(decision=decision, recommendation="proceed_with_conditions", assessed_at=now + later_assessed_at)

    response = finalise(api, decision.decision_id)

    assert response.status_code == 422
    assert veto.assessment_id in response.json()["error"]["details"]["failed_checks"][0]["reason"]
    assert Decision.objects.get(pk=decision.pk).status == "draft"


@pytest.mark.parametrize("outcome", ["deny", "escalate"])
def test_it_finalises_a_non_approve_over_a_do_not_proceed_assessment(api, outcome):
    task = make_task(risk_level="critical", action_class="transact")
    decision = make_decision(task=task, outcome=outcome)
    make_assessment(decision=decision, recommendation="do_not_proceed")

    response = finalise(api, decision.decision_id)

    assert response.status_code == 200
    assert Decision.objects.get(pk=decision.pk).status == "finalised"


# --- revoked policy sets ------------------------------------------------------------------------
def test_it_refuses_to_finalise_a_decision_citing_an_evaluation_of_a_revoked_set(api):
    task = make_task()
    policy_set = make_policy_set()
    evaluation = make_evaluation(task=task, policy_set=policy_set)
    decision = make_decision(task=task, evaluation=evaluation)
    policy_set.deprecate()
    policy_set.save()
    policy_set.revoke()
    policy_set.save()

    response = finalise(api, decision.decision_id)

    assert response.status_code == 422
    assert response.json()["error"]["code"] == "AGP_PREREQUISITE_FAILED"
    assert response.json()["error"]["details"]["failed_checks"][0]["check"] == "policy_set_not_revoked"
    assert Decision.objects.get(pk=decision.pk).status == "draft"


def test_it_finalises_a_decision_citing_an_evaluation_of_a_deprecated_set(api):
    task = make_task()
    policy_set = make_policy_set(status="deprecated")
    decision = make_decision(task=task, evaluation=make_evaluation(task=task, policy_set=policy_set))

    assert finalise(api, decision.decision_id).status_code == 200
    assert Decision.objects.get(pk=decision.pk).status == "finalised"


def test_it_lists_every_failed_check_when_rule5_and_revocation_both_fail(api):
    task = make_task(risk_level="high", action_class="delete")
    evaluation = make_evaluation(task=task, policy_set=make_policy_set(status="revoked"))
    decision = make_decision(task=task, evaluation=evaluation)

    response = finalise(api, decision.decision_id)

    assert response.status_code == 422
    assert response.json()["error"]["code"] == "AGP_IMPACT_ASSESSMENT_REQUIRED"
    assert [c["check"] for c in response.json()["error"]["details"]["failed_checks"]] == [
        "impact_assessment_present", "policy_set_not_revoked"]


# --- reads ------------------------------------------------------------------------------------
def test_it_lists_decisions_by_status_and_task(api, django_assert_num_queries):
    task = make_task()
    draft = make_decision(task=task)
    final = make_decision(task=task, status="finalised")
    make_decision(task=make_task())

    with django_assert_num_queries(1):
        response = api.get(f"/agp/decisions?task_id={task.task_id}&status=finalised")

    assert response.status_code == 200
    assert [item["decision_id"] for item in response.json()["items"]] == [final.decision_id]
    listed = api.get(f"/agp/decisions?task_id={task.task_id}").json()["items"]
    assert [item["decision_id"] for item in listed] == [final.decision_id, draft.decision_id]


# --- concurrency ------------------------------------------------------------------------------
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_concurrent_finalisations_cannot_both_succeed():
    from rest_framework.test import APIClient

    decision = make_decision(task=make_task())
    barrier = threading.Barrier(2)
    statuses = []

    def run():
        try:
            barrier.wait()
            statuses.append(finalise(APIClient(), decision.decision_id).status_code)
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(statuses) == [200, 409]
    assert LedgerEvent.objects.filter(event_type="decision.finalised").count() == 1
