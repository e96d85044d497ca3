"""POST/GET /agp/policy-evaluations: real Rego evaluation, stored with its hashes."""

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from agp_project.canonical import content_hash
from core.ledger import ledger_record
from core.models import IdempotencyRecord, LedgerEvent
from decision.models import PolicyEvaluation
from registry.models import PolicySet
from tests.decision.factories import PAYMENTS, make_policy_set, make_task, ruleset_hash

pytestmark = pytest.mark.django_db

LIMITS = {"auto_approve_max": 100, "hard_max": 1000}
ALLOW_NOTHING = "package agp.allow_nothing\n\nimport rego.v1\n\ndefault allow := false\n"


def body(policy_set, task, **overrides):
    data = {"policy_set_id": policy_set.policy_set_id, "task_id": task.task_id, "agent_id": "agent-1",
            "input": {"action_class": "transact", "amount": 500, "limits": LIMITS, "merchant": "shop"}}
    data.update(overrides)
    return data


def test_it_evaluates_the_ruleset_and_stores_the_result(api):
    task, policy_set = make_task(), make_policy_set(ruleset=PAYMENTS)
    request = body(policy_set, task, evaluation_id="pev-1")

    response = api.post("/agp/policy-evaluations", request, format="json")

    assert response.status_code == 201
    data = response.json()
    assert response["Location"] == "http://testserver/agp/policy-evaluations/pev-1"
    assert data["type"] == "PolicyEvaluation"
    assert data["result"] == {"allow": True, "require_approval": True, "approvals_required": 1, "reasons": []}
    assert data["input_hash"] == content_hash(request["input"])
    assert data["ruleset_hash"] == ruleset_hash(PAYMENTS)
    assert data["warnings"] == []
    assert data["evaluated_at"].endswith("Z")
    row = PolicyEvaluation.objects.get(evaluation_id="pev-1")
    assert (row.allowed, row.require_approval, row.input, row.policy_set_id) == (
        True, True, request["input"], policy_set.policy_set_id)
    event = LedgerEvent.objects.get(resource_id="pev-1")
    assert event.event_type == "policy_evaluation.created"
    assert event.payload["result"] == data["result"]
    assert event.payload["ruleset_hash"] == ruleset_hash(PAYMENTS)


def test_it_records_denial_reasons(api):
    task, policy_set = make_task(), make_policy_set(ruleset=PAYMENTS)
    request = body(policy_set, task, input={"action_class": "transact", "amount": 2000, "limits": LIMITS,
                                            "merchant": "evil-corp"})

    response = api.post("/agp/policy-evaluations", request, format="json")

    assert response.status_code == 201
    assert response.json()["result"] == {"allow": False, "require_approval": True, "approvals_required": 1, "reasons": [
        "amount 2000 exceeds hard maximum 1000", "merchant is blocked"]}
    assert PolicyEvaluation.objects.get().allowed is False


def test_it_records_a_ruleset_that_does_not_compile_as_not_allowed(api):
    task, policy_set = make_task(), make_policy_set(ruleset="package agp.broken\nallow if {\n")

    response = api.post("/agp/policy-evaluations", body(policy_set, task), format="json")

    assert response.status_code == 201
    result = response.json()["result"]
    assert result["allow"] is False
    assert result["reasons"][0].startswith("policy compile error:")
    assert PolicyEvaluation.objects.get().allowed is False


def test_it_warns_when_the_policy_set_is_deprecated(api):
    task, policy_set = make_task(), make_policy_set(ruleset=PAYMENTS, status="deprecated")

    response = api.post("/agp/policy-evaluations", body(policy_set, task), format="json")

    assert response.status_code == 201
    assert response.json()["warnings"] == [f"Policy set {policy_set.policy_set_id!r} is deprecated."]
    assert response.json()["result"]["allow"] is True
    assert PolicyEvaluation.objects.get().warnings == response.json()["warnings"]


def test_it_warns_when_the_policy_set_is_expired_or_not_yet_effective(api):
    now = timezone.now()
    expired = make_policy_set(expires_at=now - timedelta(days=1))
    future = make_policy_set(effective_from=now + timedelta(days=1))
    task = make_task()

    first = api.post("/agp/policy-evaluations", body(expired, task), format="json")
    second = api.post("/agp/policy-evaluations", body(future, task), format="json")

    assert first.status_code == second.status_code == 201
    assert first.json()["warnings"] == [f"Policy set {expired.policy_set_id!r} expired at "
                                        f"{expired.expires_at.strftime('%Y-%m-%dT%H:%M:%S.%fZ')}."]
    assert second.json()["warnings"] == [f"Policy set {future.policy_set_id!r} is not effective until "
                                         f"{future.effective_from.strftime('%Y-%m-%dT%H:%M:%S.%fZ')}."]
    assert PolicyEvaluation.objects.count() == 2


