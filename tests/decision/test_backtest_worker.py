"""Backtests run by a real Celery worker (docs/reference/governance.md), on PostgreSQL and Redis.

10,000 recorded evaluations, each made for an action, are re-evaluated through the API, and
the counts are checked against an independent re-evaluation here, with regorus itself; a
slow one is cancelled while it runs and stops. Four backtests of a candidate that takes the
engine's whole time limit on every evaluation do not keep a governed action from executing.
"""

import hashlib
import re
import time

import pytest
import regorus
from django.utils import timezone

from agp_project.canonical import action_document, content_hash
from core.models import LedgerEvent
from decision.models import Backtest, PolicyEvaluation
from tests.decision import backtests
from tests.execution.factories import RULESET, make_policy_set, make_world
from tests.execution.worker import (  # noqa: F401
    ledger_event_types,
    module_worker,
    poll_until_ended,
    submit_async,
    test_broker,
    wait_for,
    worker_db,
)
from tests.registry.test_policy_sets_api import SPINS_ON_DEMAND

pytestmark = pytest.mark.postgres

RECORDED = 10_000

# The in-process tests' candidate, which also denies a closed account (a rule on the action).
CANDIDATE = backtests.CANDIDATE + """
deny contains "closed account" if input.action.parameters.account == "closed"
"""

# A few milliseconds an evaluation: slow enough to be cancelled while it runs.
SLOW = """package agp.slow

import rego.v1

default allow := false

allow if count([x | some x in numbers.range(1, 3000); x % 7 == input.amount % 7]) > 0
"""


