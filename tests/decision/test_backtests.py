"""Backtests (docs/reference/governance.md), in process: the API, the summary the run stores, its window, and
that it writes nothing but its own record. (A real worker runs one in test_backtest_worker.py.)"""

import time
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from agp_project.canonical import action_document, content_hash
from agp_project.ids import new_id
from core.models import LedgerEvent, OutboxMessage
from decision import backtests as backtests_module
from decision.backtests import backtest_run
from decision.models import Backtest, PolicyEvaluation
from execution.selectors import action_ids_citing
from tests.decision.backtests import CANDIDATE, URL, backtest_of, run, start
from tests.decision.factories import make_decision
from tests.execution.factories import RULESET, make_policy_set, make_world
from tests.execution.worker import ledger_event_types, submit_async
from tests.registry.test_policy_sets_api import SPINS_ON_DEMAND

pytestmark = pytest.mark.django_db

# Allows what it is asked, but spins for minutes of CPU above an amount of 100.
SPINS_ABOVE_100 = """package agp.spins

import rego.v1

default allow := false

allow if input.amount <= 100

allow if {
    input.amount > 100
    some i in numbers.range(1, 20000)
    some j in numbers.range(1, 20000)
    i * j == -1
}
"""


def record(world, amount, *, policy_set=None, agent_id=None, task=None, evaluated_at=None, **extra_input):
    """A recorded evaluation as RULESET decided it (allow unless amount > 1000; approval if asked)."""
    now = evaluated_at or timezone.now()
    policy_input = {"action_class": "transact", "amount": amount, "divisor": 1, **extra_input}
    allowed = amount <= 1000
    result = {"allow": allowed, "require_approval": False, "approvals_required": 0, "reasons": [] if allowed else ["amount over 1000"]}
    # Made for the world's own action, as an evaluation an envelope may cite (docs/reference/governance.md).
    action = action_document(tool_id=world.tool_id, operation=world.operation, parameters=world.parameters)
    return PolicyEvaluation.objects.create(
        evaluation_id=new_id("pe"), policy_set=policy_set or world.policy_set, task=task or world.task,
        agent_id=agent_id or world.agent_id, input=policy_input, input_hash=content_hash(policy_input),
        action=action, action_hash=content_hash(action),
        ruleset_hash=(policy_set or world.policy_set).ruleset_hash, result=result, allowed=allowed,
        evaluated_at=now, created_at=now)


# --- POST /agp/backtests and the operation ---------------------------------------------------------

def test_it_answers_202_with_the_backtest_s_operation_and_records_it_pending(api):
    candidate = make_policy_set(ruleset=CANDIDATE)
    before = timezone.now()

    response = api.post(URL, {"policy_set_id": candidate.policy_set_id, "backtest_id": "bt-1"}, format="json")

    assert response.status_code == 202, response.content
    operation = response.json()
    assert set(operation) == {"operation_id", "status", "created_at", "updated_at", "status_url", "result_url",
                              "callback_url", "error", "progress"}
    assert operation["status"] == "pending" and operation["error"] is None and operation["callback_url"] is None
    assert operation["progress"] == {"evaluations": 0, "total": None}
    status_url = f"http://testserver/agp/operations/{operation['operation_id']}"
    assert operation["status_url"] == response["Location"] == response["Operation-Location"] == status_url
    assert operation["result_url"] == "http://testserver/agp/backtests/bt-1"
    assert api.get(f"/agp/operations/{operation['operation_id']}").json() == operation

    body = api.get(f"{URL}/bt-1").json()
    assert body["type"] == "Backtest"
    assert {k: body[k] for k in ("backtest_id", "policy_set_id", "baseline_policy_set_id", "status", "ruleset_hash",
                                 "operation_id", "evaluations", "changes", "by_reason", "task_id", "agent_id")} == {
        "backtest_id": "bt-1", "policy_set_id": candidate.policy_set_id, "baseline_policy_set_id": None,
        "status": "pending", "ruleset_hash": candidate.ruleset_hash, "operation_id": operation["operation_id"],
        "evaluations": 0, "changes": [], "by_reason": {}, "task_id": None, "agent_id": None}
    backtest = Backtest.objects.get(backtest_id="bt-1")
    assert before <= backtest.until <= timezone.now() and backtest.until - backtest.since == timedelta(days=30)
    assert ledger_event_types("bt-1") == ["backtest.created"]
    [message] = OutboxMessage.objects.all()
    assert (message.task_name, message.args) == ("agp.run_backtest", ["bt-1"])


