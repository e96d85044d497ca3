"""A signed notice when a decision starts waiting for people (docs/reference/approvals.md).

When a draft ``approve`` decision needs approvals (the evaluation asked for them, or the task
is critical), made over REST or in one call (the gateway, the one-call envelope), the tenant's
active ``ApprovalWebhook`` gets a POST of the event ``approval.waiting``, signed like operation
callbacks (core/webhooks.py), with the link to the decision in the approvals inbox. Nothing is
expected back: the people approve in the inbox.

Delivery is at least once, through the outbox and the worker, and every attempt is an
``ApprovalNotificationAttempt`` row whose number is reserved (unique per decision) before the
request leaves, so two copies of the message cannot both send attempt n. A failed attempt is
retried with the callbacks' backoff and limit; the last one is a ledger event.
"""

import logging
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Exists, Max, OuterRef
from django.urls import reverse
from django.utils import timezone

from agp_project import exactjson
from agp_project.timeutil import iso
from core.ledger import ledger_append
from core.models import LedgerEvent
from core.outbox import outbox_enqueue
from core.webhooks import (
    DeliveryOutcome,
    attempt_reserve,
    attempt_settle,
    recovery_window,
    redelivery_due,
    webhook_backoff,
    webhook_post,
)
from registry.models import Task

from .choices import APPROVAL_NOTICE_TASK, DecisionOutcome, DecisionStatus
from .models import ApprovalNotificationAttempt, ApprovalWebhook, Decision, PolicyEvaluation
from .selectors import approvals_required

logger = logging.getLogger(__name__)

EVENT_TYPE = "approval.waiting"
NOTIFIER_ACTOR = "system:approval-notifier"


def approval_inbox_url(decision_id: str) -> str:
    """The decision's page in the approvals inbox: absolute under ``AGP_BASE_URL``, else a path."""
    return f"{settings.AGP_BASE_URL}{reverse('approvals:decision', args=[decision_id])}"


def approval_waits(*, decision: Decision, task: Task, evaluation: PolicyEvaluation | None) -> bool:
    """Whether ``decision`` waits for people: a draft ``approve`` that needs at least one approval."""
    return (decision.status == DecisionStatus.DRAFT and decision.outcome == DecisionOutcome.APPROVE
            and approvals_required(task=task, evaluation=evaluation)[0] > 0)


def approval_wait_announce(*, decision: Decision, task: Task, evaluation: PolicyEvaluation | None) -> bool:
    """In the caller's transaction: make the notice of ``decision`` due when it waits for people and
    its tenant has an active webhook. True when a notice was enqueued."""
    if not approval_waits(decision=decision, task=task, evaluation=evaluation):
        return False
    if not ApprovalWebhook.objects.filter(root_principal=task.root_principal, is_active=True).exists():
        return False
    outbox_enqueue(task_name=APPROVAL_NOTICE_TASK, args=[decision.decision_id])
    return True


def approval_notice_body(decision: Decision) -> bytes:
    """The ``approval.waiting`` event of ``decision`` (its task and evaluation loaded)."""
    task, evaluation = decision.task, decision.policy_evaluation
    required, why = approvals_required(task=task, evaluation=evaluation)
    result = evaluation.result if evaluation is not None else {}
    return exactjson.dumps({
        "type": EVENT_TYPE,
        "decision_id": decision.decision_id,
        "task_id": task.task_id,
        "root_principal": task.root_principal,
        "agent_id": decision.agent_id,
        "risk_level": task.risk_level,
        "action_class": task.action_class,
        "action": evaluation.action if evaluation is not None else None,
        "policy_evaluation_id": evaluation.evaluation_id if evaluation is not None else None,
        "reasons": list(result.get("reasons") or []),
        "approvals_required": required,
        "why": why,
        "inbox_url": approval_inbox_url(decision.decision_id),
        "created_at": iso(decision.created_at),
    }, sort_keys=True).encode()


def approval_notice_deliver(*, decision_id: str) -> DeliveryOutcome:
    """Make the next delivery attempt of a waiting decision's notice, and record it."""
    decision = (Decision.objects.select_related("task", "policy_evaluation")
                .filter(decision_id=decision_id).first())
    if decision is None:
        return DeliveryOutcome("skipped")
    hook = ApprovalWebhook.objects.filter(root_principal=decision.task.root_principal, is_active=True).first()
    if hook is None:
        return DeliveryOutcome("skipped")
    record = attempt_reserve(attempts=ApprovalNotificationAttempt, owner={"decision_id": decision_id}, url=hook.url)
    if record is None:
        return DeliveryOutcome("skipped")
    number = record.attempt
    posted = webhook_post(url=hook.url, body=approval_notice_body(decision), field="url",
                          headers={"AGP-Event": EVENT_TYPE, "AGP-Decision-Id": decision_id,
                                   "AGP-Delivery-Attempt": str(number)})
    with transaction.atomic():
        final = attempt_settle(record, posted)
        if final:
            ledger_append(event_type="approval_notice.delivered" if posted.delivered else "approval_notice.abandoned",
                          resource_type="Decision", resource_id=decision_id, actor=NOTIFIER_ACTOR,
                          root_principal=decision.task.root_principal,
                          payload={"task_id": decision.task_id, "url": hook.url, "attempts": number,
                                   "response_status": posted.response_status, "error": posted.problem})
    if posted.delivered:
        logger.info("approval notice of %s delivered (attempt %s)", decision_id, number)
        return DeliveryOutcome("delivered", number)
    logger.warning("approval notice of %s attempt %s/%s failed: %s", decision_id, number,
                   settings.AGP_CALLBACK_MAX_ATTEMPTS, posted.problem)
    if final:
        return DeliveryOutcome("abandoned", number)
    return DeliveryOutcome("retry", number, webhook_backoff(number))


def approval_notices_recover(*, now: datetime | None = None, limit: int = 200) -> int:
    """Re-enqueue notices whose next attempt is overdue (its retry message was lost with a killed
    worker, or the embedded broker could not redeliver it): a decision that failed at least one
    attempt, was neither delivered nor abandoned (the ledger records both), and is overdue by
    ``recovery_window().slack`` after ``backoff(n)`` (core/webhooks.py). A notice whose first
    message never left is the outbox sweep's."""
    now = now or timezone.now()
    window = recovery_window()
    settled = LedgerEvent.objects.filter(resource_type="Decision", resource_id=OuterRef("decision_id"),
                                         event_type__in=("approval_notice.delivered", "approval_notice.abandoned"))
    candidates = (Decision.objects.filter(created_at__gte=now - window.lookback)
                  .annotate(tries=Count("notification_attempts"),
                            last_try=Max("notification_attempts__attempted_at"), settled=Exists(settled))
                  .filter(tries__gt=0, tries__lt=settings.AGP_CALLBACK_MAX_ATTEMPTS, settled=False)
                  .order_by("created_at").values_list("decision_id", "created_at", "tries", "last_try")[:limit])
    count = 0
    for decision_id, created_at, tries, last_try in candidates:
        if not redelivery_due(task_name=APPROVAL_NOTICE_TASK, key=decision_id, since=created_at, tries=tries,
                              last_try=last_try, now=now, window=window):
            continue
        with transaction.atomic():
            outbox_enqueue(task_name=APPROVAL_NOTICE_TASK, args=[decision_id])
        logger.info("recover: re-enqueued the approval notice of %s (after %s attempts)", decision_id, tries)
        count += 1
    return count
