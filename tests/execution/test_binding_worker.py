"""The binding of CONTRACT C12 with a real Celery worker (PostgreSQL and Redis, not eager mode):
the allowed twin of the e-mail example is executed by the worker, and a record that
changed between acceptance and execution makes the worker's re-check refuse the operation
before the tool is called."""

from datetime import timedelta

import pytest
from django.utils import timezone

from core.models import OutboxMessage
from execution.models import Receipt
from registry.models import Task
from tests.execution.factories import make_full_world, make_world
from tests.execution.receiver import receiver  # noqa: F401 - fixture
from tests.execution.test_binding_api import MAIL_RULESET, decide, evaluate, refused, register
from tests.execution.worker import (  # noqa: F401 - fixtures
    ledger_event_types,
    module_worker,
    poll_until_ended,
    publishing_fails,
    submit_async,
    test_broker,
    worker_db,
)

pytestmark = pytest.mark.postgres

URL = "/agp/action-envelopes"


def test_the_worker_sends_the_mail_its_evaluation_was_made_for_and_nothing_else(api, settings, receiver,
                                                                                module_worker, worker_db):
    settings.AGP_ALLOW_PRIVATE_URLS = True
    internal, external = {"to": "alice@umbrella.example"}, {"to": "leak@evil.example"}
    world = make_world(action_class="communicate", tool_id="mail", operation="send", parameters=internal,
                       allowed_parameter_ranges={}, connector="http", endpoint_url=receiver.url("/mail"))
    policy_set = register(api, MAIL_RULESET)
    to_alice = evaluate(api, world, policy_set_id=policy_set["policy_set_id"],
                        action={"tool_id": "mail", "operation": "send", "parameters": internal})

    decision_ref = decide(api, world, to_alice)["decision_id"]

    leak = world.envelope_request(parameters=external, policy_decision_ref=to_alice["evaluation_id"],
                                  decision_ref=decision_ref)
    assert list(refused(api.post(URL, leak, format="json", HTTP_PREFER="respond-async"))) == ["policy_evaluation"]
    twin = world.envelope_request(parameters=internal, policy_decision_ref=to_alice["evaluation_id"],
                                  decision_ref=decision_ref)
    operation_id = submit_async(api, twin)["operation_id"]

    final = poll_until_ended(api, operation_id, module_worker)

    assert final["status"] == "succeeded", final
    assert [request.json()["parameters"] for request in receiver.requests] == [internal]
    assert Receipt.objects.get(action_id=twin["action_id"]).governance["action_hash"] == to_alice["action_hash"]
    assert not Receipt.objects.filter(action_id=leak["action_id"]).exists()


def test_the_worker_refuses_an_operation_whose_task_was_reassigned_after_acceptance(api, settings, receiver,
                                                                                   module_worker, worker_db):
    settings.AGP_ALLOW_PRIVATE_URLS = True
    world = make_full_world(connector="http", endpoint_url=receiver.url("/pay"))
    # Accepted and committed, its message held back: the worker cannot start before the change.
    with publishing_fails():
        operation_id = submit_async(api, world.envelope_request())["operation_id"]
    # Between acceptance and execution the task is given to another agent (an admin edit).
    Task.objects.filter(pk=world.task.pk).update(agent_id="agent-successor")
    # Now let the outbox sweep publish the message.
    OutboxMessage.objects.filter(task_name="agp.execute_operation", status="pending").update(
        created_at=timezone.now() - timedelta(minutes=1))

    final = poll_until_ended(api, operation_id, module_worker)

    assert final["status"] == "failed", final
    assert final["error"]["code"] == "AGP_PREREQUISITE_FAILED"
    assert final["error"]["details"]["failed_checks"] == [{
        "check": "task", "reason": f"task {world.task.task_id!r} belongs to agent 'agent-successor', not to the "
                                   f"envelope's agent {world.agent_id!r}"}]
    assert receiver.requests == []
    assert ledger_event_types(operation_id) == ["operation.created", "operation.failed"]
    assert not Receipt.objects.filter(operation_id=operation_id).exists()