@pytest.mark.parametrize("body,field", [
    ({"policy_set_id": "ps-none"}, "policy_set_id"),
    ({"baseline_policy_set_id": "ps-none"}, "baseline_policy_set_id"),
    ({"since": "2026-01-02T00:00:00Z", "until": "2026-01-01T00:00:00Z"}, "since"),
    ({"status": "running"}, "status"),
    ({"evaluations": 3}, "evaluations"),
    ({"window": "7d"}, "window"),
])
def test_it_refuses_a_malformed_backtest_naming_the_field(api, body, field):
    candidate = make_policy_set(ruleset=CANDIDATE)
    response = api.post(URL, {"policy_set_id": candidate.policy_set_id, **body}, format="json")
    assert response.status_code == 400
    assert list(response.json()["error"]["details"]["fields"]) == [field]
    assert not Backtest.objects.exists() and not OutboxMessage.objects.exists()


def test_it_refuses_a_revoked_candidate_but_backtests_a_deprecated_one(api):
    revoked, deprecated = make_policy_set(status="revoked"), make_policy_set(status="deprecated")
    response = api.post(URL, {"policy_set_id": revoked.policy_set_id}, format="json")
    assert response.status_code == 422
    assert response.json()["error"]["details"]["failed_checks"][0]["check"] == "policy_set_not_revoked"
    start(api, policy_set_id=deprecated.policy_set_id)


def test_it_refuses_a_duplicate_backtest_id(api):
    candidate = make_policy_set(ruleset=CANDIDATE)
    start(api, policy_set_id=candidate.policy_set_id, backtest_id="bt-dup")
    response = api.post(URL, {"policy_set_id": candidate.policy_set_id, "backtest_id": "bt-dup"}, format="json")
    assert response.status_code == 409 and response.json()["error"]["code"] == "AGP_CONFLICT"
    assert Backtest.objects.count() == 1


def test_a_client_may_have_only_so_many_unfinished_backtests(api, settings, make_token):
    settings.AGP_BACKTESTS_PER_CLIENT = 2
    candidate = make_policy_set(ruleset=CANDIDATE)
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(client_id='planner')}")
    first, _ = start(api, policy_set_id=candidate.policy_set_id), start(api, policy_set_id=candidate.policy_set_id)

    refused = api.post(URL, {"policy_set_id": candidate.policy_set_id, "backtest_id": "bt-third"}, format="json")

    assert refused.status_code == 429 and refused["Retry-After"] == "30"
    error = refused.json()["error"]
    assert (error["code"], error["retryable"], error["details"]) == (
        "AGP_RATE_LIMITED", True, {"unfinished_backtests": 2})
    assert not Backtest.objects.filter(backtest_id="bt-third").exists()
    # Another client has its own; an ended backtest frees its client's slot.
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(client_id='auditor')}")
    start(api, policy_set_id=candidate.policy_set_id)
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(client_id='planner')}")
    api.patch(f"/agp/operations/{first['operation_id']}", {"status": "cancelled"}, format="json")
    start(api, policy_set_id=candidate.policy_set_id, backtest_id="bt-third")
    assert Backtest.objects.filter(requested_by="planner").count() == 3


# --- the run -------------------------------------------------------------------------------------

