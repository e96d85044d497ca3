"""One call per governed action over REST (execution/one_call.py): an envelope without a decision,
for a task with a policy set, is evaluated, decided and checked in the one request."""

from dataclasses import replace
from datetime import timedelta

import pytest
from django.utils import timezone

from agp_project import errors
from agp_project.http.prefer import VALIDATE
from core.models import LedgerEvent
from decision.models import Approval, Decision, PolicyEvaluation
from execution.models import ActionEnvelope, Operation, Receipt
from execution.one_call import INLINE, action_govern
from execution.runner import operation_execute
from registry.models import Freeze, Task
from tests.concurrency import waits_behind
from tests.execution.factories import check_inputs, governed_by_policy, make_world, one_call_request

pytestmark = pytest.mark.django_db

URL = "/agp/action-envelopes"


def events_of(resource_id: str) -> list[str]:
    return list(LedgerEvent.objects.filter(resource_id=resource_id).order_by("sequence")
                .values_list("event_type", flat=True))


def refusal(response) -> dict:
    assert response.status_code == 422, response.content
    return response.json()["error"]


def approve(decision_id: str, approver: str = "alice"):
    return Approval.objects.create(approval_id=f"apr-{approver}-{decision_id}", decision_id=decision_id,
                                   approver=approver, verdict="approved",
                                   expires_at=timezone.now() + timedelta(hours=1), created_at=timezone.now())


def test_the_tasks_policy_set_evaluates_the_exact_action_and_decides_in_the_one_request(api):
    world = governed_by_policy(make_world())

    response = api.post(URL, one_call_request(world), format="json")

    assert response.status_code == 200, response.content
    body = response.json()
    evaluation = PolicyEvaluation.objects.get(evaluation_id=body["policy_decision_ref"])
    decision = Decision.objects.get(decision_id=body["decision_ref"])
    assert evaluation.action == {"tool_id": world.tool_id, "operation": world.operation, "parameters": {"limit": 10}}
    assert evaluation.input == {"task": {"task_id": world.task.task_id, "root_principal": world.root_principal,
                                         "risk_level": "low", "action_class": "read"}, "agent_id": world.agent_id}
    assert (evaluation.policy_set_id, evaluation.allowed) == (world.policy_set.policy_set_id, True)
    assert (decision.outcome, decision.status, decision.decided_by, decision.policy_evaluation_id) == (
        "approve", "finalised", "policy", evaluation.evaluation_id)
    assert events_of(decision.decision_id) == ["decision.created", "decision.finalised"]
    assert events_of(body["action_id"]) == ["envelope.validated"]
    assert not ActionEnvelope.objects.exists()  # validated only


def test_with_respond_async_it_accepts_the_envelope_and_names_the_records_it_made(api):
    world = governed_by_policy(make_world())

    response = api.post(URL, one_call_request(world), format="json", HTTP_PREFER="respond-async")

    assert response.status_code == 202, response.content
    body = response.json()
    envelope = ActionEnvelope.objects.get()
    assert (envelope.decision_ref, envelope.policy_decision_ref) == (body["decision_ref"], body["policy_decision_ref"])
    assert Operation.objects.get(operation_id=body["operation_id"]).status == "pending"
    decision = Decision.objects.get(decision_id=body["decision_ref"])
    assert (decision.status, decision.decided_by) == ("finalised", "policy")
    # Executed, its receipt names the decision and the evaluation the one call made.
    assert operation_execute(operation_id=body["operation_id"], executor="worker-a") == "succeeded"
    governance = Receipt.objects.get(operation_id=body["operation_id"]).governance
    assert (governance["decision_id"], governance["evaluation_id"]) == (body["decision_ref"],
                                                                        body["policy_decision_ref"])


def test_a_policy_that_does_not_allow_records_a_final_deny_and_refuses_the_call(api):
    world = governed_by_policy(make_world(parameters={"limit": 95}, allowed_parameter_ranges={}))

    error = refusal(api.post(URL, one_call_request(world), format="json", HTTP_PREFER="respond-async"))

    checks = {item["check"]: item["reason"] for item in error["details"]["failed_checks"]}
    assert set(checks) == {"decision", "policy_evaluation"}
    assert "did not allow the action (limit over 90)" in checks["policy_evaluation"]
    assert "decision_id" not in error["details"]  # nothing waits
    decision = Decision.objects.get(decided_by="policy")
    assert (decision.outcome, decision.status) == ("deny", "finalised")
    assert not ActionEnvelope.objects.exists()
    assert events_of(error["details"]["action_id"]) == ["envelope.rejected"]


