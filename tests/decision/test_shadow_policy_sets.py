"""Shadow policy sets (docs/reference/governance.md): evaluated after the evaluation of the set they shadow was
answered, recorded in ``shadow_results``, never changing an outcome, never clearing an
envelope. Here the worker's task body runs in process (``record_shadows``); a real worker
runs it in test_shadow_worker.py."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agp_project.signing import verify_resource
from core.models import LedgerEvent, OutboxMessage
from decision.models import PolicyEvaluation
from decision.services import policy_evaluation_shadows_record
from registry.models import PolicySet
from tests.execution.factories import RULESET, make_policy_set, make_world

pytestmark = pytest.mark.django_db

# Denies what RULESET allows above an amount of 100 (RULESET denies above 1000).
STRICTER = """package agp.stricter

import rego.v1

default allow := false

allow if input.action_class in {"read", "write", "transact"}

deny contains "amount over 100" if input.amount > 100
"""

# Judges the action (docs/reference/governance.md's input.action) rather than the client's input.
REFUNDS_ONLY = """package agp.refunds_only

import rego.v1

default allow := false

allow if input.action.operation == "refund"

deny contains "refund over 100" if input.action.parameters.amount > 100
"""

# Minutes of CPU: only the engine's time limit ends it.
SPINNING = """package agp.spinning

import rego.v1

allow if {
    some i in numbers.range(1, 20000)
    some j in numbers.range(1, 20000)
    i * j == -1
}
"""

# Allows everything RULESET allows: agrees on every input below.
SAME = RULESET.replace("package agp.test", "package agp.same")


def create_set(api, ruleset, **fields):
    body = {"name": "candidate", "version": "2", "ruleset": ruleset, **fields}
    return api.post("/agp/policy-sets", body, format="json")


def evaluate(api, world, policy_set_id=None, **input_fields):
    body = {"policy_set_id": policy_set_id or world.policy_set.policy_set_id, "task_id": world.task.task_id,
            "agent_id": world.agent_id, "input": {"action_class": "transact", "amount": 50, **input_fields}}
    response = api.post("/agp/policy-evaluations", body, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def record_shadows(api, evaluation):
    """What the worker does with the evaluation's ``agp.evaluate_shadows`` message; the evaluation as read then."""
    [message] = OutboxMessage.objects.filter(task_name="agp.evaluate_shadows", args=[evaluation["evaluation_id"]])
    policy_evaluation_shadows_record(evaluation_id=message.args[0])
    return api.get(f"/agp/policy-evaluations/{evaluation['evaluation_id']}").json()


def test_it_creates_a_signed_shadow_of_a_set(api):
    world = make_world()
    response = create_set(api, STRICTER, shadow_of=world.policy_set.policy_set_id, policy_set_id="ps-shadow")

    assert response.status_code == 201, response.content
    body = response.json()
    assert body["shadow_of"] == world.policy_set.policy_set_id and body["status"] == "active"
    assert verify_resource(body, api.get("/.well-known/jwks.json").json())
    assert PolicySet.objects.get(policy_set_id="ps-shadow").shadow_of_id == world.policy_set.policy_set_id
    assert LedgerEvent.objects.get(resource_id="ps-shadow").payload["shadow_of"] == world.policy_set.policy_set_id
    listed = api.get("/agp/policy-sets", {"shadow_of": world.policy_set.policy_set_id}).json()["items"]
    assert [item["policy_set_id"] for item in listed] == ["ps-shadow"]
    # A set that shadows nothing does not carry the member (signatures issued before shadows still verify).
    assert "shadow_of" not in create_set(api, SAME).json()


@pytest.mark.parametrize("case", ["unknown", "self", "shadow", "revoked"])
def test_it_refuses_a_shadow_of_what_would_never_be_evaluated(api, case):
    world = make_world()
    target = {"unknown": "ps-none", "self": "ps-new", "shadow": "ps-first-shadow",
              "revoked": "ps-revoked"}[case]
    make_policy_set(policy_set_id="ps-first-shadow", shadow_of=world.policy_set)
    make_policy_set(policy_set_id="ps-revoked", status="revoked")

    response = create_set(api, STRICTER, shadow_of=target, policy_set_id="ps-new")

    assert response.status_code == 400
    assert list(response.json()["error"]["details"]["fields"]) == ["shadow_of"]
    assert not PolicySet.objects.filter(policy_set_id="ps-new").exists()