def test_it_refuses_a_revoked_policy_set(api):
    task, policy_set = make_task(), make_policy_set(ruleset=PAYMENTS, status="revoked")

    response = api.post("/agp/policy-evaluations", body(policy_set, task), format="json")

    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "AGP_PREREQUISITE_FAILED"
    assert error["details"]["failed_checks"] == [
        {"check": "policy_set_not_revoked", "reason": f"policy set {policy_set.policy_set_id!r} is revoked"}]
    assert not PolicyEvaluation.objects.exists()
    assert not LedgerEvent.objects.exists()


def test_it_refuses_unknown_policy_sets_and_tasks(api):
    response = api.post("/agp/policy-evaluations",
                        {"policy_set_id": "nope", "task_id": "nada", "agent_id": "a", "input": {}}, format="json")

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "AGP_INVALID_REQUEST"
    assert set(response.json()["error"]["details"]["fields"]) == {"policy_set_id", "task_id"}
    assert not PolicyEvaluation.objects.exists()


@pytest.mark.parametrize(("extra", "field"), [
    ({"result": {"allow": True}}, "result"),
    ({"ruleset_hash": "sha256:00"}, "ruleset_hash"),
    ({"allow": True}, "allow"),
    ({"input": ["not", "an", "object"]}, "input"),
    ({"type": "Decision"}, "type"),
])
def test_it_refuses_read_only_unknown_and_malformed_fields(api, extra, field):
    task, policy_set = make_task(), make_policy_set()

    response = api.post("/agp/policy-evaluations", body(policy_set, task, **extra), format="json")

    assert response.status_code == 400
    assert field in response.json()["error"]["details"]["fields"]
    assert not PolicyEvaluation.objects.exists()


def test_it_refuses_an_input_that_cannot_be_canonicalised(api):
    task, policy_set = make_task(), make_policy_set()

    response = api.post("/agp/policy-evaluations", body(policy_set, task, input={"n": 2**60}), format="json")

    assert response.status_code == 400
    assert "input" in response.json()["error"]["details"]["fields"]
    assert not PolicyEvaluation.objects.exists()


def test_it_refuses_a_duplicate_evaluation_id(api):
    task, policy_set = make_task(), make_policy_set()
    assert api.post("/agp/policy-evaluations", body(policy_set, task, evaluation_id="dup"),
                    format="json").status_code == 201

    response = api.post("/agp/policy-evaluations", body(policy_set, task, evaluation_id="dup"), format="json")

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "AGP_CONFLICT"
    assert PolicyEvaluation.objects.count() == 1
    assert LedgerEvent.objects.filter(resource_id="dup").count() == 1


def test_it_needs_the_policy_write_scope_to_evaluate(make_token):
    task, policy_set = make_task(), make_policy_set()
    decision_writer = APIClient()
    decision_writer.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(['agp.decision.write'])}")
    policy_writer = APIClient()
    policy_writer.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(['agp.policy.write'])}")

    refused = decision_writer.post("/agp/policy-evaluations", body(policy_set, task), format="json")
    accepted = policy_writer.post("/agp/policy-evaluations", body(policy_set, task), format="json")

    assert refused.status_code == 403
    assert refused.json()["error"]["details"]["required_scopes"] == ["agp.policy.write"]
    assert accepted.status_code == 201
    assert PolicyEvaluation.objects.count() == 1
    assert LedgerEvent.objects.get(resource_id=accepted.json()["evaluation_id"]).actor == "test-client"


