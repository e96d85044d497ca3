"""How a freeze reaches accepted work (docs/reference/governance.md), in process: the claim's own check, and
``freezes_enforce`` (the body of ``agp.enforce_freeze`` and of beat's recovery)."""

from decimal import Decimal

import pytest
from django.utils import timezone

from core.models import LedgerEvent, OutboxMessage
from decision.models import CommerceSession
from execution import freezes as freezes_module
from execution.freezes import freezes_enforce
from execution.models import ActionEnvelope, Operation, Payment, Receipt
from execution.runner import operation_claim, operation_execute, operation_finish
from registry.models import Freeze
from tests.execution.factories import make_world
from tests.execution.worker import ledger_event_types, submit_async

pytestmark = pytest.mark.django_db


def freeze(target_type, target_id="", freeze_id=None, status="active"):
    freeze_id = freeze_id or f"frz-{target_type}-{target_id or 'all'}"
    now = timezone.now()
    return Freeze.objects.create(freeze_id=freeze_id, target_type=target_type, target_id=target_id, reason="stop",
                                 frozen_by="ops", status=status, lifted_at=now if status == "lifted" else None,
                                 created_at=now)


def accept(api, world, **overrides):
    return submit_async(api, world.envelope_request(**overrides))["operation_id"]


def status(operation_id):
    return Operation.objects.get(operation_id=operation_id).status


def cancelled_event(operation_id):
    return LedgerEvent.objects.get(resource_id=operation_id, event_type="operation.cancelled")


def test_a_claim_cancels_a_frozen_operation_instead_of_executing_it(api, settings):
    settings.AGP_ALLOW_PRIVATE_URLS = True
    world = make_world(action_class="transact")
    operation_id = accept(api, world, callback_url="http://127.0.0.1:9/hook")
    freeze("agent", world.agent_id)

    assert operation_execute(operation_id=operation_id, executor="w/pid-1") == "cancelled"

    operation = Operation.objects.get(operation_id=operation_id)
    assert operation.status == "cancelled" and operation.completed_at is not None
    assert operation.error["code"] == "AGP_FROZEN"
    assert operation.error["details"]["freezes"] == [
        {"freeze_id": f"frz-agent-{world.agent_id}", "target_type": "agent", "target_id": world.agent_id}]
    assert [c["check"] for c in operation.error["details"]["failed_checks"]] == ["freeze"]
    assert not Receipt.objects.filter(operation_id=operation_id).exists()
    assert Payment.objects.get(envelope_id=operation.envelope_id).status == "released"
    session = CommerceSession.objects.get(pk=world.session.pk)
    assert (session.reserved_amount, session.spent_amount) == (Decimal("0"), Decimal("0"))
    assert ActionEnvelope.objects.get(action_id=operation.envelope_id).status == "failed"
    assert ledger_event_types(operation_id) == ["operation.created", "operation.cancelled"]
    assert cancelled_event(operation_id).payload == {
        "action_id": operation.envelope_id, "task_id": world.task.task_id, "stage": "execution_recheck",
        "freeze_ids": [f"frz-agent-{world.agent_id}"]}
    assert OutboxMessage.objects.filter(task_name="agp.deliver_callback", args=[operation_id]).exists()
    # A redelivered message finds it ended.
    assert operation_execute(operation_id=operation_id, executor="w/pid-2") == "done"


def test_the_enforcement_cancels_pending_and_receipt_awaiting_operations_of_the_frozen_agent(api):
    world = make_world(action_class="transact", connector="external", amount_limit=Decimal("200"))
    awaiting = accept(api, world)
    assert operation_execute(operation_id=awaiting, executor="w/pid-1") == "awaiting_receipt"
    pending = accept(api, world)
    other_world = make_world()
    untouched = accept(api, other_world)
    frozen = freeze("agent", world.agent_id)

    assert freezes_enforce(freeze_id=frozen.freeze_id) == 2

    assert (status(awaiting), status(pending), status(untouched)) == ("cancelled", "cancelled", "pending")
    assert cancelled_event(awaiting).payload["stage"] == "awaiting_receipt"
    assert cancelled_event(pending).payload["stage"] == "pending"
    for operation_id in (awaiting, pending):
        operation = Operation.objects.get(operation_id=operation_id)
        assert operation.error["code"] == "AGP_FROZEN"
        assert operation.error["details"] == {"freezes": [
            {"freeze_id": frozen.freeze_id, "target_type": "agent", "target_id": world.agent_id}]}
        assert Payment.objects.get(envelope_id=operation.envelope_id).status == "released"
    session = CommerceSession.objects.get(pk=world.session.pk)
    assert session.reserved_amount == Decimal("0")

    # The executor's receipt comes too late: 409, and nothing changes.
    action_id = Operation.objects.get(operation_id=awaiting).envelope_id
    late = api.post("/agp/receipts", {"action_id": action_id, "operation_id": awaiting, "status": "succeeded"},
                    format="json")
    assert late.status_code == 409
    assert late.json()["error"]["code"] == "AGP_INVALID_TRANSITION"
    assert status(awaiting) == "cancelled" and not Receipt.objects.filter(operation_id=awaiting).exists()
    # Enforcing again finds nothing left to stop.
    assert freezes_enforce(freeze_id=frozen.freeze_id) == 0