def test_a_run_yields_its_worker_between_slices_and_a_repeated_slice_message_does_nothing(api, monkeypatch):
    monkeypatch.setattr(backtests_module, "SLICE_SECONDS", 0)  # one evaluation a slice
    world = make_world()
    candidate = make_policy_set(ruleset=CANDIDATE)
    for amount in (10, 500, 20):
        record(world, amount)
    operation = start(api, policy_set_id=candidate.policy_set_id)
    backtest_id = backtest_of(operation)

    outcomes = [run_slice(backtest_id)]
    while outcomes[-1] == "continued":
        message = OutboxMessage.objects.order_by("-pk").first()
        assert message.task_name == "agp.run_backtest"
        outcomes.append(run_slice(*message.args))
        # The same message again: its slice is over (or the whole run).
        assert run_slice(*message.args) == ("stale" if outcomes[-1] == "continued" else "done")

    assert outcomes == ["continued"] * 3 + ["succeeded"]  # four evaluations: the world's and three recorded
    body = api.get(operation["result_url"]).json()
    assert (body["evaluations"], body["newly_denied"], body["limit_reached"]) == (4, 1, None)
    assert ledger_event_types(backtest_id) == ["backtest.created", "backtest.running", "backtest.succeeded"]


def run_slice(backtest_id, attempt=None, slice_number=None):
    return backtest_run(backtest_id=backtest_id, executor="test/pid-1", action_ids_of=action_ids_citing,
                        attempt=attempt, slice_number=slice_number)


def test_a_run_stops_at_its_bound_of_evaluations_and_says_so(api, settings):
    settings.AGP_BACKTEST_MAX_EVALUATIONS = 3
    world = make_world()
    candidate = make_policy_set(ruleset=CANDIDATE)
    recorded = [record(world, 500) for _ in range(4)]
    operation = start(api, policy_set_id=candidate.policy_set_id)

    assert run(backtest_of(operation)) == "succeeded"

    body = api.get(operation["result_url"]).json()
    assert (body["total"], body["evaluations"], body["newly_denied"]) == (5, 3, 2)
    assert [change["evaluation_id"] for change in body["changes"]] == [e.evaluation_id for e in recorded[:2]]
    assert body["limit_reached"] == {"limit": "AGP_BACKTEST_MAX_EVALUATIONS", "value": 3, "message": (
        "The backtest stopped at its bound of 3 evaluations (AGP_BACKTEST_MAX_EVALUATIONS): 3 of the window's 5 "
        "evaluations were re-evaluated, 2 were not.")}
    assert LedgerEvent.objects.get(resource_id=body["backtest_id"], event_type="backtest.succeeded").payload[
        "limit_reached"] == "AGP_BACKTEST_MAX_EVALUATIONS"


def test_a_run_stops_at_its_bound_of_time_and_says_so(api, settings):
    settings.AGP_BACKTEST_MAX_SECONDS = 1
    settings.AGP_POLICY_TIMEOUT_MS = 300
    world = make_world()
    candidate = make_policy_set(ruleset=SPINS_ON_DEMAND)  # each evaluation takes the engine's whole limit
    for _ in range(8):
        record(world, 10, spin=True)
    operation = start(api, policy_set_id=candidate.policy_set_id)
    started = time.monotonic()

    assert run(backtest_of(operation)) == "succeeded"

    assert time.monotonic() - started < 3
    body = api.get(operation["result_url"]).json()
    assert body["limit_reached"]["limit"] == "AGP_BACKTEST_MAX_SECONDS" and body["limit_reached"]["value"] == 1
    assert 2 <= body["evaluations"] <= 5 and body["total"] == 9
    assert Backtest.objects.get(backtest_id=body["backtest_id"]).run_seconds >= 1