def test_an_evaluation_records_each_active_shadow_and_its_disagreement_without_changing_the_outcome(api):
    world = make_world()
    plain = evaluate(api, world, amount=500)
    assert plain["shadow_results"] == []
    assert not OutboxMessage.objects.filter(task_name="agp.evaluate_shadows").exists()
    make_policy_set(policy_set_id="ps-b-stricter", ruleset=STRICTER, shadow_of=world.policy_set)
    make_policy_set(policy_set_id="ps-a-same", ruleset=SAME, shadow_of=world.policy_set)

    answered = evaluate(api, world, amount=500)

    # Answered with its own verdict; each shadow is named, not yet evaluated.
    assert answered["result"] == plain["result"] == {"allow": True, "require_approval": False,
                                                     "approvals_required": 0, "reasons": []}
    assert answered["shadow_results"] == [
        {"policy_set_id": "ps-a-same", "allow": None, "matches": None},
        {"policy_set_id": "ps-b-stricter", "allow": None, "matches": None}]
    created = LedgerEvent.objects.get(resource_id=answered["evaluation_id"])
    assert created.payload["shadows"] == ["ps-a-same", "ps-b-stricter"] and "shadows" not in (
        LedgerEvent.objects.get(resource_id=plain["evaluation_id"]).payload)

    shadowed = record_shadows(api, answered)

    assert shadowed == {**answered, "shadow_results": [
        {"policy_set_id": "ps-a-same", "allow": True, "matches": True},
        {"policy_set_id": "ps-b-stricter", "allow": False, "matches": False}]}
    stored = PolicyEvaluation.objects.get(evaluation_id=answered["evaluation_id"])
    assert stored.allowed is True and stored.result == plain["result"]
    assert stored.shadow_results == {"ps-a-same": {"allow": True, "matches": True},
                                     "ps-b-stricter": {"allow": False, "matches": False}}
    event = LedgerEvent.objects.get(resource_id=answered["evaluation_id"], event_type="policy_evaluation.shadowed")
    assert event.payload["shadow_results"] == {
        "ps-a-same": {"allow": True, "matches": True, "reasons": []},
        "ps-b-stricter": {"allow": False, "matches": False, "reasons": ["amount over 100"]}}
    # A repeated message records nothing more.
    assert policy_evaluation_shadows_record(evaluation_id=answered["evaluation_id"]) == 0
    assert LedgerEvent.objects.filter(resource_id=answered["evaluation_id"]).count() == 2

    # Where the primary denies and the shadow too, they agree.
    denied = record_shadows(api, evaluate(api, world, amount=5000))
    assert denied["result"]["allow"] is False
    assert {r["policy_set_id"]: r["matches"] for r in denied["shadow_results"]} == {
        "ps-a-same": True, "ps-b-stricter": True}


def test_a_shadow_judges_the_action_the_evaluation_was_made_for(api):
    world = make_world()
    make_policy_set(policy_set_id="ps-refunds-only", ruleset=REFUNDS_ONLY, shadow_of=world.policy_set)

    def evaluate_action(operation, amount):
        response = api.post("/agp/policy-evaluations", {
            "policy_set_id": world.policy_set.policy_set_id, "task_id": world.task.task_id,
            "agent_id": world.agent_id, "input": {"action_class": "transact", "amount": 50},
            "action": {"tool_id": "payments", "operation": operation, "parameters": {"amount": amount}}},
            format="json")
        assert response.status_code == 201, response.content
        return record_shadows(api, response.json())

    refund, large, delete = evaluate_action("refund", 50), evaluate_action("refund", 500), evaluate_action("delete", 5)

    # The outcome is the shadowed set's, the same for all three; the shadow saw each action.
    assert refund["result"] == large["result"] == delete["result"] == {
        "allow": True, "require_approval": False, "approvals_required": 0, "reasons": []}
    assert [body["shadow_results"] for body in (refund, large, delete)] == [
        [{"policy_set_id": "ps-refunds-only", "allow": True, "matches": True}],
        [{"policy_set_id": "ps-refunds-only", "allow": False, "matches": False}],
        [{"policy_set_id": "ps-refunds-only", "allow": False, "matches": False}]]


