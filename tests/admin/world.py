"""One row of every model the admin shows, built with the ORM on top of the execution factories' world.

``make_admin_world()`` returns ``AdminWorld``: ``rows[model]`` is a row of that model, and
the named attributes are the records the tests look at (the envelope with its operation,
receipt and payment; the delegation chain; a few ledger events).
"""

from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal

from django.contrib.auth.models import Group, User
from django.db import transaction
from django.utils import timezone

from agp_project.canonical import content_hash
from agp_project.ids import new_id
from auth_tokens.models import Client, UsedJti
from core.ledger import ledger_append
from core.models import (
    IdempotencyRecord,
    LedgerEvent,
    LedgerHead,
    LedgerPendingEvent,
    MerkleTile,
    MerkleTreeLock,
    OutboxMessage,
    StaffTenancy,
)
from core.services import checkpoint_create
from decision.models import (
    Approval,
    ApprovalNotificationAttempt,
    ApprovalWebhook,
    Backtest,
    Context,
    Escalation,
    EvidenceBundle,
)
from execution.models import ActionEnvelope, CallbackAttempt, Operation, Payment, Receipt
from registry.models import Freeze, Revocation
from tests.execution.factories import World, make_delegation, make_full_world


@dataclass
class AdminWorld:
    world: World
    envelope: ActionEnvelope
    operation: Operation
    receipt: Receipt
    payment: Payment
    grandchild: object
    events: list[LedgerEvent]
    rows: dict = field(default_factory=dict)