def ruleset_hash(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def recorded_input(i: int) -> dict:
    return {"action_class": "transact", "amount": i % 1500, "weekend": i % 7 == 0,
            "require_approval": i % 5 == 0, "divisor": 0 if i % 1000 == 0 else 1}


def recorded_action(i: int) -> dict:
    """The action (docs/reference/governance.md) the evaluation was made for: the candidate judges its account."""
    return action_document(tool_id="payments", operation="refund",
                           parameters={"amount": i % 1500, "account": "closed" if i % 11 == 0 else "open"})


def seed(world, baseline, count: int) -> None:
    """``count`` evaluations as RULESET recorded them (deny above 1000, approval when asked)."""
    now = timezone.now()
    rows = []
    for i in range(count):
        policy_input, action = recorded_input(i), recorded_action(i)
        allowed = policy_input["amount"] <= 1000
        result = {"allow": allowed, "require_approval": policy_input["require_approval"],
                  "reasons": [] if allowed else ["amount over 1000"]}
        rows.append(PolicyEvaluation(
            evaluation_id=f"pe-bt-{i}", policy_set=baseline, task=world.task, agent_id=world.agent_id,
            input=policy_input, input_hash=content_hash(policy_input), action=action,
            action_hash=content_hash(action), ruleset_hash=baseline.ruleset_hash,
            result=result, allowed=allowed, require_approval=result["require_approval"], evaluated_at=now,
            created_at=now))
    PolicyEvaluation.objects.bulk_create(rows, batch_size=2000)


def independent_counts(count: int) -> dict[str, int]:
    """What the candidate changes, evaluated here with regorus directly (not AGP's engine)."""
    engine = regorus.Engine()
    engine.set_rego_v0(False)
    engine.add_policy("candidate.rego", CANDIDATE)
    counts = dict.fromkeys(("unchanged", "newly_denied", "newly_allowed", "approval_changed", "errors"), 0)
    for i in range(count):
        policy_input = recorded_input(i)
        engine.set_input({**policy_input, "action": recorded_action(i)})
        try:
            allow = engine.eval_rule("data.agp.candidate.allow") is True
            denied = bool(engine.eval_rule("data.agp.candidate.deny"))
            approval = engine.eval_rule("data.agp.candidate.require_approval") is True
        except Exception:  # the divisor-0 inputs: an evaluation error is a denial
            counts["errors"] += 1
            allow, denied, approval = False, True, False
        after = allow and not denied
        before = policy_input["amount"] <= 1000
        if before and not after:
            counts["newly_denied"] += 1
        elif after and not before:
            counts["newly_allowed"] += 1
        elif before and approval != policy_input["require_approval"]:
            counts["approval_changed"] += 1
        else:
            counts["unchanged"] += 1
    return counts


def operation_of(api, operation_id):
    return api.get(f"/agp/operations/{operation_id}").json()


def test_a_backtest_over_ten_thousand_recorded_evaluations_matches_an_independent_re_evaluation(
        api, module_worker, worker_db):
    world = make_world()
    baseline = make_policy_set(ruleset=RULESET.replace("agp.test", "agp.baseline"))
    candidate = make_policy_set(ruleset=CANDIDATE)
    seed(world, baseline, RECORDED)
    evaluations_before = PolicyEvaluation.objects.count()

    response = api.post("/agp/backtests", {"policy_set_id": candidate.policy_set_id,
                                           "baseline_policy_set_id": baseline.policy_set_id}, format="json")

    assert response.status_code == 202, response.content
    operation = response.json()

    def ended():
        body = operation_of(api, operation["operation_id"])
        return body if body["status"] in ("succeeded", "failed", "cancelled") else None

    final = wait_for(ended, timeout=120, interval=0.2, message="the backtest to end", worker=module_worker)
    assert final["status"] == "succeeded", final
    assert final["progress"] == {"evaluations": RECORDED, "total": RECORDED}

    body = api.get(operation["result_url"]).json()
    expected = independent_counts(RECORDED)
    assert {name: body[name] for name in expected} == expected
    assert body["evaluations"] == RECORDED == sum(expected[name] for name in expected if name != "errors")
    assert len(body["changes"]) == 1000
    assert body["changes"][0]["evaluation_id"] == "pe-bt-0"  # the first changes, in recorded order
    # Those the candidate could not evaluate count under the engine's error, not under a deny reason.
    assert body["by_reason"]["amount over 100"] == sum(
        1 for i in range(RECORDED) if 100 < recorded_input(i)["amount"] <= 1000 and recorded_input(i)["divisor"])
    # Judged on the recorded action: the closed accounts among those the baseline allowed.
    assert body["by_reason"]["closed account"] == sum(
        1 for i in range(RECORDED)
        if i % 11 == 0 and recorded_input(i)["amount"] <= 1000 and recorded_input(i)["divisor"])
    assert body["ruleset_hash"] == ruleset_hash(CANDIDATE)
    assert PolicyEvaluation.objects.count() == evaluations_before
    assert ledger_event_types(body["backtest_id"]) == ["backtest.created", "backtest.running", "backtest.succeeded"]


def test_a_running_backtest_is_cancelled_through_its_operation_and_stops(api, module_worker, worker_db):
    world = make_world()
    baseline = make_policy_set(ruleset=RULESET.replace("agp.test", "agp.baseline"))
    candidate = make_policy_set(ruleset=SLOW)
    seed(world, baseline, 3000)
    operation = api.post("/agp/backtests", {"policy_set_id": candidate.policy_set_id,
                                            "baseline_policy_set_id": baseline.policy_set_id}, format="json").json()
    wait_for(lambda: operation_of(api, operation["operation_id"])["progress"]["evaluations"] > 0, timeout=30,
             message="the backtest to report progress", worker=module_worker)

    logged = len(module_worker.log_path.read_text())
    cancelled = api.patch(f"/agp/operations/{operation['operation_id']}", {"status": "cancelled"}, format="json")

    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    backtest_id = operation["result_url"].rsplit("/", 1)[1]
    # The worker stops at the slice's next progress write ('cancelled'), or, when the
    # cancellation came between two slices, the next slice finds it ended ('done'); either
    # way it writes nothing more.
    wait_for(lambda: re.search(r"agp\.run_backtest\[[^\]]+\] succeeded in [0-9.]+s: '(cancelled|done)'",
                               module_worker.log_path.read_text()[logged:]),
             timeout=30, message="the worker to stop the backtest", worker=module_worker)

    stopped = Backtest.objects.get(backtest_id=backtest_id)
    assert stopped.status == "cancelled" and 0 < stopped.evaluations < 3000
    assert stopped.changes == [] and stopped.completed_at is not None
    assert ledger_event_types(backtest_id) == ["backtest.created", "backtest.running", "backtest.cancelled"]
    assert not LedgerEvent.objects.filter(resource_id=backtest_id, event_type="backtest.succeeded").exists()


def test_four_backtests_that_spin_on_every_evaluation_leave_a_governed_action_its_worker(
        api, module_worker, worker_db, settings):
    settings.AGP_BACKTESTS_PER_CLIENT = 4  # one client asks for all four (authentication is off here)
    world = make_world()
    baseline = make_policy_set(ruleset=RULESET.replace("agp.test", "agp.baseline"))
    spinning = make_policy_set(ruleset=SPINS_ON_DEMAND)  # each evaluation runs to the engine's limit (500 ms)
    PolicyEvaluation.objects.bulk_create([PolicyEvaluation(
        evaluation_id=f"pe-spin-{i}", policy_set=baseline, task=world.task, agent_id=world.agent_id,
        input={"spin": True}, input_hash=content_hash({"spin": True}), ruleset_hash=baseline.ruleset_hash,
        result={"allow": True, "require_approval": False, "reasons": []}, allowed=True,
        evaluated_at=timezone.now(), created_at=timezone.now()) for i in range(100)])
    operations = [api.post("/agp/backtests", {"policy_set_id": spinning.policy_set_id,
                                              "baseline_policy_set_id": baseline.policy_set_id},
                           format="json").json() for _ in range(4)]
    wait_for(lambda: Backtest.objects.filter(status="running").count() >= 2, timeout=30,
             message="the backtests to take both worker processes", worker=module_worker)

    started = time.monotonic()
    accepted = submit_async(api, world.envelope_request())
    ended = poll_until_ended(api, accepted["operation_id"], worker=module_worker, timeout=10)
    elapsed = time.monotonic() - started

    assert ended["status"] == "succeeded"
    assert elapsed < 10
    unfinished = Backtest.objects.filter(status__in=["pending", "running"]).count()
    for operation in operations:
        api.patch(f"/agp/operations/{operation['operation_id']}", {"status": "cancelled"}, format="json")
    assert unfinished == 4  # still at it: each has minutes of evaluations left (100 of 500 ms)
    print(f"the governed action executed {elapsed:.1f} s after its submission, beside four running backtests")