def test_a_shadow_stopped_at_the_engine_s_time_limit_is_recorded_with_its_reason(api, settings):
    settings.AGP_OPA_URL = None
    settings.AGP_POLICY_TIMEOUT_MS = 300
    world = make_world()
    make_policy_set(policy_set_id="ps-spinning", ruleset=SPINNING, shadow_of=world.policy_set)

    evaluation = evaluate(api, world, amount=500)
    shadowed = record_shadows(api, evaluation)

    assert evaluation["result"] == {"allow": True, "require_approval": False, "approvals_required": 0, "reasons": []}
    assert shadowed["shadow_results"] == [{"policy_set_id": "ps-spinning", "allow": False, "matches": False}]
    event = LedgerEvent.objects.get(resource_id=evaluation["evaluation_id"], event_type="policy_evaluation.shadowed")
    assert event.payload["shadow_results"]["ps-spinning"]["reasons"] == [
        "policy evaluation stopped: it exceeded the time limit of 300 ms (AGP_POLICY_TIMEOUT_MS)"]
    assert PolicyEvaluation.objects.get(evaluation_id=evaluation["evaluation_id"]).allowed is True


def test_its_shadows_cost_an_evaluation_one_outbox_row_and_no_query_to_read_them(api, ledger_head):
    world = make_world()
    body = {"policy_set_id": world.policy_set.policy_set_id, "task_id": world.task.task_id,
            "agent_id": world.agent_id, "input": {"action_class": "read"}}
    with CaptureQueriesContext(connection) as without:
        assert api.post("/agp/policy-evaluations", body, format="json").status_code == 201
    make_policy_set(policy_set_id="ps-shadow-1", ruleset=STRICTER, shadow_of=world.policy_set)
    make_policy_set(policy_set_id="ps-shadow-2", ruleset=SAME, shadow_of=world.policy_set)
    with CaptureQueriesContext(connection) as with_shadows:
        response = api.post("/agp/policy-evaluations", body, format="json")
    assert len(response.json()["shadow_results"]) == 2
    # The set and its shadows are read in one query; the one more statement is the outbox message.
    assert len(with_shadows) == len(without) + 1
    assert OutboxMessage.objects.get(task_name="agp.evaluate_shadows").args == [response.json()["evaluation_id"]]


@pytest.mark.parametrize("shadow_status", ["deprecated", "revoked"])
def test_a_deprecated_or_revoked_shadow_stops_shadowing(api, shadow_status):
    world = make_world()
    make_policy_set(policy_set_id="ps-retired", ruleset=STRICTER, shadow_of=world.policy_set, status=shadow_status)
    make_policy_set(policy_set_id="ps-live", ruleset=STRICTER, shadow_of=world.policy_set)

    assert [r["policy_set_id"] for r in evaluate(api, world)["shadow_results"]] == ["ps-live"]


def test_a_shadow_evaluated_directly_has_no_shadows_and_shadow_results_are_read_only(api):
    world = make_world()
    shadow = make_policy_set(policy_set_id="ps-shadow", ruleset=STRICTER, shadow_of=world.policy_set)
    assert evaluate(api, world, policy_set_id=shadow.policy_set_id)["shadow_results"] == []

    response = api.post("/agp/policy-evaluations", {
        "policy_set_id": world.policy_set.policy_set_id, "task_id": world.task.task_id, "agent_id": world.agent_id,
        "input": {}, "shadow_results": []}, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["details"]["fields"] == {"shadow_results": ["This field is read-only."]}


def test_an_envelope_citing_an_evaluation_of_a_shadow_fails_check_5(api):
    world = make_world()
    shadow = make_policy_set(policy_set_id="ps-shadow", ruleset=RULESET.replace("agp.test", "agp.twin"),
                             shadow_of=world.policy_set)
    PolicyEvaluation.objects.filter(pk=world.evaluation.pk).update(policy_set=shadow,
                                                                   ruleset_hash=shadow.ruleset_hash)

    response = api.post("/agp/action-envelopes", world.envelope_request(), format="json")

    assert response.status_code == 422
    [failed] = response.json()["error"]["details"]["failed_checks"]
    assert failed == {"check": "policy_evaluation", "reason": (
        f"policy set 'ps-shadow' is a shadow of {world.policy_set.policy_set_id!r}: its evaluations clear nothing")}