def test_it_re_evaluates_the_window_and_stores_the_summary_and_the_changes(api):
    world = make_world()
    candidate = make_policy_set(ruleset=CANDIDATE)
    unchanged = [record(world, 10), record(world, 20), record(world, 5000)]  # allowed, allowed, denied by both
    approval = record(world, 60)  # still allowed, now with approval
    newly_denied = record(world, 500)
    weekend = record(world, 30, weekend=True)
    newly_allowed = PolicyEvaluation.objects.filter(pk=record(world, 10).pk)
    newly_allowed.update(allowed=False, result={"allow": False, "require_approval": False, "approvals_required": 0, "reasons": ["x"]})
    errored = record(world, 10, divisor=0)
    decision = make_decision(task=world.task, agent_id=world.agent_id, status="finalised", evaluation=newly_denied)
    envelope = submit_async(api, world.envelope_request(policy_decision_ref=newly_denied.evaluation_id,
                                                        decision_ref=decision.decision_id))
    evaluations_before, events_before = PolicyEvaluation.objects.count(), LedgerEvent.objects.count()
    operation = start(api, policy_set_id=candidate.policy_set_id)

    assert run(backtest_of(operation)) == "succeeded"

    body = api.get(operation["result_url"]).json()
    total = 1 + len(unchanged) + 5  # the world's own evaluation, and the eight recorded here
    assert {k: body[k] for k in ("status", "total", "evaluations", "unchanged", "newly_denied", "newly_allowed",
                                 "approval_changed", "errors")} == {
        "status": "succeeded", "total": total, "evaluations": total, "unchanged": 4, "newly_denied": 3,
        "newly_allowed": 1, "approval_changed": 1, "errors": 1}
    changes = {change["evaluation_id"]: change for change in body["changes"]}
    assert set(changes) == {approval.evaluation_id, newly_denied.evaluation_id, weekend.evaluation_id,
                            newly_allowed.get().evaluation_id, errored.evaluation_id}
    assert changes[newly_denied.evaluation_id] == {
        "evaluation_id": newly_denied.evaluation_id,
        "action_ids": [envelope["result_url"].rsplit("/", 1)[1]],
        "before": {"allow": True, "require_approval": False, "approvals_required": 0, "reasons": []},
        "after": {"allow": False, "require_approval": True, "approvals_required": 1, "reasons": ["amount over 100"]}}
    assert changes[approval.evaluation_id]["after"] == {"allow": True, "require_approval": True, "approvals_required": 1, "reasons": []}
    assert changes[errored.evaluation_id]["after"]["allow"] is False
    assert body["by_reason"] == {"amount over 100": 1, "weekend": 1,
                                 changes[errored.evaluation_id]["after"]["reasons"][0]: 1}
    assert body["started_at"] and body["completed_at"] and body["error"] is None
    final = api.get(operation["status_url"]).json()
    assert final["status"] == "succeeded" and final["progress"] == {"evaluations": total, "total": total}

    # Nothing but its own record: no evaluation, and only the backtest's own ledger events.
    assert PolicyEvaluation.objects.count() == evaluations_before
    assert list(LedgerEvent.objects.filter(pk__gt=events_before).values_list("resource_id", "event_type")
                .order_by("sequence")) == [
        (body["backtest_id"], "backtest.created"), (body["backtest_id"], "backtest.running"),
        (body["backtest_id"], "backtest.succeeded")]
    # A redelivered message finds it ended.
    assert run(body["backtest_id"]) == "done"


# Judges the action itself (docs/reference/governance.md's input.action), not the client's input: without the
# recorded action every re-evaluation would be a denial.
ACTION_CANDIDATE = """package agp.action_candidate

import rego.v1

default allow := false

allow if input.action.operation == "refund"

deny contains "refund over 100" if input.action.parameters.amount > 100
"""


