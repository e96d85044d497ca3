"""The binding at execution time, and the trail of a task and of an action (docs/reference/governance.md).

An accepted envelope is checked again when a worker claims it (``operation_execute``, the
body of ``agp.execute_operation``), by the same rules: when a record it cites changed
between acceptance and execution so that it no longer governs this action or this agent,
the operation fails naming the check, and nothing reaches the tool. (No worker test repeats
this: the worker runs the same ``operation_execute``; tests/execution/test_worker.py is the one
end-to-end path through a real worker.)
"""

from decimal import Decimal

import pytest

from agp_project.canonical import action_document, content_hash
from core.models import LedgerEvent
from decision.models import CommerceSession, Decision, PolicyEvaluation
from execution.callbacks import callback_deliver
from execution.models import ActionEnvelope, Payment, Receipt
from execution.runner import operation_execute
from registry.models import Task
from tests.execution.factories import make_full_world
from tests.execution.receiver import receiver  # noqa: F401 - fixture
from tests.execution.worker import ledger_event_types, submit_async

pytestmark = pytest.mark.django_db


def reassign_task(world):
    # As a superuser's edit of the task in the admin would (tasks are plain records there).
    Task.objects.filter(pk=world.task.pk).update(agent_id="agent-successor")
    return "task", f"task {world.task.task_id!r} belongs to agent 'agent-successor', not to the envelope's agent " \
                   f"{world.agent_id!r}"


def swap_decision_agent(world):
    Decision.objects.filter(pk=world.decision.pk).update(agent_id="agent-successor")
    return "decision", f"decision {world.decision.decision_id!r} belongs to agent 'agent-successor', not to the " \
                       f"envelope's agent {world.agent_id!r}"


def swap_evaluation_action(world):
    action = action_document(tool_id=world.tool_id, operation=world.operation,
                             parameters={"amount": 5000, "currency": "USD"})
    PolicyEvaluation.objects.filter(pk=world.evaluation.pk).update(action=action, action_hash=content_hash(action))
    return "policy_evaluation", f"policy evaluation {world.evaluation.evaluation_id!r} was evaluated for another " \
                                f"action (parameters not the envelope's)"


def swap_evaluation_agent(world):
    PolicyEvaluation.objects.filter(pk=world.evaluation.pk).update(agent_id="agent-successor")
    return "policy_evaluation", f"policy evaluation {world.evaluation.evaluation_id!r} belongs to agent " \
                                f"'agent-successor', not to the envelope's agent {world.agent_id!r}"


@pytest.mark.parametrize("change", [reassign_task, swap_decision_agent, swap_evaluation_action,
                                    swap_evaluation_agent], ids=lambda change: change.__name__)
def test_a_record_changed_between_acceptance_and_execution_fails_the_operation_and_nothing_runs(
        api, settings, receiver, change):
    settings.AGP_ALLOW_PRIVATE_URLS = True
    world = make_full_world(connector="http", endpoint_url=receiver.url("/pay"))
    operation_id = submit_async(api, world.envelope_request())["operation_id"]
    check, reason = change(world)

    assert operation_execute(operation_id=operation_id, executor="worker-test/pid-1") == "failed"

    body = api.get(f"/agp/operations/{operation_id}").json()
    assert body["status"] == "failed"
    assert body["error"]["code"] == "AGP_PREREQUISITE_FAILED"
    assert body["error"]["details"]["failed_checks"] == [{"check": check, "reason": reason}]
    assert receiver.requests == []  # the tool was never called
    action_id = body["result_url"].rsplit("/", 1)[1]
    assert not Receipt.objects.filter(action_id=action_id).exists()
    assert ActionEnvelope.objects.get(action_id=action_id).status == "failed"
    assert Payment.objects.get(envelope_id=action_id).status == "released"
    session = CommerceSession.objects.get(pk=world.session.pk)
    assert (session.reserved_amount, session.spent_amount) == (Decimal("0"), Decimal("0"))
    assert ledger_event_types(operation_id) == ["operation.created", "operation.failed"]
    failed = LedgerEvent.objects.get(resource_id=operation_id, event_type="operation.failed")
    assert failed.payload["stage"] == "execution_recheck"
    assert failed.payload["failed_checks"] == [{"check": check, "reason": reason}]


# --- the trail: ?action_id= and ?task_id= ------------------------------------------------------------------
def trail(api, **query) -> list[tuple[str, str]]:
    response = api.get("/agp/ledger-events", {**query, "limit": 200})
    assert response.status_code == 200, response.json()
    assert response.json()["next_cursor"] is None
    return [(item["event_type"], item["resource_id"]) for item in response.json()["items"]][::-1]  # oldest first


def test_the_ledger_returns_an_action_s_whole_trail_and_a_task_s(api, settings, receiver):
    settings.AGP_ALLOW_PRIVATE_URLS = True
    world = make_full_world()
    other = make_full_world()  # another task's action: in neither trail
    body = world.envelope_request(callback_url=receiver.url("/hook"))
    operation_id = submit_async(api, body)["operation_id"]
    submit_async(api, other.envelope_request())
    assert operation_execute(operation_id=operation_id, executor="worker-test/pid-1") == "succeeded"
    assert callback_deliver(operation_id=operation_id).outcome == "delivered"
    action_id = body["action_id"]
    payment_id = Payment.objects.get(envelope_id=action_id).payment_id
    receipt_id = Receipt.objects.get(action_id=action_id).receipt_id
    # A record of the task that is not about the action, made through the API.
    closed = api.patch(f"/agp/tasks/{world.task.task_id}", {"status": "closed"}, format="json")
    assert closed.status_code == 200, closed.json()

    action_trail = trail(api, action_id=action_id)

    assert action_trail == [
        ("payment.reserved", payment_id), ("envelope.accepted", action_id), ("operation.created", operation_id),
        ("operation.running", operation_id), ("payment.committed", payment_id), ("envelope.executed", action_id),
        ("operation.succeeded", operation_id), ("receipt.issued", receipt_id), ("callback.delivered", operation_id)]
    assert trail(api, task_id=world.task.task_id) == [*action_trail, ("task.closed", world.task.task_id)]
    for item in api.get("/agp/ledger-events", {"action_id": action_id}).json()["items"]:
        assert (item["task_id"], item["action_id"]) == (world.task.task_id, action_id)
    # Both filters at once, and another task's trail holds none of this action's events.
    assert trail(api, task_id=world.task.task_id, action_id=action_id) == action_trail
    assert {event for event in trail(api, task_id=other.task.task_id)}.isdisjoint(action_trail)
    assert trail(api, action_id="act-unknown") == []