def test_a_call_the_policy_sends_to_people_waits_and_the_same_call_clears_once_they_approved(api):
    world = governed_by_policy(make_world(parameters={"limit": 60}))
    call = one_call_request(world)

    error = refusal(api.post(URL, {**call}, format="json"))

    waiting = Decision.objects.get(decision_id=error["details"]["decision_id"])
    assert (waiting.status, waiting.outcome) == ("draft", "approve")
    assert [item["check"] for item in error["details"]["failed_checks"]] == ["approval"]
    # Asked again before anyone approved: the same decision still waits; nothing new is evaluated.
    again = refusal(api.post(URL, {**call, "action_id": "act-again"}, format="json"))
    assert again["details"]["decision_id"] == waiting.decision_id
    assert PolicyEvaluation.objects.filter(decisions__decided_by="policy").count() == 1

    approve(waiting.decision_id)
    cleared = api.post(URL, {**call, "action_id": "act-cleared"}, format="json", HTTP_PREFER="respond-async")

    assert cleared.status_code == 202, cleared.content
    assert cleared.json()["decision_ref"] == waiting.decision_id
    waiting.refresh_from_db()
    assert waiting.status == "finalised"
    assert ActionEnvelope.objects.get().approval_ref == f"apr-alice-{waiting.decision_id}"
    # The approval cleared that one call: the same call again is a new question for people.
    next_time = refusal(api.post(URL, {**call, "action_id": "act-next"}, format="json"))
    assert next_time["details"]["decision_id"] != waiting.decision_id


def test_a_frozen_agents_call_is_refused_without_evaluating_anything(api):
    world = governed_by_policy(make_world())
    Freeze.objects.create(freeze_id="frz-1", target_type="agent", target_id=world.agent_id, reason="incident",
                          created_at=timezone.now())

    error = refusal(api.post(URL, one_call_request(world), format="json"))

    assert {item["check"] for item in error["details"]["failed_checks"]} == {"freeze", "decision",
                                                                            "policy_evaluation"}
    assert not PolicyEvaluation.objects.exclude(pk=world.evaluation.pk).exists()
    assert not Decision.objects.filter(decided_by="policy").exists()


def test_a_call_for_a_task_without_a_policy_set_names_what_is_missing(api):
    world = make_world()
    Task.objects.filter(pk=world.task.pk).update(policy_set=None)

    error = refusal(api.post(URL, one_call_request(world), format="json"))

    assert error["details"]["failed_checks"] == [
        {"check": "decision", "reason": "the envelope cites no decision"},
        {"check": "policy_evaluation", "reason": "the envelope cites no policy evaluation"}]


def test_a_decision_without_its_evaluation_or_the_reverse_is_a_400(api):
    world = governed_by_policy(make_world())

    response = api.post(URL, one_call_request(world, decision_ref=world.decision.decision_id), format="json")

    assert response.status_code == 400
    assert list(response.json()["error"]["details"]["fields"]) == ["policy_decision_ref"]
    assert not PolicyEvaluation.objects.exclude(pk=world.evaluation.pk).exists()


def test_an_inline_call_is_decided_accepted_and_claimed_for_its_caller_in_a_pinned_number_of_queries(query_counts):
    world = governed_by_policy(make_world())
    inputs = check_inputs(world, decision_ref="", policy_decision_ref="")

    # The MCP gateway's call (its action_id minted for it): the task (with its set, freezes,
    # shadows, a waiting decision), then one transaction: evaluation, decision, the checks
    # (no look for an envelope with the new id), envelope, operation, claim.
    with query_counts.pinned("one call: governed inline"):
        governed = action_govern(inputs=inputs, actor="agent-client", mode=INLINE, executor="gateway@test",
                                 minted=True)

    operation = Operation.objects.get(operation_id=governed.claim.operation_id)
    assert (operation.status, operation.executor, operation.attempts) == ("running", "gateway@test", 1)
    decision = Decision.objects.get(decision_id=governed.decision_id)
    assert (decision.status, decision.policy_evaluation_id) == ("finalised", governed.evaluation_id)
    assert governed.claim.governance["decision_id"] == governed.decision_id
    assert governed.claim.governance["evaluation_id"] == governed.evaluation_id
    assert governed.claim.governance["assessment_id"] is None
    assert events_of(governed.envelope.action_id) == ["envelope.accepted"]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_waiting_decision_another_call_finalised_meanwhile_is_not_used_twice():
    world = governed_by_policy(make_world(parameters={"limit": 60}))
    inputs = check_inputs(world, decision_ref="", policy_decision_ref="")
    with pytest.raises(errors.AGPError) as first:
        action_govern(inputs=inputs, actor="agent-client", mode=VALIDATE)
    waiting = first.value.details["decision_id"]

    def finalise_and_commit(session):
        # What a call that cleared the waiting decision does with the row it locked.
        session.execute("UPDATE decision_decision SET status = 'finalised', finalised_at = now() "
                        "WHERE decision_id = %s", [waiting])
        session.commit()

    waited, again = waits_behind(
        "SELECT id FROM decision_decision WHERE decision_id = %s FOR UPDATE", [waiting],
        lambda: action_govern(inputs=replace(inputs, action_id="act-again"), actor="agent-client", mode=VALIDATE),
        release=finalise_and_commit)

    assert waited
    assert isinstance(again, errors.AGPError), again
    fresh = Decision.objects.get(decision_id=again.details["decision_id"])
    assert fresh.decision_id != waiting
    assert (fresh.status, fresh.outcome) == ("draft", "approve")
    assert PolicyEvaluation.objects.filter(decisions__decided_by="policy").count() == 2