def evaluate_through_the_api(api, world, policy_set, operation, parameters):
    """A live evaluation (POST /agp/policy-evaluations) of ``policy_set`` made for an action."""
    response = api.post("/agp/policy-evaluations", {
        "policy_set_id": policy_set.policy_set_id, "task_id": world.task.task_id, "agent_id": world.agent_id,
        "input": {"action_class": "transact"},
        "action": {"tool_id": "payments", "operation": operation, "parameters": parameters}}, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def test_it_re_evaluates_each_evaluation_with_the_action_it_was_made_for(api):
    world = make_world()
    baseline = make_policy_set(ruleset=RULESET.replace("agp.test", "agp.baseline"))
    # Recorded through the API, as live traffic records them; every one allowed by the baseline.
    small = evaluate_through_the_api(api, world, baseline, "refund", {"amount": Decimal("99.99"), "currency": "USD"})
    large = evaluate_through_the_api(api, world, baseline, "refund", {"amount": 500, "currency": "USD"})
    other = evaluate_through_the_api(api, world, baseline, "delete", {"amount": 5})
    # An exact amount: stored, read back and handed to the engine as sent.
    exact = evaluate_through_the_api(api, world, baseline, "refund", {"amount": Decimal("100.01"), "currency": "USD"})
    assert exact["action"]["parameters"]["amount"] == 100.01
    candidate = make_policy_set(ruleset=ACTION_CANDIDATE)
    # The candidate's own live verdicts on the same actions: what the backtest must reproduce.
    live = {body["evaluation_id"]: evaluate_through_the_api(
        api, world, candidate, body["action"]["operation"], body["action"]["parameters"])["result"]
        for body in (small, large, other, exact)}
    assert [result["allow"] for result in live.values()] == [True, False, False, False]
    evaluations_before = PolicyEvaluation.objects.count()

    operation = start(api, policy_set_id=candidate.policy_set_id, baseline_policy_set_id=baseline.policy_set_id)
    assert run(backtest_of(operation)) == "succeeded"

    body = api.get(operation["result_url"]).json()
    assert {k: body[k] for k in ("evaluations", "unchanged", "newly_denied", "newly_allowed", "errors")} == {
        "evaluations": 4, "unchanged": 1, "newly_denied": 3, "newly_allowed": 0, "errors": 0}
    changes = {change["evaluation_id"]: change for change in body["changes"]}
    assert set(changes) == {large["evaluation_id"], other["evaluation_id"], exact["evaluation_id"]}
    for evaluation_id, change in changes.items():
        assert change["after"] == live[evaluation_id]
    assert changes[large["evaluation_id"]]["after"]["reasons"] == ["refund over 100"]
    assert changes[exact["evaluation_id"]]["after"]["reasons"] == ["refund over 100"]
    assert body["by_reason"] == {"refund over 100": 2, "(allow is not true)": 1}
    assert PolicyEvaluation.objects.count() == evaluations_before


def test_a_re_evaluation_past_the_engine_s_time_limit_is_an_error_and_the_run_goes_on(api, settings):
    settings.AGP_OPA_URL = None
    settings.AGP_POLICY_TIMEOUT_MS = 300
    world = make_world()
    spinning = make_policy_set(ruleset=SPINS_ABOVE_100)
    records = [record(world, 10), record(world, 500), record(world, 20)]

    operation = start(api, policy_set_id=spinning.policy_set_id)
    started = time.monotonic()
    assert run(backtest_of(operation)) == "succeeded"
    elapsed = time.monotonic() - started

    body = api.get(operation["result_url"]).json()
    assert (body["evaluations"], body["errors"], body["newly_denied"], body["unchanged"]) == (4, 1, 1, 3)
    [change] = body["changes"]
    assert change["evaluation_id"] == records[1].evaluation_id
    assert change["after"] == {"allow": False, "require_approval": False, "approvals_required": 0, "reasons": [
        "policy evaluation stopped: it exceeded the time limit of 300 ms (AGP_POLICY_TIMEOUT_MS)"]}
    assert elapsed < 5  # one stopped evaluation costs its limit, not the minutes it would spin


def test_it_keeps_to_the_window_the_baseline_the_task_and_the_agent(api):
    world, other = make_world(), make_world()
    candidate = make_policy_set(ruleset=CANDIDATE)
    baseline = make_policy_set(ruleset=RULESET.replace("agp.test", "agp.baseline"))
    now = timezone.now()
    inside = [record(world, 500, policy_set=baseline, evaluated_at=now - timedelta(days=2)),
              record(world, 500, policy_set=baseline, evaluated_at=now - timedelta(days=3))]
    record(world, 500, evaluated_at=now - timedelta(days=2))  # another set
    record(world, 500, policy_set=baseline, evaluated_at=now - timedelta(days=9))  # before the window
    record(world, 500, policy_set=baseline, evaluated_at=now - timedelta(days=1))  # at `until`: excluded
    record(other, 500, policy_set=baseline, evaluated_at=now - timedelta(days=2))  # another task and agent
    operation = start(api, policy_set_id=candidate.policy_set_id, baseline_policy_set_id=baseline.policy_set_id,
                      since=(now - timedelta(days=7)).isoformat(), until=(now - timedelta(days=1)).isoformat(),
                      task_id=world.task.task_id, agent_id=world.agent_id)

    assert run(backtest_of(operation)) == "succeeded"

    body = api.get(operation["result_url"]).json()
    assert (body["total"], body["evaluations"], body["newly_denied"]) == (2, 2, 2)
    assert {change["evaluation_id"] for change in body["changes"]} == {e.evaluation_id for e in inside}
    assert body["task_id"] == world.task.task_id and body["agent_id"] == world.agent_id


def test_it_counts_every_change_but_keeps_the_first_ones_and_streams_in_batches(api, monkeypatch):
    monkeypatch.setattr(backtests_module, "MAX_CHANGES", 3)
    monkeypatch.setattr(backtests_module, "BATCH", 2)
    monkeypatch.setattr(backtests_module, "MAX_REASONS", 1)
    world = make_world()
    candidate = make_policy_set(ruleset=CANDIDATE)
    denied = [record(world, 500 + i, weekend=i % 2 == 0) for i in range(7)]
    operation = start(api, policy_set_id=candidate.policy_set_id)

    assert run(backtest_of(operation)) == "succeeded"

    body = api.get(operation["result_url"]).json()
    assert body["newly_denied"] == 7 and body["evaluations"] == 8
    assert [change["evaluation_id"] for change in body["changes"]] == [e.evaluation_id for e in denied[:3]]
    assert body["by_reason"] == {"amount over 100": 7, "(other reasons)": 4}


def test_an_empty_window_succeeds_with_zero_counts(api):
    candidate = make_policy_set(ruleset=CANDIDATE)
    operation = start(api, policy_set_id=candidate.policy_set_id, since="2020-01-01T00:00:00Z",
                      until="2020-01-02T00:00:00Z")
    assert run(backtest_of(operation)) == "succeeded"
    body = api.get(operation["result_url"]).json()
    assert (body["total"], body["evaluations"], body["changes"]) == (0, 0, [])


def test_a_candidate_that_runs_away_is_stopped_at_the_engine_s_time_limit_on_each_evaluation(api, settings):
    settings.AGP_POLICY_TIMEOUT_MS = 300
    world = make_world()
    candidate = make_policy_set(ruleset=SPINS_ON_DEMAND)  # minutes of CPU for an input with spin
    spinning = [record(world, 10, spin=True) for _ in range(3)]
    record(world, 20)
    operation = start(api, policy_set_id=candidate.policy_set_id)
    started = time.monotonic()

    assert run(backtest_of(operation)) == "succeeded"

    assert time.monotonic() - started < 3 * 0.3 + 4  # each stopped at 300 ms (and its process replaced)
    body = api.get(operation["result_url"]).json()
    stopped = "policy evaluation stopped: it exceeded the time limit of 300 ms (AGP_POLICY_TIMEOUT_MS)"
    assert {k: body[k] for k in ("evaluations", "unchanged", "newly_denied", "by_reason")} == {
        "evaluations": 5, "unchanged": 2, "newly_denied": 3, "by_reason": {stopped: 3}}
    assert {change["evaluation_id"]: change["after"] for change in body["changes"]} == {
        evaluation.evaluation_id: {"allow": False, "require_approval": False, "approvals_required": 0, "reasons": [stopped]}
        for evaluation in spinning}