def test_it_replays_an_idempotent_evaluation_without_evaluating_twice(api):
    task, policy_set = make_task(), make_policy_set(ruleset=PAYMENTS)
    request = body(policy_set, task)

    first = api.post("/agp/policy-evaluations", request, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    second = api.post("/agp/policy-evaluations", request, format="json", HTTP_IDEMPOTENCY_KEY="k-1")

    assert first.status_code == second.status_code == 201
    assert second["Idempotent-Replayed"] == "true"
    assert second.content == first.content
    assert PolicyEvaluation.objects.count() == 1


def test_it_lists_filters_and_retrieves_evaluations(api, django_assert_num_queries):
    task, other_task, policy_set = make_task(), make_task(), make_policy_set()
    for target in (task, task, other_task):
        assert api.post("/agp/policy-evaluations", body(policy_set, target), format="json").status_code == 201
    newest = PolicyEvaluation.objects.filter(task=task).order_by("-pk").first()

    with django_assert_num_queries(1):
        listed = api.get(f"/agp/policy-evaluations?task_id={task.task_id}&limit=1")
    page2 = api.get(f"/agp/policy-evaluations?task_id={task.task_id}&limit=1&cursor={listed.json()['next_cursor']}")
    one = api.get(f"/agp/policy-evaluations/{newest.evaluation_id}")

    assert listed.status_code == page2.status_code == one.status_code == 200
    assert [item["evaluation_id"] for item in listed.json()["items"]] == [newest.evaluation_id]
    assert len(page2.json()["items"]) == 1 and page2.json()["next_cursor"] is None
    assert one.json() == listed.json()["items"][0]
    assert api.get("/agp/policy-evaluations?bogus=1").status_code == 400
    assert api.get("/agp/policy-evaluations/missing").status_code == 404


def test_it_evaluates_in_a_fixed_number_of_queries(api, query_counts):
    task, policy_set = make_task(), make_policy_set(ruleset=PAYMENTS)
    api.post("/agp/policy-evaluations", body(policy_set, task), format="json")  # compiles and caches the ruleset

    # The set, whether the task exists, the row and its ledger event, in a transaction (a
    # savepoint inside the test's).
    with query_counts.pinned("policy evaluation"):
        response = api.post("/agp/policy-evaluations", body(policy_set, task, evaluation_id="counted"), format="json")

    assert response.status_code == 201
    assert PolicyEvaluation.objects.filter(evaluation_id="counted").exists()


def test_a_set_revoked_after_an_evaluation_refuses_the_next_and_writes_nothing(api):
    task, policy_set = make_task(), make_policy_set()
    assert api.post("/agp/policy-evaluations", body(policy_set, task), format="json").status_code == 201
    PolicySet.objects.filter(pk=policy_set.pk).update(status="revoked")

    response = api.post("/agp/policy-evaluations", body(policy_set, task, evaluation_id="late"), format="json")

    assert response.status_code == 422
    assert response.json()["error"]["details"]["failed_checks"][0]["check"] == "policy_set_not_revoked"
    assert not PolicyEvaluation.objects.filter(evaluation_id="late").exists()
    assert not LedgerEvent.objects.filter(resource_id="late").exists()


def test_a_set_changed_after_an_evaluation_is_evaluated_as_it_now_is(api):
    task, policy_set = make_task(), make_policy_set(ruleset=PAYMENTS)
    assert api.post("/agp/policy-evaluations", body(policy_set, task), format="json").status_code == 201
    PolicySet.objects.filter(pk=policy_set.pk).update(
        status="deprecated", ruleset=ALLOW_NOTHING, ruleset_hash=ruleset_hash(ALLOW_NOTHING))

    response = api.post("/agp/policy-evaluations", body(policy_set, task, evaluation_id="now"), format="json")

    assert response.status_code == 201
    assert response.json()["ruleset_hash"] == ruleset_hash(ALLOW_NOTHING)
    assert response.json()["result"]["allow"] is False
    assert response.json()["warnings"] == [f"Policy set {policy_set.policy_set_id!r} is deprecated."]
    assert PolicyEvaluation.objects.get(evaluation_id="now").ruleset_hash == ruleset_hash(ALLOW_NOTHING)
    assert LedgerEvent.objects.get(resource_id="now").payload["ruleset_hash"] == ruleset_hash(ALLOW_NOTHING)


@pytest.mark.django_db(transaction=True)
def test_outside_a_test_transaction_the_row_and_its_event_are_written_together(api):
    ledger_record(event_type="test.started", resource_type="Test", resource_id="t", actor="test")
    task, policy_set = make_task(), make_policy_set(ruleset=PAYMENTS)

    responses = [api.post("/agp/policy-evaluations", body(policy_set, task, evaluation_id=f"pev-{n}"), format="json")
                 for n in (1, 2)]

    assert [r.status_code for r in responses] == [201, 201]
    for response in responses:
        stored = PolicyEvaluation.objects.get(evaluation_id=response.json()["evaluation_id"])
        assert stored.result == response.json()["result"] and stored.result["allow"] is True
        event = LedgerEvent.objects.get(resource_id=stored.evaluation_id)
        assert (event.event_type, event.payload["input_hash"]) == ("policy_evaluation.created", stored.input_hash)


def test_a_future_created_at_is_a_stored_400_under_an_idempotency_key(api):
    # The refusal comes from the service, inside the request's transaction: it must stay a
    # clean 400, stored under the key, with nothing else written.
    task, policy_set = make_task(), make_policy_set(ruleset=PAYMENTS)
    request = {"policy_set_id": policy_set.policy_set_id, "task_id": task.task_id, "agent_id": "agent-1",
               "input": {"x": 1}, "created_at": (timezone.now() + timedelta(days=1)).isoformat()}
    response = api.post("/agp/policy-evaluations", request, format="json", HTTP_IDEMPOTENCY_KEY="k-future")
    assert response.status_code == 400, response.content
    assert "created_at" in response.json()["error"]["details"]["fields"]
    assert IdempotencyRecord.objects.filter(key="k-future", response_status=400).exists()
    assert not PolicyEvaluation.objects.exists()
    assert not LedgerEvent.objects.filter(event_type="policy_evaluation.created").exists()


OVER_100 = ("package agp.over_100\n\nimport rego.v1\n\ndefault allow := true\n\n"
            "deny contains \"x over 100\" if input.action.parameters.x > 100\n"
            "deny contains \"amount over 100\" if input.amount > 100\n")


def raw_evaluation(api, policy_set, task, *, x="1", amount="1"):
    """The request as JSON text, so that every digit of the numbers reaches the service."""
    text = (f'{{"policy_set_id": "{policy_set.policy_set_id}", "task_id": "{task.task_id}", "agent_id": "agent-1", '
            f'"input": {{"amount": {amount}}}, '
            f'"action": {{"tool_id": "crm", "operation": "update", "parameters": {{"x": {x}}}}}}}')
    return api.post("/agp/policy-evaluations", text, content_type="application/json")


@pytest.mark.parametrize(("x", "amount", "field"), [
    ("100.0000000000000000001", "1", "action.parameters.x"),  # read as 100: "> 100" would be false
    ("-100.0000000000000000001", "1", "action.parameters.x"),
    ("1", "100.000000000000000001", "input.amount"),
    ("1", "18446744073709551617.0", "input.amount"),  # a whole number past what a double holds
    ("1.000000000931322574615478515625", "1", "action.parameters.x"),  # a double, not its shortest form
])
def test_a_number_the_engine_would_not_read_as_written_is_refused(api, x, amount, field):
    task, policy_set = make_task(), make_policy_set(ruleset=OVER_100)
    events = LedgerEvent.objects.count()

    response = raw_evaluation(api, policy_set, task, x=x, amount=amount)

    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "AGP_INVALID_REQUEST"
    (message,) = response.json()["error"]["details"]["fields"][field]
    assert "IEEE 754 doubles" in message
    assert not PolicyEvaluation.objects.exists() and LedgerEvent.objects.count() == events


THRESHOLDS = ("package agp.thresholds\n\nimport rego.v1\n\ndefault allow := false\n\n"
              "allow if input.confidence >= 0.95\n"
              "deny contains \"too small\" if input.action.parameters.x < -0.1\n")


@pytest.mark.parametrize(("confidence", "x"), [
    ("0.9499999999999999999", "0"),  # below 0.95, but read as the double 0.95 is read as
    ("0.95", "-0.1000000000000000000001"),  # below -0.1, but read as -0.1
])
def test_a_number_cannot_slip_past_a_decimal_threshold_on_a_rounding(api, confidence, x):
    task, policy_set = make_task(), make_policy_set(ruleset=THRESHOLDS)
    text = (f'{{"policy_set_id": "{policy_set.policy_set_id}", "task_id": "{task.task_id}", "agent_id": "agent-1", '
            f'"input": {{"confidence": {confidence}}}, '
            f'"action": {{"tool_id": "crm", "operation": "update", "parameters": {{"x": {x}}}}}}}')

    response = api.post("/agp/policy-evaluations", text, content_type="application/json")

    assert response.status_code == 400, response.content
    assert not PolicyEvaluation.objects.exists()


@pytest.mark.parametrize(("x", "allowed"), [
    ("100.00000000000001", False),  # the shortest form of a double: compared as written
    ("100", True), ("99.99", True), ("100.0", True), ("9007199254740991", False), ("1e2", True), ("1e20", False),
])
def test_a_number_the_engine_reads_as_written_is_compared_exactly(api, x, allowed):
    task, policy_set = make_task(), make_policy_set(ruleset=OVER_100)

    response = raw_evaluation(api, policy_set, task, x=x)

    assert response.status_code == 201, response.content
    assert response.json()["result"]["allow"] is allowed