@pytest.mark.parametrize("target", ["agent", "tool", "root_principal", "all"])
def test_a_receipt_is_refused_while_a_freeze_stands_even_before_its_enforcement_ran(api, target):
    world = make_world(action_class="transact", connector="external")
    awaiting = accept(api, world)
    assert operation_execute(operation_id=awaiting, executor="w/pid-1") == "awaiting_receipt"
    target_id = {"agent": world.agent_id, "tool": world.tool_id, "root_principal": world.root_principal,
                 "all": ""}[target]
    frozen = freeze(target, target_id)  # its task has not run: the operation still awaits its receipt
    action_id = Operation.objects.get(operation_id=awaiting).envelope_id
    events = LedgerEvent.objects.count()

    refused = api.post("/agp/receipts", {"action_id": action_id, "operation_id": awaiting, "status": "succeeded"},
                       format="json")

    assert refused.status_code == 409, refused.content
    error = refused.json()["error"]
    assert error["code"] == "AGP_FROZEN"
    assert error["details"]["freezes"] == [
        {"freeze_id": frozen.freeze_id, "target_type": target, "target_id": target_id or None}]
    assert status(awaiting) == "running" and not Receipt.objects.filter(operation_id=awaiting).exists()
    assert LedgerEvent.objects.count() == events
    # The enforcement then cancels it; once the freeze is lifted before that, the receipt is taken.
    assert api.patch(f"/agp/freezes/{frozen.freeze_id}", {"status": "lifted"}, format="json").status_code == 200
    taken = api.post("/agp/receipts", {"action_id": action_id, "operation_id": awaiting, "status": "succeeded"},
                     format="json")
    assert taken.status_code == 201, taken.content
    assert status(awaiting) == "succeeded"


def test_the_enforcement_leaves_an_operation_already_passed_to_its_connector(api):
    world = make_world(parameters={"limit": 10, "sleep_seconds": 1})
    operation_id = accept(api, world)
    claim = operation_claim(operation_id=operation_id, executor="w/pid-1")  # committed: the call is under way
    frozen = freeze("agent", world.agent_id)

    assert freezes_enforce(freeze_id=frozen.freeze_id) == 0

    receipt = operation_finish(operation_id=operation_id, fence=claim.fence, status="succeeded", result={"ok": True},
                               executor="w/pid-1")
    assert receipt is not None and status(operation_id) == "succeeded"
    assert not LedgerEvent.objects.filter(event_type="operation.cancelled").exists()


@pytest.mark.parametrize("target", ["tool", "root_principal", "all"])
def test_the_enforcement_matches_tools_principals_and_everything(api, target):
    frozen_world = make_world(tool_id="crm")
    other_world = make_world(tool_id="payments")
    stopped = accept(api, frozen_world)
    other = accept(api, other_world)
    target_id = {"tool": "crm", "root_principal": frozen_world.root_principal, "all": ""}[target]
    frozen = freeze(target, target_id)

    freezes_enforce(freeze_id=frozen.freeze_id)

    assert status(stopped) == "cancelled"
    assert status(other) == ("cancelled" if target == "all" else "pending")
    if target != "all":  # the other tool's work still runs
        assert operation_execute(operation_id=other, executor="w/pid-1") == "succeeded"


def test_a_lifted_or_unknown_freeze_stops_nothing(api):
    world = make_world()
    operation_id = accept(api, world)
    lifted = freeze("agent", world.agent_id, status="lifted")

    assert freezes_enforce(freeze_id=lifted.freeze_id) == 0
    assert freezes_enforce(freeze_id="frz-none") == 0
    assert status(operation_id) == "pending"
    assert operation_execute(operation_id=operation_id, executor="w/pid-1") == "succeeded"


def test_without_a_freeze_id_it_enforces_every_active_freeze_in_batches(api, monkeypatch):
    # What beat's agp.recover_operations runs, should a freeze's own task have been lost.
    monkeypatch.setattr(freezes_module, "BATCH", 2)
    worlds = [make_world(), make_world()]
    operations = [accept(api, world) for world in worlds for _ in range(3)]
    for world in worlds:
        freeze("agent", world.agent_id)

    assert freezes_enforce() == 6

    assert {status(operation_id) for operation_id in operations} == {"cancelled"}
    assert LedgerEvent.objects.filter(event_type="operation.cancelled").count() == 6


def test_an_operation_frozen_twice_names_both_freezes(api):
    world = make_world(tool_id="crm")
    operation_id = accept(api, world)
    freeze("agent", world.agent_id, freeze_id="frz-a")
    freeze("tool", "crm", freeze_id="frz-b")
    freeze("tool", "elsewhere", freeze_id="frz-c")

    freezes_enforce()

    assert cancelled_event(operation_id).payload["freeze_ids"] == ["frz-a", "frz-b"]