def make_admin_world(*, extra_approvals: int = 0) -> AdminWorld:
    now = timezone.now()
    world = make_full_world()
    tag = new_id("x")[2:].lower()
    # A third link under the world's two: a chain of three to show up to its root.
    grandchild = make_delegation(root_principal=world.root_principal, delegator=world.agent_id,
                                 delegate=f"sub-agent-{tag}", scope=[f"{world.tool_id}:{world.operation}"],
                                 parent=world.delegation, max_hops=1)
    data = {"note": "customer asked"}
    context = Context.objects.create(context_id=new_id("ctx"), task=world.task, agent_id=world.agent_id, data=data,
                                     content_hash=content_hash(data), created_at=now)
    items = [{"uri": "https://evidence.example/1", "sha256": "ab" * 32, "kind": "document"}]
    bundle = EvidenceBundle.objects.create(bundle_id=new_id("evb"), task=world.task, items=items,
                                           bundle_hash=content_hash(items), created_at=now)
    tenant = world.root_principal
    for record in (world.policy_set, world.skill):
        type(record).objects.filter(pk=record.pk).update(root_principal=tenant)
        record.refresh_from_db()
    escalation = Escalation(escalation_id=new_id("esc"), task=world.task, decision=world.decision,
                            raised_by="auditor-bot", reason="second look", created_at=now, root_principal=tenant)
    escalation.save()
    revocation = Revocation.objects.create(revocation_id=new_id("rev"), target_type="skill",
                                           target_id=f"skl_gone_{tag}", reason="retired", revoked_by="ops",
                                           revoked_at=now, created_at=now, root_principal=tenant)
    freeze = Freeze.objects.create(freeze_id=new_id("frz"), target_type="agent", target_id=f"agent-gone-{tag}",
                                   reason="runaway", frozen_by="ops", created_at=now, root_principal=tenant)
    backtest = Backtest.objects.create(
        backtest_id=new_id("bt"), operation_id=new_id("op"), policy_set=world.policy_set,
        ruleset_hash=world.policy_set.ruleset_hash, since=now - timedelta(days=30), until=now, status="succeeded",
        total=1, evaluations=1, newly_denied=1, by_reason={"amount over 100": 1},
        changes=[{"evaluation_id": world.evaluation.evaluation_id, "action_ids": [],
                  "before": {"allow": True, "require_approval": True, "approvals_required": 1, "reasons": []},
                  "after": {"allow": False, "require_approval": False, "approvals_required": 0, "reasons": ["amount over 100"]}}],
        created_at=now, updated_at=now, root_principal=tenant)
    for i in range(extra_approvals):
        Approval.objects.create(approval_id=new_id("apr"), decision=world.decision, approver=f"second-{i}",
                                verdict="approved", created_at=now)

    envelope = ActionEnvelope.objects.create(
        action_id=new_id("act"), task_id=world.task.task_id, agent_id=world.agent_id, tool_id=world.tool_id,
        operation=world.operation, capability_token_ref=world.capability.capability_id,
        decision_ref=world.decision.decision_id, policy_decision_ref=world.evaluation.evaluation_id,
        parameters=world.parameters, parameters_hash=content_hash(world.parameters),
        approval_ref=world.approval.approval_id, commerce_session_ref=world.session.session_id,
        delegation_ref=world.delegation.delegation_id,
        checks=[{"check": "task", "passed": True, "reason": ""}, {"check": "approval", "passed": True, "reason": ""}],
        inputs={"action_id": "as submitted"}, status="executed", submitted_by="test-client", root_principal=tenant,
        created_at=now, accepted_at=now)
    operation = Operation(operation_id=new_id("op"), envelope=envelope, status="succeeded", attempts=1,
                          started_at=now, completed_at=now, created_at=now, updated_at=now)
    operation.save()
    receipt = Receipt.objects.create(
        receipt_id=new_id("rcpt"), operation=operation, action_id=envelope.action_id, status="succeeded",
        result={"ok": True}, result_hash=content_hash({"ok": True}), started_at=now, completed_at=now,
        executor="noop", created_at=now)
    payment = Payment.objects.create(payment_id=new_id("pay"), envelope=envelope, session_id=world.session.session_id,
                                     currency="USD", amount=Decimal("50"), status="committed", created_at=now,
                                     updated_at=now)
    outbox = OutboxMessage.objects.create(task_name="agp.execute_operation", args=[operation.operation_id],
                                          status="published", created_at=now, published_at=now)
    attempt = CallbackAttempt.objects.create(operation=operation, attempt=1, url="https://callback.example/hook",
                                             status="delivered", response_status=200, attempted_at=now)
    webhook = ApprovalWebhook.objects.create(root_principal=tenant, url="https://hooks.example/approvals")
    notice = ApprovalNotificationAttempt.objects.create(decision=world.decision, attempt=1, url=webhook.url,
                                                        status="delivered", response_status=200, attempted_at=now)
    idempotency = IdempotencyRecord.objects.create(
        client_id="test-client", method="POST", path="/agp/tasks", key=new_id("idem"), fingerprint="0" * 64,
        response_status=201, response_body=b'{"ok": true}', created_at=now,
        expires_at=now + timedelta(days=1))
    waiting = LedgerPendingEvent.objects.create(
        event_id=new_id("evt"), event_type="task.closed", resource_type="Task", resource_id=world.task.task_id,
        actor="test-client", payload="{}", payload_hash=content_hash({}), recorded_at=now, task_id=world.task.task_id,
        root_principal=tenant)
    used_jti = UsedJti.objects.create(key=content_hash(tag).removeprefix("sha256:"), expires_at=now + timedelta(minutes=5))
    client, _ = Client.objects.get_or_create(client_id=f"client-{tag}", defaults={"scopes": ["agp.registry.read"], "kind": "operator"})
    with transaction.atomic():
        events = [
            ledger_append(event_type="task.created", resource_type="Task", resource_id=world.task.task_id,
                          actor="test-client", payload={"task_id": world.task.task_id}, root_principal=tenant),
            ledger_append(event_type="decision.finalised", resource_type="Decision",
                          resource_id=world.decision.decision_id, actor="test-client", payload={},
                          root_principal=tenant),
            ledger_append(event_type="envelope.accepted", resource_type="ActionEnvelope",
                          resource_id=envelope.action_id, actor="test-client", payload={"checks": 10},
                          root_principal=tenant),
        ]
    checkpoint = checkpoint_create()
    group, _ = Group.objects.get_or_create(name=f"group-{tag}")
    user = User.objects.create_user(username=f"user-{tag}", password="x")
    tenancy = StaffTenancy.objects.create(user=user, tenants=[tenant])

    rows = {}
    for record in (world.task, world.root_delegation, world.policy_set, world.capability, world.skill,
                   world.binding, revocation, freeze, context, bundle, world.evaluation, backtest, world.decision,
                   world.assessment, world.approval, escalation, world.session, envelope, operation, receipt, payment,
                   outbox, attempt, idempotency, events[-1], LedgerHead.objects.get(pk=1), client, group, user,
                   checkpoint, MerkleTile.objects.first(), MerkleTreeLock.objects.get(pk=1), tenancy, webhook, notice,
                   used_jti, waiting):
        rows[type(record)] = record
    return AdminWorld(world=world, envelope=envelope, operation=operation, receipt=receipt, payment=payment,
                      grandchild=grandchild, events=events, rows=rows)
